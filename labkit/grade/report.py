"""Reports from the gradebook: the class table, per-learner feedback, LMS exports.

Everything here reads :class:`ClassGrades` — the gradebook's current state
(:func:`labkit.grade.gradebook.current`), or a list of ``NotebookGrade``s for one run — so a
regrade of some learners merges into every report.

* ``grades.csv`` / ``grades.md`` / ``grades.html``: one row per learner; exercise columns
  grouped by notebook (with the exercises' titles), a points subtotal per notebook, written
  answers' points, the total; notes; in HTML the grading time per notebook, a pass-rate
  chart and a histogram of totals.
* ``feedback/<learner>.md`` and ``.html`` (``--feedback DIR``): one learner's notebooks —
  each exercise's verdict, points and hint, the first error with the learner's own
  traceback lines, the cells that failed, the time taken, lateness. Nothing about others.
* ``lms.csv`` (numeric: student id, then points per assignment, total), ``canvas.csv``
  (Canvas's gradebook import: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one
  column per assignment, a ``Points Possible`` row) and ``moodle.csv`` (Moodle's grade
  import: ``ID number, Email address``, one numeric column per grade item).
"""
from __future__ import annotations

import base64
import csv
import html
import io
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from labkit.check.core import ERROR, FAIL, MISSING, PASS, get
from labkit.grade.config import GradingConfig


@dataclass
class NotebookRow:
    notebook: str
    submitted: bool = True
    statuses: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    points: dict[str, float] = field(default_factory=dict)
    tracebacks: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    submitted_at: str = ""
    graded_at: str = ""
    late_days: int = 0
    late_factor: float = 1.0
    seed: int | None = None

    @property
    def subtotal(self) -> float:
        return sum(self.points.values())


@dataclass
class LearnerGrades:
    learner: str
    student_id: str = ""
    info: dict = field(default_factory=dict)           # roster: name, email, section, ...
    notebooks: dict[str, NotebookRow] = field(default_factory=dict)
    manual: list[dict] = field(default_factory=list)   # written answers' points

    @property
    def written(self) -> float:
        return sum(m["points"] for m in self.manual)

    @property
    def total(self) -> float:
        return sum(n.subtotal for n in self.notebooks.values()) + self.written

    def status(self, notebook: str, exercise: str) -> str:
        row = self.notebooks.get(notebook)
        return row.statuses.get(exercise, MISSING) if row else MISSING


@dataclass
class ClassGrades:
    """The columns (notebooks, exercises, titles, maximum points) and one row per learner."""
    notebooks: list[str]
    exercises: dict[str, list[str]]                    # notebook -> exercise ids in order
    titles: dict[str, str]
    max_points: dict[str, float]
    learners: dict[str, LearnerGrades]
    assignments: dict[str, list[str]] = field(default_factory=dict)   # name -> notebooks
    notes: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    written_max: float = 0.0

    @property
    def all_exercises(self) -> list[str]:
        return [ex for nb in self.notebooks for ex in self.exercises[nb]]

    def notebook_max(self, notebook: str) -> float:
        return sum(self.max_points.get(ex, 1.0) for ex in self.exercises[notebook])

    @property
    def max_total(self) -> float:
        return sum(self.notebook_max(nb) for nb in self.notebooks) + self.written_max

    def rows(self) -> list[LearnerGrades]:
        return [self.learners[k] for k in sorted(self.learners)]


