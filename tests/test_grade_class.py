"""An instructor's term in one test (issue 23): a class of thirteen synthetic learners on two
notebooks, graded with a grading.toml (points, an assignment with a due date, a late
policy) and a roster; per-learner feedback; the numeric, Canvas and Moodle exports; a
regrade of two learners merged into the gradebook; the written-answers page and its
points read back."""
import copy
import csv
import sqlite3
import subprocess
import sys
import textwrap

import nbformat
import pytest

from grading_runs import (RIGHT, SHOTS, WRONG, ZERO, chromium_page, course, grade_command,
                          grade_rows, hand_in, run_grading, with_answer, with_cell)
from labkit.check.core import get
from labkit.grade.authoring import code, md
from labkit.grade.generate import BEGIN, SOLUTIONS, check_cells, learner_version
from labkit.grade.slices import build_slice

MINI = "12_performance_eval.ipynb"      # a trimmed chapter 12: two exercises, one question


def mini_solution():
    """Chapter 12's first two exercises with a checker of the (answer, ref, rng) form, the
    cells they need, their check cells, a prediction and a written answer."""
    full = nbformat.read(SOLUTIONS / MINI, as_version=4)
    checks = check_cells(full)
    chosen = [ex for ex in checks if get(ex).handles][:2]
    assert len(chosen) == 2, "chapter 12 needs two exercises in the handles form"
    keep: list[str] = []
    for ex in chosen:
        keep += [c.id for c in build_slice(full, full, ex).cells]
        keep.append(checks[ex].get("id"))
    by_id = {c.get("id"): c for c in full.cells}
    cells = [copy.deepcopy(by_id[i]) for i in dict.fromkeys(keep)]
    written = md("**Question.** Why report a median with an interval?\n\n"
                 f"{BEGIN}\nBecause one run is one sample of a noisy process.\n"
                 "### END SOLUTION")
    written["id"] = "written-1"
    guess = code("from labkit.check import predict\n### BEGIN SOLUTION\nguess = 3.0\n"
                 "### END SOLUTION\npredict('12.mini', guess, 'speedup of the batched loss')")
    guess["id"] = "predict-1"
    nb = nbformat.v4.new_notebook(cells=cells + [written, guess])
    nb.metadata = copy.deepcopy(full.metadata)
    return nb, chosen


