"""labkit.check: verdicts, learning vs grading mode, rebinding, logging, errors."""
import json
import re

import pytest

from labkit.check import (ERROR, FAIL, MISSING, PASS, ExerciseFailed, Wrong, check, evaluate,
                          exercise, expect_close, expect_equal, expect_raises, get, stub)
from labkit.check.core import REGISTRY
from labkit.grid import blocks_needed


@pytest.fixture
def toy():
    """A throw-away exercise 99.1: square a number."""
    @exercise("99.1", "square", reference=lambda x: x * x, binds="square")
    def _(answer):
        for x in (0, 3, -2.5):
            if answer(x) != x * x:
                raise Wrong(f"square({x}) = {answer(x)}, expected {x * x}")
    yield "99.1"
    REGISTRY.pop("99.1")


def test_verdicts_for_right_wrong_missing_and_crashing(toy):
    assert evaluate(toy, lambda x: x * x).status == PASS
    wrong = evaluate(toy, lambda x: 2 * x)
    assert wrong.status == FAIL and "square(3) = 6, expected 9" in wrong.message
    assert evaluate(toy, None).status == MISSING
    assert evaluate(toy, ...).status == MISSING

    def not_written(x):
        raise NotImplementedError
    assert evaluate(toy, not_written).status == MISSING
    assert evaluate(toy, stub(lambda x: x)).status == MISSING
    crash = evaluate(toy, lambda x: 1 / 0)
    assert crash.status == ERROR and "ZeroDivisionError" in crash.message


def test_learning_mode_prints_and_never_raises(toy, capsys, monkeypatch):
    monkeypatch.delenv("LABKIT_GRADE", raising=False)
    check(toy, lambda x: x + 1)
    out = capsys.readouterr().out
    assert out.startswith("❌ Exercise 99.1 (square)") and "expected 0" in out
    check(toy, lambda x: x ** 2)
    assert capsys.readouterr().out.startswith("✅ Exercise 99.1")


def test_wrong_answer_rebinds_the_reference_in_the_callers_globals(toy, monkeypatch):
    monkeypatch.delenv("LABKIT_GRADE", raising=False)
    namespace = {"check": check, "square": lambda x: -x}
    exec('check("99.1", square)', namespace)
    assert namespace["square"](4) == 16
    right = lambda x: x * x  # noqa: E731
    namespace["square"] = right
    exec('check("99.1", square)', namespace)
    assert namespace["square"] is right


def test_grading_mode_raises_only_on_failure_and_logs(toy, monkeypatch, tmp_path):
    log = tmp_path / "log.jsonl"
    monkeypatch.setenv("LABKIT_GRADE", "1")
    monkeypatch.setenv("LABKIT_GRADE_LOG", str(log))
    check(toy, lambda x: x * x)
    with pytest.raises(ExerciseFailed, match="99.1 fail"):
        check(toy, lambda x: x)
    with pytest.raises(ExerciseFailed, match="99.1 missing"):
        check(toy, None)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["status"] for e in entries] == [PASS, FAIL, MISSING]


def test_unknown_and_malformed_exercise_ids_are_clear_errors():
    with pytest.raises(ValueError, match="unknown exercise '0.99'"):
        get("0.99")
    with pytest.raises(ValueError, match="must look like '2.3'"):
        get("two.three")


def test_expect_helpers_name_what_is_wrong():
    import numpy as np

    with pytest.raises(Wrong, match=r"has shape \(2,\), expected \(3,\)"):
        expect_close(np.ones(2), np.ones(3), "y")
    with pytest.raises(Wrong, match="off by up to 0.5"):
        expect_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), "y", hint="check the sign")
    expect_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]), "y")
    with pytest.raises(Wrong, match="expected 3"):
        expect_equal(2, 3, "n")
    with pytest.raises(Wrong, match="should raise ValueError"):
        expect_raises(lambda: None, ValueError, "f(-1)")
    expect_raises(lambda: int("x"), ValueError, "int('x')")


# ---- chapter 00's exercise -------------------------------------------------------------

def test_blocks_needed_reference_and_its_errors():
    assert [blocks_needed(n, 256) for n in (1, 255, 256, 257, 1000)] == [1, 1, 1, 2, 4]
    for bad in [(0, 32), (-5, 32), (10, 0), (10, 1025), (2.5, 32)]:
        with pytest.raises(ValueError, match="n must|threads_per_block must"):
            blocks_needed(*bad)


