"""Exercise checks: a registry of exercises and the one function a check cell calls.

A chapter module (``labkit/check/chNN.py``) registers its exercises::

    @exercise("2.3", "softmax backward", reference=softmax_vjp_rule, binds="softmax_backward",
              answers=("labkit.autograd.ops:OPS",))
    def _(answer, ref, rng):
        for shape in [(5,), (3, 7)]:
            s, g = softmax_forward(rng.normal(size=shape)), rng.normal(size=shape)
            expect_close(answer(g, s), ref(g, s), f"softmax_backward on {shape}",
                         hint="J = diag(s) - s s^T, so J^T g = s * (g - sum(g * s))")

A checker receives handles (:mod:`labkit.check.handles`), never the objects: ``answer(...)``
and ``ref(...)`` return plain data, ``answer.derive(fn, ...)`` runs a labkit function on the
answer object and returns plain data, and ``rng`` is the only source of inputs. So the
grader can run the learner's side in a process of its own and decide the verdict in its
own (see :mod:`labkit.grade.verdicts`). Checkers written before this (``def _(answer)``)
still run, whole, next to the answer.

A check cell in a notebook calls ``check("2.3", answer)``.

* Learning mode (the default) prints a verdict and never raises, so every learner notebook
  runs clean under nbval as shipped. When the answer is wrong or missing and the exercise
  has a reference, the name in ``binds`` is rebound to labkit's reference in the notebook,
  so later cells keep working; that reference is marked, and checking it again says so.
* An answer that is labkit's own implementation — the reference, a listed ``answers=``
  object, a wrapper or copy of one, or code that calls one while the check runs — fails
  with "this is labkit's implementation" (:mod:`labkit.check.refuse`).
* Inputs come from ``rng``: seeded per exercise while learning, drawn by the grader when
  grading, so outputs hard-coded for known inputs fail.
* ``LABKIT_GRADE=1`` (the tests' run of ``solutions/``) raises :class:`ExerciseFailed` on a
  wrong or missing answer: the check cell, and only it, fails. With ``LABKIT_GRADE_LOG=path``
  every verdict is appended there as a JSON line — a hint for the grader's notes, never
  the grade.
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit.check import handles, release
from labkit.check.plain import Unencodable
from labkit.check.record import record
from labkit.check.refuse import Refused, implementation
from labkit.check.registry import REGISTRY, ExerciseRequired, chapter_of, get

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
    checker: Callable[..., None]
    reference: Any = None
    binds: str | None = None
    points: float = 1.0
    answers: tuple = ()          # other labkit objects that compute the answer: refused

    @property
    def handles(self) -> bool:
        """Whether the checker takes ``(answer, ref, rng)`` (else the old ``(answer)``)."""
        return _takes_handles(self.checker)

    def refused(self) -> Refused:
        """The reference and the listed ``answers`` (resolved on first use)."""
        cached = _REFUSED.get(self.id)
        if cached is None:
            cached = _REFUSED[self.id] = Refused.of((self.reference, *self.answers))
        return cached


@dataclass(frozen=True)
class Verdict:
    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS


_REFUSED: dict[str, Refused] = {}
HANDED_OUT: dict[int, str] = {}      # id(reference) -> exercise whose failure rebound it


def _takes_handles(checker: Callable) -> bool:
    try:
        params = list(inspect.signature(checker).parameters)
    except (TypeError, ValueError):
        return False
    return len(params) >= 3


def exercise(id: str, title: str, *, reference: Any = None, binds: str | None = None,
             points: float = 1.0, answers: tuple | list = ()
             ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the decorated function as the checker of exercise ``id``.

    The checker ``(answer, ref, rng)`` returns nothing when the answer is right and raises
    :class:`Wrong` with a specific hint when it is not. ``answers`` lists the other labkit
    objects (or ``"module:qualname"`` strings) that compute the answer: like the reference,
    they are refused as answers.
    """
    chapter_of(id)                      # a string 'N.k' (TypeError / ValueError otherwise)
    if isinstance(points, bool) or not isinstance(points, (int, float)) or not points > 0:
        raise ValueError(f"points must be a positive number, got {points!r}")

    def register(checker: Callable[..., None]) -> Callable[..., None]:
        if id in REGISTRY and REGISTRY[id].checker.__module__ != checker.__module__:
            raise ValueError(f"exercise {id!r} is registered twice")
        REGISTRY[id] = Exercise(id, title, checker, reference, binds, float(points),
                                tuple(answers))
        _REFUSED.pop(id, None)
        return checker
    return register


def grading_mode() -> bool:
    return os.environ.get(GRADE_ENV, "") not in ("", "0")


LEARNING_SEED = 20261202     # the fixed seed of learning mode (any value; never changes)


def exercise_rng(exercise_id: str, seed: int | None = None) -> np.random.Generator:
    """The inputs' generator of one exercise: ``seed`` (the grader draws one per run) mixed
    with the exercise id, so exercises of one run draw different inputs."""
    if seed is None:
        seed = LEARNING_SEED
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng([int(seed), zlib.crc32(exercise_id.encode())])


