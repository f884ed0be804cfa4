"""The instructor's ``grading.toml``: points, assignments, due dates and the late policy.

Everything is optional; without a file every exercise is worth its registered points
(``@exercise(..., points=1)``), every graded notebook is one assignment, and nothing is late.
An example (``labkit-grade --config grading.toml``)::

    # points per exercise (the registry's default is 1)
    [points]
    "2.6" = 3
    "5.2" = 2

    # which chapters (or notebooks) make an assignment, and when it is due
    [[assignment]]
    name = "A1: autodiff"
    chapters = [2]
    due = "2026-10-15T23:59:00+00:00"

    [[assignment]]
    name = "A2: kernels"
    notebooks = ["04_gpu_cuda", "05_fast_kernels"]
    due = "2026-10-29T23:59:00+00:00"

    # what a late submission is worth: none (no penalty), per_day (lose `penalty` of the
    # points per started day late, nothing after `max_days`), or zero
    [late]
    policy = "per_day"
    penalty = 0.1
    max_days = 5

    # written answers and predictions: points for each question the instructor marks
    [written]
    points = 1

``load(path)`` returns a :class:`GradingConfig`; a malformed file is one ``ValueError``
naming the key and what is allowed.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from labkit.check.core import chapter_of, get

LATE_POLICIES = ("none", "per_day", "zero")


@dataclass(frozen=True)
class AssignmentSpec:
    name: str
    notebooks: tuple[str, ...] = ()      # file names, e.g. "02_autodiff.ipynb"
    chapters: tuple[int, ...] = ()
    due: datetime | None = None

    def covers(self, notebook: str) -> bool:
        number = int(notebook[:2]) if notebook[:2].isdigit() else None
        return notebook in self.notebooks or (number is not None and number in self.chapters)


@dataclass(frozen=True)
class LatePolicy:
    policy: str = "none"
    penalty: float = 0.0                 # fraction of the points lost per started day
    max_days: float = math.inf           # after this many days: nothing

    def factor(self, submitted: datetime | None, due: datetime | None) -> float:
        """The fraction of its points a submission keeps (1.0 when on time or unknown)."""
        if self.policy == "none" or submitted is None or due is None or submitted <= due:
            return 1.0
        if self.policy == "zero":
            return 0.0
        days = math.ceil((submitted - due).total_seconds() / 86400)
        if days > self.max_days:
            return 0.0
        return max(0.0, 1.0 - self.penalty * days)

    def days_late(self, submitted: datetime | None, due: datetime | None) -> int:
        if submitted is None or due is None or submitted <= due:
            return 0
        return math.ceil((submitted - due).total_seconds() / 86400)


@dataclass(frozen=True)
class GradingConfig:
    points: dict[str, float] = field(default_factory=dict)
    assignments: tuple[AssignmentSpec, ...] = ()
    late: LatePolicy = LatePolicy()
    written_points: float = 1.0
    source: str = ""

    def points_for(self, exercise_id: str) -> float:
        """Points of an exercise: the file's, else the registry's (default 1)."""
        if exercise_id in self.points:
            return self.points[exercise_id]

        try:
            return float(get(exercise_id).points)
        except ValueError:
            return 1.0

    def assignment_of(self, notebook: str) -> AssignmentSpec | None:
        return next((a for a in self.assignments if a.covers(notebook)), None)

    def due_of(self, notebook: str) -> datetime | None:
        a = self.assignment_of(notebook)
        return a.due if a else None


def _err(key: str, value, allowed: str) -> ValueError:
    return ValueError(f"grading.toml: {key} = {value!r}: {allowed}")


def parse_time(text, key: str = "due") -> datetime:
    """An ISO 8601 time (a TOML datetime works too); naive times are taken as UTC."""
    if isinstance(text, datetime):
        value = text
    elif isinstance(text, str):
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _err(key, text, "give an ISO 8601 time such as 2026-10-15T23:59:00+00:00") \
                from None
    else:
        raise _err(key, text, "give an ISO 8601 time such as 2026-10-15T23:59:00+00:00")
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _number(key: str, value, *, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value) and high != math.inf or not (low <= value <= high):
        raise _err(key, value, f"a number in [{low:g}, {high:g}]")
    return float(value)


def from_dict(data: dict, source: str = "") -> GradingConfig:
    known = {"points", "assignment", "late", "written"}
    for key in data:
        if key not in known:
            raise _err(key, "…", f"unknown section; the sections are {', '.join(sorted(known))}")
    points = {}
    for ex, p in (data.get("points") or {}).items():
        try:
            chapter_of(str(ex))
        except (TypeError, ValueError):
            raise _err(f"points.{ex}", p, "keys are exercise ids such as \"2.6\"") from None
        points[str(ex)] = _number(f"points.{ex}", p, low=0.0, high=1e6)
    specs = []
    for k, a in enumerate(data.get("assignment") or []):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or not a["name"]:
            raise _err(f"assignment[{k}].name", a.get("name") if isinstance(a, dict) else a,
                       "each [[assignment]] needs a name")
        notebooks = tuple(n if str(n).endswith(".ipynb") else f"{n}.ipynb"
                          for n in a.get("notebooks", []))
        chapters = a.get("chapters", [])
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in chapters):
            raise _err(f"assignment[{k}].chapters", chapters, "a list of chapter numbers")
        if not notebooks and not chapters:
            raise _err(f"assignment[{k}]", a["name"], "give chapters = [...] or notebooks = [...]")
        due = parse_time(a["due"], f"assignment[{k}].due") if "due" in a else None
        specs.append(AssignmentSpec(a["name"], notebooks, tuple(chapters), due))
    late_d = data.get("late") or {}
    policy = late_d.get("policy", "none")
    if policy not in LATE_POLICIES:
        raise _err("late.policy", policy, f"one of {', '.join(LATE_POLICIES)}")
    late = LatePolicy(policy, _number("late.penalty", late_d.get("penalty", 0.0), high=1.0),
                      _number("late.max_days", late_d.get("max_days", math.inf), low=0.0))
    written = _number("written.points", (data.get("written") or {}).get("points", 1.0),
                      high=1e6)
    return GradingConfig(points, tuple(specs), late, written, source)


def load(path: str | Path | None) -> GradingConfig:
    if path is None:
        return GradingConfig()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"--config: no file {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--config: {path} is not valid TOML: {exc}") from None
    return from_dict(data, str(path))
