"""Right answers taken from a chapter's solution instead of a copy typed into a test.

``solution_answer("05", "5.8")`` is what the solution notebook hands to ``check("5.8",
...)``: the cells of the exercise's slice (``labkit.grade.slices.build_slice``, the cells
the grader runs for a verdict) run as the solution has them, in one namespace per chapter,
and the check cell's answer expression evaluated there. The solution is a right learner: it
is written independently of labkit's reference, so a check test may use it as its right
answer, and state a wrong answer as the solution with one change (``mutants.mutant``). Each
cell's text is kept in ``linecache`` under its own name, as IPython keeps a cell's, so
``inspect.getsource`` (the tracer, ``mutant``) reads the solution's kernels.
"""
from __future__ import annotations

import functools
import linecache
import types
from pathlib import Path

import nbformat

from labkit.grade.slices import build_slice, python_of

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
# a cell's magics (``%matplotlib inline``) become get_ipython() calls: here they do nothing
_QUIET = types.SimpleNamespace(run_line_magic=lambda *a, **k: None,
                               run_cell_magic=lambda *a, **k: None, system=lambda *a: None)


@functools.lru_cache(maxsize=None)
def _chapter(chapter: str) -> tuple[nbformat.NotebookNode, dict]:
    (path,) = SOLUTIONS.glob(f"{chapter}_*.ipynb")
    return nbformat.read(path, as_version=4), {"__name__": f"solution_{chapter}",
                                               "get_ipython": lambda: _QUIET}


@functools.lru_cache(maxsize=None)
def solution_answer(chapter: str, exercise: str):
    """The object chapter ``chapter``'s solution passes to ``check(exercise, ...)``."""
    nb, namespace = _chapter(chapter)
    piece = build_slice(nb, nb, exercise)
    for cell in piece.cells:
        name = f"<solution {chapter} {cell.id}>"
        code = python_of(cell.source)
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        exec(compile(code, name, "exec"), namespace)  # noqa: S102 - the course's own solution
    return eval(piece.answer, namespace)  # noqa: S307