def mini_zero():
    """Chapter 00 cut to what exercise 0.1 needs: the first cell (the imports), the cells of
    0.1's slice and its check cell. The class's fifteen gradings of chapter 00 then skip its
    simulator launch and its widgets (the whole chapter is graded in test_grade_samples)."""
    full = nbformat.read(SOLUTIONS / ZERO, as_version=4)
    check = check_cells(full)["0.1"]
    first = next(c for c in full.cells if c.cell_type == "code")
    keep = [first, *(c for c in full.cells if c.get("id") in
                     {sc.id for sc in build_slice(full, full, "0.1").cells}), check]
    nb = nbformat.v4.new_notebook(cells=[copy.deepcopy(c) for c in keep])
    nb.metadata = copy.deepcopy(full.metadata)
    return nb


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    root, sols = course(tmp_path_factory, "term")
    mini, chosen = mini_solution()
    zero_sol = mini_zero()
    nbformat.write(zero_sol, sols / ZERO)
    nbformat.write(mini, sols / MINI)
    zero_blank = learner_version(zero_sol)
    mini_blank = learner_version(mini)
    right0 = with_answer(zero_blank, RIGHT)
    wrong0 = with_answer(zero_blank, WRONG)
    broken0 = with_answer(zero_blank, "def blocks_needed(n, threads_per_block)\n"
                          "    return n\n")                                  # a SyntaxError
    writes = with_cell(mini, "written-1", "**Question.** Why report a median with an interval?"
                      "\n\nRuns vary; one number hides how much.")
    edited = copy.deepcopy(mini)
    for cell in edited.cells:
        if "check" in cell.metadata.get("tags", []):
            cell.source = 'print("✅ fine")'
    crash = copy.deepcopy(mini)
    crash.cells.insert(1, nbformat.v4.new_code_cell("import os\nos._exit(0)"))
    layout = {   # learner -> {file name: notebook}
        "ada": {ZERO: right0, MINI: writes},
        "bob": {ZERO: wrong0, MINI: mini},
        "cy": {ZERO: zero_blank, MINI: mini_blank},
        "dee": {ZERO: right0},                                   # the second never came
        "eve": {ZERO: broken0, MINI: mini},
        "fay": {ZERO: right0, "12_performance_eval (1).ipynb": mini},   # misnamed copy
        "gus": {ZERO: right0, MINI: edited},
        "hal": {ZERO: right0, MINI: crash},
        "ivy": {ZERO: right0, MINI: mini},                       # late (submitted.csv)
        "jon": {ZERO: right0, MINI: mini},
        "kim": {ZERO: wrong0, MINI: mini_blank},
    }
    folder = hand_in(root / "submissions", layout)
    # two learners come as a Canvas bulk download: <name>[_LATE]_<id>_<sub>_<file>
    nbformat.write(right0, folder / f"lee_4401_9001_{ZERO}")
    nbformat.write(mini, folder / f"lee_4401_9002_{MINI}")
    nbformat.write(wrong0, folder / f"mo_LATE_4402_9003_{ZERO}")
    (folder / "submitted.csv").write_text("learner,notebook,submitted_at\n"
                                          "ivy,,2100-01-03T12:00:00+00:00\n")
    config = root / "grading.toml"
    config.write_text(textwrap.dedent(f"""
        [points]
        "0.1" = 2
        "{chosen[0]}" = 3

        [[assignment]]
        name = "A1 warm-up"
        chapters = [0]

        [[assignment]]
        name = "A2 measuring"
        chapters = [12]
        due = "2100-01-01T00:00:00+00:00"

        [late]
        policy = "per_day"
        penalty = 0.25
        max_days = 3

        [written]
        points = 2
        """))
    roster = root / "roster.csv"
    with roster.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "student_id", "name", "email", "section"])
        for k, who in enumerate(sorted(layout)):
            w.writerow([who, f"S{1000 + k}", who.title(), f"{who}@uni.example", "A"])
    out = root / "grades"
    cmd = grade_command(folder, out, sols, "--config", str(config), "--roster", str(roster),
                        "--feedback", str(out / "feedback"), "--answers", str(out / "answers"),
                        "--jobs", "2", "--timeout", "60", "--cell-timeout", "10",
                        "--exercise-timeout", "30", "--seed", "7", "--quiet")
    proc = run_grading(cmd, timeout=900)
    first = grade_rows(out)
    # regrade two learners after fixing bob's answer: merged into the gradebook
    nbformat.write(right0, folder / "bob" / ZERO)
    regrade = run_grading(cmd + ["--learners", "bob", "kim"], timeout=600)
    return root, out, chosen, first, proc.stdout, regrade.stdout


rows = grade_rows


def test_class_has_thirteen_learners_with_points_and_subtotals(term):
    root, out, chosen, first, stdout, _ = term
    assert len(first) == 13
    a = first["ada"]
    assert a["0.1"] == "pass"
    assert a["00_start_here points"] == "2" and a["12_performance_eval points"] == "4"
    assert a["max"] == "6" and a["total"] == "6"
    assert first["bob"]["0.1"] == "fail"
    assert first["bob"]["total"] == "4"
    assert first["cy"]["total"] == "0"
    assert first["dee"]["12_performance_eval points"] == "0" and "not submitted" in first["dee"]["notes"]
    assert "12_performance_eval (1).ipynb" in first["fay"]["notes"] and first["fay"]["total"] == "6"
    assert "checks " in first["gus"]["notes"] and "were edited; restored" in first["gus"]["notes"]
    assert first["gus"]["notes"].count("edited") == 1 and first["gus"]["total"] == "6"
    assert "the kernel died" in first["hal"]["notes"] and first["hal"]["notes"].count("died") == 1
    # ivy was 3 days late: 1 − 3 × 0.25 of the chapter-12 points
    assert first["ivy"]["12_performance_eval points"] == "1" and "3 days late" in first["ivy"]["notes"]
    assert first["lee"]["total"] == "6" and first["mo"]["total"] == "0"
    assert "seed 7" in stdout and "26 notebooks graded (9 distinct files)" in stdout
    # byte-identical files are graded once; the instructor hears of answered copies
    assert "note: jon/12_performance_eval.ipynb: the same file as bob's (graded once)" in stdout
    assert "cy/12_performance_eval.ipynb" not in stdout          # blank copies: no note
    assert first["jon"]["12_performance_eval points"] == first["bob"]["12_performance_eval points"] == "4"


