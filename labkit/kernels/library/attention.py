"""Attention o = softmax(q kᵀ / sqrt(d)) v (chapter 05).

* :func:`attention_flash`: FlashAttention's fused forward pass: the online softmax over
  tiles of keys in shared memory, so the N x N scores never reach global memory. The
  standard three launches (a matmul, a softmax, a matmul) are
  :func:`labkit.kernels.ops.attention` with ``variant="standard"``.
"""
from __future__ import annotations

import math
from functools import lru_cache

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels.library.sizes import _check_pow2, named


@lru_cache(maxsize=None)
def attention_flash(d: int = 8, rows: int = 8):
    """FlashAttention's forward pass (T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré,
    "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
    NeurIPS 2022, arXiv:2205.14135, Algorithm 1), one head, float32:
    o = softmax(q kᵀ / sqrt(d)) v for q, k, v, o of shape (N, d), without the N x N
    matrix ever reaching global memory.

    A block of (d, ``rows``) threads owns ``rows`` query rows (B_r) and walks the keys in
    tiles of ``rows`` (B_c = B_r). Per tile it loads K_j and V_j into shared memory
    (thread (x, y) loads element (y, x) of each: coalesced), computes the scores
    S_ij = Q_i K_jᵀ / sqrt(d) into a shared ``rows`` x ``rows`` tile (thread (x, y) the
    scores (y, x), (y, x + d), ...; keys past N score -inf: Algorithm 1's line 9), then
    updates its row's running max m and sum l and its element acc of the output with
    the online softmax of lines 10-12: m' = max(m, max_c S[y, c]),
    l' = e^(m - m') l + sum_c e^(S[y, c] - m'),
    acc' = e^(m - m') acc + sum_c e^(S[y, c] - m') v[c, x].
    The loops are in FlashAttention-2's order (T. Dao, arXiv:2307.08691, 2023, §3.1):
    query tiles outside (one per block), key and value tiles inside, so the output stays
    on chip and is divided by l once at the end, where Algorithm 1 (keys outside) reads
    and rewrites O_i in HBM for every key tile. K's shared tile is padded to d + 1 words
    per row, so the lanes of a warp reading the rows k[x, :] hit different banks.

    Global traffic: q and o once (N d each), k and v once per query block
    (2 N d ceil(N / rows)); the standard implementation (:func:`labkit.kernels.ops.attention`
    with ``variant="standard"``: a matmul, a softmax, a matmul) writes the N x N scores and
    probabilities to global memory and reads them back (the paper's Theorem 2: standard
    attention takes Θ(N d + N²) HBM accesses, FlashAttention Θ(N² d² / M) for an on-chip
    memory of M elements)."""
    _check_pow2(d, "d", 1, 64)
    _check_pow2(rows, "rows", 1, 64)
    if d * rows > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"d * rows = {d * rows} threads per block; at most "
                         f"{MAX_THREADS_PER_BLOCK}")
    scale = 1.0 / math.sqrt(d)
    padded = d + 1       # a plain int: numba needs constant shared-array shapes

    def factory(cuda):
        def kernel(q, k, v, o):
            sq = cuda.shared.array((rows, d), cuda.float32)
            sk = cuda.shared.array((rows, padded), cuda.float32)   # padded: no conflicts
            sv = cuda.shared.array((rows, d), cuda.float32)
            s = cuda.shared.array((rows, rows), cuda.float32)
            x = cuda.threadIdx.x
            y = cuda.threadIdx.y
            n = q.shape[0]
            i = cuda.blockIdx.x * rows + y
            sq[y, x] = q[i, x] if i < n else 0.0
            m = -math.inf
            l = 0.0
            acc = 0.0
            j0 = 0
            while j0 < n:                      # one tile of keys and values
                j = j0 + y
                sk[y, x] = k[j, x] if j < n else 0.0
                sv[y, x] = v[j, x] if j < n else 0.0
                cuda.syncthreads()
                c = x
                while c < rows:                # scores S[y, c] of this tile
                    if j0 + c < n:
                        dot = 0.0
                        for e in range(d):
                            dot += sq[y, e] * sk[c, e]
                        s[y, c] = dot * scale
                    else:
                        s[y, c] = -math.inf
                    c += d
                cuda.syncthreads()
                m_new = m
                for c in range(rows):
                    m_new = max(m_new, s[y, c])
                rescale = math.exp(m - m_new)
                l *= rescale
                acc *= rescale
                for c in range(rows):
                    p = math.exp(s[y, c] - m_new)
                    l += p
                    acc += p * sv[c, x]
                m = m_new
                cuda.syncthreads()             # before the next tile overwrites sk, sv, s
                j0 += rows
            if i < n:
                o[i, x] = acc / l
        return kernel
    return named(factory, f"attention_flash_{d}_{rows}")
