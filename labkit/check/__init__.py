"""Exercise checks used in notebooks. See :mod:`labkit.check.core` for the design.

Each chapter registers its exercises in ``labkit/check/chNN.py``; ``check("N.k", answer)``
imports that module on first use. ``labkit.progress()`` (:mod:`labkit.check.progress`) shows
which exercises of the course this learner's check cells have passed.
"""
from labkit.check.core import (  # noqa: F401
    ERROR, FAIL, MISSING, PASS, REGISTRY, Exercise, ExerciseFailed, Verdict, Wrong, check,
    evaluate, exercise, expect_close, expect_equal, expect_raises, get, grading_mode,
    is_missing, stub,
)
from labkit.check.predict import PREDICTIONS, predict, reveal  # noqa: F401,E402
