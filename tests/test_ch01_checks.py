"""Chapter 01's checkers: a right answer written here passes, a missing one is missing, and
each named wrong answer fails with its hint."""
import math
import re

import numpy as np
import pytest

from labkit.check import FAIL, PASS, evaluate
from labkit.check import ch01
from labkit.perf.stack import ALLOC_OPS, COMPUTE_OPS, CONV_OPS, MATMUL_OPS
from check_basics import reference_and_missing_test
from mutants import mutant

IDS = [f"1.{k}" for k in range(1, 14)]


test_reference_passes_and_missing_is_missing = reference_and_missing_test(IDS, handles=True)


# --------------------------------------------------------------- right answers, ours
def which_layer(name):
    if re.search(r"Torch-Compiled Region|CompiledFunction|TorchDynamo|Inductor", name):
        return "compiler/graph"
    if re.match(r"cu(da)?[A-Z]", name):
        return "runtime"
    if name.startswith(("void ", "Memcpy", "ampere_", "triton_", "cutlass")) or \
            re.match(r"sm\d+_", name):
        return "kernel libraries"
    if name.startswith(("aten::", "autograd::", "torch::autograd", "Optimizer.")) or \
            re.fullmatch(r"\w+Backward\d*", name):
        return "framework"
    return "application"


def charge_of(name, on_cpu=True):
    layer = which_layer(name)
    if layer != "framework":
        return layer
    if name in ALLOC_OPS:
        return "runtime"
    return "kernel libraries" if on_cpu and name in COMPUTE_OPS else layer


def charge_layers(rows, on_cpu=True):
    out = {}

    def visit(r):
        out[charge_of(r["name"], on_cpu)] = out.get(charge_of(r["name"], on_cpu), 0) + r["self_s"]
        for c in r["children"]:
            visit(c)
    for r in rows:
        visit(r)
    return out


def kernel_intervals(rows, on_cpu=True):
    got = [(r["start_s"], r["end_s"]) for r in rows
           if charge_of(r["name"], on_cpu) == "kernel libraries"]
    for r in rows:
        got += kernel_intervals(r["children"], on_cpu)
    return got


def status_bytes(text):
    return {m.group(1): 1024 * int(m.group(2))
            for m in re.finditer(r"^(\w+):\s+(\d+) kB$", text, re.M)}


def busy_time(intervals):
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return sum(e - s for s, e in merged)


def op_precision(name, peaks, cudnn_tf32=True, matmul_tf32=False):
    tf32 = "tf32" in peaks and ((name in CONV_OPS and cudnn_tf32) or
                                (name in MATMUL_OPS and matmul_tf32))
    return "tf32" if tf32 else "fp32"


def pipeline_step(host_s, device_s):
    issued = np.cumsum(host_s)
    end = 0.0
    for t, d in zip(issued, device_s):
        end = max(end, t) + d
    return float(max(end, issued[-1] if len(issued) else 0.0))


def calibrate_host(device_s, target_s):
    lo, hi = 0.0, target_s
    while hi - lo > 1e-12 * target_s:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ch01.pipeline_step([mid] * len(device_s), device_s) < target_s \
            else (lo, mid)
    return lo


@pytest.mark.parametrize("ex, answer", [
    ("1.1", which_layer), ("1.2", charge_of), ("1.3", charge_layers),
    ("1.5", status_bytes), ("1.9", busy_time), ("1.10", kernel_intervals),
    ("1.11", op_precision), ("1.12", pipeline_step), ("1.13", calibrate_host),
    ("1.4", lambda b, i, h, o, rg: 2 * b * h * (3 * i + 3 * o) - (0 if rg else 2 * b * i * h)),
    ("1.6", lambda p, b: p / b), ("1.8", lambda lat, bw, n: lat * bw / n),
    ("1.7", lambda p, b, f, q: (max(f / p, q / b), "compute-bound" if f * b >= q * p
                                 else "memory-bound")),
])
def test_a_right_answer_written_here_passes(ex, answer):
    v = evaluate(ex, answer)
    assert v.status == PASS, v.message
    assert evaluate(ex, answer, seed=99).status == PASS


def test_outputs_typed_in_for_the_learning_inputs_fail_another_seed():
    seen = {}

    def remembering(name):
        seen[name] = ch01.layer_of(name)
        return seen[name]
    assert evaluate("1.1", remembering, refuse=False).status == PASS
    typed = dict(seen)
    v = evaluate("1.1", lambda name: typed.get(name, "application"), seed=5)
    assert v.status == FAIL


# ------------------------------------------------------------------- 1.1
def _kernels_for_cuda(name):
    return "kernel libraries" if "cuda" in name.lower() else which_layer(name)


def _aten_is_kernel(name):
    return "kernel libraries" if name.startswith("aten::") else which_layer(name)


def _no_compiler(name):
    got = which_layer(name)
    return "framework" if got == "compiler/graph" else got