def _fmt(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


# ---- building the class view --------------------------------------------------------------

def from_grades(grades, assignment, *, config=None, notes=()) -> ClassGrades:
    """The class view of one run's ``NotebookGrade``s (no gradebook)."""
    config = config or GradingConfig()
    view = _empty(assignment, config, notes)
    for g in grades:
        lg = view.learners.setdefault(g.learner, LearnerGrades(g.learner, g.student_id))
        lg.notebooks[g.notebook] = NotebookRow(
            g.notebook, g.submitted, dict(g.statuses), dict(g.messages), dict(g.points),
            dict(g.tracebacks), list(g.notes), g.seconds, g.submitted_at, g.graded_at,
            g.late_days, g.late_factor, g.seed)
        if g.seed is not None and g.seed not in view.seeds:
            view.seeds.append(g.seed)
    return view


def from_current(cur, assignment, *, config=None, notes=()) -> ClassGrades:
    """The class view of the gradebook's current state (every run merged)."""
    config = config or GradingConfig()
    view = _empty(assignment, config, notes)
    graded = set(view.notebooks)
    for n in cur.notebooks:
        if n["notebook"] not in graded:
            continue
        info = cur.learners.get(n["learner"], {})
        lg = view.learners.setdefault(n["learner"], LearnerGrades(
            n["learner"], info.get("student_id") or "", info))
        lg.notebooks[n["notebook"]] = NotebookRow(
            n["notebook"], bool(n["submitted"]), notes=list(n["notes"]),
            seconds=n["seconds"] or 0.0, submitted_at=n["submitted_at"] or "",
            graded_at=n["graded_at"] or "", late_days=n["late_days"] or 0,
            late_factor=1.0 if n["late_factor"] is None else n["late_factor"], seed=n["seed"])
        if n["seed"] is not None and n["seed"] not in view.seeds:
            view.seeds.append(n["seed"])
    for e in cur.exercises:
        lg = view.learners.get(e["learner"])
        row = lg.notebooks.get(e["notebook"]) if lg else None
        if row is None:
            continue
        row.statuses[e["exercise"]] = e["status"]
        row.messages[e["exercise"]] = e["message"] or ""
        row.points[e["exercise"]] = e["points"] or 0.0
        if e["max_points"] is not None and e["exercise"] in view.max_points:
            view.max_points[e["exercise"]] = e["max_points"]      # what it was graded for
        if e["traceback"]:
            row.tracebacks[e["exercise"]] = e["traceback"]
    items: dict[str, float] = {}
    for m in cur.manual:
        lg = view.learners.get(m["learner"])
        if lg is not None:
            lg.manual.append(m)
            items[m["item"]] = max(items.get(m["item"], 0.0), m["max_points"] or 0.0)
    view.written_max = sum(items.values())
    return view


def _empty(assignment, config, notes) -> ClassGrades:
    notebooks = list(assignment.exercises)
    titles, maxp = {}, {}
    for nb in notebooks:
        for ex in assignment.exercises[nb]:
            try:
                titles[ex] = get(ex).title
            except ValueError:
                titles[ex] = ""
            maxp[ex] = config.points_for(ex)
    groups: dict[str, list[str]] = {}
    for nb in notebooks:
        spec = config.assignment_of(nb)
        groups.setdefault(spec.name if spec else nb[:-6], []).append(nb)
    return ClassGrades(notebooks, {nb: list(assignment.exercises[nb]) for nb in notebooks},
                       titles, maxp, {}, groups, list(notes))


# ---- the class table ------------------------------------------------------------------------

def header(view: ClassGrades) -> list[str]:
    cols = ["learner", "student_id"]
    for nb in view.notebooks:
        cols += list(view.exercises[nb])          # titles are in grades.md and grades.html
        cols.append(f"{nb[:-6]} points")
    return cols + ["written points", "total", "max", "notes"]


def rows(view: ClassGrades) -> list[list[str]]:
    out = []
    for lg in view.rows():
        row = [lg.learner, lg.student_id]
        notes = []
        for nb in view.notebooks:
            row += [lg.status(nb, ex) for ex in view.exercises[nb]]
            nrow = lg.notebooks.get(nb)
            row.append(_fmt(nrow.subtotal if nrow else 0.0))
            if nrow:
                notes += nrow.notes
        row += [_fmt(lg.written), _fmt(lg.total), _fmt(view.max_total), "; ".join(notes)]
        out.append(row)
    return out


def feedback_lines(lg: LearnerGrades, view: ClassGrades) -> list[str]:
    """What is worth telling one learner; nothing for what passed."""
    lines = []
    for nb in view.notebooks:
        row = lg.notebooks.get(nb)
        if row is None or not row.submitted:
            lines.append(f"{nb}: not submitted")
            continue
        unanswered = []
        for ex in view.exercises[nb]:
            status, message = row.statuses.get(ex, MISSING), row.messages.get(ex, "").strip()
            if status in (FAIL, ERROR) and message:
                lines.append(f"{ex}: {message}")
            elif status == ERROR:
                lines.append(f"{ex}: error (see the notes)")
            elif status == MISSING:
                unanswered.append(ex)
        if unanswered:
            lines.append(f"{nb}: not answered yet: {', '.join(unanswered)}")
    return lines


def pass_rates(view: ClassGrades) -> dict[str, float]:
    learners = view.rows()
    if not learners:
        return {ex: 0.0 for ex in view.all_exercises}
    return {ex: sum(lg.status(nb, ex) == PASS for lg in learners) / len(learners)
            for nb in view.notebooks for ex in view.exercises[nb]}


def write_class(view: ClassGrades, out: Path) -> list[Path]:
    """grades.csv, grades.md, grades.html."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder for the reports; {out} is a file")
    out.mkdir(parents=True, exist_ok=True)
    head, body = header(view), rows(view)
    csv_path, md_path, html_path = out / "grades.csv", out / "grades.md", out / "grades.html"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(head)
        writer.writerows(body)
    md_path.write_text(render_markdown(view), encoding="utf-8")
    html_path.write_text(render_html(view), encoding="utf-8")
    return [csv_path, md_path, html_path]


def render_markdown(view: ClassGrades) -> str:
    lines = ["# Grades", "", _summary_sentence(view), ""]
    for nb in view.notebooks:
        exs = view.exercises[nb]
        lines += [f"## {nb}", "", "| learner | " + " | ".join(exs) + " | points |",
                  "|---|" + "---|" * (len(exs) + 1)]
        for lg in view.rows():
            row = lg.notebooks.get(nb)
            lines.append(f"| {lg.learner} | " + " | ".join(lg.status(nb, ex) for ex in exs)
                         + f" | {_fmt(row.subtotal if row else 0)}/{_fmt(view.notebook_max(nb))} |")
        lines += ["", "Exercises: " + "; ".join(f"{ex} {view.titles.get(ex, '')} "
                                                   f"({_fmt(view.max_points[ex])} pt)"
                                                   for ex in exs), ""]
    lines += ["## Totals", "", "| learner | " + " | ".join(n[:-6] for n in view.notebooks)
              + " | written | total |", "|---|" + "---|" * (len(view.notebooks) + 2)]
    for lg in view.rows():
        subs = [_fmt(lg.notebooks[nb].subtotal) if nb in lg.notebooks else "0"
                for nb in view.notebooks]
        lines.append(f"| {lg.learner} | " + " | ".join(subs)
                     + f" | {_fmt(lg.written)} | {_fmt(lg.total)}/{_fmt(view.max_total)} |")
    noted = [f"- **{lg.learner}**: {'; '.join(n for r in lg.notebooks.values() for n in r.notes)}"
             for lg in view.rows() if any(r.notes for r in lg.notebooks.values())]
    noted += [f"- {n}" for n in view.notes]
    if noted:
        lines += ["", "## Notes", "", *noted]
    said = [f"- {lg.learner} · {line}" for lg in view.rows() for line in feedback_lines(lg, view)]
    if said:
        lines += ["", "## Feedback", "", *said]
    return "\n".join(lines) + "\n"


def _summary_sentence(view: ClassGrades) -> str:
    graded = [r for lg in view.rows() for r in lg.notebooks.values() if r.submitted]
    mean = sum(r.seconds for r in graded) / len(graded) if graded else 0.0
    seeds = ", ".join(map(str, view.seeds)) or "—"
    return (f"{len(view.learners)} learners · {len(view.notebooks)} notebooks · "
            f"{len(view.all_exercises)} exercises · {len(graded)} notebooks graded, "
            f"{mean:.1f} s each on average · inputs from seed {seeds}")


# ---- HTML -----------------------------------------------------------------------------------

COLOURS = {PASS: "#d8f5d0", FAIL: "#ffd9d6", MISSING: "#eeeeee", ERROR: "#ffe7b3"}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { border: 1px solid #bbb; padding: 4px 8px; text-align: center; }
td:first-child, th:first-child { text-align: left; }
.charts img { margin-right: 2em; vertical-align: top; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
"""


def plot_pass_rates(rates: dict[str, float], ax=None):
    """Bar chart: the fraction of learners who passed each exercise."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(min(14.0, max(4.0, 0.45 * len(rates) + 1.5)), 3.0))
    ax.bar(range(len(rates)), [100 * r for r in rates.values()], color="#4c72b0")
    ax.set_xticks(range(len(rates)), list(rates), rotation=90 if len(rates) > 12 else 0)
    ax.set_ylim(0, 100)
    ax.set_ylabel("learners who passed (%)")
    ax.set_title("Pass rate per exercise")
    return ax


def plot_totals(totals: list[float], maximum: float, ax=None):
    """Histogram of learners' total points (0..maximum)."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 3.0))
    top = max(1.0, maximum)
    bins = min(20, max(1, int(math.ceil(top)) + 1))
    ax.hist(totals, bins=bins, range=(-0.5, top + 0.5), color="#55a868", rwidth=0.85)
    from matplotlib.ticker import MaxNLocator  # deferred: matplotlib

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"points (of {_fmt(maximum)})")
    ax.set_ylabel("learners")
    ax.set_title("Totals")
    return ax


