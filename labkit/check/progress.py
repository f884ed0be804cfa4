"""A learner's own progress: which exercises of the course their check cells have passed.

Every ``check(...)`` run while learning records its verdict in one JSON file per learner:
``$LABKIT_PROGRESS`` when set, else ``~/.labkit/progress.json``. (The grader never writes
it: in grading mode checks do not record.) :func:`progress` reads that file and shows, in
any notebook, a table of every exercise of the course and a small chart per chapter::

    import labkit
    labkit.progress()

The file holds ``{"exercises": {"2.3": {"status": "pass", "passed": true, "title": ...,
"when": "2026-11-29T23:59:00+00:00"}}}``: the last verdict, and whether it ever passed
(a later wrong re-run does not take a pass away).
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path

from labkit.check.core import PASS, SYMBOL
from labkit.check.record import load
from labkit.check.registry import _sort_key, load_all


@dataclass(frozen=True)
class ProgressRow:
    exercise: str
    chapter: int
    title: str
    status: str          # the last verdict: pass/fail/missing/error, or "not tried"
    passed: bool         # passed at least once


NOT_TRIED = "not tried"


@dataclass(frozen=True)
class Progress:
    rows: tuple[ProgressRow, ...]

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.rows)

    @property
    def total(self) -> int:
        return len(self.rows)

    def by_chapter(self) -> dict[int, tuple[int, int]]:
        """chapter -> (passed, total)."""
        out: dict[int, tuple[int, int]] = {}
        for r in self.rows:
            p, t = out.get(r.chapter, (0, 0))
            out[r.chapter] = (p + r.passed, t + 1)
        return out

    def __str__(self) -> str:
        lines = [f"Your progress: {self.passed} of {self.total} exercises passed", ""]
        lines += [f"{SYMBOL.get(r.status, '·') if not r.passed else SYMBOL[PASS]} "
                  f"{r.exercise:<6} {r.title}"
                  + ("" if r.passed or r.status == NOT_TRIED else f"  (last: {r.status})")
                  for r in self.rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        rows = "".join(
            f"<tr><td>{esc(r.exercise)}</td><td style='text-align:left'>{esc(r.title)}</td>"
            f"<td>{'✅ passed' if r.passed else esc(r.status)}</td></tr>" for r in self.rows)
        return (f"<p><b>Your progress: {self.passed} of {self.total} exercises passed</b></p>"
                f"<img alt='passed per chapter' src='data:image/png;base64,{chart_png(self)}'>"
                f"<table><tr><th>exercise</th><th>title</th><th>status</th></tr>{rows}</table>")


def progress_of(recorded: dict[str, dict], exercises: dict[str, object]) -> Progress:
    """Every exercise of the course (``exercises``: id -> Exercise) with what was recorded."""
    rows = []
    for ex_id in sorted(exercises, key=_sort_key):
        rec = recorded.get(ex_id, {})
        rows.append(ProgressRow(ex_id, int(ex_id.split(".")[0]),
                                getattr(exercises[ex_id], "title", ""),
                                str(rec.get("status", NOT_TRIED)), bool(rec.get("passed"))))
    return Progress(tuple(rows))


def plot_progress(result: Progress, ax=None):
    """Stacked bars per chapter: exercises passed and still to do."""
    if ax is None:
        import matplotlib.pyplot as plt  # deferred: matplotlib

        _, ax = plt.subplots(figsize=(6, 2.6))
    chapters = result.by_chapter()
    xs = [f"{c:02d}" for c in chapters]
    done = [p for p, _ in chapters.values()]
    todo = [t - p for p, t in chapters.values()]
    ax.bar(xs, done, color="#55a868", label="passed")
    ax.bar(xs, todo, bottom=done, color="#dddddd", label="to do")
    ax.set_xlabel("chapter")
    ax.set_ylabel("exercises")
    ax.set_title(f"{result.passed} of {result.total} exercises passed")
    ax.legend(loc="upper right", fontsize="small")
    return ax


def chart_png(result: Progress) -> str:
    from matplotlib.figure import Figure  # deferred: matplotlib

    fig = Figure(figsize=(6, 2.6))
    plot_progress(result, fig.subplots())
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def progress(path: str | Path | None = None) -> Progress:
    """Which exercises of the course you have passed, from the verdicts your check cells
    recorded. In a notebook it shows as a table with a chart per chapter; ``print`` it for
    text. ``path`` defaults to ``$LABKIT_PROGRESS`` or ``~/.labkit/progress.json``."""
    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a file path, got {type(path).__name__}")
    return progress_of(load(None if path is None else Path(path)), load_all())
