"""Score tables: learner × exercise, written as CSV, Markdown and HTML (with two charts).

Only the graded notebooks appear (``labkit-grade --notebooks/--chapters`` narrows the
assignment before grading). Feedback lists only what has something to say: a failing
hint, an error, the exercises not answered in a submitted notebook, and "not submitted"
once per notebook.
"""
from __future__ import annotations

import base64
import csv
import html
import io
from collections import defaultdict
from pathlib import Path

from labkit.check.core import ERROR, FAIL, MISSING, PASS
from labkit.grade.runner import Assignment, NotebookGrade


def exercises_of(assignment: Assignment) -> list[str]:
    return [ex for name in assignment.exercises for ex in assignment.exercises[name]]


def table(grades: list[NotebookGrade], assignment: Assignment) -> tuple[list[str], list[list[str]]]:
    """Header and one row per learner: a status per exercise, then score, total and notes."""
    exercises = exercises_of(assignment)
    by_learner: dict[str, dict[str, str]] = defaultdict(dict)
    notes: dict[str, list[str]] = defaultdict(list)
    for g in grades:
        by_learner[g.learner].update(g.statuses)
        notes[g.learner] += g.notes
    header = ["learner", *exercises, "score", "total", "notes"]
    rows = []
    for learner in sorted(by_learner):
        statuses = [by_learner[learner].get(ex, MISSING) for ex in exercises]
        rows.append([learner, *statuses, str(sum(s == PASS for s in statuses)),
                     str(len(exercises)), "; ".join(notes[learner])])
    return header, rows


def feedback(grades: list[NotebookGrade]) -> list[str]:
    """One line per thing worth telling a learner; nothing for what passed."""
    lines = []
    for g in sorted(grades, key=lambda g: (g.learner, g.notebook)):
        if not g.submitted:
            lines.append(f"{g.learner} · {g.notebook}: not submitted")
            continue
        unanswered = []
        for ex, status in g.statuses.items():
            message = g.messages.get(ex, "").strip()
            if status in (FAIL, ERROR) and message:
                lines.append(f"{g.learner} · {ex}: {message}")
            elif status == ERROR:
                lines.append(f"{g.learner} · {ex}: error (see the notes)")
            elif status == MISSING:
                unanswered.append(ex)
        if unanswered:
            lines.append(f"{g.learner} · {g.notebook}: not answered yet: {', '.join(unanswered)}")
    return lines


def pass_rates(grades: list[NotebookGrade], assignment: Assignment) -> dict[str, float]:
    """Fraction of learners who passed each exercise."""
    header, rows = table(grades, assignment)
    exercises = header[1:-3]
    if not rows:
        return {ex: 0.0 for ex in exercises}
    return {ex: sum(r[1 + i] == PASS for r in rows) / len(rows) for i, ex in enumerate(exercises)}


def write_reports(grades: list[NotebookGrade], assignment: Assignment, out: Path,
                  extra_notes: list[str] = ()) -> tuple[Path, Path, Path]:
    """Write ``grades.csv``, ``grades.md`` and ``grades.html`` into ``out``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder for the reports; {out} is a file")
    out.mkdir(parents=True, exist_ok=True)
    header, rows = table(grades, assignment)
    csv_path, md_path, html_path = out / "grades.csv", out / "grades.md", out / "grades.html"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    lines = ["# Grades", "", "| " + " | ".join(header[:-1]) + " |",
             "|" + "---|" * (len(header) - 1)]
    lines += ["| " + " | ".join(r[:-1]) + " |" for r in rows]
    noted = [f"- **{r[0]}**: {r[-1]}" for r in rows if r[-1]] + [f"- {n}" for n in extra_notes]
    if noted:
        lines += ["", "## Notes", "", *noted]
    said = feedback(grades)
    if said:
        lines += ["", "## Feedback", "", *[f"- {line}" for line in said]]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    html_path.write_text(render_html(grades, assignment, extra_notes), encoding="utf-8")
    return csv_path, md_path, html_path


# ---- HTML -------------------------------------------------------------------------------

COLOURS = {PASS: "#d8f5d0", FAIL: "#ffd9d6", MISSING: "#eeeeee", ERROR: "#ffe7b3"}


def plot_pass_rates(rates: dict[str, float], ax=None):
    """Bar chart: the fraction of learners who passed each exercise."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(min(14.0, max(4.0, 0.45 * len(rates) + 1.5)), 3.0))
    ax.bar(range(len(rates)), [100 * r for r in rates.values()], color="#4c72b0")
    ax.set_xticks(range(len(rates)), list(rates), rotation=90 if len(rates) > 12 else 0)
    ax.set_ylim(0, 100)
    ax.set_ylabel("learners who passed (%)")
    ax.set_title("Pass rate per exercise")
    return ax


