"""labkit.check: verdicts, learning vs grading mode, rebinding, logging, errors."""
import json

import pytest

from labkit.check import (ERROR, FAIL, MISSING, PASS, ExerciseFailed, Wrong, check, evaluate,
                          exercise, expect_close, expect_equal, expect_raises, get, stub)
from labkit.check.core import REGISTRY
from labkit.launch import blocks_needed


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
    (lambda n, t: (n + t - 1) / t, FAIL, "expected"),
    (lambda n, t: float(-(-n // t)), FAIL, "use // not /"),
    (None, MISSING, "not answered"),
])
def test_exercise_0_1_checker(answer, status, hint):
    verdict = evaluate("0.1", answer)
    assert verdict.status == status and hint in verdict.message
