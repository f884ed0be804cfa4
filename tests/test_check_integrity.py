"""Checks refuse labkit's own answers, draw fresh inputs, and decide on plain data.

Issue 21: a check that labkit's implementation passes teaches the import; a rebound
reference is reported as the reference; outputs typed in for known inputs fail under
another seed; a checker's verdict from a replayed transcript equals the live one.
"""
import functools
import types

import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, check, evaluate, get
from labkit.check import handles, plain
from labkit.check.core import HANDED_OUT, exercise_rng, run_checker
from labkit.check.record import load
from labkit.check.registry import load_all
from labkit.check.refuse import Refused, implementation, mentions

RIGHT_0_1 = lambda n, t: -(-n // t)  # noqa: E731


@pytest.mark.parametrize("ex", sorted(load_all(), key=lambda e: [int(p) for p in e.split(".")]))
def test_every_reference_is_refused_as_an_answer(ex):
    e = get(ex)
    assert e.reference is not None, f"{ex} has no reference"
    v = evaluate(ex, e.reference)
    assert v.status == FAIL and "labkit's implementation" in v.message, v


def test_listed_answers_are_refused_too():
    v = evaluate("0.1", __import__("labkit.validate", fromlist=["ceil_div"]).ceil_div)
    assert v.status == FAIL and "ceil_div" in v.message


def _ref():
    return get("0.1").reference


@pytest.mark.parametrize("make", [
    lambda r: types.FunctionType(r.__code__, r.__globals__, "mine"),          # a code copy
    lambda r: types.FunctionType(r.__code__.replace(co_name="mine"), r.__globals__),
    lambda r: functools.wraps(r)(lambda n, t: 0),                             # wraps → __wrapped__
    lambda r: functools.partial(r),
    lambda r: (lambda n, t: r(n, t)),                                          # a wrapper: watched
    lambda r: (lambda n, t: int(r(n, t) * 1)),
])
def test_copies_and_wrappers_of_the_reference_are_refused(make):
    v = evaluate("0.1", make(_ref()))
    assert v.status == FAIL and "labkit's implementation" in v.message, v


def test_an_answer_that_switches_off_the_watch_fails():
    import sys

    def sneaky(n, t):
        sys.setprofile(None)
        return -(-n // t)
    v = evaluate("0.1", sneaky)
    assert v.status == FAIL and "switched off" in v.message


def test_a_learner_answer_with_the_same_name_is_not_refused():
    def blocks_needed(n, threads_per_block):          # the learner's own, same name
        return (n + threads_per_block - 1) // threads_per_block
    assert evaluate("0.1", blocks_needed).status == PASS
    assert implementation(blocks_needed, get("0.1").refused()) is None


def test_the_rebound_reference_is_reported_and_records_no_pass(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("LABKIT_GRADE", raising=False)
    monkeypatch.setenv("LABKIT_PROGRESS", str(tmp_path / "p.json"))
    ns = {"check": check, "blocks_needed": lambda n, t: n // t}
    exec('check("0.1", blocks_needed)', ns)
    assert ns["blocks_needed"] is _ref() and HANDED_OUT[id(_ref())] == "0.1"
    capsys.readouterr()
    exec('check("0.1", blocks_needed)', ns)                 # the cell run again
    out = capsys.readouterr().out
    assert out.startswith("❌") and "you are using labkit's reference" in out
    assert load(tmp_path / "p.json")["0.1"]["passed"] is False
    ns["blocks_needed"] = RIGHT_0_1
    exec('check("0.1", blocks_needed)', ns)
    assert load(tmp_path / "p.json")["0.1"]["passed"] is True


def test_mentions_reads_imports_and_attribute_chains():
    refused = get("0.1").refused()
    assert mentions("from labkit.grid import blocks_needed as b\nx = b", refused)
    assert mentions("import labkit.grid\nf = labkit.grid.blocks_needed", refused)
    assert mentions("import labkit.grid as g\nf = getattr(g, 'blocks_needed')", refused)
    assert mentions("from labkit import validate\nf = validate.ceil_div", refused)
    assert not mentions("def blocks_needed(n, t):\n    return -(-n // t)", refused)
    assert not mentions("import numpy as np\nblocks_needed = lambda n, t: np.ceil(n / t)",
                        refused)


# ---- fresh inputs --------------------------------------------------------------------------

def test_outputs_typed_in_for_the_learning_inputs_fail_under_another_seed():
    from labkit.check.ch00 import CASES, fresh_cases

    known = {(n, t): -(-n // t) for n, t in CASES + fresh_cases(exercise_rng("0.1"))}
    typed_in = lambda n, t: known.get((n, t), 1)  # noqa: E731
    assert evaluate("0.1", typed_in).status == PASS            # learning mode's inputs
    assert evaluate("0.1", typed_in, seed=12345).status == FAIL
    assert evaluate("0.1", RIGHT_0_1, seed=12345).status == PASS


def test_seeds_differ_per_exercise_and_are_validated():
    a, b = exercise_rng("0.1", 7).integers(1 << 30), exercise_rng("1.1", 7).integers(1 << 30)
    assert a != b and exercise_rng("0.1", 7).integers(1 << 30) == a
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        exercise_rng("0.1", -1)


def test_formula_exercises_add_fresh_cases():
    from labkit.check.formula import drawn_cases, perturbed

    rng = np.random.default_rng(0)
    case = perturbed((300.0, 86400, "x", 0), rng)
    assert case[2:] == ("x", 0) and isinstance(case[1], int) and case[0] != 300.0
    ref = handles.Live(lambda c, m: c / m)
    assert len(drawn_cases([(1.0, 2.0)], ref, rng)) == 3


# ---- plain data and transcripts --------------------------------------------------------------

@pytest.mark.parametrize("value", [
    None, True, 3, 2 ** 70, -1.5, float("nan"), float("inf"), 1 + 2j, "s", b"\x00\xff",
    (1, [2, {"a": 3}]), {1: "x", (2, 3): None}, np.arange(6, dtype=np.int16).reshape(2, 3),
    np.float32(1.25), np.array([], dtype=np.float64), np.array(["a", "bc"]),
])
def test_plain_round_trip(value):
    back = plain.loads(plain.dumps(value))
    assert plain.dumps(back) == plain.dumps(value)
    assert type(back) is type(value) or isinstance(value, (np.ndarray, np.generic))


def test_plain_refuses_objects_and_object_arrays():
    for bad in (lambda: 0, object(), np.array([object()]), types.SimpleNamespace()):
        with pytest.raises(plain.Unencodable):
            plain.dumps(bad)
    with pytest.raises(ValueError, match="unknown tag"):
        plain.decode({"__plain__": "pickle", "data": ""})


def _checker(answer, ref, rng):
    x = rng.normal(size=(3, 4))
    buf = [np.zeros(2)]
    y = answer(x, buf)
    assert buf[0][0] == 1.0, "the in-place write reached the checker"
    np.testing.assert_allclose(y, ref(x, buf))


def test_recorded_and_replayed_answers_give_the_same_verdict():
    def learner(x, buf):
        buf[0][0] = 1.0
        return x * 2

    ex = types.SimpleNamespace(id="t.1", handles=True, checker=_checker)
    rec = handles.Recording(learner)
    ref = handles.Live(lambda x, buf: x * 2)
    assert run_checker(ex, rec, ref, np.random.default_rng(5)).status == PASS
    replay = handles.Replaying(handles.Transcript.from_json(
        plain.loads(plain.dumps(rec.transcript.to_json()))))
    assert run_checker(ex, replay, ref, np.random.default_rng(5)).status == PASS
    # the same transcript against inputs from another seed: a mismatch, never a pass
    replay = handles.Replaying(handles.Transcript.from_json(rec.transcript.to_json()))
    v = run_checker(ex, replay, ref, np.random.default_rng(6))
    assert v.status == "error" and "arguments differ" in v.message


def test_a_replayed_exception_keeps_its_builtin_type():
    def learner(x, buf):
        raise np.exceptions.AxisError("no such axis")

    rec = handles.Recording(learner)
    with pytest.raises(ValueError):
        rec(np.ones(1), [np.zeros(2)])
    replay = handles.Replaying(handles.Transcript.from_json(rec.transcript.to_json()))
    with pytest.raises(ValueError, match="AxisError: no such axis"):
        replay(np.ones(1), [np.zeros(2)])


def test_missing_stays_missing_through_handles():
    assert evaluate("0.1", None).status == MISSING


# ---- learner notebooks do not hand out the answers ---------------------------------------

def _refused_objects():
    out = {}
    for ex in load_all().values():
        for obj in ex.refused().objects:
            out.setdefault(id(obj), (obj, ex.id))
    return out


def _imports_of_refused(source: str, refused: dict) -> list[str]:
    import ast
    import importlib

    from labkit.grade.slices import python_of

    try:
        tree = ast.parse(python_of(source))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labkit"):
            try:
                module = importlib.import_module(node.module)
            except ImportError:
                continue
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                hit = refused.get(id(obj))
                if hit:
                    found.append(f"{node.module}.{alias.name} (exercise {hit[1]})")
    return found


@pytest.mark.parametrize("path", sorted(__import__("labkit.grade.generate", fromlist=["x"])
                                        .NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_learner_notebooks_import_no_exercise_answer(path):
    """A learner notebook's own cells never bring labkit's answer to one of the chapter's
    exercises into scope by name (issue 21: chapter 06's first cell imported the answers to
    6.1–6.5). Labkit's machinery reached through its module (``pipeline.schedule(...)``)
    is not an import of the answer; using it as one is refused by the check."""
    import nbformat

    chapter = int(path.stem[:2])
    refused = {k: v for k, v in _refused_objects().items()
               if int(v[1].split(".")[0]) == chapter}        # this chapter's exercises
    nb = nbformat.read(path, as_version=4)
    found = [f"{c.get('id')}: {hit}" for c in nb.cells if c.cell_type == "code"
             for hit in _imports_of_refused(c.source, refused)]
    assert not found, found