def _png(draw, size: tuple[float, float]) -> str:
    """Base64 PNG of one figure drawn by ``draw(ax)``, without touching pyplot's state."""
    from matplotlib.figure import Figure  # deferred: matplotlib

    fig = Figure(figsize=size)
    draw(fig.subplots())
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(view: ClassGrades) -> str:
    """One self-contained page: the grouped table, times, charts, notes and feedback."""
    esc = html.escape
    rates = pass_rates(view)
    n_ex = len(rates)
    bars = _png(lambda ax: plot_pass_rates(rates, ax), (min(14.0, max(4.0, 0.45 * n_ex + 1.5)), 3.0))
    hist = _png(lambda ax: plot_totals([lg.total for lg in view.rows()], view.max_total, ax),
                (4.5, 3.0))
    group = "".join(f'<th colspan="{len(view.exercises[nb]) + 2}">{esc(nb)}</th>'
                    for nb in view.notebooks)
    sub = "".join("".join(f'<th><abbr title="{esc(view.titles.get(ex, ""))}">{esc(ex)}</abbr>'
                          f"</th>" for ex in view.exercises[nb])
                  + "<th>points</th><th>time</th>" for nb in view.notebooks)
    body = []
    for lg in view.rows():
        cells = [f"<td>{esc(lg.learner)}</td>"]
        for nb in view.notebooks:
            row = lg.notebooks.get(nb)
            for ex in view.exercises[nb]:
                s = lg.status(nb, ex)
                cells.append(f'<td class="{esc(s)}" style="background:{COLOURS.get(s, "#fff")}" '
                             f'title="{esc(row.messages.get(ex, "") if row else "")}">{esc(s)}</td>')
            cells.append(f"<td>{_fmt(row.subtotal if row else 0)}/{_fmt(view.notebook_max(nb))}"
                         f"</td>")
            cells.append(f"<td>{row.seconds:.0f} s</td>" if row and row.submitted else "<td>—</td>")
        cells += [f"<td>{_fmt(lg.written)}</td>",
                  f"<td><b>{_fmt(lg.total)}</b>/{_fmt(view.max_total)}</td>"]
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = [f"<li><b>{esc(lg.learner)}</b>: {esc('; '.join(n for r in lg.notebooks.values() for n in r.notes))}</li>"
             for lg in view.rows() if any(r.notes for r in lg.notebooks.values())]
    notes += [f"<li>{esc(n)}</li>" for n in view.notes]
    said = [f"<li>{esc(lg.learner)} · {esc(line)}</li>" for lg in view.rows()
            for line in feedback_lines(lg, view)]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Grades</title>
