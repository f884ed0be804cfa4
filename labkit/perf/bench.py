"""Rows of ``make bench``: labkit against a baseline, measured in the same run.

Each module ``benchmarks/bench_*.py`` defines ``rows() -> Iterable[Row]``. ``ratio`` is
baseline time / labkit time, so above 1 means labkit is faster. A row can instead carry a
rate (``unit`` like "events/s") in ``labkit`` with no baseline.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.validate import instances, positive


@dataclass(frozen=True)
class Row:
    name: str
    labkit: float                 # seconds per call (or a rate, see ``unit``)
    baseline: float | None = None  # seconds per call of the baseline
    baseline_name: str = ""
    unit: str = "s"
    goal: str = ""

    def __post_init__(self):
        if self.unit == "s":        # a time: the ratio divides by it
            positive("labkit", self.labkit)
            if self.baseline is not None:
                positive("baseline", self.baseline)

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.unit != "s":
            return None
        return self.baseline / self.labkit


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        for scale, suffix in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if value >= scale:
                return f"{value / scale:.3g} {suffix}"
        return f"{value * 1e9:.3g} ns"
    return f"{value:,.0f} {unit}"


def format_table(rows: list[Row]) -> str:
    rows = instances("rows", rows, Row)
    header = ("benchmark", "labkit", "baseline", "vs", "speed ratio", "goal")
    body = [(r.name, _fmt(r.labkit, r.unit), _fmt(r.baseline, "s" if r.unit == "s" else r.unit),
             r.baseline_name, "-" if r.ratio is None else f"{r.ratio:.2f}x", r.goal)
            for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(b) for b in body])
