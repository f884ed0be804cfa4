"""Every learner notebook as shipped fails exactly at its checks when graded.

Running each notebook through the grader again would be a fourth run of every chapter, so
the proof is shared with the learning-mode nbval run of ``notebooks/`` that ``make test``
does anyway (see labkit/grade/pytest_plugin.py):

* that run fails on any cell that raises, so nothing but the checks can fail;
* the plugin fails a check cell there unless it reports its exercise as not answered yet
  (⬜), so every exercise is "missing" — and in grading mode that same check raises, and
  nothing else changes (both modes rebind labkit's reference for later cells);
* here: the grader would put back no check cell (none is edited, moved or missing);
* tests/test_grade_samples.py grades chapter 00's shipped notebook end to end ("blank").
"""
import nbformat
import pytest

from labkit.check.core import SYMBOL
from labkit.grade.generate import NOTEBOOKS
from labkit.grade.pytest_plugin import learner_check_problem
from labkit.grade.restore import restore_checks
from labkit.grade.runner import Assignment

ASSIGNMENT = Assignment.load()


@pytest.mark.parametrize("name", sorted(ASSIGNMENT.exercises))
def test_shipped_learner_notebook_has_every_canonical_check_untouched(name):
    learner = nbformat.read(NOTEBOOKS / name, as_version=4)
    restored = restore_checks(learner, ASSIGNMENT.solutions[name])
    assert restored.notes == []


def check_cell(exercise="2.1"):
    return {"metadata": {"tags": ["check"], "labkit": {"exercise": exercise}}}


def stream(text):
    return [{"output_type": "stream", "name": "stdout", "text": text}]


@pytest.mark.parametrize("outputs, bad", [
    (stream(f"{SYMBOL['missing']} Exercise 2.1 (x): not answered yet\n   Later cells use"), False),
    (stream(f"{SYMBOL['pass']} Exercise 2.1 (x): correct"), True),       # the stub passes
    (stream(f"{SYMBOL['fail']} Exercise 2.1 (x): off by one"), True),    # stub not "missing"
    (stream(f"{SYMBOL['error']} Exercise 2.1 (x): your answer raised"), True),
    ([], True),                                                         # printed nothing
])
def test_plugin_accepts_only_a_not_answered_check(outputs, bad):
    problem = learner_check_problem(check_cell(), outputs)
    assert (problem is not None) == bad
    if bad:
        assert problem.startswith("shipped learner notebook: check 2.1 should report")


def test_plugin_ignores_cells_that_are_not_checks():
    assert learner_check_problem({"metadata": {}}, stream("anything")) is None
