"""Chapter 01's exercises: the stack, FLOPs of a step, rooflines, Little's law."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.hardware import GPUS
from labkit.perf.stack import bytes_in_flight, layer_of, loads_in_flight, simplenet_step_flops


def _same(a, b) -> bool:
    return bool(np.isclose(a, b, rtol=1e-9, atol=0))


def ridge_point(peak, bandwidth):
    """Reference: the ridge point peak / bandwidth (FLOP per byte)."""
    return peak / bandwidth


def roofline_bound(peak, bandwidth, flops, nbytes):
    """Reference: (least time, 'memory-bound' or 'compute-bound') of a kernel."""
    t = max(flops / peak, nbytes / bandwidth)
    return t, ("memory-bound" if flops / nbytes < peak / bandwidth else "compute-bound")


def _forward_flops(b, i, h, o, rg):
    """The forward pass of step_flops's MLP: 2B(d_in·h + h·d_out)."""
    return 2 * b * (i * h + h * o)


_MULTIPLY_ADD = "a multiply-add counts as 2 FLOPs: an m×k by k×n matmul costs 2·m·n·k."

formula_exercise(
    "1.1", "FLOPs of one SimpleNet training step", simplenet_step_flops, binds="step_flops",
    cases=[(5, 10, 50, 1, True), (5, 10, 50, 1, False), (64, 10, 50, 1, True),
           (7, 33, 19, 4, True), (128, 64, 256, 10, False), (1, 1, 1, 1, True)],
    call=lambda b, i, h, o, rg: f"step_flops({b}, {i}, {h}, {o}, {rg})", rtol=0, atol=0.5,
    shortcuts=[
        (equals(_forward_flops),
         "that is the forward pass only; backward computes two matmuls per layer (dW and "
         "dx)."),
        (scaled(_forward_flops, 0.5), _MULTIPLY_ADD),
        (scaled(simplenet_step_flops, 0.5), _MULTIPLY_ADD),
        (lambda got, b, i, h, o, rg: not rg and math.isclose(
            got, 3 * _forward_flops(b, i, h, o, rg), rel_tol=1e-9),
         "with input_requires_grad=False nobody needs the gradient of the first layer's "
         "input: skip that matmul (2·B·d_in·h)."),
        (scaled(_forward_flops, 2),
         "backward is about twice the forward, not once: dW and dx of each layer are one "
         "matmul each.")],
    hint="forward 2B(d_in·h + h·d_out), then dW and dx for each layer.")


LAYER_CASES = [
    ("## forward ##", "application"), ("my_data_loading", "application"),
    ("aten::addmm", "framework"), ("aten::mm", "framework"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "framework"),
    ("AddmmBackward0", "framework"), ("Optimizer.step#SGD.step", "framework"),
    ("Torch-Compiled Region: 0/0", "compiler/graph"), ("CompiledFunction", "compiler/graph"),
    ("cudaLaunchKernel", "runtime"), ("cudaMemcpyAsync", "runtime"),
    ("cudaStreamSynchronize", "runtime"), ("cuLaunchKernel", "runtime"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "kernel libraries"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
     "::launch_clamp_scalar>", "kernel libraries"),
    ("Memcpy HtoD (Pageable -> Device)", "kernel libraries"),
    ("triton_poi_fused_relu_0", "kernel libraries"),
]


@exercise("1.2", "which layer a profiler row belongs to", reference=layer_of, binds="which_layer")
def _(answer):
    for name, want in LAYER_CASES:
        got = answer(name)
        if got == want:
            continue
        if name.startswith("cuda") and got == "kernel libraries":
            raise Wrong(f"{name!r} is a call on the CPU into the CUDA runtime; it asks for "
                        f"work, the kernel itself runs later on the device: 'runtime'.")
        if name.startswith("aten::") and got == "kernel libraries":
            raise Wrong(f"{name!r} is an ATen operator: the framework's dispatcher. The "
                        f"kernel it calls (MKL, cuBLAS…) is a separate row: 'framework'.")
        if "Compiled" in name and got != want:
            raise Wrong(f"{name!r} is a region run by torch.compile: 'compiler/graph'.")
        if name.startswith("##") and got != want:
            raise Wrong(f"{name!r} is a range the user labelled with record_function: "
                        f"'application'.")
        raise Wrong(f"which_layer({name!r}) = {got!r}, expected {want!r}.")


