"""What the checks do in a student release, where labkit's references are not shipped.

``labkit-release`` (:mod:`labkit.grade.release`) writes the release: learner notebooks and
labkit with every exercise's reference removed. In their place:

* each check replays the reference's outputs recorded for learning mode's fixed inputs
  (``labkit/check/expected/N.k.json``, written by the release builder), so a check still
  tells a right answer from a wrong one on those inputs — grading, with fresh inputs, is
  done by the instructor's full checkout;
* a reference that labkit's library uses elsewhere becomes a stand-in that runs the
  learner's own answer once it has passed its check in this kernel, and otherwise raises
  :class:`~labkit.check.core.ExerciseRequired` naming the exercise to finish first;
* after a failed check, the answer's name is bound to such a stand-in (there is no
  reference to fall back on).

In the full checkout (``RELEASE`` false) nothing here is used but :func:`remember`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from labkit.check import handles
from labkit.check.registry import ExerciseRequired, chapter_of, get

EXPECTED = Path(__file__).resolve().parent / "expected"
RELEASE = (EXPECTED / "MANIFEST.json").exists()

PASSED: dict[str, Any] = {}          # exercise id -> the learner's answer that passed


def remember(exercise, answer: Any) -> None:
    """Keep an answer that passed, for the stand-ins of labkit functions that need it."""
    PASSED[exercise.id] = answer


def _title(exercise_id: str) -> str:
    try:
        return get(exercise_id).title
    except Exception:
        return ""


def required(exercise_id: str, name: str = "") -> Exception:
    what = f"`{name}` " if name else ""
    return ExerciseRequired(
        f"this needs your answer to exercise {exercise_id} ({_title(exercise_id)}): "
        f"{what}is yours to write — labkit's own is not in the student release. Finish "
        f"exercise {exercise_id} in chapter {chapter_of(exercise_id):02d} (its check must "
        f"pass in this notebook's kernel), then run this cell again.")


def answer_for(exercise_id: str, name: str = "") -> Any:
    """The learner's passed answer to ``exercise_id``, or ExerciseRequired."""
    if exercise_id in PASSED:
        return PASSED[exercise_id]
    raise required(exercise_id, name)


def stand_in_call(exercise_id: str, name: str, args: tuple, kwargs: dict, *,
                  factory: bool = False) -> Any:
    """What a cut definition does when called in the release. A plain reference runs the
    learner's passed answer (or raises ExerciseRequired). A *factory* whose products are
    the answers (``conv1d_shared(32, 2)`` makes the 4.4 kernel) returns the learner's
    passed kernel — or one that raises when it is launched, so that importing labkit and
    building its tables never fails."""
    if factory:
        if exercise_id in PASSED:
            return PASSED[exercise_id]

        def not_yet(*a, **k):
            raise required(exercise_id, name)
        not_yet.__name__ = name
        not_yet.__labkit_stub__ = True
        return not_yet
    return answer_for(exercise_id, name)(*args, **kwargs)


def stand_in(exercise) -> Callable:
    """What ``binds`` is bound to after a failed check in the release."""
    def not_yet(*args, **kwargs):
        raise required(exercise.id, exercise.binds or "")
    not_yet.__name__ = exercise.binds or "answer"
    not_yet.__labkit_stub__ = True
    return not_yet


def expected_path(exercise_id: str) -> Path:
    return EXPECTED / f"{exercise_id}.json"


def reference_handle(exercise) -> handles.Handle:
    """The recorded reference of ``exercise`` (a fresh replay each time a check runs)."""
    path = expected_path(exercise.id)
    if not path.exists():
        return _Missing(exercise.id)
    calls = json.loads(path.read_text(encoding="utf-8"))["calls"]
    return handles.Replaying(handles.Transcript.from_json(calls), "labkit's reference")


class _Missing(handles.Handle):
    what = "labkit's reference"

    def __init__(self, exercise_id: str):
        self.exercise_id = exercise_id

    def _run(self, fn, args, kwargs):
        raise handles.TranscriptMismatch(
            f"the student release holds no expected outputs for exercise {self.exercise_id}")
