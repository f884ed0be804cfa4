"""Build a solution notebook from a list of cells (a chapter's first draft, by script).

    from labkit.grade.authoring import md, code, check_cell, write
    write("solutions/02_autodiff.py", [md("# Title"), code("x = 1"), check_cell("2.1", "x")])

writes the chapter's text source (py:percent, see :mod:`labkit.grade.generate`); ``make
notebooks`` then writes its pair ``solutions/02_autodiff.ipynb``. From then on the text file
is edited by hand. ``check_cell("2.1", "answer")`` makes the canonical check cell
``check("2.1", answer)`` with its tag, metadata and id. Tags such as ``browser-test`` or
``nbval-skip`` go in ``tags``.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from labkit.grade.generate import CHECK_TAG, check_cell_id, clean, notebook_to_text, render

KERNELSPEC = {"display_name": "Python 3 (labkit)", "language": "python", "name": "python3"}


def md(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(source.strip("\n"))


def code(source: str, tags: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def check_cell(exercise_id: str, answer_expr: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(f'check("{exercise_id}", {answer_expr})')
    cell.metadata["tags"] = [CHECK_TAG]
    cell.metadata["labkit"] = {"exercise": exercise_id}
    cell.id = check_cell_id(exercise_id)
    return cell


def notebook(cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    used: set[str] = set()
    for i, cell in enumerate(cells):
        if not cell.get("id", "").startswith("check-"):
            cell.id = f"cell-{i:03d}"
        if cell.id in used:
            raise ValueError(f"duplicate cell id {cell.id}")
        used.add(cell.id)
    nb.cells = cells
    return nb


def write(path: str | Path, cells: list[nbformat.NotebookNode]) -> Path:
    """Write the cells as a chapter's text source (``.py``) or as a notebook (``.ipynb``)."""
    path = Path(path)
    nb = notebook(cells)
    nbformat.validate(nb)
    path.write_text(notebook_to_text(nb) if path.suffix == ".py" else render(clean(nb)),
                    encoding="utf-8")
    return path
