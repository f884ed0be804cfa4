"""Reductions: the sum of an array (chapters 04 and 05), rung by rung after M. Harris,
"Optimizing Parallel Reduction in CUDA" (NVIDIA, 2007).

* :func:`reduce_atomic`: every thread adds into ``out[0]`` atomically: n atomics on one
  address, serialized.
* :func:`reduce_interleaved`: a shared-memory tree per block, one partial sum per block
  (a second pass sums those); its active threads are scattered across warps (divergence)
  and their words collide in banks.
* :func:`reduce_strided`: active threads contiguous (no divergence), bank conflicts left.
* :func:`reduce_shared`: sequential addressing: contiguous threads, consecutive words (no
  conflict).
* :func:`reduce_warp`: warp shuffles replace the tree inside a warp; one shared word per
  warp.
* :func:`reduce_fast`: built to run at memory bandwidth: a grid-stride loop with
  ``unroll`` accumulators, shuffles, and one atomic per block: a single launch.

Notes. :func:`reduce_fast` on sm_90 at (256, 4) (``benchmarks/ptx_report.py --only
reduce_fast``): with the block index and grid size masked the grid-stride loop is 26
instructions for 4 loads, 6.5 per element (54, 13.5 per element, unmasked: numba's
negative-index wrap-around cost 4 integer instructions per load), all loads issued before
the first add; at ``unroll=8`` 46 for 8, 5.75 per element. The tail loop (fewer than
``unroll`` trips per thread) keeps the wrap-around: the compiler cannot bound ``i`` after
the loop.

Two steps are device functions that kernels call
(:func:`~labkit.kernels.library.sizes.device`): :func:`warp_sum`, the shuffles that add a
warp's 32 values (:func:`reduce_warp` and twice :func:`reduce_fast`), and
:func:`sequential_tree`, the shared-memory tree of any associative operator (the row
softmax's max and sum). Inlined, they compile to the SASS the kernels had with the loops
written out (``benchmarks/ptx_report.py``: the same instructions).
"""
from __future__ import annotations

from functools import lru_cache

from labkit.kernels.library.sizes import GRID_MASK, _check_pow2, device, named


def sequential_tree(cuda, block: int, combine):
    """Device function ``tree(buf, t)``: ``buf[0] = combine(buf[0], ..., buf[block - 1])``
    by the sequential tree (Harris's reduction #3): at step s = block/2, block/4, ..., 1
    the threads t < s set ``buf[t] = combine(buf[t], buf[t + s])``, a barrier after each
    step. ``combine`` is associative, a function numba compiles in a kernel (``max``,
    ``operator.add``): the tree regroups its terms. Every thread of the block calls
    ``tree`` after the barrier that follows its write of ``buf[t]``:
    :func:`~labkit.kernels.library.softmax.softmax_rows_block` does, for the row's max and
    then its sum. :func:`reduce_shared` writes this tree out for ``+``: it is exercise
    5.1's reference, the kernel a learner writes whole, and the checks' tests state the
    learner's mistakes as one-line changes of its source."""
    @device(cuda)
    def tree(buf, t):
        s = block // 2
        while s > 0:
            if t < s:
                buf[t] = combine(buf[t], buf[t + s])
            cuda.syncthreads()
            s //= 2
    return tree


def warp_sum(cuda):
    """Device function ``total(v)``: the sum of ``v`` over the 32 lanes of a warp, in lane
    0, by ``shfl_down_sync`` in 5 steps (offsets 16, 8, 4, 2, 1: lane L adds the value of
    lane L + offset, no shared memory). Every lane of the warp calls it: a shuffle reads
    the other lanes' registers."""
    @device(cuda)
    def total(v):
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        return v
    return total


