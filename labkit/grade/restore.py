"""Put the canonical check cells back into a learner's notebook.

A learner cannot edit a check into passing: every check cell is replaced by the one in
``solutions/`` (matched by cell id, then by the exercise its code checks), a deleted check
is inserted again where it belongs, and any other cell that calls ``check(...)`` is emptied.
Everything undone is reported.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import nbformat

from labkit.grade.generate import CHECK_CALL, CHECK_TAG, check_cells


@dataclass
class Restored:
    notebook: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)

    @property
    def tampered(self) -> bool:
        return bool(self.notes)


def _same(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    """Same check by content: the code a learner sees. Cell ids, tags and metadata are not
    compared: converting an nbformat-3 notebook drops ids and adds metadata, and the
    canonical cell (with its tags) is put back either way."""
    return _code(a.source) == _code(b.source)


def _code(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def restore_checks(submission: nbformat.NotebookNode,
                   solution: nbformat.NotebookNode) -> Restored:
    """A copy of ``submission`` with the canonical check cells of ``solution`` restored."""
    nb = copy.deepcopy(submission)
    canonical = check_cells(solution)
    notes: list[str] = []
    placed: set[int] = set()

    for ex_id, good in canonical.items():
        index = next((i for i, c in enumerate(nb.cells) if c.get("id") == good.id), None)
        if index is None:
            index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                          and ex_id in CHECK_CALL.findall(c.source) and i not in placed), None)
        if index is None:
            index = _insertion_point(nb, solution, good)
            nb.cells.insert(index, copy.deepcopy(good))
            placed = {i + (i >= index) for i in placed}
            notes.append(f"check {ex_id} was deleted; restored")
        else:
            if not _same(nb.cells[index], good):
                notes.append(f"check {ex_id} was edited; restored")
            nb.cells[index] = copy.deepcopy(good)
        placed.add(index)

    for i, cell in enumerate(nb.cells):
        if i in placed or cell.cell_type != "code":
            continue
        if CHECK_CALL.search(cell.source) or CHECK_TAG in cell.metadata.get("tags", []):
            ids = ", ".join(CHECK_CALL.findall(cell.source)) or "?"
            notes.append(f"an extra cell calling check({ids}) was emptied")
            cell.source = "# (removed by the grader: only the canonical check cells run)"
            cell.metadata.pop("tags", None)
    return Restored(nb, notes)


def _insertion_point(nb: nbformat.NotebookNode, solution: nbformat.NotebookNode,
                     good: nbformat.NotebookNode) -> int:
    """Just after the nearest cell that precedes ``good`` in the solution and survives."""
    ids = [c.get("id") for c in solution.cells]
    at = ids.index(good.id)
    present = {c.get("id"): i for i, c in enumerate(nb.cells)}
    for prev in reversed(ids[:at]):
        if prev in present:
            return present[prev] + 1
    return len(nb.cells)
