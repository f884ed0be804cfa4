"""``make bench`` rows for labkit.kernels' CPU counterparts (numba ``parallel=True``).

* fused bias+ReLU+scale+residual chain (one pass) vs the same chain in numpy (five passes
  with temporaries); goal >= 2x.
* numba parallel blocked matmul vs numpy matmul (BLAS); the ratio is reported as measured.
* on a CUDA GPU only: the 2-D register-blocked matmul at 4096^3 FP32 vs ``torch.matmul``
  (cuBLAS, TF32 off), goal ``gpu_check.MATMUL_GOAL``; ``reduce_fast`` on 2^28 float32 vs
  the time the data-sheet HBM bandwidth allows, goal ``gpu_check.REDUCTION_GOAL`` (both
  timed with CUDA events, as ``gpu_check.py`` times them).

Both sides use the best of their repeats (the timeit advice: the minimum is the run least
disturbed by other processes), because this machine's cores are shared and a 2-thread
parallel loop suffers most when one of its threads is descheduled.
"""
from __future__ import annotations

import math

import numpy as np

import labkit  # noqa: F401  (simulator selection before numba)
from labkit.kernels import cpu
from labkit.perf import Row


def rows() -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4_000_000).astype(np.float32)
    res = rng.standard_normal(x.size).astype(np.float32)
    fused = cpu.compare_epilogue(x, res, repeats=15, warmup=2)
    if not fused.agrees:
        raise AssertionError("fused chain disagrees with numpy")

    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    blocked = cpu.compare_matmul(a, b, repeats=9, warmup=2)
    if not blocked.agrees:
        raise AssertionError("blocked matmul disagrees with numpy")
    return [*_gpu_rows(rng),
        Row("kernels: fused bias+ReLU+scale+residual, 4M float32 (numba parallel)",
            fused.ours.best, fused.baseline.best, fused.baseline_name, goal=">= 2x"),
        Row("kernels: blocked matmul 512^3 float32 (numba parallel)", blocked.ours.best,
            blocked.baseline.best, blocked.baseline_name, goal="report"),
    ]


def _gpu_rows(rng: np.random.Generator) -> list[Row]:
    """The issue-15 rows, on a real GPU only (none under the simulator): gpu_check's
    measurements (``time_matmul`` at the ladder's shape, NaN-filled and checked; the goals
    ``gpu_check.MATMUL_GOAL`` and ``REDUCTION_GOAL``)."""
    if labkit.CUDA_BACKEND != "gpu":
        return []
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_check
    from numba import cuda

    from labkit.kernels import library as lib
    from labkit.kernels import ops
    from labkit.kernels.models import predict_reduction
    from labkit.kernels.numba_run import compiled
    from labkit.kernels.timing import (device_name, event_seconds, hardware_key, time_matmul,
                                       torch_matmul_seconds)

    key = hardware_key(device_name())
    rows = []
    n = 4096
    a = rng.standard_normal((n, n)).astype(np.float32)
    da, dc = cuda.to_device(a), cuda.device_array((n, n), dtype=np.float32)
    want = a.astype(np.float64) @ a.astype(np.float64)
    run = time_matmul("register2d", da, da, dc, want, 5)      # models.LADDER_SHAPES
    label = "kernels: 2-D register-blocked matmul 4096^3 FP32 (GPU)"
    if not run.correct:
        label += " WRONG RESULT"
    try:
        ref = torch_matmul_seconds(a, 5)
        rows.append(Row(label, run.seconds, ref, "torch.matmul (cuBLAS, TF32 off)",
                        goal=f">= {gpu_check.MATMUL_GOAL:g}x"))
    except (ImportError, RuntimeError):  # no (CUDA) torch: report the kernel alone
        rows.append(Row(label, run.seconds))
    if key is not None:
        size = 2 ** 28
        x = cuda.to_device(rng.random(size, dtype=np.float32))
        out = cuda.device_array(1, dtype=np.float32)
        blocks = ops.fast_reduction_blocks(size, 256, "numba")
        red = compiled(lib.reduce_fast(256))
        secs = event_seconds(lambda: red[blocks, 256](x, out), 10)
        out.copy_to_device(np.zeros(1, np.float32))              # one checked run
        red[blocks, 256](x, out)
        cuda.synchronize()
        want = float(x.copy_to_host().astype(np.float64).sum())
        label = "kernels: reduce_fast 2^28 float32 (GPU)"
        if not math.isclose(float(out.copy_to_host()[0]), want, rel_tol=1e-4):
            label += " WRONG RESULT"
        rows.append(Row(label, secs, predict_reduction(size, key),
                        f"{key} HBM peak (data sheet)",
                        goal=f">= {gpu_check.REDUCTION_GOAL:g}x"))
    return rows
