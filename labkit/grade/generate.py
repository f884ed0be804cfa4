"""Write the learner notebooks in ``notebooks/`` from the single source in ``solutions/``.

In a solution notebook, solution code sits between ``### BEGIN SOLUTION`` and
``### END SOLUTION``. Each region becomes a stub:

* inside a function (the markers are indented): ``raise NotImplementedError(...)`` after a
  ``# YOUR CODE HERE`` line that says roughly how many lines the solution took;
* at top level: ``name = None`` for every name the solution assigns, so a check can tell a
  missing answer from a wrong one;
* lines in the region written ``# STUB: code`` replace all of that with ``code``;
* in a markdown cell (a written answer) the region becomes *Write your answer here.*

Both kinds of notebook are stored without outputs. A check cell is a code cell tagged
``check`` whose metadata ``labkit.exercise`` names its exercise; its cell id is
``check-<id with dots as dashes>``. The grader puts these cells back from the solutions.

A chapter's source is the text file ``solutions/NN_slug.py`` (jupytext's py:percent format);
``solutions/NN_slug.ipynb`` is its pair, written from it, for nbval, the grader and the
browser test. The text stores each cell's id as cell metadata ``id`` (jupytext's text
formats store none), except a check cell's, which follows from ``labkit.exercise``; a cell
written without an id gets the next free ``cell-NNN``. So the text alone gives the notebook.

Usage: ``python -m labkit.grade.generate [--check]`` (``make notebooks``): syncs each pair
(the text is the source), then writes ``notebooks/`` and the README's chapter table.
"""
from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
import textwrap
from pathlib import Path

import nbformat

from labkit.course import CHAPTERS

BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", "# STUB:"
CHECK_TAG = "check"
CHECK_CALL = re.compile(r"""check\(\s*["'](\d+\.\d+[a-z]?)["']""")
REPO = Path(__file__).resolve().parents[2]
SOLUTIONS, NOTEBOOKS = REPO / "solutions", REPO / "notebooks"


class NotebookFormatError(ValueError):
    """A solution notebook breaks the authoring rules above."""


def strip_region(lines: list[str]) -> list[str]:
    """The stub lines that replace one solution region (``lines`` excludes the markers)."""
    custom = [ln.strip()[len(STUB):].strip() for ln in lines if ln.strip().startswith(STUB)]
    indent = ""
    for ln in lines:
        if ln.strip():
            indent = ln[: len(ln) - len(ln.lstrip())]
            break
    if custom:
        return [indent + c for c in custom]
    code = [ln for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    if indent:
        return [f"{indent}# YOUR CODE HERE (about {len(code)} line{'s' * (len(code) != 1)})",
                f'{indent}raise NotImplementedError("write this, then run the check below")']
    names: list[str] = []
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines)))
    except SyntaxError as exc:
        raise NotebookFormatError(f"solution region does not parse: {exc}") from None
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and n.id not in names:
                    names.append(n.id)
    if not names:
        return ["# YOUR CODE HERE"]
    return [f"{n} = None  # YOUR ANSWER HERE" for n in names]


def strip_solutions(source: str) -> str:
    """Replace every solution region in ``source`` with its stub."""
    out: list[str] = []
    region: list[str] | None = None
    for ln in source.split("\n"):
        mark = ln.strip()
        if mark == BEGIN:
            if region is not None:
                raise NotebookFormatError("nested ### BEGIN SOLUTION")
            region = []
        elif mark == END:
            if region is None:
                raise NotebookFormatError("### END SOLUTION without BEGIN")
            out.extend(strip_region(region))
            region = None
        elif region is not None:
            region.append(ln)
        else:
            out.append(ln)
    if region is not None:
        raise NotebookFormatError("### BEGIN SOLUTION without END")
    return "\n".join(out)


