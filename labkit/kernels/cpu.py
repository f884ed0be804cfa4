"""CPU counterparts compiled with ``numba.njit(parallel=True)``: the same ideas on cores.

* ``matmul_blocked``: rows split across cores (``prange`` over row blocks, like thread
  blocks), k blocked so a strip of b stays in cache (like a shared-memory tile), the
  innermost loop over j contiguous so it vectorizes (like coalescing).
* ``epilogue_fused``: y = max(x * scale + shift, 0) * gain + residual (a layer's
  bias + ReLU + scale + residual epilogue) in one pass; ``epilogue_numpy`` is the same
  chain in numpy: one temporary array and one pass over memory per operation (5 passes,
  11 array reads/writes instead of 3: :data:`EPILOGUE_ARRAY_TRAFFIC`). Fusion removes the
  temporaries' traffic.

numba is imported on first use; the first call compiles (seconds).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from labkit.timing import benchmark



@lru_cache(maxsize=None)
def _compiled():
    from numba import njit, prange  # deferred: numba

    @njit(parallel=True, fastmath=True, cache=True)   # compiled once per machine
    def matmul_blocked(a, b, c, bs):
        m, kk = a.shape
        n = b.shape[1]
        for bi in prange((m + bs - 1) // bs):
            i0 = bi * bs
            i1 = min(i0 + bs, m)
            for i in range(i0, i1):
                for j in range(n):
                    c[i, j] = 0.0
            for k0 in range(0, kk, bs):
                k1 = min(k0 + bs, kk)
                for i in range(i0, i1):
                    for k in range(k0, k1):
                        aik = a[i, k]
                        for j in range(n):
                            c[i, j] += aik * b[k, j]

    @njit(parallel=True, fastmath=True, cache=True)   # compiled once per machine
    def epilogue(x, residual, scale, shift, gain, out):
        for i in prange(x.size):
            out[i] = max(x[i] * scale + shift, np.float32(0.0)) * gain + residual[i]

    return matmul_blocked, epilogue


def matmul_blocked(a: np.ndarray, b: np.ndarray, block: int = 64) -> np.ndarray:
    """a @ b (float32) with the parallel blocked loop nest."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be 2-D with a.shape[1] == b.shape[0], got "
                         f"{a.shape} and {b.shape}")
    if not 1 <= block <= 4096:
        raise ValueError(f"block must be in [1, 4096], got {block}")
    c = np.empty((a.shape[0], b.shape[1]), dtype=np.float32)
    _compiled()[0](a, b, c, block)
    return c


def _vectors(x, residual):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    residual = np.ascontiguousarray(residual, dtype=np.float32).reshape(-1)
    if x.shape != residual.shape:
        raise ValueError(f"x and residual must have the same size, got {x.size} and "
                         f"{residual.size}")
    return x, residual


def epilogue_fused(x: np.ndarray, residual: np.ndarray, scale: float = 1.5,
                   shift: float = -0.25, gain: float = 0.5) -> np.ndarray:
    """max(x * scale + shift, 0) * gain + residual in one fused parallel pass (float32)."""
    x, residual = _vectors(x, residual)
    out = np.empty_like(x)
    _compiled()[1](x, residual, np.float32(scale), np.float32(shift), np.float32(gain), out)
    return out


# Arrays of n floats read + written: numpy's 5 passes (x*a, +b, max, *g each read 1 and
# write 1; +residual reads 2, writes 1: 6 reads, 5 writes) vs the fused pass (2 reads, 1
# write). Write-allocate caches would add a read per write; not counted here.
EPILOGUE_ARRAY_TRAFFIC = {"numpy": 6 + 5, "fused": 2 + 1}


def epilogue_numpy(x: np.ndarray, residual: np.ndarray, scale: float = 1.5,
                   shift: float = -0.25, gain: float = 0.5) -> np.ndarray:
    """The same chain unfused: numpy makes a temporary for each of the 5 operations."""
    x, residual = _vectors(x, residual)
    y = x * np.float32(scale)
    y = y + np.float32(shift)
    y = np.maximum(y, np.float32(0.0))
    y = y * np.float32(gain)
    return y + residual


# ---- measured against the baseline (chapter 05's last cell, ``make bench``) --------------

@dataclass(frozen=True)
class Comparison:
    """One CPU kernel timed against its numpy baseline on the same inputs
    (:func:`labkit.perf.benchmark` timings: ``.median``, ``.best``), and whether their
    results agreed. ``flops``: the work of one call (0 where FLOP/s mean nothing)."""
    name: str
    ours: Any                  # labkit.perf.Timing
    baseline: Any              # labkit.perf.Timing
    baseline_name: str
    agrees: bool
    flops: float = 0.0

    @property
    def ratio(self) -> float:
        """Baseline median time / ours: above 1, ours is faster."""
        return self.baseline.median / self.ours.median

    @property
    def gflops(self) -> float:
        return self.flops / self.ours.median / 1e9

    @property
    def baseline_gflops(self) -> float:
        return self.flops / self.baseline.median / 1e9


def compare_matmul(a: np.ndarray, b: np.ndarray, repeats: int = 5,
                   warmup: int = 1) -> Comparison:
    """:func:`matmul_blocked` vs numpy's ``a @ b`` (BLAS): 2 m n k FLOPs a call; agreement
    to 1e-3 absolute."""
    ours = matmul_blocked(a, b)
    agrees = bool(np.allclose(ours, np.asarray(a) @ np.asarray(b), atol=1e-3))
    return Comparison("blocked matmul (numba parallel)",
                      benchmark(lambda: matmul_blocked(a, b), repeats=repeats, warmup=warmup),
                      benchmark(lambda: a @ b, repeats=repeats, warmup=warmup),
                      "numpy matmul (BLAS)", agrees,
                      2.0 * a.shape[0] * a.shape[1] * b.shape[1])


def compare_epilogue(x: np.ndarray, residual: np.ndarray, repeats: int = 5,
                     warmup: int = 1) -> Comparison:
    """:func:`epilogue_fused` vs :func:`epilogue_numpy` (five passes with temporaries);
    agreement to 1e-6 absolute."""
    agrees = bool(np.allclose(epilogue_fused(x, residual), epilogue_numpy(x, residual),
                              atol=1e-6))
    return Comparison("bias+ReLU+scale+residual (numba parallel, fused)",
                      benchmark(lambda: epilogue_fused(x, residual), repeats=repeats,
                                warmup=warmup),
                      benchmark(lambda: epilogue_numpy(x, residual), repeats=repeats,
                                warmup=warmup),
                      "numpy unfused", agrees)
