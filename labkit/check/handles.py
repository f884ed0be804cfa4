"""What a checker holds instead of the learner's answer and labkit's reference.

A checker is ``def _(answer, ref, rng)``. It calls ``answer(*args)`` and ``ref(*args)``, or
``answer.derive(fn, *args)`` / ``ref.derive(fn, *args)`` to run a labkit function ``fn`` on
the object itself (``fn(object, *args)``: trace a kernel, build a graph and read back a
summary) — and only ever receives **plain data** back (:mod:`labkit.check.plain`). Nothing
else of the answer reaches the checker, so the same checker runs three ways:

* **live** (learning, and the tests): the calls go straight to the objects; results make
  the plain-data round trip, so a check behaves exactly as it will when grading;
* **recording** (the grader's answer process, or building a student release): the calls
  go to the objects and each call's arguments, result (or exception) and in-place changes
  to its arguments are written to a :class:`Transcript`;
* **replaying** (the grader's own process, or a student release without references): no
  object exists; each call is checked against the transcript (the same function, the same
  arguments bit for bit — both sides drew them from the same seed) and answered from it.

So when grading, the learner's code runs in a process of its own and the checker that
decides the verdict runs in the grader's process on plain data, where no code of the
learner's can reach it.
"""
from __future__ import annotations

import builtins
import hashlib
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from labkit.check import plain
from labkit.check.refuse import Refused, watch


class TranscriptMismatch(Exception):
    """A replayed call differs from the recorded one (or there is none left)."""


class UsesLabkit(Exception):
    """The answer called one of labkit's implementations of it while the check ran."""


class AnswerRaised(Exception):
    """Replay of an exception of a type that is not a builtin one."""


