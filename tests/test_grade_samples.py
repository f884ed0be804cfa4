"""The grading command end to end on chapter 00: right, wrong, tampered, blank, missing,
broken, looping and crashing submissions each give the expected line in the table."""
import copy
import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from labkit.grade.generate import NOTEBOOKS, SOLUTIONS
from labkit.grade.runner import Assignment, grade_all

NAME = "00_start_here.ipynb"


def with_answer(nb, body):
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if "def blocks_needed" in c.source)
    cell.source = f"def blocks_needed(n, threads_per_block):\n    {body}"
    return nb


def insert_before_check(nb, source):
    nb = copy.deepcopy(nb)
    at = next(i for i, c in enumerate(nb.cells) if c.get("id") == "check-0-1")
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    sols = root / "solutions"
    sols.mkdir()
    shutil.copy(SOLUTIONS / NAME, sols / NAME)
    solution = nbformat.read(SOLUTIONS / NAME, as_version=4)
    learner = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    tampered = with_answer(learner, "return n // threads_per_block")
    next(c for c in tampered.cells if c.get("id") == "check-0-1").source = 'print("✅ passed")'
    subs = {
        "right": solution,
        "wrong": with_answer(learner, "return n // threads_per_block"),
        "tampered": tampered,
        "blank": learner,
        "looping": insert_before_check(solution, "while True:\n    pass"),
        "crashing": insert_before_check(solution, "import os\nos._exit(1)"),
    }
    folder = root / "submissions"
    for who, nb in subs.items():
        (folder / who).mkdir(parents=True)
        nbformat.write(nb, folder / who / NAME)
    (folder / "broken").mkdir()
    (folder / "broken" / NAME).write_text("{this is not json")
    (folder / "absent").mkdir()
    (folder / "stray.ipynb").write_text("{}")
    out = root / "grades"
    proc = subprocess.run([sys.executable, "-m", "labkit.grade.cli", str(folder), "--out",
                           str(out), "--solutions", str(sols), "--jobs", "2", "--timeout",
                           "120", "--cell-timeout", "10", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = {r["learner"]: r for r in csv.DictReader((out / "grades.csv").open())}
    return rows, (out / "grades.md").read_text(), proc.stdout


@pytest.mark.parametrize("learner, status, note", [
    ("right", "pass", ""),
    ("wrong", "fail", ""),
    ("tampered", "fail", "check 0.1 was edited; restored"),
    ("blank", "missing", ""),
    ("absent", "missing", "notebook not submitted"),
    ("broken", "error", "not a valid notebook"),
    ("looping", "pass", "ran past the cell time limit of 10 s"),
    ("crashing", "error", "the kernel crashed or stopped responding"),
])
def test_each_submission_gets_its_line(graded, learner, status, note):
    rows, _, _ = graded
    assert rows[learner]["0.1"] == status
    assert rows[learner]["score"] == str(int(status == "pass"))
    assert rows[learner]["total"] == "1"
    assert note in rows[learner]["notes"]
    if learner in ("right", "wrong", "blank", "tampered"):
        assert "cells other than checks failed" not in rows[learner]["notes"]


def test_reports_and_summary(graded):
    rows, markdown, stdout = graded
    assert set(rows) == {"right", "wrong", "tampered", "blank", "absent", "broken", "looping",
                         "crashing"}
    assert "| learner | 0.1 | score | total |" in markdown
    assert "| right | pass | 1 | 1 |" in markdown
    assert "you rounded down" in markdown           # the wrong answer's hint is fed back
    assert "ignored stray.ipynb" in stdout and "right" in stdout and "1/1" in stdout


def test_bad_arguments_are_one_clear_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labkit.grade.cli", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("labkit-grade: error: submissions must be a folder")
    assert "Traceback" not in proc.stderr
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        grade_all(tmp_path, Assignment.load(SOLUTIONS), jobs=0)