<style>{STYLE}</style></head><body>
<h1>Grades</h1>
<p id="summary">{esc(_summary_sentence(view))}</p>
<table id="grades"><thead><tr><th rowspan="2">learner</th>{group}<th rowspan="2">written</th>
<th rowspan="2">total</th></tr><tr>{sub}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
<div class="charts">
<img id="pass-rates" alt="pass rate per exercise" src="data:image/png;base64,{bars}">
<img id="scores" alt="histogram of totals" src="data:image/png;base64,{hist}">
</div>
{"<h2>Notes</h2><ul>" + "".join(notes) + "</ul>" if notes else ""}
{"<h2>Feedback</h2><ul>" + "".join(said) + "</ul>" if said else ""}
</body></html>
"""


# ---- per-learner feedback -------------------------------------------------------------------

def safe_name(learner: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", learner).strip("._") or "learner"


def learner_markdown(lg: LearnerGrades, view: ClassGrades) -> str:
    lines = [f"# Feedback for {lg.learner}", "",
             f"Total: **{_fmt(lg.total)} of {_fmt(view.max_total)} points**", ""]
    for nb in view.notebooks:
        row = lg.notebooks.get(nb)
        lines += [f"## {nb}", ""]
        if row is None or not row.submitted:
            lines += ["Not submitted.", ""]
            continue
        late = (f" — {row.late_days} day{'s' * (row.late_days != 1)} late, "
                f"{row.late_factor:.0%} of the points kept" if row.late_days else "")
        lines += [f"{_fmt(row.subtotal)} of {_fmt(view.notebook_max(nb))} points · graded in "
                  f"{row.seconds:.0f} s{late}", "",
                  "| exercise | | verdict | points | what the check said |",
                  "|---|---|---|---|---|"]
        for ex in view.exercises[nb]:
            s = row.statuses.get(ex, MISSING)
            msg = row.messages.get(ex, "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {ex} | {view.titles.get(ex, '')} | {s} | "
                         f"{_fmt(row.points.get(ex, 0.0))}/{_fmt(view.max_points[ex])} | {msg} |")
        lines.append("")
        first = next(((ex, tb) for ex, tb in row.tracebacks.items() if tb), None)
        if first:
            lines += [f"The first error, in your answer to {first[0]}:", "", "```",
                      first[1].rstrip(), "```", ""]
        if row.notes:
            lines += ["Notes:", "", *[f"- {n}" for n in row.notes], ""]
    if lg.manual:
        lines += ["## Written answers", "", "| question | points | comment |", "|---|---|---|"]
        lines += [f"| {m['item']} | {_fmt(m['points'])}/{_fmt(m['max_points'])} | "
                  f"{(m.get('comment') or '').replace('|', '/')} |" for m in lg.manual]
    return "\n".join(lines) + "\n"


def learner_html(lg: LearnerGrades, view: ClassGrades) -> str:
    esc = html.escape
    parts = [f"<h1>Feedback for {esc(lg.learner)}</h1>",
             f"<p id='total'>Total: <b>{_fmt(lg.total)} of {_fmt(view.max_total)} points</b></p>"]
    for nb in view.notebooks:
        row = lg.notebooks.get(nb)
        parts.append(f"<h2>{esc(nb)}</h2>")
        if row is None or not row.submitted:
            parts.append("<p>Not submitted.</p>")
            continue
        late = (f" — {row.late_days} day(s) late, {row.late_factor:.0%} of the points kept"
                if row.late_days else "")
        parts.append(f"<p>{_fmt(row.subtotal)} of {_fmt(view.notebook_max(nb))} points · "
                     f"graded in {row.seconds:.0f} s{esc(late)}</p>")
        trs = "".join(
            f"<tr><td>{esc(ex)}</td><td style='text-align:left'>{esc(view.titles.get(ex, ''))}</td>"
            f"<td style='background:{COLOURS.get(row.statuses.get(ex, MISSING), '#fff')}'>"
            f"{esc(row.statuses.get(ex, MISSING))}</td>"
            f"<td>{_fmt(row.points.get(ex, 0.0))}/{_fmt(view.max_points[ex])}</td>"
            f"<td style='text-align:left'>{esc(row.messages.get(ex, ''))}</td></tr>"
            for ex in view.exercises[nb])
        parts.append("<table class='exercises'><tr><th>exercise</th><th></th><th>verdict</th>"
                     f"<th>points</th><th>what the check said</th></tr>{trs}</table>")
        first = next(((ex, tb) for ex, tb in row.tracebacks.items() if tb), None)
        if first:
            parts.append(f"<p>The first error, in your answer to {esc(first[0])}:</p>"
                         f"<pre class='traceback'>{esc(first[1])}</pre>")
        if row.notes:
            parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in row.notes) + "</ul>")
    if lg.manual:
        parts.append("<h2>Written answers</h2><table><tr><th>question</th><th>points</th>"
                     "<th>comment</th></tr>" + "".join(
                         f"<tr><td>{esc(m['item'])}</td><td>{_fmt(m['points'])}/"
                         f"{_fmt(m['max_points'])}</td><td>{esc(m.get('comment') or '')}</td></tr>"
                         for m in lg.manual) + "</table>")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Feedback: "
            f"{esc(lg.learner)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def write_feedback(view: ClassGrades, folder: Path) -> list[Path]:
    """One Markdown and one HTML file per learner in ``folder``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--feedback must be a folder; {folder} is a file")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for lg in view.rows():
        base = folder / safe_name(lg.learner)
        base.with_suffix(".md").write_text(learner_markdown(lg, view), encoding="utf-8")
        base.with_suffix(".html").write_text(learner_html(lg, view), encoding="utf-8")
        written += [base.with_suffix(".md"), base.with_suffix(".html")]
    return written


