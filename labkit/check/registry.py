"""The exercise registry: every ``@exercise`` of ``labkit/check/chNN.py`` by its id ("2.3"),
filled as the chapter modules are imported (:func:`labkit.check.core.exercise`)."""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any

REGISTRY: dict = {}     # exercise id -> labkit.check.core.Exercise


class ExerciseRequired(RuntimeError):
    """A cell needs an exercise's answer that has not passed (and labkit's is not shipped)."""


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


def load_all() -> dict:
    """Import every chapter's checks (``labkit/check/chNN.py``) and return the registry."""
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if len(info.name) == 4 and info.name.startswith("ch") and info.name[2:].isdigit():
            importlib.import_module(f"labkit.check.{info.name}")
    return REGISTRY


def get(exercise_id: str) -> Any:
    """The registered exercise (a :class:`labkit.check.core.Exercise`), importing its chapter module ``labkit.check.chNN`` first."""
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
