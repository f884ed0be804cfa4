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

Usage: ``python -m labkit.grade.generate [--check]`` (``make notebooks``).
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

    Returns the problems found: stale or missing notebooks, notebooks without a solution,
    solution notebooks stored with outputs.
    """
    problems: list[str] = []
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise NotebookFormatError(f"no solution notebooks in {solutions}")
    for src in sources:
        solution = nbformat.read(src, as_version=4)
        if render(clean(solution)) != src.read_text(encoding="utf-8"):
            problems.append(f"{src.name}: solution notebook holds outputs (run `make notebooks`)")
            if not check_only:
                src.write_text(render(clean(solution)), encoding="utf-8")
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
    from labkit.course import CHAPTERS

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
    return [f"{readme.name}: chapter table out of date with labkit/course.py and solutions/ "
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
