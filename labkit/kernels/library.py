"""The kernels of chapters 4 and 5, each written once as ``fn(cuda)`` returning the body.

The same body runs under labkit's tracer and under ``numba.cuda``; only the subset of
Python that numba compiles for the GPU is used. Kernels with a compile-time size (a shared
array, a tile) come from a factory such as ``matmul_tiled(tile)``, cached so that the same
parameters give the same ``fn`` (and one compilation in :func:`run_numba`).

Every kernel guards its indices, so sizes need not be multiples of the block.
"""
from __future__ import annotations

import math
from functools import lru_cache


def _check_pow2(value: int, what: str, low: int = 1, high: int = 1024) -> None:
    if not (low <= value <= high and value & (value - 1) == 0):
        raise ValueError(f"{what} must be a power of two in [{low}, {high}], got {value}")


# ---- map, zip, 2-D, broadcast ---------------------------------------------------------

def vector_add(cuda):
    """out[i] = a[i] + b[i] for i < out.size; one thread per element."""
    def kernel(a, b, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            out[i] = a[i] + b[i]
    return kernel


def add_ten(cuda):
    """out[i] = a[i] + 10 (a map with a bounds guard)."""
    def kernel(a, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            out[i] = a[i] + 10
    return kernel


def strided_copy(cuda):
    """out[i] = a[i * stride]: consecutive threads read addresses ``stride`` apart."""
    def kernel(a, out, stride):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size and i * stride < a.size:
            out[i] = a[i * stride]
    return kernel


def add_2d(cuda):
    """out[r, c] = a[r, c] + b[r, c]; threadIdx.x walks columns (coalesced in row-major)."""
    def kernel(a, b, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = a[r, c] + b[r, c]
    return kernel


def add_2d_transposed(cuda):
    """The same sum with threadIdx.x walking rows: each warp access strides a whole row."""
    def kernel(a, b, out):
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        c = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = a[r, c] + b[r, c]
    return kernel


def broadcast_add(cuda):
    """out[r, c] = col[r] + row[c]  (numpy: ``col[:, None] + row[None, :]``)."""
    def kernel(col, row, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = col[r] + row[c]
    return kernel


def branchy(cuda):
    """Even and odd lanes take different branches: a warp runs both paths, half idle."""
    def kernel(a, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            if i % 2 == 0:
                out[i] = a[i] * 2
            else:
                out[i] = a[i] + 1
    return kernel


@lru_cache(maxsize=None)
def shared_stride(block: int = 32, stride: int = 1):
    """Each thread reads shared word ``(tid * stride) % (block * stride)``: bank conflicts.

    With 32 banks of 4 bytes, bank = word mod 32: stride 1 touches 32 banks (no conflict),
    stride 32 puts all 32 lanes of a warp in bank 0 (a 32-way conflict).
    """
    _check_pow2(block, "block", 32)
    if not 1 <= stride <= 64:
        raise ValueError(f"stride must be in [1, 64], got {stride}")
    size = block * stride

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(size, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * cuda.blockDim.x + t
            if i < a.size:
                buf[t * stride] = a[i]
            cuda.syncthreads()
            if i < out.size:
                out[i] = buf[t * stride]
        return kernel
    factory.__name__ = factory.__qualname__ = f"shared_stride_{block}_{stride}"
    return factory


# ---- stencil ----------------------------------------------------------------------

@lru_cache(maxsize=None)
def conv1d_shared(block: int = 32, radius: int = 2):
    """out[i] = sum_k w[k] * a[i + k - radius], zero outside a; tile + halo in shared memory.

    Each block loads its ``block`` elements and ``2 * radius`` halo elements once, so an
    element of ``a`` is read from global memory at most twice (once as halo).
    """
    _check_pow2(block, "block", 8)
    if not 0 <= radius <= block // 2:
        raise ValueError(f"radius must be in [0, {block // 2}], got {radius}")
    width = block + 2 * radius

    def factory(cuda):
        def kernel(a, w, out):
            tile = cuda.shared.array(width, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            tile[t + radius] = a[i] if i < a.size else 0.0
            if t < radius:
                left = i - radius
                tile[t] = a[left] if left >= 0 else 0.0
                right = i + block
                tile[t + block + radius] = a[right] if right < a.size else 0.0
            cuda.syncthreads()
            if i < out.size:
                acc = 0.0
                for k in range(2 * radius + 1):
                    acc += w[k] * tile[t + k]
                out[i] = acc
        return kernel
    factory.__name__ = factory.__qualname__ = f"conv1d_shared_{block}_{radius}"
    return factory


def conv1d_naive(cuda):
    """The same convolution reading every neighbour from global memory."""
    def kernel(a, w, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        radius = (w.size - 1) // 2
        if i < out.size:
            acc = 0.0
            for k in range(w.size):
                j = i + k - radius
                if 0 <= j < a.size:
                    acc += w[k] * a[j]
            out[i] = acc
    return kernel


# ---- reductions -----------------------------------------------------------------------

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
    factory.__name__ = factory.__qualname__ = f"reduce_interleaved_{block}"
    return factory


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
    factory.__name__ = factory.__qualname__ = f"reduce_strided_{block}"
    return factory


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
    factory.__name__ = factory.__qualname__ = f"reduce_shared_{block}"
    return factory


@lru_cache(maxsize=None)
def reduce_warp(block: int = 64):
    """Warp-level reduction with ``shfl_down_sync``, then one shared word per warp.

    Needs warp shuffles: the tracer and a real GPU run it; Numba's simulator does not
    implement shuffles.
    """
    _check_pow2(block, "block", 32)
    n_warps = block // 32

    def factory(cuda):
        def kernel(a, out):
            sums = cuda.shared.array(n_warps, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            v = a[i] if i < a.size else cuda.float32(0.0)
            offset = 16
            while offset > 0:
                v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
                offset //= 2
            if t % 32 == 0:
                sums[t // 32] = v
            cuda.syncthreads()
            if t == 0:
                total = cuda.float32(0.0)
                for w in range(n_warps):
                    total += sums[w]
                out[cuda.blockIdx.x] = total
        return kernel
    factory.__name__ = factory.__qualname__ = f"reduce_warp_{block}"
    return factory


# ---- prefix sum -------------------------------------------------------------------------

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
    factory.__name__ = factory.__qualname__ = f"scan_block_{block}"
    return factory


def add_block_offsets(cuda):
    """out[i] += offsets[block of i]: the last phase of a multi-block scan."""
    def kernel(out, offsets, block):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            b = i // block
            if b > 0:
                out[i] += offsets[b - 1]
    return kernel


# ---- matmul ---------------------------------------------------------------------------

def matmul_naive(cuda):
    """c[i, j] = sum_k a[i, k] b[k, j]; threadIdx.x walks *rows* i (uncoalesced c and a)."""
    def kernel(a, b, c):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        j = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if i < c.shape[0] and j < c.shape[1]:
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc
    return kernel


def matmul_coalesced(cuda):
    """The same, with threadIdx.x walking *columns* j: a warp reads a row of b, writes c."""
    def kernel(a, b, c):
        j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if i < c.shape[0] and j < c.shape[1]:
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc
    return kernel


@lru_cache(maxsize=None)
def matmul_tiled(tile: int = 16):
    """Shared-memory tiled matmul (Kirk & Hwu, *Programming Massively Parallel Processors*,
    ch. 5): a block of tile x tile threads computes a tile x tile block of c, loading one
    tile of a and one of b per phase. Each element of a is read ceil(N / tile) times from
    global memory instead of N times.
    """
    _check_pow2(tile, "tile", 2, 32)

    def factory(cuda):
        def kernel(a, b, c):
            sa = cuda.shared.array((tile, tile), cuda.float32)
            sb = cuda.shared.array((tile, tile), cuda.float32)
            tx = cuda.threadIdx.x
            ty = cuda.threadIdx.y
            j = cuda.blockIdx.x * tile + tx
            i = cuda.blockIdx.y * tile + ty
            n_k = a.shape[1]
            acc = 0.0
            for p in range((n_k + tile - 1) // tile):
                ka = p * tile + tx
                kb = p * tile + ty
                sa[ty, tx] = a[i, ka] if i < a.shape[0] and ka < n_k else 0.0
                sb[ty, tx] = b[kb, j] if kb < n_k and j < b.shape[1] else 0.0
                cuda.syncthreads()
                for k in range(tile):
                    acc += sa[ty, k] * sb[k, tx]
                cuda.syncthreads()
            if i < c.shape[0] and j < c.shape[1]:
                c[i, j] = acc
        return kernel
    factory.__name__ = factory.__qualname__ = f"matmul_tiled_{tile}"
    return factory


@lru_cache(maxsize=None)
def matmul_register_blocked(tile: int = 16, rows: int = 4):
    """Tiled matmul where each thread computes ``rows`` outputs of one column.

    A block of (tile, tile // rows) threads computes a tile x tile block of c. Per phase a
    thread reads one value of sb and reuses it from a register for ``rows`` products, so
    shared-memory reads per output drop from 2 * tile to tile * (1 + 1 / rows).
    """
    _check_pow2(tile, "tile", 2, 64)
    _check_pow2(rows, "rows", 1, tile)
    if tile * tile // rows > 1024:
        raise ValueError(f"tile * tile / rows = {tile * tile // rows} threads per block; at "
                         "most 1024 (raise rows)")
    height = tile // rows

    def factory(cuda):
        def kernel(a, b, c):
            sa = cuda.shared.array((tile, tile), cuda.float32)
            sb = cuda.shared.array((tile, tile), cuda.float32)
            acc = cuda.local.array(rows, cuda.float32)
            tx = cuda.threadIdx.x
            ty = cuda.threadIdx.y
            j = cuda.blockIdx.x * tile + tx
            i0 = cuda.blockIdx.y * tile
            n_k = a.shape[1]
            for r in range(rows):
                acc[r] = 0.0
            for p in range((n_k + tile - 1) // tile):
                for r in range(rows):
                    li = ty + r * height
                    ka = p * tile + tx
                    kb = p * tile + li
                    sa[li, tx] = a[i0 + li, ka] if i0 + li < a.shape[0] and ka < n_k else 0.0
                    sb[li, tx] = b[kb, j] if kb < n_k and j < b.shape[1] else 0.0
                cuda.syncthreads()
                for k in range(tile):
                    bv = sb[k, tx]
                    for r in range(rows):
                        acc[r] += sa[ty * rows + r, k] * bv
                cuda.syncthreads()
            for r in range(rows):
                i = i0 + ty * rows + r
                if i < c.shape[0] and j < c.shape[1]:
                    c[i, j] = acc[r]
        return kernel
    factory.__name__ = factory.__qualname__ = f"matmul_register_blocked_{tile}_{rows}"
    return factory


# ---- softmax ------------------------------------------------------------------------------

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
    """One block per row: threads stride over the columns, shared-memory tree for max and sum.

    Reads each element 3 times, like the naive kernel, but a warp's reads are coalesced
    (consecutive threads read consecutive columns) and a row uses ``block`` threads.
    """
    _check_pow2(block, "block", 2)

    def factory(cuda):
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
            s = block // 2
            while s > 0:
                if t < s:
                    buf[t] = max(buf[t], buf[t + s])
                cuda.syncthreads()
                s //= 2
            m = buf[0]
            cuda.syncthreads()
            d = 0.0
            for c in range(t, n, block):
                d += math.exp(x[r, c] - m)
            buf[t] = d
            cuda.syncthreads()
            s = block // 2
            while s > 0:
                if t < s:
                    buf[t] += buf[t + s]
                cuda.syncthreads()
                s //= 2
            d = buf[0]
            for c in range(t, n, block):
                out[r, c] = math.exp(x[r, c] - m) / d
        return kernel
    factory.__name__ = factory.__qualname__ = f"softmax_rows_block_{block}"
    return factory
