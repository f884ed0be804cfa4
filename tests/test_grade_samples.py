"""The grading command end to end on chapter 00: right, wrong, tampered, blank, missing,
misnamed, broken, looping, crashing and nbformat-3 submissions each give the expected line
in the table; a dead kernel is reported in seconds."""
import copy
import shutil
import subprocess
import sys

import nbformat
import pytest

from grading_runs import (WRONG, ZERO as NAME, course, grade_command, grade_rows, hand_in,
                          run_grading, with_answer, with_cell, with_new_cell)
from labkit.grade.generate import NOTEBOOKS, SOLUTIONS
from labkit.grade.runner import Assignment, grade_all, grade_notebook


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root, sols = course(tmp_path_factory, "grading")
    shutil.copy(SOLUTIONS / NAME, sols / NAME)
    solution = nbformat.read(SOLUTIONS / NAME, as_version=4)
    learner = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    wrong = with_answer(learner, WRONG)
    subs = {
        "right": solution,
        "wrong": wrong,
        "tampered": with_cell(wrong, "check-0-1", 'print("✅ passed")'),
        "blank": learner,
        # an endless loop that sleeps: the same cell limit, without burning a shared core
        "looping": with_new_cell(solution, "import time\nwhile True:\n    time.sleep(0.05)",
                                 before="check-0-1"),
        "crashing": with_new_cell(solution, "import os\nos._exit(0)", before="check-0-1"),
    }
    folder = hand_in(root / "submissions", subs)
    (folder / "broken").mkdir()
    (folder / "broken" / NAME).write_text("{this is not json")
    (folder / "emptylist").mkdir()
    (folder / "emptylist" / NAME).write_text("[]")
    (folder / "misnamed").mkdir()
    nbformat.write(solution, folder / "misnamed" / "00_Start_Here.ipynb")
    (folder / "v3").mkdir()                       # saved by an old Jupyter: nbformat 3
    (folder / "v3" / NAME).write_text(nbformat.writes(nbformat.convert(copy.deepcopy(solution), 3)))
    (folder / "absent").mkdir()
    (folder / "stray.ipynb").write_text("{}")
    out = root / "grades"
    proc = run_grading(grade_command(folder, out, sols, "--jobs", "2", "--timeout", "120",
                                     "--cell-timeout", "10", "--quiet"), timeout=600)
    rows = grade_rows(out)
    assert (out / "grades.html").read_text().count("data:image/png;base64,") == 2
    return rows, (out / "grades.md").read_text(), proc.stdout


# learner -> (the verdict of 0.1, what the notes must hold)
LINES = {
    "right": ("pass", ""),
    "wrong": ("fail", ""),
    "tampered": ("fail", "check 0.1 was edited; restored"),
    "blank": ("missing", ""),
    "absent": ("missing", "notebook not submitted"),
    "misnamed": ("pass", "graded 00_Start_Here.ipynb (its cells are this notebook's; name it "
                 "00_start_here.ipynb)"),
    "broken": ("error", "not a valid notebook"),
    "emptylist": ("error", "not a notebook (a JSON list"),
    "v3": ("pass", ""),
    "looping": ("pass", "a cell waited without working"),
    "crashing": ("pass", "the kernel died"),   # the verdict is decided apart
}


@pytest.mark.parametrize("learner", LINES)
def test_each_submission_gets_its_line(graded, learner):
    rows, _, _ = graded
    status, note = LINES[learner]
    assert rows[learner]["0.1"] == status
    assert rows[learner]["total"] == str(int(status == "pass"))
    assert rows[learner]["max"] == "1"
    assert note in rows[learner]["notes"]
    if learner in ("right", "wrong", "blank", "tampered", "v3"):
        assert "cells other than checks failed" not in rows[learner]["notes"]
    if learner in ("right", "v3"):                # an old format is not an edit
        assert rows[learner]["notes"] == ""


def test_reports_and_summary(graded):
    rows, markdown, stdout = graded
    assert set(rows) == {"right", "wrong", "tampered", "blank", "absent", "broken", "looping",
                         "crashing", "emptylist", "misnamed", "v3"}
    assert "| learner | 0.1 | points |" in markdown
    assert "| right | pass | 1/1 |" in markdown
    feedback = markdown.split("## Feedback")[1].strip().splitlines()
    assert "- wrong · 0.1: " in "\n".join(feedback) and "you rounded down" in markdown
    assert "- absent · 00_start_here.ipynb: not submitted" in feedback
    assert "- blank · 00_start_here.ipynb: not answered yet: 0.1" in feedback
    assert not any(line.startswith(("- right ", "- v3 ")) for line in feedback)
    assert all(line.split(": ", 1)[1].strip() for line in feedback)   # no empty lines
    assert "ignored stray.ipynb" in stdout and "right" in stdout and "1/1" in stdout
    assert "11 learners" in stdout and "s each on average" in stdout


def test_bad_arguments_are_one_clear_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labkit.grade.cli", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("labkit-grade: error: submissions must be a folder")
    assert "Traceback" not in proc.stderr
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        grade_all(tmp_path, Assignment.load(SOLUTIONS), jobs=0)


def test_a_dead_kernel_is_reported_in_seconds(tmp_path):
    """``os._exit(0)`` in a learner cell: reported as a crash long before the cell limit."""
    solution = nbformat.read(SOLUTIONS / NAME, as_version=4)
    nb = copy.deepcopy(solution)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first_code, nbformat.v4.new_code_cell("import os\nos._exit(0)"))
    nbformat.write(nb, tmp_path / NAME)
    grade = grade_notebook("dies", tmp_path / NAME, NAME, Assignment.load(SOLUTIONS)
                           .select([NAME]), timeout=600, cell_timeout=300)
    assert any(n.startswith("00_start_here.ipynb: the kernel died") for n in grade.notes)
    assert grade.statuses == {"0.1": "pass"}      # the verdict runs the answer apart
    assert grade.seconds < 60, f"took {grade.seconds:.0f} s (the cell limit was 300 s)"
