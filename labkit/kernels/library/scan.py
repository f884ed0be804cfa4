"""Prefix sums (chapter 05).

* :func:`scan_block`: the inclusive scan of each block's slice in shared memory (Hillis &
  Steele 1986, double-buffered: log2(block) steps), and each block's total.
* :func:`add_block_offsets`: the last phase of a multi-block scan: add to every element the
  scanned totals of the blocks before its own.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.kernels.library.sizes import _check_pow2, named


@lru_cache(maxsize=None)
def scan_block(block: int = 64):
    """Inclusive scan of each block's slice (Hillis & Steele 1986, double-buffered).

    out[i] = a[start] + ... + a[i] within the block; sums[blockIdx.x] = the block total.
    log2(block) steps; step d adds the element 2^d to the left.
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
        def kernel(a, out, sums):
            buf = cuda.shared.array((2, block), cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            buf[0, t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            src = 0
            d = 1
            while d < block:
                v = buf[src, t]
                if t >= d:
                    v += buf[src, t - d]
                buf[1 - src, t] = v
                cuda.syncthreads()
                src = 1 - src
                d *= 2
            if i < out.size:
                out[i] = buf[src, t]
            if t == block - 1:
                sums[cuda.blockIdx.x] = buf[src, t]
        return kernel
    return named(factory, f"scan_block_{block}")


def add_block_offsets(cuda):
    """out[i] += offsets[block of i]: the last phase of a multi-block scan."""
    def kernel(out, offsets, block):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            b = i // block
            if b > 0:
                out[i] += offsets[b - 1]
    return kernel
