"""An exercise left as shipped is "missing" without running its slice (grading.verdicts.
untouched); any change the learner made to what the slice runs goes to the answer process."""
import copy

import nbformat
import pytest

from labkit.grade import verdicts
from labkit.grade.generate import NOTEBOOKS, SOLUTIONS, check_cells

NAME = "00_start_here.ipynb"


@pytest.fixture
def pair():
    return (nbformat.read(NOTEBOOKS / NAME, as_version=4),
            nbformat.read(SOLUTIONS / NAME, as_version=4))


def test_the_shipped_notebook_is_missing_and_starts_no_process(pair, monkeypatch):
    learner, solution = pair

    def refuse(self):
        raise AssertionError("the answer process was started for an untouched notebook")
    monkeypatch.setattr(verdicts.AnswerProcess, "start", refuse)
    got = verdicts.decide(learner, solution, list(check_cells(solution)), seed=1)
    assert {k: (r.status, r.message) for k, r in got.items()} == {
        "0.1": ("missing", "not answered yet")}


def _with_cell_after(nb, cell_id, source):
    nb = copy.deepcopy(nb)
    at = next(i for i, c in enumerate(nb.cells) if c.get("id") == cell_id)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
    return nb


def test_an_answer_written_in_a_cell_of_its_own_is_graded(pair):
    learner, solution = pair
    own = _with_cell_after(learner, "cell-013", "def blocks_needed(n, threads_per_block):\n"
                                                "    return -(-n // threads_per_block)\n")
    sl = verdicts.build_slices(own, solution, ["0.1"])["0.1"]
    assert verdicts.untouched(sl, {"cell-013": next(
        c.source for c in learner.cells if c.get("id") == "cell-013")}) is None
    got = verdicts.decide(own, solution, ["0.1"], seed=3)
    assert got["0.1"].status == "pass", got["0.1"].message


def test_an_edited_stub_goes_to_the_answer_process(pair):
    learner, solution = pair
    edited = copy.deepcopy(learner)
    cell = next(c for c in edited.cells if c.get("id") == "cell-013")
    cell.source += "\n# thinking about it"
    sl = verdicts.build_slices(edited, solution, ["0.1"])["0.1"]
    stubs = {c.get("id"): c.source for c in learner.cells if c.cell_type == "code"}
    assert verdicts.untouched(sl, stubs) is None
    assert verdicts.untouched(verdicts.build_slices(learner, solution, ["0.1"])["0.1"],
                              stubs).status == "missing"
