"""Score tables: learner × exercise, written as CSV and Markdown."""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from labkit.check.core import PASS
from labkit.grade.runner import Assignment, NotebookGrade


def table(grades: list[NotebookGrade], assignment: Assignment) -> tuple[list[str], list[list[str]]]:
    """Header and one row per learner: a status per exercise, then score, total and notes."""
    exercises = [ex for name in assignment.exercises for ex in assignment.exercises[name]]
    by_learner: dict[str, dict[str, str]] = defaultdict(dict)
    notes: dict[str, list[str]] = defaultdict(list)
    for g in grades:
        by_learner[g.learner].update(g.statuses)
        notes[g.learner] += g.notes
    header = ["learner", *exercises, "score", "total", "notes"]
    rows = []
    for learner in sorted(by_learner):
        statuses = [by_learner[learner].get(ex, "missing") for ex in exercises]
        rows.append([learner, *statuses, str(sum(s == PASS for s in statuses)),
                     str(len(exercises)), "; ".join(notes[learner])])
    return header, rows


def write_reports(grades: list[NotebookGrade], assignment: Assignment, out: Path,
                  extra_notes: list[str] = ()) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    header, rows = table(grades, assignment)
    csv_path, md_path = out / "grades.csv", out / "grades.md"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    lines = ["# Grades", "", "| " + " | ".join(header[:-1]) + " |",
             "|" + "---|" * (len(header) - 1)]
    lines += ["| " + " | ".join(r[:-1]) + " |" for r in rows]
    lines += ["", "## Notes", ""]
    lines += [f"- **{r[0]}**: {r[-1]}" for r in rows if r[-1]]
    lines += [f"- {n}" for n in extra_notes]
    failed = [(g.learner, ex, g.messages.get(ex, "")) for g in grades
              for ex, st in g.statuses.items() if st != PASS]
    if failed:
        lines += ["", "## Feedback", ""]
        lines += [f"- {who} · {ex}: {msg}" for who, ex, msg in failed]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv_path, md_path


def summary(grades: list[NotebookGrade], assignment: Assignment) -> str:
    header, rows = table(grades, assignment)
    width = max([len("learner")] + [len(r[0]) for r in rows])
    out = [f"{'learner':<{width}}  score"]
    out += [f"{r[0]:<{width}}  {r[-3]}/{r[-2]}" + (f"  ({r[-1]})" if r[-1] else "")
            for r in rows]
    return "\n".join(out)
