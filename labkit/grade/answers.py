"""Written answers and predictions, side by side for the instructor (``--answers DIR``).

A *written answer* is a markdown cell of a solution notebook that holds a solution region
(the seed's questions; the learner's notebook says *Write your answer here.*). A
*prediction* is a code cell that calls ``predict(...)`` with the guess in a solution region.
For each of them ``DIR`` gets one page with every learner's answer in a table (and, folded,
the model answer), an index page, and ``points.csv`` — ``learner,item,points,max_points,
comment`` with the points empty — which the instructor fills in and reads back with
``labkit-grade import-points DIR/points.csv``. Predictions are listed with ``max_points`` 0:
a guess is not graded unless the instructor gives it points.
"""
from __future__ import annotations

import ast
import csv
import html
from dataclasses import dataclass
from pathlib import Path

import nbformat

from labkit.grade.generate import BEGIN, END, strip_markdown_solutions
from labkit.grade.slices import python_of

PROMPT = "*Write your answer here.*"


@dataclass(frozen=True)
class Question:
    item: str               # "<notebook stem>:<cell id>"
    notebook: str
    cell_id: str
    kind: str               # "written" or "prediction"
    prompt: str
    model: str              # the solution's answer


def questions(name: str, solution: nbformat.NotebookNode) -> list[Question]:
    out = []
    stem = name[:-6] if name.endswith(".ipynb") else name
    for cell in solution.cells:
        cid = cell.get("id", "")
        if cell.cell_type == "markdown" and BEGIN in cell.source:
            head = cell.source.split(BEGIN, 1)[0].strip()
            model = cell.source.split(BEGIN, 1)[1].split(END, 1)[0].strip()
            out.append(Question(f"{stem}:{cid}", name, cid, "written", head, model))
        elif cell.cell_type == "code" and "predict(" in cell.source and BEGIN in cell.source:
            model = cell.source.split(BEGIN, 1)[1].split(END, 1)[0].strip()
            out.append(Question(f"{stem}:{cid}", name, cid, "prediction",
                                _predict_question(cell.source), model))
    return out


def _predict_question(source: str) -> str:
    try:
        tree = ast.parse(python_of(source))
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "predict":
            args = list(node.args)
            q = args[2] if len(args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "question"), None)
            if isinstance(q, ast.Constant) and isinstance(q.value, str):
                return q.value
            if args and isinstance(args[0], ast.Constant):
                return str(args[0].value)
    return ""


def answer_of(question: Question, learner_nb: nbformat.NotebookNode | None,
              solution: nbformat.NotebookNode) -> str:
    """The learner's answer text ('' when not answered)."""
    if learner_nb is None:
        return ""
    cell = next((c for c in learner_nb.cells if c.get("id") == question.cell_id), None)
    if cell is None:
        return ""
    if question.kind == "written":
        text = cell.source.strip()
        if question.prompt and text.startswith(question.prompt):
            text = text[len(question.prompt):].strip()
        stub = strip_markdown_solutions(next(c for c in solution.cells
                                             if c.get("id") == question.cell_id).source)
        if text in ("", PROMPT) or text == stub.strip():
            return ""
        return text.replace(PROMPT, "").strip()
    names = _assigned(question.model)
    lines = [ln for ln in cell.source.splitlines()
             if any(ln.strip().startswith(f"{n} =") or ln.strip().startswith(f"{n}=")
                    for n in names)]
    text = "\n".join(lines).strip()
    return "" if not text or all(ln.split("=", 1)[1].split("#")[0].strip() in ("None", "...")
                                 for ln in lines) else text


def _assigned(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [t.id for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def write_answers(folder: Path, solutions: dict, submissions: dict[str, dict[str, Path]], *,
                  written_points: float = 1.0) -> list[Path]:
    """The pages and ``points.csv`` (see the module docstring). ``submissions`` maps each
    learner to their graded notebooks' files."""
    from labkit.grade.runner import read_submission  # deferred: nbformat

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--answers must be a folder; {folder} is a file")
    folder.mkdir(parents=True, exist_ok=True)
    esc = html.escape
    pages, index, rows = [], [], []
    learners = sorted(submissions)
    for name, solution in solutions.items():
        loaded = {}
        for who in learners:
            path = submissions[who].get(name)
            try:
                loaded[who] = read_submission(path) if path else None
            except ValueError:
                loaded[who] = None
        for q in questions(name, solution):
            answers = {who: answer_of(q, loaded[who], solution) for who in learners}
            top = written_points if q.kind == "written" else 0.0
            rows += [[who, q.item, "", f"{top:g}", ""] for who in learners]
            page = folder / f"{q.item.replace(':', '__')}.html"
            trs = "".join(f"<tr><td>{esc(who)}</td><td class='answer'>"
                          f"{esc(a) if a else '<i>not answered</i>'}</td></tr>"
                          for who, a in answers.items())
            page.write_text(
                f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>"
                f"{esc(q.item)}</title><style>body{{font-family:system-ui,sans-serif;margin:2em}}"
                f"td{{border:1px solid #bbb;padding:6px;vertical-align:top;white-space:pre-wrap}}"
                f"table{{border-collapse:collapse}}</style></head><body>"
                f"<h1>{esc(q.notebook)} · {esc(q.cell_id)} ({q.kind})</h1>"
                f"<blockquote>{esc(q.prompt)}</blockquote>"
                f"<details><summary>model answer</summary><pre>{esc(q.model)}</pre></details>"
                f"<table><tr><th>learner</th><th>answer</th></tr>{trs}</table>"
                f"<p>Points: fill in <code>points.csv</code>, then "
                f"<code>labkit-grade import-points points.csv --out GRADES</code>.</p>"
                f"</body></html>\n", encoding="utf-8")
            pages.append(page)
            answered = sum(bool(a) for a in answers.values())
            index.append(f"<li><a href='{esc(page.name)}'>{esc(q.item)}</a> ({q.kind}, "
                         f"{answered} of {len(learners)} answered)</li>")
    (folder / "index.html").write_text(
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Written answers"
        "</title></head><body><h1>Written answers and predictions</h1><ul>"
        + "".join(index) + "</ul></body></html>\n", encoding="utf-8")
    points = folder / "points.csv"
    with points.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "item", "points", "max_points", "comment"])
        w.writerows(rows)
    return [folder / "index.html", points, *pages]
