"""``make bench`` rows for labkit.kernels' CPU counterparts (numba ``parallel=True``).

* fused bias+ReLU+scale+residual chain (one pass) vs the same chain in numpy (five passes
  with temporaries); goal >= 2x.
* numba parallel blocked matmul vs numpy matmul (BLAS); the ratio is reported as measured.

Both sides use the best of their repeats (the timeit advice: the minimum is the run least
disturbed by other processes), because this machine's cores are shared and a 2-thread
parallel loop suffers most when one of its threads is descheduled.
"""
from __future__ import annotations

import numpy as np

import labkit  # noqa: F401  (simulator selection before numba)
from labkit.kernels import cpu
from labkit.perf import Row, time_call


def rows() -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4_000_000).astype(np.float32)
    res = rng.standard_normal(x.size).astype(np.float32)
    if not np.allclose(cpu.epilogue_fused(x, res), cpu.epilogue_numpy(x, res), atol=1e-6):
        raise AssertionError("fused chain disagrees with numpy")
    fused = time_call(lambda: cpu.epilogue_fused(x, res), repeats=15, warmup=2)
    unfused = time_call(lambda: cpu.epilogue_numpy(x, res), repeats=15, warmup=2)

    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    if not np.allclose(cpu.matmul_blocked(a, b), a @ b, atol=1e-3):
        raise AssertionError("blocked matmul disagrees with numpy")
    blocked = time_call(lambda: cpu.matmul_blocked(a, b), repeats=9, warmup=2)
    blas = time_call(lambda: a @ b, repeats=9, warmup=2)
    return [
        Row("kernels: fused bias+ReLU+scale+residual, 4M float32 (numba parallel)",
            fused.best, unfused.best, "numpy unfused", goal=">= 2x"),
        Row("kernels: blocked matmul 512^3 float32 (numba parallel)", blocked.best,
            blas.best, "numpy matmul (BLAS)", goal="report"),
    ]