def test_feedback_files_hold_one_learner_each_with_their_traceback(term):
    _, out, chosen, *_ = term
    eve = (out / "feedback" / "eve.md").read_text()
    assert "# Feedback for eve" in eve and "SyntaxError" in eve
    assert "bob" not in eve and "ada" not in eve
    html = (out / "feedback" / "eve.html").read_text()
    assert "traceback" in html and "0.1" in html
    assert sorted(p.stem for p in (out / "feedback").glob("*.md")) == sorted(rows(out))


def test_lms_exports_follow_the_roster(term):
    _, out, *_ = term
    lms = list(csv.DictReader((out / "lms.csv").open()))
    ada = next(r for r in lms if r["learner"] == "ada")
    assert ada["student_id"] == "S1000" and ada["A1 warm-up"] == "2" and ada["total"] == "6"
    lee = next(r for r in lms if r["learner"] == "lee")
    assert lee["student_id"] == "4401"                    # from the Canvas file name
    canvas = list(csv.reader((out / "canvas.csv").open()))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[1][0] == "Points Possible" and canvas[1][5:7] == ["2", "4"]
    moodle = list(csv.reader((out / "moodle.csv").open()))
    assert moodle[0][:2] == ["ID number", "Email address"]
    assert ["S1000", "ada@uni.example", "2", "4"] == moodle[1][:4]


def test_a_regrade_merges_into_the_gradebook(term):
    _, out, _, first, _, regraded = term
    now = rows(out)
    assert first["bob"]["total"] == "4" and now["bob"]["total"] == "6"
    assert now["ada"] == first["ada"]                      # untouched learners keep theirs
    db = sqlite3.connect(out / "gradebook.sqlite")
    runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    graded = db.execute("SELECT COUNT(*) FROM notebooks WHERE learner='bob'").fetchone()[0]
    seeds = {r[0] for r in db.execute("SELECT seed FROM runs")}
    assert runs == 2 and graded == 4 and seeds == {7}
    assert "bob" in regraded and "ada" in regraded         # the summary lists the class


def test_written_answers_page_and_points_import(term):
    root, out, *_ = term
    page = next((out / "answers").glob("*written-1.html")).read_text()
    assert "Runs vary; one number hides how much." in page and "not answered" in page
    assert "model answer" in page
    points = list(csv.DictReader((out / "answers" / "points.csv").open()))
    items = {p["item"] for p in points}
    assert {"12_performance_eval:written-1", "12_performance_eval:predict-1"} <= items
    filled = out / "answers" / "filled.csv"
    with filled.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "item", "points", "max_points", "comment"])
        w.writerow(["ada", "12_performance_eval:written-1", "2", "2", "clear"])
    proc = subprocess.run([sys.executable, "-m", "labkit.grade.cli", "import-points",
                           str(filled), "--out", str(out), "--solutions",
                           str(root / "solutions")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    now = rows(out)
    assert now["ada"]["written points"] == "2" and now["ada"]["total"] == "8"
    assert now["ada"]["max"] == "8"
    canvas = list(csv.reader((out / "canvas.csv").open()))
    assert canvas[0][7] == "written answers" and canvas[1][7] == "2"
    bad = out / "answers" / "bad.csv"
    bad.write_text("learner,item,points,max_points\nada,x,5,2\n")
    proc = subprocess.run([sys.executable, "-m", "labkit.grade.cli", "import-points", str(bad),
                           "--out", str(out), "--solutions", str(root / "solutions")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "outside [0, 2]" in proc.stderr


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_grades_and_a_feedback_file_render_in_chromium(term, record_property):
    _, out, *_ = term
    with chromium_page({"width": 1200, "height": 900}) as page:
        page.goto((out / "grades.html").as_uri())
        page.wait_for_function("() => [...document.images].every(i => i.complete && "
                               "i.naturalWidth > 0) && document.images.length === 2",
                               timeout=30_000)
        learners = page.locator("#grades tbody tr").count()
        summary = page.locator("#summary").inner_text()
        page.screenshot(path=str(SHOTS / "class_grades.png"), full_page=True)
        page.goto((out / "feedback" / "eve.html").as_uri())
        total = page.locator("#total").inner_text()
        tb = page.locator("pre.traceback").inner_text()
        page.screenshot(path=str(SHOTS / "feedback_eve.png"), full_page=True)
    record_property("screenshot", str(SHOTS / "class_grades.png"))
    assert learners == 13 and "13 learners" in summary
    assert "of 6 points" in total or "of 8 points" in total
    assert "SyntaxError" in tb
