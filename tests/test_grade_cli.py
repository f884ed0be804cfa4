"""The grading command's arguments and the files it meets, none of which needs a kernel:
grading one assignment (--notebooks/--chapters), empty or odd folders, bad notebooks,
bad numbers."""
import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

from labkit.grade.cli import main, parser
from labkit.grade.generate import SOLUTIONS
from labkit.grade.runner import Assignment, _near_match, read_submission

TWO = ["00_start_here.ipynb", "02_autodiff.ipynb"]


@pytest.fixture
def sols(tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    for name in TWO:
        shutil.copy(SOLUTIONS / name, folder / name)
    return folder


def run(*args):
    return subprocess.run([sys.executable, "-m", "labkit.grade.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flags", [["--chapters", "2"], ["--notebooks", "notebooks/02_autodiff"],
                                   ["--notebooks", "02_autodiff.ipynb"]])
def test_grading_one_assignment_shows_only_its_columns_and_notes(sols, tmp_path, flags):
    subs = tmp_path / "subs"
    for who in ("ada", "bob"):
        (subs / who).mkdir(parents=True)         # nothing submitted: no kernel runs
    out = tmp_path / "grades"
    assert main([str(subs), "--solutions", str(sols), "--out", str(out), "--quiet",
                 *flags]) == 0
    header = next(csv.reader((out / "grades.csv").open()))
    ex02 = list(Assignment.load(sols).exercises["02_autodiff.ipynb"])
    assert header == ["learner", "student_id", *ex02, "02_autodiff points", "written points",
                      "total", "max", "notes"]
    markdown = (out / "grades.md").read_text()
    assert "00_start_here" not in markdown and "| 0.1 |" not in markdown
    feedback = markdown.split("## Feedback")[1].strip().splitlines()
    assert feedback == ["- ada · 02_autodiff.ipynb: not submitted",
                        "- bob · 02_autodiff.ipynb: not submitted"]


def test_selection_errors_name_the_near_match(sols):
    assignment = Assignment.load(sols)
    assert list(assignment.select([], [0, 2]).exercises) == TWO
    assert assignment.select().exercises == assignment.exercises
    assert list(assignment.select(["02_autodiff", "00_start_here"]).exercises) == TWO
    with pytest.raises(ValueError, match="did you mean 02_autodiff"):
        assignment.select(["02_autodif"])
    with pytest.raises(ValueError, match="chapter 5 has no graded notebook.*0, 2"):
        assignment.select([], [5])


def test_empty_submissions_folder_is_an_error(sols, tmp_path):
    (tmp_path / "subs").mkdir()
    proc = run(tmp_path / "subs", "--solutions", sols, "--out", tmp_path / "g")
    assert proc.returncode == 2
    assert "no learner folders found" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "g").exists()


def test_out_pointing_at_a_file_is_a_clear_error(sols, tmp_path):
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    (tmp_path / "taken").write_text("x")
    proc = run(tmp_path / "subs", "--solutions", sols, "--out", tmp_path / "taken")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"labkit-grade: error: --out must be a folder for the "
                                   f"reports; {tmp_path / 'taken'} is a file")


@pytest.mark.parametrize("flag, value", [("--timeout", "nan"), ("--timeout", "inf"),
                                         ("--timeout", "-3"), ("--timeout", "soon"),
                                         ("--cell-timeout", "0"), ("--jobs", "0"),
                                         ("--jobs", "2.5"), ("--chapters", "two")])
def test_bad_numbers_are_rejected_by_argparse(flag, value, capsys):
    with pytest.raises(SystemExit) as stop:
        parser().parse_args(["subs", flag, value])
    assert stop.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_unreadable_solution_notebook_is_named(sols, tmp_path):
    (sols / "05_fast_kernels.ipynb").write_text("{not json")
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    proc = run(tmp_path / "subs", "--solutions", sols)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"solution notebook {sols / '05_fast_kernels.ipynb'} cannot be read" in proc.stderr


@pytest.mark.parametrize("text, message", [
    ("[]", "not a notebook (a JSON list, not a Jupyter notebook)"),
    ("{}", "not a notebook (a JSON object without cells, not a Jupyter notebook)"),
    ("3", "not a notebook (a JSON int, not a Jupyter notebook)"),
    ("{oops", "not a valid notebook (not JSON: "),
])
def test_files_that_are_not_notebooks_get_one_plain_line(tmp_path, text, message):
    path = tmp_path / "a.ipynb"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        read_submission(path)
    assert str(err.value).startswith(message)


def test_an_old_format_notebook_is_read_as_version_4(tmp_path):
    nb = nbformat.read(SOLUTIONS / TWO[0], as_version=4)
    (tmp_path / "a.ipynb").write_text(nbformat.writes(nbformat.convert(nb, 3)))
    assert read_submission(tmp_path / "a.ipynb").nbformat == 4


def test_near_match_suggests_the_misnamed_file(tmp_path):
    (tmp_path / "00_Start_Here.ipynb").write_text("{}")
    (tmp_path / "02_autodiff (1).ipynb").write_text("{}")
    assert _near_match(tmp_path, "00_start_here.ipynb") == \
        " (found 00_Start_Here.ipynb: rename it to 00_start_here.ipynb)"
    assert "found 02_autodiff (1).ipynb" in _near_match(tmp_path, "02_autodiff.ipynb")
    assert _near_match(tmp_path, "09_data_parallel.ipynb") == ""
