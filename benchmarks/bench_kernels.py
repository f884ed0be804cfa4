"""``make bench`` rows for labkit.kernels' CPU counterparts (numba ``parallel=True``).

* fused bias+ReLU+scale+residual chain (one pass) vs the same chain in numpy (five passes
  with temporaries); goal >= 2x.
* numba parallel blocked matmul vs numpy matmul (BLAS); the ratio is reported as measured.
* on a CUDA GPU only: the 2-D register-blocked matmul at 4096^3 FP32 vs ``torch.matmul``
  (cuBLAS, TF32 off), goal >= 0.3x; ``reduce_fast`` on 2^28 float32 vs the time the
  data-sheet HBM bandwidth allows, goal >= 0.8x (both timed with CUDA events, see
  ``gpu_check.py``).

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
    return [*_gpu_rows(rng),
        Row("kernels: fused bias+ReLU+scale+residual, 4M float32 (numba parallel)",
            fused.best, unfused.best, "numpy unfused", goal=">= 2x"),
        Row("kernels: blocked matmul 512^3 float32 (numba parallel)", blocked.best,
            blas.best, "numpy matmul (BLAS)", goal="report"),
    ]


def _gpu_rows(rng: np.random.Generator) -> list[Row]:
    """The issue-15 rows, on a real GPU only (none under the simulator)."""
    if labkit.CUDA_BACKEND != "gpu":
        return []
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_check
    from numba import cuda

    from labkit import hardware
    from labkit.kernels import library as lib
    from labkit.kernels import ops
    from labkit.kernels.numba_run import compiled
    from labkit.kernels.timing import device_name, event_seconds, hardware_key

    key = hardware_key(device_name())
    rows = []
    n = 4096
    a = rng.standard_normal((n, n)).astype(np.float32)
    grid, block, fn = ops.matmul_launch("register2d", n, n,
                                        blocked=dict(bm=128, bn=128, bk=8, tm=8, tn=8))
    kernel = compiled(fn)
    da, dc = cuda.to_device(a), cuda.device_array((n, n), dtype=np.float32)
    mine = event_seconds(lambda: kernel[grid, block](da, da, dc), 5)
    try:
        ref = gpu_check._torch_matmul_seconds(a, 5)
        rows.append(Row("kernels: 2-D register-blocked matmul 4096^3 FP32 (GPU)", mine, ref,
                        "torch.matmul (cuBLAS, TF32 off)", goal=">= 0.3x"))
    except Exception:  # no CUDA torch: report the kernel alone
        rows.append(Row("kernels: 2-D register-blocked matmul 4096^3 FP32 (GPU)", mine))
    if key is not None:
        size = 2 ** 28
        x = cuda.to_device(rng.random(size, dtype=np.float32))
        out = cuda.device_array(1, dtype=np.float32)
        blocks = ops.fast_reduction_blocks(size, 256, "numba")
        red = compiled(lib.reduce_fast(256))
        secs = event_seconds(lambda: red[blocks, 256](x, out), 10)
        rows.append(Row("kernels: reduce_fast 2^28 float32 (GPU)", secs,
                        4.0 * size / hardware.gpu(key).hbm_bandwidth,
                        f"{key} HBM peak (data sheet)", goal=">= 0.8x"))
    return rows