def is_missing(answer: Any) -> bool:
    """An answer the learner has not written yet: None, Ellipsis, or a stub function."""
    if answer is None or answer is Ellipsis:
        return True
    if callable(answer) and getattr(answer, "__labkit_stub__", False):
        return True
    return False


def labkit_message(name: str, exercise: Exercise, answer: Any) -> str:
    if exercise.reference is not None and answer is exercise.reference \
            and HANDED_OUT.get(id(answer)) == exercise.id:
        return (f"you are using labkit's reference `{exercise.binds}` (your answer failed "
                f"earlier, and the check put labkit's in its place): write your own and run "
                f"its cell again.")
    return (f"this is labkit's implementation ({name}): write your own. A check that "
            f"labkit's own code passes would only teach the import.")


def _reference_handle(ex: Exercise, mode: str, transcript=None):
    if mode == "replay-reference":
        return handles.Replaying(transcript, "labkit's reference")
    if ex.reference is None:
        return None
    if mode == "record-reference":
        return handles.Recording(ex.reference, None, "labkit's reference")
    return handles.Live(ex.reference, None, "labkit's reference")


def run_checker(ex: Exercise, answer_handle: Any, ref_handle: Any,
                rng: np.random.Generator) -> Verdict:
    """Run a checker on handles and turn what it raises into a verdict."""
    try:
        if ex.handles:
            ex.checker(answer_handle, ref_handle, rng)
        else:
            ex.checker(answer_handle)
    except Wrong as wrong:
        return Verdict(ex.id, FAIL, str(wrong))
    except handles.UsesLabkit as uses:
        return Verdict(ex.id, FAIL, f"your answer calls labkit's implementation ({uses}) "
                                    f"while the check runs: write your own.")
    except NotImplementedError:
        return Verdict(ex.id, MISSING, "not answered yet (your code raises NotImplementedError)")
    except Unencodable as exc:
        return Verdict(ex.id, ERROR, f"your answer returned {exc}: return numbers, strings, "
                                     f"numpy arrays, or tuples, lists and dicts of them.")
    except handles.TranscriptMismatch as exc:
        return Verdict(ex.id, ERROR, f"the grading record does not match the check ({exc}).")
    except ExerciseRequired as exc:
        return Verdict(ex.id, ERROR, str(exc))
    except Exception as exc:  # the learner's code crashed: show what, never a traceback
        return Verdict(ex.id, ERROR, f"your answer raised {type(exc).__name__}: {exc}")
    return Verdict(ex.id, PASS, "correct")


def evaluate(exercise_id: str, answer: Any, *, seed: int | None = None,
             refuse: bool = True) -> Verdict:
    """Run the checker of ``exercise_id`` on ``answer`` and return the verdict (no printing).

    ``seed`` picks the inputs (None: learning mode's fixed inputs). ``refuse=False`` lets
    labkit's own implementation be checked (the tests' use, to show a check accepts it).
    """
    ex = get(exercise_id)
    if is_missing(answer):
        return Verdict(ex.id, MISSING, "not answered yet")
    refused = ex.refused() if refuse else None
    if refused:
        name = implementation(answer, refused)
        if name:
            return Verdict(ex.id, FAIL, labkit_message(name, ex, answer))
    rng = exercise_rng(ex.id, seed)
    if not ex.handles:
        return run_checker(ex, answer, None, rng)
    ref = release.reference_handle(ex) if release.RELEASE else _reference_handle(ex, "live")
    return run_checker(ex, handles.Live(answer, refused), ref, rng)


SYMBOL = {PASS: "✅", FAIL: "❌", MISSING: "⬜", ERROR: "💥"}


def check(exercise_id: str, answer: Any = None) -> None:
    """Check the learner's answer to exercise ``exercise_id`` and print the verdict.

    Learning mode never raises. Grading mode (``LABKIT_GRADE=1``) raises
    :class:`ExerciseFailed` unless the answer passes.
    """
    verdict = evaluate(exercise_id, answer)
    ex = REGISTRY[verdict.exercise]
    line = f"{SYMBOL[verdict.status]} Exercise {ex.id} ({ex.title}): {verdict.message}"
    if not verdict.passed and ex.binds:
        stand_in = release.stand_in(ex) if release.RELEASE else ex.reference
        if stand_in is not None:
            caller = sys._getframe(1).f_globals
            caller[ex.binds] = stand_in
            if stand_in is ex.reference:
                HANDED_OUT[id(stand_in)] = ex.id
                line += (f"\n   Later cells use labkit's reference `{ex.binds}` until yours "
                         f"passes.")
            else:
                line += (f"\n   Later cells that use `{ex.binds}` will ask you to finish "
                         f"exercise {ex.id} first.")
    if verdict.passed:
        release.remember(ex, answer)
    print(line)
    _log(verdict)
    if not grading_mode():
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
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
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
