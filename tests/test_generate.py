"""The generator: solution regions become stubs; notebooks/ is never stale; authoring rules."""
import re

import nbformat
import pytest

from labkit.course import CHAPTERS
from labkit.grade.authoring import check_cell, code, md, notebook
from labkit.grade.generate import (NOTEBOOKS, SOLUTIONS, NotebookFormatError, check_cells,
                                   generate, learner_version, strip_solutions)


def test_region_inside_a_function_becomes_not_implemented():
    src = ("def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    y = x * 2\n"
           "    # a comment\n    return y\n    ### END SOLUTION")
    out = strip_solutions(src)
    assert out == ("def f(x):\n    '''doc'''\n    # YOUR CODE HERE (about 2 lines)\n"
                   '    raise NotImplementedError("write this, then run the check below")')
    ns = {}
    exec(out, ns)
    with pytest.raises(NotImplementedError):
        ns["f"](1)


def test_top_level_region_sets_every_assigned_name_to_none():
    src = "a = 1\n### BEGIN SOLUTION\nbytes_total = 16 * 10**8\nx, (y, z) = 1, (2, 3)\nx += 1\n### END SOLUTION\nb = 2"
    assert strip_solutions(src) == ("a = 1\nbytes_total = None  # YOUR ANSWER HERE\n"
                                    "x = None  # YOUR ANSWER HERE\ny = None  # YOUR ANSWER HERE\n"
                                    "z = None  # YOUR ANSWER HERE\nb = 2")


def test_custom_stub_lines_win():
    src = "### BEGIN SOLUTION\n# STUB: tile = ...  # pick a tile size\ntile = 16\n### END SOLUTION"
    assert strip_solutions(src) == "tile = ...  # pick a tile size"


@pytest.mark.parametrize("src, msg", [
    ("### BEGIN SOLUTION\nx = 1", "without END"),
    ("x = 1\n### END SOLUTION", "without BEGIN"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
    ("### BEGIN SOLUTION\nx = (\n### END SOLUTION", "does not parse"),
])
def test_broken_markers_are_reported(src, msg):
    with pytest.raises(NotebookFormatError, match=msg):
        strip_solutions(src)


def test_learner_version_strips_code_markdown_and_outputs():
    nb = notebook([md("Answer:\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
                   code("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
                   check_cell("0.1", "f")])
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[1].execution_count = 3
    learner = learner_version(nb)
    assert learner.cells[0].source == "Answer:\n*Write your answer here.*"
    assert "return 1" not in learner.cells[1].source
    assert learner.cells[1].outputs == [] and learner.cells[1].execution_count is None
    assert learner.cells[2].source == 'check("0.1", f)' and learner.cells[2].id == "check-0-1"
    assert nb.cells[1].outputs  # the solution itself is untouched


@pytest.mark.parametrize("mutate, msg", [
    (lambda c: c.metadata.update(tags=[]), "tagged 'check'"),
    (lambda c: setattr(c, "id", "cell-9"), "must have id check-0-1"),
    (lambda c: c.metadata.pop("labkit"), "metadata labkit.exercise"),
    (lambda c: setattr(c, "source", 'check("0.1", f)\ncheck("0.2", g)'), "exactly once"),
])
def test_check_cell_rules(mutate, msg):
    cell = check_cell("0.1", "f")
    mutate(cell)
    nb = nbformat.v4.new_notebook(cells=[cell])
    with pytest.raises(NotebookFormatError, match=msg):
        check_cells(nb)


def test_generate_reports_stale_missing_and_extra(tmp_path):
    sols, nbs = tmp_path / "solutions", tmp_path / "notebooks"
    sols.mkdir()
    nbs.mkdir()
    (sols / "01_a.ipynb").write_text(nbformat.writes(notebook([code("x = 1")])) + "\n")
    (nbs / "99_orphan.ipynb").write_text("{}")
    problems = generate(sols, nbs, check_only=True)
    assert any("01_a.ipynb: out of date" in p for p in problems)
    assert any("99_orphan.ipynb: in notebooks/ but not in solutions/" in p for p in problems)
    generate(sols, nbs)
    assert generate(sols, nbs, check_only=True) == ["99_orphan.ipynb: in notebooks/ but not in solutions/"]


# ---- the repository itself -------------------------------------------------------------

def test_learner_notebooks_are_up_to_date_and_hold_no_outputs():
    assert generate(SOLUTIONS, NOTEBOOKS, check_only=True) == []


def solution_paths():
    return sorted(SOLUTIONS.glob("*.ipynb"))


def test_every_solution_is_a_known_chapter():
    names = {ch.filename for ch in CHAPTERS}
    assert solution_paths() and all(p.name in names for p in solution_paths())


@pytest.mark.parametrize("path", solution_paths(), ids=lambda p: p.stem)
def test_chapter_follows_the_house_rules(path):
    """DESIGN.md: every exercise registered; chapters (not 00) have >= 4 checked exercises
    and >= 2 widgets; one widget cell is tagged browser-test."""
    from labkit.check import get

    nb = nbformat.read(path, as_version=4)
    exercises = check_cells(nb)
    chapter = int(path.name[:2])
    for ex_id in exercises:
        assert int(ex_id.split(".")[0]) == chapter, f"{ex_id} checked in chapter {chapter}"
        get(ex_id)
    widget_call = re.compile(r"\binteract(ive)?\(|_widget\(|\bwidgets\.\w+\(")
    widgets = sum(bool(widget_call.search(c.source)) for c in nb.cells if c.cell_type == "code")
    browser = [c for c in nb.cells if "browser-test" in c.metadata.get("tags", [])]
    assert len(browser) == 1 and widget_call.search(browser[0].source)
    assert len(exercises) >= (1 if chapter == 0 else 4)
    assert widgets >= (1 if chapter == 0 else 2)