@pytest.mark.parametrize("answer, status, hint", [
    (lambda n, t: -(-n // t), PASS, "correct"),
    (lambda n, t: n // t, FAIL, "you rounded down"),
    (lambda n, t: n // t + 1, FAIL, "multiple of the block size"),
    (lambda n, t: (n + t - 1) / t, FAIL, "use // not /"),
    (lambda n, t: float(-(-n // t)), FAIL, "use // not /"),
    (None, MISSING, "not answered"),
])
def test_exercise_0_1_checker(answer, status, hint):
    verdict = evaluate("0.1", answer)
    assert verdict.status == status and hint in verdict.message


# ---- exercise ids ------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [2.10, 2, None, ("2", "1")])
def test_exercise_ids_are_strings(bad):
    with pytest.raises(TypeError, match="exercise ids are strings such as '2.10'"):
        check(bad, 1)
    with pytest.raises(TypeError, match="exercise ids are strings"):
        exercise(bad, "a title")


def test_unknown_exercise_in_a_fresh_kernel_lists_the_whole_course():
    """A fresh process has imported no chapter's checks: the error still lists them all."""
    import pkgutil
    import subprocess
    import sys

    import labkit.check

    code = ("from labkit.check import check\ntry:\n    check('99.1', 1)\n"
            "except ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ}).stdout
    assert out.startswith("unknown exercise '99.1'; the course's exercises: 0.1, ")
    chapters = [int(m.name[2:]) for m in pkgutil.iter_modules(labkit.check.__path__)
                if re.fullmatch(r"ch\d\d", m.name)]
    listed = out.split(": ", 1)[1].strip().split(", ")
    assert sorted({int(i.split(".")[0]) for i in listed}) == sorted(chapters)
    assert len(chapters) >= 7


# ---- the learner's progress --------------------------------------------------------------

@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "me" / "progress.json"
    monkeypatch.setenv("LABKIT_PROGRESS", str(path))
    monkeypatch.delenv("LABKIT_GRADE", raising=False)
    return path


def test_checks_record_verdicts_and_progress_shows_them(toy, progress_file, capsys):
    import labkit
    from labkit.check.progress import NOT_TRIED

    check(toy, lambda x: 2 * x)
    entry = json.loads(progress_file.read_text())["exercises"]["99.1"]
    assert entry["status"] == FAIL and entry["passed"] is False and entry["title"] == "square"
    check(toy, lambda x: x * x)
    check(toy, lambda x: x)                     # a later wrong re-run keeps the pass
    result = labkit.progress()
    row = next(r for r in result.rows if r.exercise == "99.1")
    assert row.passed and row.status == FAIL
    assert result.passed == 1
    zero = next(r for r in result.rows if r.exercise == "0.1")
    assert zero.status == NOT_TRIED and not zero.passed
    assert result.total == len(REGISTRY) and result.by_chapter()[99] == (1, 1)
    assert {r.chapter for r in result.rows} >= {0, 2, 3, 4, 5, 6, 9}
    text = str(result)
    assert text.startswith("Your progress: 1 of ") and "✅ 99.1" in text
    page = result._repr_html_()
    assert "data:image/png;base64," in page and "<td>99.1</td>" in page


def test_grading_never_writes_progress(toy, progress_file, monkeypatch):
    monkeypatch.setenv("LABKIT_GRADE", "1")
    check(toy, lambda x: x * x)
    assert not progress_file.exists()


def test_an_unwritable_or_broken_progress_file_never_breaks_a_check(toy, tmp_path, monkeypatch,
                                                                   capsys):
    from labkit.check.record import load

    monkeypatch.delenv("LABKIT_GRADE", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("LABKIT_PROGRESS", str(blocker / "progress.json"))  # parent is a file
    check(toy, lambda x: x * x)
    assert capsys.readouterr().out.startswith("✅")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert load(broken) == {}
    broken.write_text('{"exercises": [1, 2]}')
    assert load(broken) == {}


def test_progress_chart_stacks_passed_and_to_do():
    import matplotlib

    matplotlib.use("Agg")
    from labkit.check.progress import Progress, ProgressRow as Row, plot_progress

    result = Progress((Row("1.1", 1, "a", "pass", True), Row("1.2", 1, "b", "fail", False),
                       Row("2.1", 2, "c", "not tried", False)))
    assert result.by_chapter() == {1: (1, 2), 2: (0, 1)}
    ax = plot_progress(result)
    heights = [(p.get_x(), p.get_y(), p.get_height()) for p in ax.patches]
    assert [h for _, _, h in heights] == [1, 0, 1, 1]       # passed bars, then to-do bars
    assert heights[2][1] == 1                               # to-do stacked on the passed
    import matplotlib.pyplot as plt
    plt.close("all")
    with pytest.raises(TypeError, match="path must be a file path"):
        __import__("labkit").progress(3)