formula_exercise(
    "1.3", "the ridge point of a machine", ridge_point,
    cases=[(g.peak(p), g.hbm_bandwidth) for g in GPUS.values() for p in ("fp32", "fp16")
           if p in g.flops] + [(1.2e11, 2.3e10), (5e9, 5e9)],
    call=lambda peak, bw: f"ridge_point({peak:.3g}, {bw:.3g})",
    shortcuts=[
        (equals(lambda peak, bw: bw / peak),
         "that is bytes per FLOP; the ridge point is FLOP per byte: peak / bandwidth."),
        (scaled(ridge_point, 8, 1 / 8),
         "no factor 8: the bandwidth is in bytes per second, not bits."),
        (scaled(ridge_point, *(1000.0 ** k for k in (-4, -3, -2, -1, 1, 2, 3, 4))),
         "off by a power of 1000: peak is in FLOP/s and bandwidth in bytes/s, both in base "
         "units; convert neither to giga or tera.")],
    hint="the ridge point is peak / bandwidth, in FLOP per byte (Williams, Waterman & "
         "Patterson, CACM 2009).")


@exercise("1.4", "a roofline bound", reference=roofline_bound, binds="roofline_bound")
def _(answer):
    h100, a100 = GPUS["H100"], GPUS["A100"]
    fp32, bw = h100.peak("fp32"), h100.hbm_bandwidth
    cases = [(fp32, bw, 16500, 24928), (fp32, bw, 2 * 4096 ** 3, 3 * 4 * 4096 ** 2),
             (1.5e11, 2.3e10, 1e9, 1e7), (1.5e11, 2.3e10, 1e6, 1e6),
             (h100.peak("bf16"), bw, 1e12, 1e9),
             (a100.peak("fp32"), a100.hbm_bandwidth, 3e6, 1e6)]
    for peak, bw, f, q in cases:
        got = answer(peak, bw, f, q)
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("return a pair (seconds, 'memory-bound' or 'compute-bound').")
        t, kind = got
        want_t, want_kind = roofline_bound(peak, bw, f, q)
        if _same(t, f / peak + q / bw) and not _same(t, want_t):
            raise Wrong("compute and memory traffic overlap: the bound is the larger of "
                        "F/peak and Q/bandwidth, not their sum.")
        if _same(t, f / peak) and not _same(t, want_t):
            raise Wrong(f"F={f:.3g}, Q={q:.3g}: you used F/peak only; this kernel is "
                        f"memory-bound, so Q/bandwidth is the larger time.")
        if not np.isclose(t, want_t, rtol=1e-9, atol=0):
            raise Wrong(f"peak={peak:.3g}, bw={bw:.3g}, F={f:.3g}, Q={q:.3g}: time {t:.4g} s, "
                        f"expected {want_t:.4g} s = max(F/peak, Q/bandwidth).")
        if kind != want_kind:
            raise Wrong(f"intensity {f / q:.3g} FLOP/byte against ridge {peak / bw:.3g}: "
                        f"that is {want_kind}, not {kind!r}.")


formula_exercise(
    "1.5", "Little's law: loads in flight", loads_in_flight,
    cases=[(500e-9, GPUS["H100"].hbm_bandwidth, 4), (500e-9, GPUS["H200"].hbm_bandwidth, 16),
           (80e-9, 2.3e10, 8), (1e-6, 1e9, 1)],
    call=lambda lat, bw, b: f"loads_in_flight({lat:g}, {bw:.3g}, {b})",
    shortcuts=[
        (equals(lambda lat, bw, b: bytes_in_flight(lat, bw)),
         "that is bytes in flight; divide by the bytes each load brings."),
        (equals(lambda lat, bw, b: bw / lat / b, lambda lat, bw, b: lat / bw / b),
         "Little's law multiplies: in flight = latency × throughput."),
        (scaled(loads_in_flight, 8, 1 / 8),
         "no factor 8: the bandwidth is in bytes per second and each load brings "
         "bytes_per_load bytes.")],
    hint="Little's law (Little 1961): bytes in flight = latency × bandwidth, and each load "
         "brings bytes_per_load of them.")