def fn_key(fn: Callable | None) -> str:
    if fn is None:
        return "call"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def resolve_key(key: str) -> Callable:
    """The module-level function a :func:`fn_key` names (``labkit.x.y.fn``)."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            break
        return obj
    raise ValueError(f"no function {key!r}: derive functions are module-level labkit "
                     f"functions")


def args_digest(args: tuple, kwargs: dict) -> str:
    return hashlib.sha256(plain.dumps([list(args), kwargs]).encode()).hexdigest()


@dataclass
class Transcript:
    """The calls of one check, in order: ``{"fn", "args", "result" | "raised", "mutated"}``."""
    calls: list[dict] = field(default_factory=list)
    position: int = 0

    def to_json(self) -> list[dict]:
        return self.calls

    @classmethod
    def from_json(cls, calls: list[dict]) -> "Transcript":
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise ValueError("a transcript is a list of calls")
        return cls(list(calls))


def _exception_record(exc: BaseException) -> dict:
    base = next((k for k in type(exc).__mro__
                 if isinstance(k, type) and issubclass(k, BaseException)
                 and getattr(builtins, k.__name__, None) is k), Exception)
    return {"type": type(exc).__name__, "base": base.__name__, "message": str(exc)[:2000]}


def _raise_recorded(rec: dict) -> None:
    base = getattr(builtins, rec.get("base", ""), None)
    message = str(rec.get("message", ""))
    name = str(rec.get("type", "Exception"))
    if not (isinstance(base, type) and issubclass(base, Exception)) or base is Exception:
        raise AnswerRaised(f"{name}: {message}")
    if name != base.__name__:
        message = f"{name}: {message}"
    raise base(message)


def _apply_mutation(target: Any, new: Any) -> None:
    """Write a recorded post-call value of an argument back into the live argument."""
    if isinstance(target, np.ndarray) and isinstance(new, np.ndarray):
        if target.shape == new.shape:
            np.copyto(target, new, casting="unsafe")
    elif isinstance(target, list) and isinstance(new, list):
        for i, v in enumerate(new):
            if i < len(target) and isinstance(target[i], (np.ndarray, list, dict)):
                _apply_mutation(target[i], v)
            elif i < len(target):
                target[i] = v
            else:
                target.append(v)
        del target[len(new):]
    elif isinstance(target, dict) and isinstance(new, dict):
        for k, v in new.items():
            if k in target and isinstance(target[k], (np.ndarray, list, dict)):
                _apply_mutation(target[k], v)
            else:
                target[k] = v


def _round_trip(value: Any) -> Any:
    return plain.loads(plain.dumps(value))


class Handle:
    """Base of the three kinds; subclasses implement :meth:`_run`."""

    what = "the answer"

    def __call__(self, *args, **kwargs) -> Any:
        return self._run(None, args, kwargs)

    def derive(self, fn: Callable, *args, **kwargs) -> Any:
        """``fn(object, *args, **kwargs)`` as plain data; ``fn`` is a labkit function."""
        if not callable(fn):
            raise TypeError(f"derive needs a function, got {type(fn).__name__}")
        return self._run(fn, args, kwargs)

    def _run(self, fn, args, kwargs):  # pragma: no cover - abstract
        raise NotImplementedError


class Live(Handle):
    """Calls the object (learning mode). ``refused`` is watched during each call."""

    def __init__(self, obj: Any, refused: Refused | None = None, what: str = "the answer"):
        self.obj, self.refused, self.what = obj, refused, what
        self.switched_off = False

    def _invoke(self, fn, args, kwargs):
        if self.refused:
            with watch(self.refused) as w:
                try:
                    out = self.obj(*args, **kwargs) if fn is None else fn(self.obj, *args,
                                                                          **kwargs)
                finally:
                    self.switched_off |= w.switched_off
            if w.hit:
                raise UsesLabkit(w.hit)
            if w.switched_off:
                raise UsesLabkit("(unknown: your answer switched off the profile hook that "
                                 "watches which functions it calls)")
            return out
        return self.obj(*args, **kwargs) if fn is None else fn(self.obj, *args, **kwargs)

    def _run(self, fn, args, kwargs):
        try:
            out = self._invoke(fn, args, kwargs)
        except plain.Unencodable:
            raise
        return _round_trip(out)


class Recording(Live):
    """Calls the object and writes the transcript (the grader's answer process)."""

    def __init__(self, obj: Any, refused: Refused | None = None, what: str = "the answer"):
        super().__init__(obj, refused, what)
        self.transcript = Transcript()

    def _run(self, fn, args, kwargs):
        entry: dict[str, Any] = {"fn": fn_key(fn), "args": args_digest(args, kwargs)}
        before = plain.dumps([list(args), kwargs])
        self.transcript.calls.append(entry)
        try:
            out = self._invoke(fn, args, kwargs)
        except UsesLabkit as exc:
            entry["uses_labkit"] = str(exc)
            raise
        except Exception as exc:
            entry["raised"] = _exception_record(exc)
            self._note_mutation(entry, before, args, kwargs)
            raise
        entry["result"] = plain.encode(out)          # Unencodable propagates: an error
        self._note_mutation(entry, before, args, kwargs)
        return plain.decode(entry["result"])

    @staticmethod
    def _note_mutation(entry, before, args, kwargs):
        try:
            after = plain.dumps([list(args), kwargs])
        except plain.Unencodable:
            return
        if after != before:
            entry["mutated"] = plain.encode([list(args), kwargs])


class Replaying(Handle):
    """Answers from a transcript (the grader's process; a student release's references)."""

    def __init__(self, transcript: Transcript, what: str = "the answer"):
        self.transcript, self.what = transcript, what

    def _run(self, fn, args, kwargs):
        t = self.transcript
        if t.position >= len(t.calls):
            raise TranscriptMismatch(f"{self.what} was called more often than recorded "
                                     f"(call {t.position + 1} of {len(t.calls)})")
        entry = t.calls[t.position]
        t.position += 1
        if entry.get("fn") != fn_key(fn):
            raise TranscriptMismatch(f"call {t.position}: recorded {entry.get('fn')}, "
                                     f"now {fn_key(fn)}")
        if entry.get("args") != args_digest(args, kwargs):
            raise TranscriptMismatch(f"call {t.position} ({fn_key(fn)}): the arguments "
                                     f"differ from the recorded ones")
        if "uses_labkit" in entry:
            raise UsesLabkit(str(entry["uses_labkit"]))
        if "mutated" in entry:
            new_args, new_kwargs = plain.decode(entry["mutated"])
            for old, new in zip(args, new_args):
                _apply_mutation(old, new)
            for k, v in new_kwargs.items():
                if k in kwargs:
                    _apply_mutation(kwargs[k], v)
        if "raised" in entry:
            _raise_recorded(entry["raised"])
        if "result" not in entry:
            raise TranscriptMismatch(f"call {t.position}: no result recorded")
        return plain.decode(entry["result"])

    @property
    def finished(self) -> bool:
        return self.transcript.position == len(self.transcript.calls)
