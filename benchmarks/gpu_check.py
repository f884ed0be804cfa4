"""Check and time labkit's kernels on a real CUDA GPU (prints a report; exits 0 without one).

    .venv/bin/python benchmarks/gpu_check.py [--quick]

1. Every kernel of ``labkit.kernels.library`` runs compiled by ``numba.cuda`` on the GPU
   and is compared with numpy (sizes not multiples of the block), including the
   warp-shuffle reduction the simulator cannot run.
2. The tiled and register-blocked matmuls are timed against ``torch.matmul`` (FP32, TF32
   off) with CUDA events, on device-resident data (no host copies in the timing).
3. The shared-memory and warp reductions are timed on a large vector; their bandwidth is
   set against the data-sheet peak of the matching preset (A100/H100/H200) if any.

Exit status: 0 when every check passes or there is no GPU; 1 when a check fails.
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np

import labkit  # selects the real GPU or the simulator before numba is imported


def _device_name() -> str:
    from numba import cuda
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def _preset_for(name: str):
    from labkit.kernels.roofline import PRESETS
    for key in ("H200", "H100", "A100"):
        if key in name.upper():
            return PRESETS[key]
    return None


def check_kernels(rng: np.random.Generator) -> list[str]:
    """Run every op with runner='numba' on the GPU; return the failures."""
    from labkit.kernels import library as lib
    from labkit.kernels import ops

    a1 = rng.standard_normal(1000).astype(np.float32)
    b1 = rng.random(1000).astype(np.float32)
    m = rng.standard_normal((257, 129)).astype(np.float32)
    n = rng.random((257, 129)).astype(np.float32)
    ma = rng.standard_normal((257, 131)).astype(np.float32)
    mb = rng.standard_normal((131, 97)).astype(np.float32)
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
    for variant in ("atomic", "interleaved", "strided", "shared", "warp"):
        cases[f"reduce_{variant}"] = (
            lambda v=variant: ops.reduce_sum(big, variant=v, runner="numba", block=256),
            np.array([big.astype(np.float64).sum()]), 1e-3)
    for variant, tile, rows in (("naive", 16, 1), ("coalesced", 16, 1), ("tiled", 16, 1),
                                ("tiled", 32, 1), ("register", 32, 4), ("register", 64, 4)):
        cases[f"matmul_{variant}_{tile}"] = (
            lambda v=variant, t=tile, r=rows: ops.matmul(ma, mb, variant=v, runner="numba",
                                                         tile=t, rows=r),
            ma @ mb, 1e-3)
    for variant in ops.SOFTMAXES:
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
            print(f"  {name:22s} raised {type(exc).__name__}: {exc}")
        print(f"  {name:22s} {'ok  ' if ok else 'FAIL'} max abs error {err:.2e}")
        if not ok:
            failures.append(name)
    return failures


def _time_launch(kernel, grid, block, args, repeats: int) -> float:
    """Seconds per launch, by CUDA events, after one warm-up launch."""
    from numba import cuda
    kernel[grid, block](*args)
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(repeats):
        kernel[grid, block](*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats  # milliseconds between the events


def time_matmuls(rng: np.random.Generator, size: int, repeats: int) -> None:
    from numba import cuda

    from labkit.kernels import library as lib
    from labkit.kernels.numba_run import compiled
    from labkit.kernels.ops import cdiv

    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    da, db = cuda.to_device(a), cuda.to_device(b)
    dc = cuda.device_array((size, size), dtype=np.float32)
    flops = 2.0 * size ** 3
    want = a @ b
    results = {}
    for label, fn, block, tile in (
            ("tiled 16", lib.matmul_tiled(16), (16, 16), 16),
            ("tiled 32", lib.matmul_tiled(32), (32, 32), 32),
            ("register 64x64 (4 rows/thread)", lib.matmul_register_blocked(64, 4),
             (64, 16), 64)):
        grid = (cdiv(size, tile), cdiv(size, tile))
        secs = _time_launch(compiled(fn), grid, block, (da, db, dc), repeats)
        ok = np.allclose(dc.copy_to_host(), want, rtol=1e-3, atol=1e-2)
        results[label] = secs
        print(f"  labkit {label:32s} {secs * 1e3:8.3f} ms  {flops / secs / 1e12:7.2f} TFLOP/s"
              f"  {'ok' if ok else 'WRONG RESULT'}")
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("this torch build has no CUDA")
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
            torch.backends.cuda.matmul.fp32_precision = "ieee"
        else:
            torch.backends.cuda.matmul.allow_tf32 = False
        ta = torch.from_numpy(a).cuda()
        tb = torch.from_numpy(b).cuda()
        torch.matmul(ta, tb)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            torch.matmul(ta, tb)
        end.record()
        torch.cuda.synchronize()
        secs = start.elapsed_time(end) / 1e3 / repeats
        print(f"  torch.matmul fp32 (TF32 off)            {secs * 1e3:8.3f} ms  "
              f"{flops / secs / 1e12:7.2f} TFLOP/s")
        for label, mine in results.items():
            print(f"  labkit {label} / torch time: {mine / secs:.1f}x slower")
    except Exception as exc:  # torch missing or CPU-only: the labkit numbers still stand
        print(f"  torch.matmul not timed: {exc}")


def time_reductions(rng: np.random.Generator, n: int, repeats: int, preset) -> None:
    from numba import cuda

    from labkit.kernels import library as lib
    from labkit.kernels.numba_run import compiled
    from labkit.kernels.ops import cdiv

    x = rng.random(n, dtype=np.float32)
    dx = cuda.to_device(x)
    block = 256
    partial = cuda.device_array(cdiv(n, block), dtype=np.float32)
    for label, fn in (("shared tree (sequential)", lib.reduce_shared(block)),
                      ("interleaved tree", lib.reduce_interleaved(block)),
                      ("warp shuffles", lib.reduce_warp(block))):
        secs = _time_launch(compiled(fn), cdiv(n, block), block, (dx, partial), repeats)
        total = float(partial.copy_to_host().astype(np.float64).sum())
        ok = math.isclose(total, float(x.astype(np.float64).sum()), rel_tol=1e-4)
        gbs = 4.0 * n / secs / 1e9
        peak = f" = {gbs * 1e9 / preset.bandwidth:5.1%} of {preset.name} peak" if preset else ""
        print(f"  {label:26s} {secs * 1e3:8.3f} ms  {gbs:8.1f} GB/s{peak}  "
              f"{'ok' if ok else 'WRONG RESULT'}")


def main(argv: list[str]) -> int:
    if labkit.CUDA_BACKEND != "gpu":
        print("gpu_check: no CUDA GPU here (labkit selected Numba's simulator); nothing to "
              "check. Run this script on a machine with an NVIDIA GPU.")
        return 0
    quick = "--quick" in argv
    rng = np.random.default_rng(0)
    name = _device_name()
    preset = _preset_for(name)
    print(f"device: {name}; data-sheet preset: {preset.name if preset else 'none'}")
    t0 = time.perf_counter()
    print("1. kernels on real CUDA vs numpy")
    failures = check_kernels(rng)
    print(f"2. matmul {1024 if quick else 4096}^3 vs torch.matmul")
    time_matmuls(rng, 1024 if quick else 4096, 3 if quick else 10)
    n = 2 ** (24 if quick else 28)
    print(f"3. reduction of {n:,} float32 ({4 * n / 2 ** 20:.0f} MiB) vs peak bandwidth")
    time_reductions(rng, n, 3 if quick else 10, preset)
    print(f"done in {time.perf_counter() - t0:.1f} s; "
          f"{'all kernels correct' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
