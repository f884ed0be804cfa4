"""Chapter 01's checkers accept the references and reject wrong or missing answers."""
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch01
from labkit.perf.stack import layer_of


@pytest.mark.parametrize("ex", ["1.1", "1.2", "1.3", "1.4", "1.5"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _fwd(b, i, h, o, rg):
    return 2 * b * (i * h + h * o)


@pytest.mark.parametrize("wrong, hint", [
    (_fwd, "forward pass only"),
    (lambda b, i, h, o, rg: 3 * b * (i * h + h * o), "2 FLOPs"),       # the step, MACs
    (lambda b, i, h, o, rg: b * (i * h + h * o), "2 FLOPs"),           # the forward, MACs
    (lambda b, i, h, o, rg: 3 * _fwd(b, i, h, o, rg), "input_requires_grad=False"),
    (lambda b, i, h, o, rg: 2 * _fwd(b, i, h, o, rg), "twice"),
])
def test_1_1_rejects(wrong, hint):
    v = evaluate("1.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def _kernels_for_cuda(name):
    return "kernel libraries" if "cuda" in name.lower() else layer_of(name)


def _aten_is_kernel(name):
    return "kernel libraries" if name.startswith("aten::") else layer_of(name)


def _no_compiler(name):
    got = layer_of(name)
    return "framework" if got == "compiler/graph" else got


@pytest.mark.parametrize("wrong, hint", [
    (_kernels_for_cuda, "runtime"), (_aten_is_kernel, "dispatcher"),
    (_no_compiler, "torch.compile"), (lambda n: "framework", "record_function"),
])
def test_1_2_rejects(wrong, hint):
    v = evaluate("1.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_1_3_and_1_4_and_1_5_reject_shortcuts():
    assert "bytes per FLOP" in evaluate("1.3", lambda p, b: b / p).message
    assert "power of 1000" in evaluate("1.3", lambda p, b: p / b / 1e9).message
    v = evaluate("1.4", lambda p, b, f, q: (f / p, "compute-bound"))
    assert v.status == FAIL and "F/peak only" in v.message
    v = evaluate("1.4", lambda p, b, f, q: (f / p + q / b, ch01.roofline_bound(p, b, f, q)[1]))
    assert v.status == FAIL and "not their sum" in v.message
    v = evaluate("1.4", lambda p, b, f, q: (ch01.roofline_bound(p, b, f, q)[0], "memory-bound"))
    assert v.status == FAIL and "compute-bound" in v.message
    assert "bytes in flight" in evaluate("1.5", lambda l, b, n: l * b).message
    assert "multiplies" in evaluate("1.5", lambda l, b, n: b / l / n).message


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, b: b / p, "bytes per FLOP"),
    (lambda p, b: p / (8 * b), "no factor 8"),            # bandwidth taken as bits/s
    (lambda p, b: 8 * p / b, "no factor 8"),
    (lambda p, b: p / 1e12 / (b / 1e9), "power of 1000"),  # TFLOP/s over GB/s
    (lambda p, b: p / b + 1, "Williams"),
])
def test_1_3_rejects(wrong, hint):
    v = evaluate("1.3", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda l, b, n: l * b, "bytes in flight"),
    (lambda l, b, n: b / l / n, "multiplies"),
    (lambda l, b, n: l / b / n, "multiplies"),
    (lambda l, b, n: 8 * l * b / n, "no factor 8"),        # bytes taken as bits
    (lambda l, b, n: l * b / (8 * n), "no factor 8"),
    (lambda l, b, n: l * b / n / 32, "Little 1961"),       # per warp, not per thread
])
def test_1_5_rejects(wrong, hint):
    v = evaluate("1.5", wrong)
    assert v.status == FAIL and hint in v.message, v.message