def check_cells(nb: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    """The check cells of a notebook by exercise id, validating the authoring rules."""
    found: dict[str, nbformat.NotebookNode] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tagged = CHECK_TAG in cell.metadata.get("tags", [])
        calls = CHECK_CALL.findall(cell.source)
        if not tagged and not calls:
            continue
        if not (tagged and len(calls) == 1):
            raise NotebookFormatError(
                f"cell {cell.get('id')!r}: a check cell is tagged 'check' and calls "
                f"check('N.k', ...) exactly once; got tags={cell.metadata.get('tags', [])} "
                f"calls={calls}")
        ex_id = calls[0]
        if cell.metadata.get("labkit", {}).get("exercise") != ex_id:
            raise NotebookFormatError(f"check cell for {ex_id}: metadata labkit.exercise missing")
        if cell.get("id") != check_cell_id(ex_id):
            raise NotebookFormatError(f"check cell for {ex_id} must have id {check_cell_id(ex_id)}")
        if ex_id in found:
            raise NotebookFormatError(f"exercise {ex_id} is checked twice")
        found[ex_id] = cell
    return found


def check_cell_id(exercise_id: str) -> str:
    return "check-" + exercise_id.replace(".", "-")


def clean(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy without outputs, execution counts or per-run metadata."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
    nb.metadata.pop("widgets", None)
    return nb


# jupytext's py:percent; the header keeps the notebook's kernelspec and language_info only
# (no jupytext version that would change with every upgrade), cells keep all their metadata.
TEXT_FORMAT = {"extension": ".py", "format_name": "percent",
               "notebook_metadata_filter": "kernelspec,language_info,-all",
               "cell_metadata_filter": "all"}
NUMBERED_ID = re.compile(r"cell-(\d+)")
# How a hand-written text spaced and marked its cells (jupytext/cell_metadata.py's
# _JUPYTEXT_CELL_METADATA): not kept, so `make notebooks` rewrites the text in one layout.
LAYOUT_METADATA = ("skipline", "noskipline", "cell_marker", "lines_to_next_cell",
                   "lines_to_end_of_cell_marker")


def implied_id(cell: nbformat.NotebookNode) -> str | None:
    """The id a cell's text form need not store: a check cell's, from ``labkit.exercise``."""
    exercise = cell.metadata.get("labkit", {}).get("exercise")
    return check_cell_id(exercise) if isinstance(exercise, str) else None


def notebook_to_text(nb: nbformat.NotebookNode) -> str:
    """The text source of a solution notebook: py:percent, each cell's id in its metadata."""
    # deferred: jupytext
    import jupytext  # the authoring tool (dev extra): the grader imports this module without it

    nb = clean(nb)
    for cell in nb.cells:                 # sorted, as the notebook's JSON stores them
        stored = {"id": cell.id} if cell.get("id") != implied_id(cell) else {}
        cell.metadata = {**stored, **dict(sorted(cell.metadata.items()))}
    return jupytext.writes(nb, fmt=TEXT_FORMAT)


def text_to_notebook(text: str) -> nbformat.NotebookNode:
    """The solution notebook a text source describes; a cell with no id (a new one) gets the
    next free ``cell-NNN``, so the same text always gives the same notebook."""
    # deferred: jupytext
    import jupytext  # see notebook_to_text

    nb = jupytext.reads(text, fmt=TEXT_FORMAT)
    nb.metadata.pop("jupytext", None)
    for cell in nb.cells:
        for key in LAYOUT_METADATA:
            cell.metadata.pop(key, None)
    ids = [cell.metadata.pop("id", None) or implied_id(cell) for cell in nb.cells]
    numbers = [int(m[1]) for i in ids if i and (m := NUMBERED_ID.fullmatch(i))]
    fresh = max(numbers, default=-1) + 1
    for cell, cell_id in zip(nb.cells, ids):
        if cell_id is None:
            cell_id, fresh = f"cell-{fresh:03d}", fresh + 1
        cell.id = cell_id
    return nb


def sync_pair(notebook_path: Path, *, check_only: bool = False
              ) -> tuple[nbformat.NotebookNode, list[str]]:
    """Bring ``NN_slug.ipynb`` and its text source ``NN_slug.py`` into agreement, the text
    being the source; return the solution notebook and the problems found (a drifted pair,
    a missing half, a text not in the layout written here or with new cells, outputs).

    Without a text file, it is written from the notebook (a chapter built with
    ``labkit.grade.authoring``). A notebook edited after its text (in JupyterLab) is not
    overwritten: that raises, saying which file to delete to keep which edits.
    """
    text_path = notebook_path.with_suffix(".py")
    stored = clean(nbformat.read(notebook_path, as_version=4)) if notebook_path.exists() else None
    solution = text_to_notebook(text_path.read_text(encoding="utf-8")) \
        if text_path.exists() else stored
    edited = stored is not None and render(stored) != render(solution)
    if (edited and not check_only and text_path.exists()
            and notebook_path.stat().st_mtime > text_path.stat().st_mtime):
        raise NotebookFormatError(
            f"{notebook_path.name} was edited after {text_path.name}: to keep the notebook's "
            f"edits delete {text_path.name}, to keep the text's delete {notebook_path.name}; "
            f"then run `make notebooks`")
    problems = []
    for path, text in ((text_path, notebook_to_text(solution)),
                       (notebook_path, render(solution))):
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        other = (notebook_path if path == text_path else text_path).name
        why = (f"missing, written from {other}" if not path.exists() else
               "cells without an id, or laid out by hand" if path == text_path else
               "solution notebook holds outputs" if not edited else f"differs from {other}")
        problems.append(f"{path.name}: {why} (run `make notebooks`)")
        if not check_only:
            path.write_text(text, encoding="utf-8")
    return solution, problems


def learner_version(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The learner notebook generated from a solution notebook."""
    check_cells(solution)
    nb = clean(solution)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
        elif cell.cell_type == "markdown" and BEGIN in cell.source:
            cell.source = strip_markdown_solutions(cell.source)
    return nb


def strip_markdown_solutions(source: str) -> str:
    """In a markdown cell, a marked region (a written answer) becomes a prompt."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if source.count(BEGIN) != source.count(END):
        raise NotebookFormatError("unbalanced solution markers in a markdown cell")
    return pattern.sub("*Write your answer here.*", source)


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def generate(solutions: Path = SOLUTIONS, notebooks: Path = NOTEBOOKS, *,
             check_only: bool = False) -> list[str]:
    """Write (or, with ``check_only``, compare) every learner notebook.

    Each solution is first synced with its text source (:func:`sync_pair`). Returns the
    problems found: drifted pairs, stale or missing notebooks, notebooks without a solution,
    solution notebooks stored with outputs.
    """
    problems: list[str] = []
    sources = sorted({solutions / f"{p.stem}.ipynb"
                      for p in [*solutions.glob("*.ipynb"), *solutions.glob("*.py")]})
    if not sources:
        raise NotebookFormatError(f"no solution notebooks in {solutions}")
    for src in sources:
        solution, found = sync_pair(src, check_only=check_only)
        problems += found
        text = render(learner_version(solution))
        dest = notebooks / src.name
        if not dest.exists() or dest.read_text(encoding="utf-8") != text:
            problems.append(f"{dest.name}: out of date with solutions/ (run `make notebooks`)")
            if not check_only:
                notebooks.mkdir(parents=True, exist_ok=True)
                dest.write_text(text, encoding="utf-8")
    for extra in sorted(set(p.name for p in notebooks.glob("*.ipynb"))
                        - set(p.name for p in sources)):
        problems.append(f"{extra}: in notebooks/ but not in solutions/")
    return problems


README = REPO / "README.md"
TABLE_BEGIN, TABLE_END = "<!-- chapters: generated by `make notebooks` -->", "<!-- end chapters -->"


def readme_table(solutions: Path = SOLUTIONS) -> str:
    """The README's chapter table: the chapters of ``labkit.course`` whose solution notebook
    exists (chapters being written appear once their notebook lands)."""
    lines = ["| # | notebook | what you will do |", "|---|---|---|"]
    for ch in CHAPTERS:
        if (solutions / ch.filename).exists():
            lines.append(f"| {ch.number:02d} | [{ch.title}](notebooks/{ch.filename}) | "
                         f"{ch.experiments} |")
    return "\n".join(lines)


def readme_with_table(text: str, table: str) -> str:
    """``text`` with the block between the chapter-table markers replaced by ``table``."""
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise NotebookFormatError(f"README.md lacks the markers {TABLE_BEGIN} ... {TABLE_END}")
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{table}\n{TABLE_END}{tail}"


def update_readme(readme: Path = README, solutions: Path = SOLUTIONS, *,
                  check_only: bool = False) -> list[str]:
    """Rewrite (or, with ``check_only``, compare) the README's chapter table."""
    text = readme.read_text(encoding="utf-8")
    new = readme_with_table(text, readme_table(solutions))
    if new == text:
        return []
    if not check_only:
        readme.write_text(new, encoding="utf-8")
    return [f"{readme.name}: chapter table out of date with labkit/chapters.csv and solutions/ "
            f"(run `make notebooks`)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only report stale notebooks; exit 1 if any")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS)
    args = parser.parse_args(argv)
    try:
        problems = generate(args.solutions, args.notebooks, check_only=args.check)
        if args.solutions.resolve() == SOLUTIONS and README.exists():
            problems += update_readme(check_only=args.check)
    except NotebookFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(("stale: " if args.check else "updated: ") + p.split(" (run")[0])
    if args.check and problems:
        return 1
    print(f"{len(list(args.solutions.glob('*.ipynb')))} notebooks "
          f"{'checked' if args.check else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
