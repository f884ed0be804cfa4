"""Exercise checks: a registry of exercises and the one function a check cell calls.

A chapter module (``labkit/check/chNN.py``) registers its exercises::

    @exercise("2.3", "softmax backward", reference=softmax_backward, binds="softmax_backward")
    def _(answer):
        got = answer(x, g)
        expect_close(got, softmax_backward(x, g), "softmax_backward(x, g)",
                     hint="the Jacobian of softmax is diag(s) - s s^T")

A check cell in a notebook calls ``check("2.3", answer)``.

* Learning mode (the default) prints a verdict and never raises, so every learner notebook
  runs clean under nbval as shipped. When the answer is wrong or missing and the exercise
  has a reference, the name in ``binds`` is rebound to labkit's reference in the notebook,
  so later cells keep working.
* Grading mode (``LABKIT_GRADE=1``) does the same rebinding, then raises
  :class:`ExerciseFailed` on a wrong or missing answer: the check cell, and only it, fails.
  With ``LABKIT_GRADE_LOG=path`` every verdict is appended there as a JSON line.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

GRADE_ENV = "LABKIT_GRADE"
LOG_ENV = "LABKIT_GRADE_LOG"

PASS, FAIL, MISSING, ERROR = "pass", "fail", "missing", "error"


class Wrong(Exception):
    """Raised by a checker when the answer is wrong; its message is the hint shown."""


class ExerciseFailed(AssertionError):
    """Raised in grading mode when an exercise is wrong, missing or crashes."""


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    checker: Callable[[Any], None]
    reference: Any = None
    binds: str | None = None
    points: float = 1.0


@dataclass(frozen=True)
class Verdict:
    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS


REGISTRY: dict[str, Exercise] = {}


def exercise(id: str, title: str, *, reference: Any = None, binds: str | None = None,
             points: float = 1.0) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register the decorated function as the checker of exercise ``id``.

    The checker takes the learner's answer and returns nothing when it is right; it raises
    :class:`Wrong` with a specific hint when it is not.
    """
    chapter_of(id)                      # a string 'N.k' (TypeError / ValueError otherwise)

    def register(checker: Callable[[Any], None]) -> Callable[[Any], None]:
        if id in REGISTRY and REGISTRY[id].checker.__module__ != checker.__module__:
            raise ValueError(f"exercise {id!r} is registered twice")
        REGISTRY[id] = Exercise(id, title, checker, reference, binds, points)
        return checker
    return register


def chapter_of(exercise_id: str) -> int:
    _require_str(exercise_id)
    head = exercise_id.split(".")[0]
    if not head.isdigit():
        raise ValueError(f"exercise id {exercise_id!r} must look like '2.3' (chapter.number)")
    return int(head)


def _require_str(exercise_id: Any) -> None:
    if not isinstance(exercise_id, str):
        raise TypeError(f"exercise ids are strings such as '2.10' (a float 2.10 would be "
                        f"2.1), got {exercise_id!r} of type {type(exercise_id).__name__}")


def load_all() -> dict[str, Exercise]:
    """Import every chapter's checks (``labkit/check/chNN.py``) and return the registry."""
    import pkgutil

    import labkit.check as package

    for info in pkgutil.iter_modules(package.__path__):
        if len(info.name) == 4 and info.name.startswith("ch") and info.name[2:].isdigit():
            importlib.import_module(f"labkit.check.{info.name}")
    return REGISTRY


def get(exercise_id: str) -> Exercise:
    """The registered exercise, importing its chapter module ``labkit.check.chNN`` first."""
    chapter = chapter_of(exercise_id)
    if exercise_id not in REGISTRY:
        module = f"labkit.check.ch{chapter:02d}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    if exercise_id not in REGISTRY:
        known = ", ".join(sorted(load_all(), key=_sort_key)) or "none"
        raise ValueError(f"unknown exercise {exercise_id!r}; the course's exercises: {known}")
    return REGISTRY[exercise_id]


def _sort_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in exercise_id.split("."))


def grading_mode() -> bool:
    return os.environ.get(GRADE_ENV, "") not in ("", "0")


def is_missing(answer: Any) -> bool:
    """An answer the learner has not written yet: None, Ellipsis, or a stub function."""
    if answer is None or answer is Ellipsis:
        return True
    if callable(answer) and getattr(answer, "__labkit_stub__", False):
        return True
    return False


