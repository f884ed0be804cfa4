"""Row softmax, out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)) (chapter 05).

* :func:`softmax_rows_naive`: one thread per row, three passes (max, sum, write): 3 reads
  per element, a warp's reads 32 rows apart.
* :func:`softmax_rows_online`: the online softmax (Milakov & Gimelshein 2018): one pass
  keeps the running max and sum: 2 reads per element.
* :func:`softmax_rows_block`: one block per row, threads striding over the columns
  (coalesced), shared-memory trees for the max and the sum.
* :func:`softmax_rows_warp`: one warp per row, the online softmax per lane, the lanes'
  (max, sum) pairs combined with shuffles: coalesced, 2 reads per element, no shared
  memory.
"""
from __future__ import annotations

import math
import operator
from functools import lru_cache

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels.library.reductions import sequential_tree
from labkit.kernels.library.sizes import _check_pow2, named


def softmax_rows_naive(cuda):
    """One thread per row, three passes: max, sum of exp, write (3 reads per element)."""
    def kernel(x, out):
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r < x.shape[0]:
            m = x[r, 0]
            for c in range(1, x.shape[1]):
                m = max(m, x[r, c])
            d = 0.0
            for c in range(x.shape[1]):
                d += math.exp(x[r, c] - m)
            for c in range(x.shape[1]):
                out[r, c] = math.exp(x[r, c] - m) / d
    return kernel


def softmax_rows_online(cuda):
    """One thread per row, online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867).

    One pass keeps the running max m and the running sum d = sum exp(x - m), rescaling d
    by exp(m_old - m_new) when the max grows; a second pass writes. 2 reads per element.
    """
    def kernel(x, out):
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r < x.shape[0]:
            m = -math.inf
            d = 0.0
            for c in range(x.shape[1]):
                v = x[r, c]
                m_new = max(m, v)
                d = d * math.exp(m - m_new) + math.exp(v - m_new)
                m = m_new
            for c in range(x.shape[1]):
                out[r, c] = math.exp(x[r, c] - m) / d
    return kernel


@lru_cache(maxsize=None)
def softmax_rows_block(block: int = 32):
    """One block per row: threads stride over the columns, then the shared-memory tree
    (:func:`~labkit.kernels.library.reductions.sequential_tree`) for the max, and again for
    the sum.

    Reads each element 3 times, like the naive kernel, but a warp's reads are coalesced
    (consecutive threads read consecutive columns) and a row uses ``block`` threads.
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
        tree_max = sequential_tree(cuda, block, max)
        tree_sum = sequential_tree(cuda, block, operator.add)

        def kernel(x, out):
            buf = cuda.shared.array(block, cuda.float32)
            t = cuda.threadIdx.x
            r = cuda.blockIdx.x
            n = x.shape[1]
            m = -math.inf
            for c in range(t, n, block):
                m = max(m, x[r, c])
            buf[t] = m
            cuda.syncthreads()
            tree_max(buf, t)
            m = buf[0]
            cuda.syncthreads()
            d = 0.0
            for c in range(t, n, block):
                d += math.exp(x[r, c] - m)
            buf[t] = d
            cuda.syncthreads()
            tree_sum(buf, t)
            d = buf[0]
            for c in range(t, n, block):
                out[r, c] = math.exp(x[r, c] - m) / d
        return kernel
    return named(factory, f"softmax_rows_block_{block}")

@lru_cache(maxsize=None)
def softmax_rows_warp(warps: int = 4):
    """Online softmax with one *warp* per row: blocks of (32, ``warps``) threads, row
    ``blockIdx.x * warps + threadIdx.y``. Lane L keeps a running max m and sum d (Milakov &
    Gimelshein 2018, arXiv:1805.02867) over the columns L, L + 32, ... — a warp reads 32
    consecutive columns at a time, coalesced, where one thread per row
    (:func:`softmax_rows_online`) makes each warp access touch 32 rows. The 32 partial
    (m, d) pairs are combined with ``shfl_xor_sync`` in 5 butterfly steps (every lane ends
    with the row's m and d): (m, d) + (m', d') = (M, d e^(m - M) + d' e^(m' - M)),
    M = max(m, m'). Then each lane writes its columns. 2 reads of x and 1 write of out per
    element, 10 shuffles per lane."""
    _check_pow2(warps, "warps", 1, MAX_THREADS_PER_BLOCK // 32)

    def factory(cuda):
        def kernel(x, out):
            lane = cuda.threadIdx.x
            r = cuda.blockIdx.x * warps + cuda.threadIdx.y
            if r < x.shape[0]:               # the whole warp takes the same side
                n = x.shape[1]
                m = -math.inf
                d = 0.0
                c = lane
                while c < n:
                    v = x[r, c]
                    m_new = max(m, v)
                    d = d * math.exp(m - m_new) + math.exp(v - m_new)
                    m = m_new
                    c += 32
                offset = 16
                while offset > 0:
                    m_other = cuda.shfl_xor_sync(0xFFFFFFFF, m, offset)
                    d_other = cuda.shfl_xor_sync(0xFFFFFFFF, d, offset)
                    m_new = max(m, m_other)
                    d = d * math.exp(m - m_new) + d_other * math.exp(m_other - m_new)
                    m = m_new
                    offset //= 2
                c = lane
                while c < n:
                    out[r, c] = math.exp(x[r, c] - m) / d
                    c += 32
        return kernel
    return named(factory, f"softmax_rows_warp_{warps}")
