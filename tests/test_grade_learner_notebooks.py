"""Every learner notebook as shipped, graded: each exercise is 'missing' and nothing but the
check cells fails (the stubs never break a later cell)."""
import pytest

from labkit.grade.generate import NOTEBOOKS
from labkit.grade.runner import Assignment, grade_notebook

ASSIGNMENT = Assignment.load()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(ASSIGNMENT.exercises))
def test_shipped_learner_notebook_fails_exactly_at_its_checks(name):
    grade = grade_notebook("blank", NOTEBOOKS / name, name, ASSIGNMENT, timeout=600,
                           cell_timeout=300)
    assert grade.failed_cells == [], grade.notes
    assert grade.statuses == {ex: "missing" for ex in ASSIGNMENT.exercises[name]}, grade.messages
    assert not any("edited" in n or "deleted" in n for n in grade.notes)