def plot_scores(scores: list[int], total: int, ax=None):
    """Histogram of learners' scores (0..total)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 3.0))
    ax.hist(scores, bins=[b - 0.5 for b in range(total + 2)], color="#55a868", rwidth=0.85)
    ax.set_xlim(-0.5, total + 0.5)
    step = max(1, (total + 1) // 12)
    ax.set_xticks(range(0, total + 1, step))
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"score (of {total})")
    ax.set_ylabel("learners")
    ax.set_title("Scores")
    return ax


def _png(draw, size: tuple[float, float]) -> str:
    """Base64 PNG of one figure drawn by ``draw(ax)``, without touching pyplot's state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    draw(fig.subplots())
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(grades: list[NotebookGrade], assignment: Assignment,
                extra_notes: list[str] = ()) -> str:
    """One self-contained page: the table, a pass-rate bar chart, a score histogram, notes."""
    header, rows = table(grades, assignment)
    rates = pass_rates(grades, assignment)
    total = len(header) - 4
    scores = [int(r[-3]) for r in rows]

    bars_png = _png(lambda ax: plot_pass_rates(rates, ax), (min(14.0, max(4.0, 0.45 * total + 1.5)), 3.0))
    hist_png = _png(lambda ax: plot_scores(scores, total, ax), (4.5, 3.0))
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header[:-1])
    body = []
    for r in rows:
        cells = [f"<td>{esc(r[0])}</td>"]
        cells += [f'<td class="{esc(s)}" style="background:{COLOURS.get(s, "#fff")}">{esc(s)}</td>'
                  for s in r[1:-3]]
        cells += [f"<td>{esc(r[-3])}</td>", f"<td>{esc(r[-2])}</td>"]
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = [f"<li><b>{esc(r[0])}</b>: {esc(r[-1])}</li>" for r in rows if r[-1]]
    notes += [f"<li>{esc(n)}</li>" for n in extra_notes]
    said = [f"<li>{esc(line)}</li>" for line in feedback(grades)]
    notebooks = ", ".join(esc(n) for n in assignment.exercises)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Grades</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #bbb; padding: 4px 8px; text-align: center; }}
td:first-child {{ text-align: left; }}
.charts img {{ margin-right: 2em; vertical-align: top; }}
</style></head><body>
<h1>Grades</h1>
<p>{len(rows)} learners · {total} exercises · notebooks: {notebooks}</p>
<table id="grades"><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
<div class="charts">
<img id="pass-rates" alt="pass rate per exercise" src="data:image/png;base64,{bars_png}">
<img id="scores" alt="score histogram" src="data:image/png;base64,{hist_png}">
</div>
{"<h2>Notes</h2><ul>" + "".join(notes) + "</ul>" if notes else ""}
{"<h2>Feedback</h2><ul>" + "".join(said) + "</ul>" if said else ""}
</body></html>
"""


def summary(grades: list[NotebookGrade], assignment: Assignment) -> str:
    header, rows = table(grades, assignment)
    width = max([len("learner")] + [len(r[0]) for r in rows])
    out = [f"{'learner':<{width}}  score"]
    out += [f"{r[0]:<{width}}  {r[-3]}/{r[-2]}" + (f"  ({r[-1]})" if r[-1] else "")
            for r in rows]
    return "\n".join(out)