# ---- LMS exports ----------------------------------------------------------------------------

def assignment_points(lg: LearnerGrades, view: ClassGrades) -> dict[str, float]:
    out = {}
    for name, nbs in view.assignments.items():
        out[name] = sum(lg.notebooks[nb].subtotal for nb in nbs if nb in lg.notebooks)
    if view.written_max:
        out["written answers"] = lg.written
    return out


def assignment_max(view: ClassGrades) -> dict[str, float]:
    out = {name: sum(view.notebook_max(nb) for nb in nbs)
           for name, nbs in view.assignments.items()}
    if view.written_max:
        out["written answers"] = view.written_max
    return out


def write_lms(view: ClassGrades, out: Path) -> list[Path]:
    """lms.csv (numeric), canvas.csv and moodle.csv; learners without a student id are
    listed in lms.csv with an empty id (and left out of the LMS layouts, with a note)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    maxima = assignment_max(view)
    names = list(maxima)
    plain, canvas, moodle = out / "lms.csv", out / "canvas.csv", out / "moodle.csv"
    with plain.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["student_id", "learner", *names, "total"])
        for lg in view.rows():
            pts = assignment_points(lg, view)
            w.writerow([lg.student_id, lg.learner, *[_fmt(pts[n]) for n in names],
                        _fmt(lg.total)])
    with canvas.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *names])
        w.writerow(["Points Possible", "", "", "", "", *[_fmt(maxima[n]) for n in names]])
        for lg in view.rows():
            if not lg.student_id:
                continue
            pts = assignment_points(lg, view)
            w.writerow([lg.info.get("name") or lg.learner, lg.student_id,
                        lg.info.get("student_id") or lg.student_id,
                        lg.info.get("sis_login_id") or "", lg.info.get("section") or "",
                        *[_fmt(pts[n]) for n in names]])
    with moodle.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["ID number", "Email address", *names])
        for lg in view.rows():
            if not lg.student_id:
                continue
            pts = assignment_points(lg, view)
            w.writerow([lg.student_id, lg.info.get("email") or "", *[_fmt(pts[n]) for n in names]])
    return [plain, canvas, moodle]


def summary(view: ClassGrades) -> str:
    """The command's printout: one line per learner, then the summary line."""
    width = max([len("learner")] + [len(lg.learner) for lg in view.rows()])
    out = [f"{'learner':<{width}}  points"]
    for lg in view.rows():
        notes = "; ".join(n for r in lg.notebooks.values() for n in r.notes)
        out.append(f"{lg.learner:<{width}}  {_fmt(lg.total)}/{_fmt(view.max_total)}"
                   + (f"  ({notes})" if notes else ""))
    out.append(_summary_sentence(view))
    return "\n".join(out)