def reduce_atomic(cuda):
    """out[0] += a[i] by every thread: n atomics, all on one address (serialized)."""
    def kernel(a, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < a.size:
            cuda.atomic.add(out, 0, a[i])
    return kernel


@lru_cache(maxsize=None)
def reduce_interleaved(block: int = 64):
    """Shared-memory tree, interleaved addressing (Harris's reduction #1/#2 shape).

    At step s thread t with t % (2s) == 0 adds buf[t + s]: active lanes are scattered
    across warps (divergence) and the strided words collide in banks.
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(block, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            s = 1
            while s < block:
                if t % (2 * s) == 0:
                    buf[t] += buf[t + s]
                cuda.syncthreads()
                s *= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0]
        return kernel
    return named(factory, f"reduce_interleaved_{block}")


@lru_cache(maxsize=None)
def reduce_strided(block: int = 64):
    """Shared-memory tree, strided index (Harris's reduction #2): thread t adds
    buf[2 s t + s] into buf[2 s t]. Active threads are contiguous (no divergence) but the
    lanes' words are 2s apart: 2-way, 4-way, ... bank conflicts.
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(block, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            s = 1
            while s < block:
                idx = 2 * s * t
                if idx < block:
                    buf[idx] += buf[idx + s]
                cuda.syncthreads()
                s *= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0]
        return kernel
    return named(factory, f"reduce_strided_{block}")


@lru_cache(maxsize=None)
def reduce_shared(block: int = 64):
    """Shared-memory tree, sequential addressing (Harris's reduction #3).

    At step s (block/2, block/4, ...) threads t < s add buf[t + s]: active threads are
    contiguous (whole warps idle instead of half-idle warps) and lanes read consecutive
    words (no bank conflict). Writes one partial sum per block to out[blockIdx.x].
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(block, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            s = block // 2
            while s > 0:
                if t < s:
                    buf[t] += buf[t + s]
                cuda.syncthreads()
                s //= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0]
        return kernel
    return named(factory, f"reduce_shared_{block}")


@lru_cache(maxsize=None)
def reduce_warp(block: int = 64):
    """Warp-level reduction with ``shfl_down_sync`` (:func:`warp_sum`), then one shared
    word per warp.

    Needs warp shuffles: the tracer and a real GPU run them; Numba's simulator has none,
    and labkit's simulator proxy (:mod:`labkit.kernels.numba_run`) emulates them with block
    barriers.
    """
    _check_pow2(block, "block", 32)
    n_warps = block // 32

    def factory(cuda):
        warp_total = warp_sum(cuda)

        def kernel(a, out):
            sums = cuda.shared.array(n_warps, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            v = warp_total(a[i] if i < a.size else cuda.float32(0.0))
            if t % 32 == 0:
                sums[t // 32] = v
            cuda.syncthreads()
            if t == 0:
                total = cuda.float32(0.0)
                for w in range(n_warps):
                    total += sums[w]
                out[cuda.blockIdx.x] = total
        return kernel
    return named(factory, f"reduce_warp_{block}")

@lru_cache(maxsize=None)
def reduce_fast(block: int = 256, unroll: int = 4):
    """A reduction built to run at memory bandwidth (Harris 2007's lessons plus warp
    shuffles, which came later with Kepler: Luitjens, "Faster Parallel Reductions on
    Kepler", NVIDIA blog 2014).

    * grid-stride loop: a grid sized from the device (a few blocks per SM) walks the whole
      array, each thread summing many elements in registers; ``unroll`` independent
      accumulators keep that many loads in flight per thread;
    * consecutive threads read consecutive elements (coalesced, each element read once);
    * warp shuffles (``shfl_down_sync``, :func:`warp_sum`) reduce 32 lanes without shared
      memory, then one shared word per warp, then warp 0 reduces those;
    * one ``atomic.add`` per block into ``out[0]`` (``out`` must start at 0).

    Written for the compiler (``benchmarks/ptx_report.py --only reduce_fast``): the block
    index and the grid size are masked (:data:`~labkit.kernels.library.sizes.GRID_MASK`)
    so that the compiler proves every ``i + u * step`` >= 0 (what the SASS shows: the
    module's Notes).

    Traffic (tested against traces): n global reads, one atomic per block, ``block / 32``
    shared writes and reads per block, ``5 * (block + 32)`` shuffles per block.
    """
    _check_pow2(block, "block", 32)
    _check_pow2(unroll, "unroll", 1, 16)
    n_warps = block // 32

    def factory(cuda):
        warp_total = warp_sum(cuda)

        def kernel(a, out):
            sums = cuda.shared.array(n_warps, cuda.float32)
            t = cuda.threadIdx.x & (block - 1)      # no-op masks (blockDim is block) that
            step = block * (cuda.gridDim.x & GRID_MASK)     # prove t, step, i >= 0
            i = (cuda.blockIdx.x & GRID_MASK) * block + t
            n = a.size
            acc = cuda.local.array(unroll, cuda.float32)
            for u in range(unroll):
                acc[u] = 0.0
            while i + (unroll - 1) * step < n:       # unroll loads in flight per thread
                for u in range(unroll):
                    acc[u] += a[i + u * step]
                i += unroll * step
            while i < n:
                acc[0] += a[i]
                i += step
            v = acc[0]
            for u in range(1, unroll):
                v += acc[u]
            v = warp_total(v)
            if t % 32 == 0:
                sums[t // 32] = v
            cuda.syncthreads()
            if t < 32:
                w = warp_total(sums[t] if t < n_warps else cuda.float32(0.0))
                if t == 0:
                    cuda.atomic.add(out, 0, w)
        return kernel
    return named(factory, f"reduce_fast_{block}_{unroll}")