def evaluate(exercise_id: str, answer: Any) -> Verdict:
    """Run the checker of ``exercise_id`` on ``answer`` and return the verdict (no printing)."""
    ex = get(exercise_id)
    if is_missing(answer):
        return Verdict(ex.id, MISSING, "not answered yet")
    try:
        ex.checker(answer)
    except Wrong as wrong:
        return Verdict(ex.id, FAIL, str(wrong))
    except NotImplementedError:
        return Verdict(ex.id, MISSING, "not answered yet (your code raises NotImplementedError)")
    except Exception as exc:  # the learner's code crashed: show what, never a traceback
        return Verdict(ex.id, ERROR, f"your answer raised {type(exc).__name__}: {exc}")
    return Verdict(ex.id, PASS, "correct")


SYMBOL = {PASS: "✅", FAIL: "❌", MISSING: "⬜", ERROR: "💥"}


def check(exercise_id: str, answer: Any = None) -> None:
    """Check the learner's answer to exercise ``exercise_id`` and print the verdict.

    Learning mode never raises. Grading mode (``LABKIT_GRADE=1``) raises
    :class:`ExerciseFailed` unless the answer passes.
    """
    verdict = evaluate(exercise_id, answer)
    ex = REGISTRY[verdict.exercise]
    line = f"{SYMBOL[verdict.status]} Exercise {ex.id} ({ex.title}): {verdict.message}"
    if not verdict.passed and ex.binds and ex.reference is not None:
        caller = sys._getframe(1).f_globals
        caller[ex.binds] = ex.reference
        line += f"\n   Later cells use labkit's reference `{ex.binds}` until yours passes."
    print(line)
    _log(verdict)
    if not grading_mode():
        from labkit.check.progress import record

        record(verdict, ex.title)
    if grading_mode() and not verdict.passed:
        raise ExerciseFailed(f"Exercise {ex.id} {verdict.status}: {verdict.message}")


def _log(verdict: Verdict) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"exercise": verdict.exercise, "status": verdict.status,
                             "message": verdict.message}) + "\n")


def stub(fn: Callable) -> Callable:
    """Mark a function as not written yet (the generator's stubs raise NotImplementedError)."""
    fn.__labkit_stub__ = True
    return fn


# ---- helpers checkers use -------------------------------------------------------------

def expect_close(got: Any, want: Any, what: str, *, hint: str = "", rtol: float = 1e-5,
                 atol: float = 1e-8) -> None:
    """Raise :class:`Wrong` unless ``got`` matches ``want`` in shape and value."""
    got_a = np.asarray(_to_numpy(got))
    want_a = np.asarray(_to_numpy(want))
    if got_a.shape != want_a.shape:
        raise Wrong(_join(f"{what} has shape {got_a.shape}, expected {want_a.shape}.", hint))
    if not np.allclose(got_a, want_a, rtol=rtol, atol=atol, equal_nan=True):
        if got_a.dtype.kind in "fc" and want_a.dtype.kind in "fciub":
            unwritten = np.isnan(got_a) & ~np.isnan(want_a.astype(float))
            if unwritten.any():
                where = tuple(int(i) for i in np.argwhere(unwritten)[0])
                raise Wrong(_join(
                    f"{what} holds NaN at index {where[0] if len(where) == 1 else where} "
                    f"({int(unwritten.sum())} of {unwritten.size} values): a value read "
                    "from shared or local memory before any thread wrote it (the tracer "
                    "starts them at NaN, as a GPU starts them with garbage), or an output "
                    "never written. Threads past the end of the data must still store "
                    "their padding (a 0 for a sum).", hint))
        err = np.max(np.abs(got_a.astype(float) - want_a.astype(float))) if got_a.size else 0
        raise Wrong(_join(f"{what} is off by up to {err:.3g}.", hint))


def expect_equal(got: Any, want: Any, what: str, *, hint: str = "") -> None:
    if isinstance(want, (np.ndarray, list, tuple)) and not isinstance(want, str):
        if not np.array_equal(np.asarray(got, dtype=object), np.asarray(want, dtype=object)):
            raise Wrong(_join(f"{what} = {got!r}, expected {want!r}.", hint))
        return
    if got != want:
        raise Wrong(_join(f"{what} = {got!r}, expected {want!r}.", hint))


def expect_raises(fn: Callable, exc_type: type[BaseException], what: str, *,
                  hint: str = "") -> None:
    try:
        fn()
    except exc_type:
        return
    except Exception as exc:
        raise Wrong(_join(f"{what} raised {type(exc).__name__}, expected {exc_type.__name__}.",
                          hint)) from None
    raise Wrong(_join(f"{what} should raise {exc_type.__name__}.", hint))


def _to_numpy(x: Any) -> Any:
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # torch tensor
        return x.detach().cpu().numpy()
    if hasattr(x, "data") and isinstance(getattr(x, "data"), np.ndarray):  # labkit Tensor
        return x.data
    return x


def _join(message: str, hint: str) -> str:
    return f"{message} Hint: {hint}" if hint else message
