"""Histograms: many threads updating few counters (chapter 04).

* :func:`histogram_global`: one global atomic per element; the updates of a popular bin
  wait for one another in L2.
* :func:`histogram_shared` adds privatization: each block counts into its own copy of the
  bins in shared memory, then adds it into the global counts with one atomic per bin.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels.library.sizes import _check_pow2, named


def histogram_global(cuda):
    """bins[a[i]] += 1 by one global atomic per element (grid-stride loop): every update
    of a popular bin waits for the one before it, in L2."""
    def kernel(a, bins):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        step = cuda.gridDim.x * cuda.blockDim.x
        while i < a.size:
            cuda.atomic.add(bins, a[i], 1)
            i += step
    return kernel


@lru_cache(maxsize=None)
def histogram_shared(bins: int = 16):
    """A histogram privatized in shared memory (Kirk & Hwu, *Programming Massively Parallel
    Processors*, 4th ed., ch. 9 "Parallel histogram", privatization): each block counts
    its grid-stride share of ``a`` into a shared copy of the ``bins`` counters with shared
    atomics, then adds its copy into the global ``counts`` with one global atomic per bin:
    ``blocks x bins`` global atomics instead of one per element. ``counts`` must start at
    0 and the block must have at least ``bins`` threads. The two barriers order the
    zeroing before the first update and the last update before the copy out."""
    _check_pow2(bins, "bins", 1, MAX_THREADS_PER_BLOCK)

    def factory(cuda):
        def kernel(a, counts):
            hist = cuda.shared.array(bins, cuda.int32)
            t = cuda.threadIdx.x
            if t < bins:
                hist[t] = 0
            cuda.syncthreads()
            i = cuda.blockIdx.x * cuda.blockDim.x + t
            step = cuda.gridDim.x * cuda.blockDim.x
            while i < a.size:
                cuda.atomic.add(hist, a[i], 1)
                i += step
            cuda.syncthreads()
            if t < bins:
                cuda.atomic.add(counts, t, hist[t])
        return kernel
    return named(factory, f"histogram_shared_{bins}")
