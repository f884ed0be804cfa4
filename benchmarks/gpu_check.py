"""Check and time labkit's kernels on a real CUDA GPU (prints a report; exits 0 without one).

    .venv/bin/python benchmarks/gpu_check.py [--quick] [--only kernels,matmul,...]

One function per section (``SECTIONS``); each takes a :class:`Context` and returns the
names of the checks that failed, so more sections (the allocator comparison) plug in:

* ``kernels``   every kernel of ``labkit.kernels.library`` compiled by ``numba.cuda`` on
                the GPU, compared with numpy (sizes not multiples of the block; every
                variant of ``labkit.kernels.registry.KERNELS``; every matmul shape,
                ``REGISTER2D_TRIALS`` too, on full and cut tiles).
* ``timing``    how to time a GPU, with numbers: wall time including host copies, wall
                time without synchronising, and CUDA events after a warm-up.
* ``matmul``    the ladder naive -> coalesced -> tiled -> register -> 2-D register-blocked
                at 4096^3 FP32, timed with CUDA events on device-resident data, each step's
                speed-up, % of ``torch.matmul`` (cuBLAS, TF32 off) and the model's
                prediction beside each; goal: 2-D blocked >= 30 % of cuBLAS.
* ``reduction`` sums of 2^28 float32 (1 GiB): tree, warp-shuffle and the grid-stride
                ``reduce_fast`` (grid from the SM count), in GB/s and % of the data-sheet
                HBM peak; goal: reduce_fast >= 80 %.

Exit status: 0 when every check passes or there is no GPU; 1 when a check fails or, outside
``--quick``, when a goal cannot be measured (no CUDA torch for cuBLAS: ``matmul_goal_unmeasured``;
no data sheet for the board: ``reduction_goal_unmeasured``).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import labkit  # selects the real GPU or the simulator before numba is imported
# CUDA events, the device's name and its labkit.hardware key, matmul timing: one source
from labkit.kernels.timing import (device_name, event_seconds, hardware_key, time_matmul,
                                   torch_matmul_seconds)

MATMUL_GOAL = 0.30       # 2-D register-blocked / torch.matmul FP32 at 4096^3 (issue 15)
REDUCTION_GOAL = 0.80    # reduce_fast / HBM peak at 2^28 float32 (issue 15)


@dataclass
class Context:
    quick: bool
    rng: np.random.Generator
    device: str
    gpu_key: str | None                     # the labkit.hardware key, if the GPU is known
    results: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)   # overrides (a simulator smoke test uses tiny)

    def size(self, what: str, quick: int, full: int) -> int:
        return self.sizes.get(what, quick if self.quick else full)


# ---- 1. correctness -------------------------------------------------------------------------

MATMUL_SHAPES = ((257, 131), (131, 161))
"""a and b of the matmul correctness cases: c is 257 x 161 with k = 131, so every case, up
to 128 x 128 blocks and 64-wide k phases, has full tiles (its unguarded path) and cut ones
along rows, columns and k."""


def matmul_cases() -> list[tuple[str, dict]]:
    """(variant, ``ops.matmul`` keywords) of the correctness pass: each rung's
    ``checked_shapes`` in the registry (the ladder's launch shapes, ``models.LADDER_SHAPES``,
    and smaller tiles), then every :data:`REGISTER2D_TRIALS` shape (the first is
    ``ops.BLOCKED_2D``, register2d's default)."""
    from labkit.kernels.registry import KERNELS, MATMUL

    cases = [(variant, kernel.keywords(shape)) for variant, kernel in KERNELS[MATMUL].items()
             for shape in kernel.checked_shapes]
    return cases + [("register2d", dict(blocked=shape)) for shape in REGISTER2D_TRIALS]


def section_kernels(ctx: Context) -> list[str]:
    """Run every op with runner='numba' on the GPU; return the failures."""
    from labkit.kernels import library as lib
    from labkit.kernels import ops
    from labkit.kernels.registry import KERNELS, REDUCTION, SOFTMAX, TRANSPOSE

    rng = ctx.rng
    a1 = rng.standard_normal(1000).astype(np.float32)
    b1 = rng.random(1000).astype(np.float32)
    m = rng.standard_normal((257, 129)).astype(np.float32)
    n = rng.random((257, 129)).astype(np.float32)
    ma = rng.standard_normal(MATMUL_SHAPES[0]).astype(np.float32)
    mb = rng.standard_normal(MATMUL_SHAPES[1]).astype(np.float32)
    sx = (rng.standard_normal((67, 300)) * 3).astype(np.float32)
    big = (rng.standard_normal(100_003) + 0.1).astype(np.float32)
    e = np.exp(sx - sx.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    w = rng.standard_normal(5).astype(np.float32)

    cases = {
        "vector_add": (lambda: ops.add(a1, b1, runner="numba", block=128), a1 + b1, 1e-6),
        "add_ten": (lambda: ops.elementwise(lib.add_ten, a1, runner="numba"), a1 + 10, 1e-6),
        "branchy": (lambda: ops.elementwise(lib.branchy, a1, runner="numba"),
                    np.where(np.arange(1000) % 2 == 0, a1 * 2, a1 + 1), 1e-6),
        "add_2d": (lambda: ops.add_matrices(m, n, runner="numba"), m + n, 1e-6),
        "add_2d_transposed": (lambda: ops.add_matrices(m, n, transposed=True,
                                                       runner="numba"), m + n, 1e-6),
        "broadcast_add": (lambda: ops.broadcast(a1[:77], b1[:301], runner="numba"),
                          a1[:77, None] + b1[None, :301], 1e-6),
        "conv1d_shared": (lambda: ops.conv1d(a1, w, runner="numba", block=64),
                          np.convolve(a1, w[::-1], "same"), 1e-4),
        "conv1d_naive": (lambda: ops.conv1d(a1, w, shared=False, runner="numba"),
                         np.convolve(a1, w[::-1], "same"), 1e-4),
        "prefix_sum": (lambda: ops.prefix_sum(a1, runner="numba", block=128), np.cumsum(a1),
                       1e-3),
    }
    for variant in KERNELS[TRANSPOSE]:
        cases[f"transpose_{variant}"] = (
            lambda v=variant: ops.transpose(m, variant=v, runner="numba"), m.T, 0.0)
    for variant in KERNELS[REDUCTION]:
        cases[f"reduce_{variant}"] = (
            lambda v=variant: ops.reduce_sum(big, variant=v, runner="numba", block=256),
            np.array([big.astype(np.float64).sum()]), 1e-3)
    for variant, kw in matmul_cases():
        label = f"matmul_{variant}_" + "_".join(str(v) for v in kw.get("blocked", kw).values())
        cases[label] = (lambda v=variant, k=kw: ops.matmul(ma, mb, variant=v, runner="numba",
                                                           **k), ma @ mb, 1e-3)
    for variant in KERNELS[SOFTMAX]:
        cases[f"softmax_{variant}"] = (
            lambda v=variant: ops.softmax(sx, variant=v, runner="numba", block=64), soft, 1e-5)

    failures = []
    for name, (run, want, tol) in cases.items():
        try:
            got = run().value
            ok = np.allclose(got, want, rtol=tol, atol=tol)
            err = float(np.max(np.abs(got.astype(np.float64) - want)))
        except Exception as exc:  # report and go on
            ok, err = False, float("nan")
            print(f"  {name:30s} raised {type(exc).__name__}: {exc}")
        print(f"  {name:30s} {'ok  ' if ok else 'FAIL'} max abs error {err:.2e}")
        if not ok:
            failures.append(name)
    return failures


# ---- 2. how to time a GPU ----------------------------------------------------------------

def section_timing(ctx: Context) -> list[str]:
    """The same tiled matmul timed three ways (the numbers chapter 05's text quotes)."""
    from numba import cuda

    from labkit.kernels import ops
    from labkit.kernels.numba_run import compiled

    size = ctx.size("timing", 1024, 2048)
    a = ctx.rng.standard_normal((size, size)).astype(np.float32)
    flops = 2.0 * size ** 3
    grid, block, fn = ops.matmul_launch("tiled", size, size, tile=32)
    kernel = compiled(fn)
    da, db = cuda.to_device(a), cuda.to_device(a)
    dc = cuda.device_array((size, size), dtype=np.float32)

    t0 = time.perf_counter()
    ops.matmul(a, a, variant="tiled", tile=32, runner="numba")     # first call: compiles
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    ops.matmul(a, a, variant="tiled", tile=32, runner="numba")     # copies in and out
    with_copies = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernel[grid, block](da, db, dc)                                # returns before it ends
    no_sync = time.perf_counter() - t0
    cuda.synchronize()
    events = event_seconds(lambda: kernel[grid, block](da, db, dc), 5)
    ctx.results["timing"] = dict(first=first, with_copies=with_copies, no_sync=no_sync,
                                 events=events)
    print(f"  tiled 32 matmul {size}^3:")
    print(f"    first call (compiles + copies)    {first * 1e3:9.2f} ms")
    print(f"    wall time incl. host<->device copies {with_copies * 1e3:6.2f} ms")
    print(f"    wall time, no synchronize         {no_sync * 1e3:9.3f} ms  (launch only)")
    print(f"    CUDA events after warm-up         {events * 1e3:9.3f} ms  "
          f"= {flops / events / 1e12:.2f} TFLOP/s")
    return []


# ---- 3. the matmul ladder ----------------------------------------------------------------

REGISTER2D_TRIALS = (      # more 2-D tile shapes, checked and timed after the ladder
    dict(bm=64, bn=64, bk=8, tm=4, tn=4),       # 48   registers (ptxas 13.x sm_90,
    dict(bm=128, bn=64, bk=8, tm=8, tn=4),      # 72   benchmarks/ptx_report.py --blocked)
    dict(bm=128, bn=128, bk=4, tm=8, tn=8),     # 111  (capped at 128: library.REGISTER_BUDGET_2D)
)


def _registers(kernel) -> str:
    """Registers and local memory per thread of a compiled numba kernel (one signature):
    above 128 registers a 256-thread block leaves room for one block per SM, not two."""
    try:
        regs, local = kernel.get_regs_per_thread(), kernel.get_local_mem_per_thread()
        regs = max(regs.values()) if isinstance(regs, dict) else regs
        local = max(local.values()) if isinstance(local, dict) else local
        return f"{regs:3d} regs {local:3d} B local"
    except Exception as exc:  # an older numba-cuda: the timing still stands
        return f"registers unknown ({type(exc).__name__})"


def section_matmul(ctx: Context) -> list[str]:
    """The ladder at its launch shapes (``models.LADDER_SHAPES``), then more 2-D tiles."""
    from numba import cuda

    from labkit.kernels.models import LADDER, LADDER_GPUS, predict_matmul

    size = ctx.size("matmul", 1024, 4096)
    repeats = ctx.size("repeats", 3, 5)
    a = ctx.rng.standard_normal((size, size)).astype(np.float32)
    want = a.astype(np.float64) @ a.astype(np.float64)
    flops = 2.0 * size ** 3
    da, db = cuda.to_device(a), cuda.to_device(a)
    dc = cuda.device_array((size, size), dtype=np.float32)
    failures, seconds = [], {}
    previous = None
    for variant in LADDER:
        # time_matmul fills c with NaN first: a kernel that skips an output cannot pass
        run = time_matmul(variant, da, db, dc, want, repeats)
        secs = seconds[variant] = run.seconds
        step = f"  x{previous / secs:5.2f} vs previous" if previous else " " * 22
        pred = (f"  model {predict_matmul(size, variant, ctx.gpu_key).tflops:6.2f}"
                if ctx.gpu_key in LADDER_GPUS else "")
        print(f"  {variant:11s} {secs * 1e3:9.3f} ms {run.tflops:7.2f} TFLOP/s"
              f"{step}{pred}  {'ok' if run.correct else 'WRONG RESULT'}  "
              f"{_registers(run.kernel)}")
        previous = secs
        if not run.correct:
            failures.append(f"matmul_{variant}")
    for shape in REGISTER2D_TRIALS:
        label = "register2d " + ",".join(str(v) for v in shape.values())
        run = time_matmul("register2d", da, db, dc, want, repeats, shape)
        seconds[label] = run.seconds
        print(f"  {label:24s} {run.seconds * 1e3:9.3f} ms {run.tflops:7.2f} TFLOP/s  "
              f"{'ok' if run.correct else 'WRONG RESULT'}  {_registers(run.kernel)}")
        if not run.correct:
            failures.append(f"matmul_{label.replace(' ', '_')}")
    ctx.results["matmul"] = {v: flops / s / 1e12 for v, s in seconds.items()}
    try:
        ref = torch_matmul_seconds(a, repeats)
    except Exception as exc:  # torch missing or CPU-only: the labkit numbers still stand
        print(f"  torch.matmul not timed: {exc}")
        if not ctx.quick:      # issue 15's goal needs the cuBLAS time: never a silent pass
            print(f"  GOAL NOT MEASURED: register2d vs cuBLAS (goal {MATMUL_GOAL:.0%}) "
                  f"needs torch.matmul on the GPU")
            failures.append("matmul_goal_unmeasured")
        return failures
    print(f"  torch.matmul FP32, TF32 off (cuBLAS) {ref * 1e3:9.3f} ms "
          f"{flops / ref / 1e12:7.2f} TFLOP/s")
    for variant, secs in seconds.items():
        print(f"    {variant:24s} = {ref / secs:6.1%} of cuBLAS")
    share = ref / seconds["register2d"]
    ctx.results["matmul_vs_cublas"] = share
    if not ctx.quick and share < MATMUL_GOAL:
        print(f"  GOAL MISSED: register2d at {share:.1%} of cuBLAS (goal {MATMUL_GOAL:.0%})")
        failures.append("matmul_goal")
    return failures


# ---- 4. reductions -------------------------------------------------------------------------

def section_reduction(ctx: Context) -> list[str]:
    from numba import cuda

    from labkit import hardware
    from labkit.kernels import library as lib
    from labkit.kernels.numba_run import compiled
    from labkit.kernels.ops import cdiv, fast_reduction_blocks

    n = ctx.size("reduction", 2 ** 24, 2 ** 28)
    repeats = ctx.size("repeats", 3, 10)
    x = ctx.rng.random(n, dtype=np.float32)
    exact = float(x.astype(np.float64).sum())
    dx = cuda.to_device(x)
    peak = hardware.gpu(ctx.gpu_key).hbm_bandwidth if ctx.gpu_key else None
    block = ctx.size("block", 256, 256)
    partial = cuda.device_array(cdiv(n, block), dtype=np.float32)
    failures = []

    def report(label, secs, total):
        ok = math.isclose(total, exact, rel_tol=1e-4)
        gbs = 4.0 * n / secs / 1e9
        share = f" = {gbs * 1e9 / peak:6.1%} of HBM peak" if peak else ""
        print(f"  {label:34s} {secs * 1e3:8.3f} ms {gbs:8.1f} GB/s{share}  "
              f"{'ok' if ok else 'WRONG RESULT'}")
        if not ok:
            failures.append(label)
        return gbs * 1e9

    for label, fn in (("tree, sequential (1st pass)", lib.reduce_shared(block)),
                      ("warp shuffles (1st pass)", lib.reduce_warp(block))):
        kernel = compiled(fn)
        secs = event_seconds(lambda: kernel[cdiv(n, block), block](dx, partial), repeats)
        report(label, secs, float(partial.copy_to_host().astype(np.float64).sum()))
    sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)
    best = 0.0
    for per_sm in (2, 4, 8):
        blocks = fast_reduction_blocks(n, block, "numba", per_sm=per_sm)
        kernel = compiled(lib.reduce_fast(block))
        out = cuda.device_array(1, dtype=np.float32)
        secs = event_seconds(lambda: kernel[blocks, block](dx, out), repeats)
        out.copy_to_device(np.zeros(1, np.float32))             # one clean run for the value
        kernel[blocks, block](dx, out)
        cuda.synchronize()
        bw = report(f"reduce_fast, {blocks} blocks ({per_sm}/SM x {sms})", secs,
                    float(out.copy_to_host()[0]))
        best = max(best, bw)
    if peak:
        ctx.results["reduction_vs_peak"] = best / peak
        if not ctx.quick and best / peak < REDUCTION_GOAL:
            print(f"  GOAL MISSED: reduce_fast at {best / peak:.1%} of HBM peak "
                  f"(goal {REDUCTION_GOAL:.0%})")
            failures.append("reduction_goal")
    elif not ctx.quick:        # issue 15's goal needs the board's data-sheet HBM peak
        print(f"  GOAL NOT MEASURED: reduce_fast vs HBM peak (goal {REDUCTION_GOAL:.0%}) "
              f"needs a data sheet for {ctx.device!r} (labkit.hardware)")
        failures.append("reduction_goal_unmeasured")
    return failures


def section_allocator(ctx: Context) -> list[str]:
    """labkit's caching allocator vs torch.cuda's, op by op, under every
    PYTORCH_CUDA_ALLOC_CONF setting (each in its own process)."""
    from labkit.memory.fidelity import report

    try:
        import torch  # noqa: F401
    except ImportError:
        print("  torch is not importable: allocator comparison skipped")
        return ["allocator_no_torch"]
    results = report(seed=0, n=150 if ctx.quick else 300)
    ctx.results["allocator_equal"] = sum(r.equal for r in results) / len(results)
    return [f"allocator[{r.conf or 'default'}]" for r in results if not r.equal]


SECTIONS: dict[str, Callable[[Context], list[str]]] = {
    "kernels": section_kernels,
    "timing": section_timing,
    "matmul": section_matmul,
    "reduction": section_reduction,
    "allocator": section_allocator,
}


def main(argv: list[str]) -> int:
    from labkit.hardware import GPUS

    if labkit.CUDA_BACKEND != "gpu":
        print("gpu_check: no CUDA GPU here (labkit selected Numba's simulator); nothing to "
              "check. Run this script on a machine with an NVIDIA GPU.")
        return 0
    only = list(SECTIONS)
    if "--only" in argv:
        only = argv[argv.index("--only") + 1].split(",")
        unknown = sorted(set(only) - set(SECTIONS))
        if unknown:
            print(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
            return 2
    name = device_name()
    ctx = Context("--quick" in argv, np.random.default_rng(0), name, hardware_key(name))
    sheet = GPUS[ctx.gpu_key].name if ctx.gpu_key else "none (unknown board)"
    print(f"device: {name}; data sheet: {sheet}")
    t0 = time.perf_counter()
    failures = []
    for k, section in enumerate(only, 1):
        print(f"{k}. {section}")
        failures += SECTIONS[section](ctx)
    print(f"done in {time.perf_counter() - t0:.1f} s; "
          f"{'all checks passed' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
