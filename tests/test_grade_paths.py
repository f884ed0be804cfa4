"""Every exercise through the grader's own path: the answer cells of the solution notebook run
alone in the answer process, the checker decides in this process on fresh inputs (issue 21).

All pass on the solutions and are missing on the shipped learner notebooks (whose slices are
the stubs untouched, so nothing runs for them: tests/test_grade_untouched.py; that each stub
reads as "not answered" when run is the learning-mode nbval run's, labkit.grade.pytest_plugin);
every checker takes handles, so every verdict is trusted (decided outside the learner's
process).
"""
import nbformat
import pytest

from labkit.check.registry import get, load_all
from labkit.course import CHAPTERS
from labkit.grade.generate import NOTEBOOKS, SOLUTIONS, check_cells
from labkit.grade.verdicts import decide

NAMES = [ch.filename for ch in CHAPTERS if (SOLUTIONS / ch.filename).exists()]


@pytest.mark.parametrize("name", NAMES)
def test_solutions_pass_and_learner_notebooks_are_missing(name):
    solution = nbformat.read(SOLUTIONS / name, as_version=4)
    ids = list(check_cells(solution))
    got = decide(solution, solution, ids, seed=4242, timeout=300)
    bad = {k: (r.status, r.message) for k, r in got.items() if r.status != "pass"}
    assert not bad, bad
    for k, r in got.items():
        assert r.trusted == get(k).handles, (k, r.trusted)
    learner = nbformat.read(NOTEBOOKS / name, as_version=4)
    blank = decide(learner, solution, ids, seed=4242, timeout=300)
    assert {k: r.status for k, r in blank.items()} == {k: "missing" for k in ids}


def test_every_checker_takes_handles():
    """Every exercise is decided in the grader's process: its checker takes ``(answer, ref,
    rng)`` handles, none of the old ``(answer)`` form is left (issue 21)."""
    from labkit.check.registry import REGISTRY
    load_all()
    assert len(REGISTRY) > 100
    assert [k for k, e in REGISTRY.items() if not e.handles] == []