@pytest.mark.parametrize("wrong, hint", [
    (_kernels_for_cuda, "runtime"), (_aten_is_kernel, "dispatcher"),
    (_no_compiler, "torch.compile"), (lambda n: "framework", "record_function"),
])
def test_1_1_rejects(wrong, hint):
    v = evaluate("1.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 1.2, 1.3
@pytest.mark.parametrize("wrong, hint", [
    (lambda n, cpu: "framework" if n in ALLOC_OPS else charge_of(n, cpu), "ALLOC_OPS"),
    (lambda n, cpu: "framework" if n in COMPUTE_OPS else charge_of(n, cpu), "COMPUTE_OPS"),
    (lambda n, cpu: "kernel libraries" if n in COMPUTE_OPS else charge_of(n, cpu),
     "row of its own"),                                                  # CPU rule on a GPU
    (lambda n, cpu: "kernel libraries" if cpu and n in ch01._METADATA else charge_of(n, cpu),
     "metadata operator"),
])
def test_1_2_rejects(wrong, hint):
    v = evaluate("1.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def _total_time(rows, on_cpu=True):
    out = {}
    for r in rows:
        k = charge_of(r["name"], on_cpu)
        out[k] = out.get(k, 0) + r["end_s"] - r["start_s"]
        for c, t in _total_time(r["children"], on_cpu).items():
            out[c] = out.get(c, 0) + t
    return out


def _top_only(rows, on_cpu=True):
    return charge_layers([{**r, "children": []} for r in rows], on_cpu)


@pytest.mark.parametrize("wrong, hint", [
    (_total_time, "whole time (end − start)"), (_top_only, "only the top rows"),
    (lambda rows, on_cpu=True: charge_layers(rows, True), "row of its own"),
    (lambda rows, on_cpu=True: {k: 2 * v for k, v in charge_layers(rows, on_cpu).items()},
     "charge_of(name, on_cpu)"),
    (lambda rows, on_cpu=True: list(charge_layers(rows, on_cpu).values()), "dict of layer"),
])
def test_1_3_rejects(wrong, hint):
    v = evaluate("1.3", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_1_3_reference_mutant_without_the_walk_fails():
    v = evaluate("1.3", mutant(ch01.charge_layers, "todo.extend(row[\"children\"])", "pass"),
                 refuse=False)
    assert v.status == FAIL and "only the top rows" in v.message, v.message


# ------------------------------------------------------------------- 1.4
def _fwd(b, i, h, o, rg):
    return 2 * b * (i * h + h * o)


@pytest.mark.parametrize("wrong, hint", [
    (_fwd, "forward pass only"),
    (lambda b, i, h, o, rg: 3 * b * (i * h + h * o), "2 FLOPs"),       # the step, MACs
    (lambda b, i, h, o, rg: b * (i * h + h * o), "2 FLOPs"),           # the forward, MACs
    (lambda b, i, h, o, rg: 3 * _fwd(b, i, h, o, rg), "input_requires_grad=False"),
    (lambda b, i, h, o, rg: 2 * _fwd(b, i, h, o, rg), "twice"),
])
def test_1_4_rejects(wrong, hint):
    v = evaluate("1.4", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 1.5
@pytest.mark.parametrize("wrong, hint", [
    (lambda t: {k: v // 1024 for k, v in status_bytes(t).items()}, "that is in kB"),
    (lambda t: {k: v // 1024 * 1000 for k, v in status_bytes(t).items()}, "1024 bytes"),
    (lambda t: {k: str(v) for k, v in status_bytes(t).items()}, "strings"),
    (lambda t: {**status_bytes(t), "Threads": 4}, "not a size in kB"),
    (lambda t: {k: v for k, v in status_bytes(t).items() if k in ("VmRSS", "VmHWM")},
     "is missing"),
    (lambda t: [status_bytes(t)["VmRSS"]], "dict of field name"),
])
def test_1_5_rejects(wrong, hint):
    v = evaluate("1.5", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_the_status_texts_are_what_linux_writes():
    rng = np.random.default_rng(0)
    text = ch01.status_text(rng)
    assert re.search(r"^VmRSS:\s+\t\s*\d+ kB$", text, re.M)
    assert re.search(r"^VmHWM:\s+\t\s*\d+ kB$", text, re.M)
    assert "Threads:\t" in text and text.endswith("\n")
    with open("/proc/self/status") as fh:
        real = ch01.status_bytes(fh.read())
    assert real["VmHWM"] >= real["VmRSS"] > 0 and real["VmRSS"] % 1024 == 0


# ------------------------------------------------------------------- 1.6 – 1.8
@pytest.mark.parametrize("wrong, hint", [
    (lambda p, b: b / p, "bytes per FLOP"),
    (lambda p, b: p / (8 * b), "no factor 8"),            # bandwidth taken as bits/s
    (lambda p, b: 8 * p / b, "no factor 8"),
    (lambda p, b: p / 1e12 / (b / 1e9), "power of 1000"),  # TFLOP/s over GB/s
    (lambda p, b: p / b + 1, "Williams"),
])
def test_1_6_rejects(wrong, hint):
    v = evaluate("1.6", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, b, f, q: (f / p, "compute-bound"), "F/peak only"),
    (lambda p, b, f, q: (f / p + q / b, ch01.roofline_bound(p, b, f, q)[1]), "not their sum"),
    (lambda p, b, f, q: (ch01.roofline_bound(p, b, f, q)[0], "memory-bound"), "compute-bound"),
    (lambda p, b, f, q: max(f / p, q / b), "return a pair"),
])
def test_1_7_rejects(wrong, hint):
    v = evaluate("1.7", wrong, refuse=False)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda l, b, n: l * b, "bytes in flight"),
    (lambda l, b, n: b / l / n, "multiplies"),
    (lambda l, b, n: l / b / n, "multiplies"),
    (lambda l, b, n: 8 * l * b / n, "no factor 8"),        # bytes taken as bits
    (lambda l, b, n: l * b / (8 * n), "no factor 8"),
    (lambda l, b, n: l * b / n / 32, "Little 1961"),       # per warp, not per thread
])
def test_1_8_rejects(wrong, hint):
    v = evaluate("1.8", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 1.9, 1.10
@pytest.mark.parametrize("wrong, hint", [
    (lambda iv: sum(e - s for s, e in iv), "counted twice"),
    (lambda iv: max((e for _, e in iv), default=0) - min((s for s, _ in iv), default=0),
     "idle gaps"),
    (ch01._merged_in_order, "sort the intervals"),
    (lambda iv: len(iv), "sort by start"),
])
def test_1_9_rejects(wrong, hint):
    v = evaluate("1.9", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_1_9_busy_time_of_nested_rows_is_the_parent():
    assert busy_time([(0.0, 10.0), (2.0, 3.0), (4.0, 6.0)]) == ch01.busy_time(
        [(0.0, 10.0), (2.0, 3.0)]) == 10.0
    assert ch01.busy_time([]) == 0.0 and ch01.busy_time([(0.0, 1.0), (1.0, 2.0)]) == 2.0


@pytest.mark.parametrize("wrong, hint", [
    (lambda rows, on_cpu=True: ch01._intervals(rows, lambda r: True), "every row's interval"),
    (lambda rows, on_cpu=True: ch01._intervals(
        rows, lambda r: which_layer(r["name"]) == "kernel libraries"), "reads the name only"),
    (lambda rows, on_cpu=True: [(r["start_s"], r["end_s"]) for r in rows
                                if charge_of(r["name"], on_cpu) == "kernel libraries"],
     "only the top rows"),
    (lambda rows, on_cpu=True: {"n": 0}, "list of (start_s, end_s)"),
])
def test_1_10_rejects(wrong, hint):
    v = evaluate("1.10", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 1.11
@pytest.mark.parametrize("wrong, hint", [
    (lambda n, p, c=True, m=False: "fp32" if n in CONV_OPS else op_precision(n, p, c, m),
     "TF32 Tensor Cores"),
    (lambda n, p, c=True, m=False: "tf32" if n in MATMUL_OPS and "tf32" in p
     else op_precision(n, p, c, m), "matmuls stay FP32"),
    (lambda n, p, c=True, m=False: "tf32" if n in CONV_OPS and c else op_precision(n, p, c, m),
     "no TF32"),                                                         # TF32 on a V100
    (lambda n, p, c=True, m=False: "tf32" if "tf32" in p and n not in CONV_OPS | MATMUL_OPS
     else op_precision(n, p, c, m), "elementwise"),
    (lambda n, p, c=True, m=False: "tf32" if n in CONV_OPS and "tf32" in p
     else op_precision(n, p, c, m), "cudnn_tf32 off"),
])
def test_1_11_rejects(wrong, hint):
    v = evaluate("1.11", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 1.12, 1.13
@pytest.mark.parametrize("wrong, hint", [
    (lambda h, d: sum(h) + sum(d), "waited for the host"),
    (lambda h, d: max(sum(h), sum(d)), "perfect overlap"),
    (lambda h, d: sum(max(a, b) for a, b in zip(h, d)), "not i."),
    (lambda h, d: float(len(h)), "host_done"),
])
def test_1_12_rejects(wrong, hint):
    v = evaluate("1.12", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_1_12_pipeline_closed_forms():
    """Host-bound: n·h plus the last kernel; device-bound: the first launch plus Σd."""
    assert pipeline_step([4.0] * 4, [1.0] * 4) == ch01.pipeline_step([4.0] * 4, [1.0] * 4) == 17
    assert ch01.pipeline_step([1.0] * 4, [4.0] * 4) == 17.0
    assert ch01.pipeline_step([1, 1, 1], [5, 0, 0]) == 6.0


@pytest.mark.parametrize("wrong, hint", [
    (lambda d, t: t / len(d), "device's time counts too"),
    (lambda d, t: (t - sum(d)) / len(d), "never overlap"),
    (lambda d, t: (t - d[-1]) / len(d), "sets the pace"),
    (lambda d, t: 1e-6, "bisection"),
])
def test_1_13_rejects(wrong, hint):
    v = evaluate("1.13", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_1_13_calibration_reproduces_its_target():
    d = [50e-6, 1e-6, 1e-6, 1e-6]
    h = ch01.calibrate_host(d, 120e-6)
    assert math.isclose(ch01.pipeline_step([h] * 4, d), 120e-6, rel_tol=1e-12)
