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

from labkit.hardware import MAX_THREADS_PER_BLOCK


GRID_MASK = 0x7FFFFFFF
"""``cuda.blockIdx.x & GRID_MASK`` (and ``gridDim``): numba reads the block index and the
grid size as signed 32-bit numbers, so an index built from them may be negative as far as
the compiler knows and pays numba's negative-index wrap-around (a compare and select and
64-bit arithmetic per access, see :func:`matmul_naive`). No grid reaches 2^31 blocks along
a dimension (CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability": at most 2^31 - 1 along x, 65535 along y and z), so the mask changes no value
and proves it >= 0."""


def _check_pow2(value: int, what: str, low: int = 1, high: int = MAX_THREADS_PER_BLOCK) -> None:
    from labkit.validate import power_of_two
    power_of_two(what, value, low=low, high=high)
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

    Needs warp shuffles: the tracer and a real GPU run them; Numba's simulator has none,
    and labkit's simulator proxy (:mod:`labkit.kernels.numba_run`) emulates them with block
    barriers.
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
    """c[i, j] = sum_k a[i, k] b[k, j]; threadIdx.x walks *rows* i (uncoalesced c and a).

    k counts in a ``while`` loop, not ``for k in range(...)``: numba wraps negative
    indices like Python, and the compiler does not bound a ``range`` counter, so each of
    ``a[i, k]`` and ``b[k, j]`` would pay a compare, a select and 64-bit address
    arithmetic per step (see the inner loop in ``benchmarks/ptx_report.py``).
    """
    def kernel(a, b, c):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        j = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if i < c.shape[0] and j < c.shape[1]:
            acc = cuda.float32(0.0)   # float32 accumulate: an FP32 kernel
            k = 0
            while k < a.shape[1]:     # not range(): see the docstring
                acc += a[i, k] * b[k, j]
                k += 1
            c[i, j] = acc
    return kernel


def matmul_coalesced(cuda):
    """The same, with threadIdx.x walking *columns* j: a warp reads a row of b, writes c."""
    def kernel(a, b, c):
        j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        i = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if i < c.shape[0] and j < c.shape[1]:
            acc = cuda.float32(0.0)
            k = 0
            while k < a.shape[1]:     # a while loop, as in matmul_naive
                acc += a[i, k] * b[k, j]
                k += 1
            c[i, j] = acc
    return kernel


@lru_cache(maxsize=None)
def matmul_tiled(tile: int = 16):
    """Shared-memory tiled matmul (Kirk & Hwu, *Programming Massively Parallel Processors*,
    ch. 5): a block of tile x tile threads computes a tile x tile block of c, loading one
    tile of a and one of b per phase. Each element of a is read ceil(N / tile) times from
    global memory instead of N times. The accumulator is ``cuda.float32(0.0)``: a bare
    ``0.0`` is a float64 in numba and turns every product into an FP64 add (seen in the
    PTX: ``cvt.f64.f32`` + ``add.f64`` per multiply-add). The thread index is masked
    (``threadIdx.x & (tile - 1)``, a no-op for the (tile, tile) launch), so is the block
    index (:data:`GRID_MASK`), and the phases are counted by a ``while`` loop: together they
    let the compiler prove every index >= 0 and drop numba's negative-index wrap-around
    from the tile loads (see :func:`matmul_naive`). On sm_90 at tile 32 the phase is 109
    instructions for 32 FFMAs (``benchmarks/ptx_report.py``; 112 without the block mask).
    """
    _check_pow2(tile, "tile", 2, 32)

    def factory(cuda):
        def kernel(a, b, c):
            sa = cuda.shared.array((tile, tile), cuda.float32)
            sb = cuda.shared.array((tile, tile), cuda.float32)
            tx = cuda.threadIdx.x & (tile - 1)      # = threadIdx for blockDim (tile, tile);
            ty = cuda.threadIdx.y & (tile - 1)      # the mask proves 0 <= tx, ty < tile
            j = (cuda.blockIdx.x & GRID_MASK) * tile + tx   # GRID_MASK: 0 <= j, i
            i = (cuda.blockIdx.y & GRID_MASK) * tile + ty
            n_k = a.shape[1]
            acc = cuda.float32(0.0)
            k0 = 0
            while k0 < n_k:                         # one phase per tile columns of a
                ka = k0 + tx
                kb = k0 + ty
                sa[ty, tx] = a[i, ka] if i < a.shape[0] and ka < n_k else 0.0
                sb[ty, tx] = b[kb, j] if kb < n_k and j < b.shape[1] else 0.0
                cuda.syncthreads()
                for k in range(tile):               # a constant count: fully unrolled
                    acc += sa[ty, k] * sb[k, tx]
                cuda.syncthreads()
                k0 += tile
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
    shared-memory reads per output drop from 2 * tile to tile * (1 + 1 / rows). The thread
    and block indices are masked (:data:`GRID_MASK`) and the k loops are ``while`` loops so
    that the compiler can prove every index >= 0 and skips numba's negative-index
    wrap-around; a phase whose tiles lie wholly inside a and b (``full``) skips the bounds
    guards: written once as ``full or (guard)``, the compiler makes an unguarded copy of
    the loads for it (see :func:`matmul_2d_blocked`). On sm_90 at (64, 4) a full phase is
    then 475 instructions for 256 FFMAs (54 %; was 556, 46 %, with the guards and the
    wrap-around of the block index), of which the k loop is 63 % FFMAs: with one b value
    and one ``LDS.128`` of a per 4 FFMAs, two shared loads per 4 FFMAs bound a 1-D
    register block at 4 / 6 = 67 %, the step that 2-D blocking takes.
    """
    _check_pow2(tile, "tile", 2, 64)
    _check_pow2(rows, "rows", 1, tile)
    if tile * tile // rows > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"tile * tile / rows = {tile * tile // rows} threads per block; at "
                         f"most {MAX_THREADS_PER_BLOCK} (raise rows)")
    height = tile // rows

    def factory(cuda):
        def kernel(a, b, c):
            sa = cuda.shared.array((tile, tile), cuda.float32)
            sb = cuda.shared.array((tile, tile), cuda.float32)
            acc = cuda.local.array(rows, cuda.float32)
            tx = cuda.threadIdx.x & (tile - 1)      # no-ops for blockDim (tile, height)
            ty = cuda.threadIdx.y & (height - 1)    # that prove 0 <= tx, ty
            j0 = (cuda.blockIdx.x & GRID_MASK) * tile   # and 0 <= j0, i0: GRID_MASK
            i0 = (cuda.blockIdx.y & GRID_MASK) * tile
            j = j0 + tx
            m = a.shape[0]
            n_k = a.shape[1]
            inside = i0 + tile <= m and j0 + tile <= b.shape[1]
            for r in range(rows):
                acc[r] = 0.0
            k0 = 0
            while k0 < n_k:                         # one phase per tile columns of a
                full = inside and k0 + tile <= n_k  # no guard can fail: unguarded loads
                for r in range(rows):
                    li = ty + r * height
                    if full or (i0 + li < m and k0 + tx < n_k):
                        sa[li, tx] = a[i0 + li, k0 + tx]
                    else:
                        sa[li, tx] = 0.0
                    if full or (k0 + li < n_k and j < b.shape[1]):
                        sb[li, tx] = b[k0 + li, j]
                    else:
                        sb[li, tx] = 0.0
                cuda.syncthreads()
                k = 0
                while k < tile:
                    bv = sb[k, tx]
                    for r in range(rows):
                        acc[r] += sa[ty * rows + r, k] * bv
                    k += 1
                cuda.syncthreads()
                k0 += tile
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


# ---- fast kernels (issue 15): bandwidth-bound reduction, 2-D register-blocked matmul ------

@lru_cache(maxsize=None)
def reduce_fast(block: int = 256, unroll: int = 4):
    """A reduction built to run at memory bandwidth (Harris 2007's lessons plus warp
    shuffles, which came later with Kepler: Luitjens, "Faster Parallel Reductions on
    Kepler", NVIDIA blog 2014).

    * grid-stride loop: a grid sized from the device (a few blocks per SM) walks the whole
      array, each thread summing many elements in registers; ``unroll`` independent
      accumulators keep that many loads in flight per thread;
    * consecutive threads read consecutive elements (coalesced, each element read once);
    * warp shuffles (``shfl_down_sync``) reduce 32 lanes without shared memory, then one
      shared word per warp, then warp 0 reduces those;
    * one ``atomic.add`` per block into ``out[0]`` (``out`` must start at 0).

    Written for the compiler (``benchmarks/ptx_report.py --only reduce_fast``): the block
    index and the grid size are masked (:data:`GRID_MASK`) so that the compiler proves
    every ``i + u * step`` >= 0. On sm_90 at (256, 4) the grid-stride loop is then 26
    instructions for 4 loads, 6.5 per element (was 54, 13.5: numba's negative-index
    wrap-around cost 4 integer instructions per load), all loads issued before the first
    add; at ``unroll=8`` 46 for 8, 5.75 per element. The tail loop (fewer than ``unroll``
    trips per thread) keeps the wrap-around: the compiler cannot bound ``i`` after the
    loop.

    Traffic (tested against traces): n global reads, one atomic per block, ``block / 32``
    shared writes and reads per block, ``5 * (block + 32)`` shuffles per block.
    """
    _check_pow2(block, "block", 32)
    _check_pow2(unroll, "unroll", 1, 16)
    n_warps = block // 32

    def factory(cuda):
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
            offset = 16
            while offset > 0:
                v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
                offset //= 2
            if t % 32 == 0:
                sums[t // 32] = v
            cuda.syncthreads()
            if t < 32:
                w = sums[t] if t < n_warps else cuda.float32(0.0)
                offset = 16
                while offset > 0:
                    w += cuda.shfl_down_sync(0xFFFFFFFF, w, offset)
                    offset //= 2
                if t == 0:
                    cuda.atomic.add(out, 0, w)
        return kernel
    factory.__name__ = factory.__qualname__ = f"reduce_fast_{block}_{unroll}"
    return factory


REGISTER_BUDGET_2D = 128
"""Most registers per thread :func:`matmul_2d_blocked` may use (its ``jit_options``):
an SM's 64 K registers then hold two 256-thread blocks."""


def register_limit(threads: int, budget: int) -> int:
    """``max_registers`` for a kernel of ``threads`` per block: ``budget``, or less where a
    block of ``threads`` at ``budget`` would not fit the register file of one SM (the
    smallest of :data:`labkit.hardware.SM_LIMITS`, 64 K on all of them): 64 at 1024."""
    from labkit.hardware import SM_LIMITS
    per_sm = min(s.registers_per_sm for s in SM_LIMITS.values())
    return min(budget, per_sm // threads)


def _conflict_free_pad(rows: int, cols: int, threads: int) -> int:
    """Smallest padding p of a (cols, rows + p) shared tile such that storing a row-major
    (rows, cols) global tile transposed into it is free of bank conflicts: thread e of a
    warp stores element (e // cols, e % cols) at word (e % cols) * (rows + p) + e // cols."""
    for pad in range(33):
        ok = True
        for w0 in range(0, min(threads, rows * cols), 32):
            banks = {((e % cols) * (rows + pad) + e // cols) % 32
                     for e in range(w0, min(w0 + 32, threads, rows * cols))}
            if len(banks) < min(32, threads - w0, rows * cols - w0):
                ok = False
                break
        if ok:
            return pad
    raise ValueError(f"no conflict-free padding for a {rows} x {cols} tile")


@lru_cache(maxsize=None)
def matmul_2d_blocked(bm: int = 64, bn: int = 64, bk: int = 8, tm: int = 4, tn: int = 4):
    """FP32 matmul with 2-D register blocking (the CUTLASS / "How to optimize a CUDA
    matmul" (S. Boehm, 2022, kernels 5-6) structure).

    A block of (bn / tn) x (bm / tm) threads computes a bm x bn tile of c; each thread a
    tm x tn micro-tile of c held in registers, at the tm consecutive rows
    ``ty * tm + r`` and the columns ``tx + q * (bn / tn)``. Per phase of ``bk`` the block
    loads an a tile (bm x bk, stored transposed and padded so the stores are
    conflict-free) and a b tile (bk x bn) with consecutive threads on consecutive
    addresses, then each thread does ``bk * tm * tn`` FMAs from ``bk * (tm + tn)`` shared
    reads — the ratio that moves the kernel from shared-memory-bound (tiled: 2 reads per
    FMA) towards compute-bound. A thread's tm values of a are adjacent words (one 128-bit
    ``LDS.128`` per 4 when the row is 16-byte aligned), the same words for the threads of
    one ``ty`` (a broadcast) and distinct banks for a warp's other ``ty`` when
    tm <= bn / tn; its b values are strided so a warp reads consecutive words; its c
    stores are contiguous across a warp.

    Written for the compiler, checked in the SASS (``benchmarks/ptx_report.py``):
    numba, like Python, wraps negative indices, so every ``sa[kk, col]`` with a signed
    index the compiler cannot prove >= 0 costs a compare, a select and 64-bit address
    arithmetic. Two habits keep the inner loop to FFMAs and shared loads: the thread index
    is masked (``threadIdx.x & (cs - 1)``, a no-op for the launch shape that proves
    0 <= tx < cs), and the k loops are ``while`` loops with a plain counter (numba's
    ``range`` loop keeps a 64-bit iterator whose index the compiler does not bound, so
    ``sa[kk, ...]`` kept its wrap check). On sm_90 at
    (128, 128, 8, 8, 8) the inner loop is then 64 FFMA, 8 LDS, 2 LDS.128 and 7 others
    (was 64 FFMA, 16 LDS, 86 others), a whole phase 785 instructions for 512 FFMAs (was
    1602), 128 registers (was 146: two 256-thread blocks fit in an SM's 64 K registers, not
    one), no local memory, no spills; the 8 global loads of a phase are issued before the
    first shared store (they were interleaved, one load's latency at a time). Two more for
    the tile loads: the block index is masked too (:data:`GRID_MASK`), and a phase whose
    tiles lie wholly inside a and b (``full``) skips the guards — written once as
    ``full or (guard)``, from which the compiler makes an unguarded copy of the loads. A
    full phase is then 745 instructions (69 % FFMAs) in 124 registers; at (64, 64, 8, 4,
    4) 221 instead of 239 (58 % FFMAs instead of 54 %) in 48 registers instead of 56
    (five blocks per SM instead of four).

    Where the micro-tile alone (tm tn accumulators, tm + tn operands) takes half of
    :data:`REGISTER_BUDGET_2D` or more, the factory's ``jit_options`` cap its registers at
    that budget (``max_registers``, applied when the PTX is assembled: ``ptxas
    -maxrregcount``), so another ptxas cannot make (128, 128, 8, 8, 8) 146 again. Smaller
    micro-tiles go uncapped: given a cap, ptxas 13.x spends registers up to it ((64, 64, 8,
    4, 4) went from 56 to 68, four blocks per SM to three; with the full-tile path,
    from 48 to 64, five to four). Launch bounds (``launch_bounds=(256, 2)``) were
    tried and left out: libnvvm reads them too and wrote other PTX, which ptxas made 116
    registers but 902 instructions a phase instead of 785.

    Traffic: a read m*k*ceil(n/bn) times in all, b k*n*ceil(m/bm), c written m*n times.
    """
    for name, v, lo, hi in (("bm", bm, 2, 256), ("bn", bn, 2, 256), ("bk", bk, 1, 64),
                            ("tm", tm, 1, 16), ("tn", tn, 1, 16)):
        _check_pow2(v, name, lo, hi)
    if tm > bm or tn > bn:
        raise ValueError(f"the micro-tile ({tm}, {tn}) must fit in the block tile ({bm}, {bn})")
    threads = (bm // tm) * (bn // tn)
    if not 32 <= threads <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"(bm / tm) * (bn / tn) = {threads} threads per block; must be in "
                         f"[32, {MAX_THREADS_PER_BLOCK}]")
    if (bm * bk) % threads or (bk * bn) % threads:
        raise ValueError(f"the a tile ({bm} x {bk}) and the b tile ({bk} x {bn}) must be "
                         f"multiples of the {threads} threads that load them")
    rs, cs = bm // tm, bn // tn          # threads along a column and along a row of c
    pad = _conflict_free_pad(bm, bk, threads)
    loads_a, loads_b = bm * bk // threads, bk * bn // threads
    a_width, n_acc = bm + pad, tm * tn    # plain ints: numba needs constant array shapes

    def factory(cuda):
        def kernel(a, b, c):
            sa = cuda.shared.array((bk, a_width), cuda.float32)     # a tile, transposed
            sb = cuda.shared.array((bk, bn), cuda.float32)
            acc = cuda.local.array(n_acc, cuda.float32)   # registers: every index is a
            ra = cuda.local.array(tm, cuda.float32)       # constant once the r, q loops
            rb = cuda.local.array(tn, cuda.float32)       # are unrolled
            tx = cuda.threadIdx.x & (cs - 1)    # the masks change nothing (blockDim is
            ty = cuda.threadIdx.y & (rs - 1)    # (cs, rs)) but prove 0 <= tx, ty
            t = ty * cs + tx
            i0 = (cuda.blockIdx.y & GRID_MASK) * bm     # and 0 <= i0, j0
            j0 = (cuda.blockIdx.x & GRID_MASK) * bn
            m = a.shape[0]
            n_k = a.shape[1]
            n = b.shape[1]
            inside = i0 + bm <= m and j0 + bn <= n
            for e in range(n_acc):
                acc[e] = 0.0
            k0 = 0
            while k0 < n_k:                     # one phase per bk columns of a
                full = inside and k0 + bk <= n_k    # no guard can fail: unguarded loads
                for l in range(loads_a):
                    e = t + l * threads
                    ii = e // bk
                    kk = e % bk
                    if full or (i0 + ii < m and k0 + kk < n_k):
                        sa[kk, ii] = a[i0 + ii, k0 + kk]
                    else:
                        sa[kk, ii] = 0.0
                for l in range(loads_b):
                    e = t + l * threads
                    kk = e // bn
                    jj = e % bn
                    if full or (k0 + kk < n_k and j0 + jj < n):
                        sb[kk, jj] = b[k0 + kk, j0 + jj]
                    else:
                        sb[kk, jj] = 0.0
                cuda.syncthreads()
                kk = 0
                while kk < bk:                  # the inner loop: tm + tn loads, tm tn FMAs
                    for r in range(tm):
                        ra[r] = sa[kk, ty * tm + r]
                    for q in range(tn):
                        rb[q] = sb[kk, tx + q * cs]
                    for r in range(tm):
                        for q in range(tn):
                            acc[r * tn + q] += ra[r] * rb[q]
                    kk += 1
                cuda.syncthreads()
                k0 += bk
            for r in range(tm):
                i = i0 + ty * tm + r
                for q in range(tn):
                    j = j0 + tx + q * cs
                    if i < m and j < n:
                        c[i, j] = acc[r * tn + q]
        return kernel
    factory.__name__ = factory.__qualname__ = f"matmul_2d_blocked_{bm}_{bn}_{bk}_{tm}_{tn}"
    if 2 * (n_acc + tm + tn) >= REGISTER_BUDGET_2D:
        factory.jit_options = {"max_registers": register_limit(threads, REGISTER_BUDGET_2D)}
    return factory


# ---- transpose (chapter 04: shared memory, coalescing and padding) ---------------------

def transpose_naive(cuda):
    """out[c, r] = a[r, c]: reads coalesced (threadIdx.x walks c), writes strided by rows."""
    def kernel(a, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < a.shape[0] and c < a.shape[1]:
            out[c, r] = a[r, c]
    return kernel


@lru_cache(maxsize=None)
def transpose_shared(tile: int = 32, rows: int = 8, pad: int = 1):
    """Transpose through a shared tile (M. Harris, "An Efficient Matrix Transpose in CUDA
    C/C++", NVIDIA developer blog, 2013): a block of (tile, rows) threads reads a tile x tile
    tile of ``a`` row by row (coalesced; each thread tile / rows elements), then writes rows
    of the *output* (coalesced), reading the shared tile by column. With ``pad=0`` the
    column read of a ``[32][32]`` float array puts all 32 lanes in one bank (32-way
    conflict); ``pad=1`` makes rows 33 words long, so lane k reads bank (33 k + c) mod 32 =
    (k + c) mod 32: conflict-free.
    """
    _check_pow2(tile, "tile", 2, 32)
    _check_pow2(rows, "rows", 1, tile)
    if pad not in (0, 1):
        raise ValueError(f"pad must be 0 or 1, got {pad}")
    width = tile + pad

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array((tile, width), cuda.float32)
            tx = cuda.threadIdx.x
            ty = cuda.threadIdx.y
            c = cuda.blockIdx.x * tile + tx
            for k in range(0, tile, rows):
                r = cuda.blockIdx.y * tile + ty + k
                if r < a.shape[0] and c < a.shape[1]:
                    buf[ty + k, tx] = a[r, c]
            cuda.syncthreads()
            oc = cuda.blockIdx.y * tile + tx           # output column = input row
            for k in range(0, tile, rows):
                orow = cuda.blockIdx.x * tile + ty + k   # output row = input column
                if orow < out.shape[0] and oc < out.shape[1]:
                    out[orow, oc] = buf[tx, ty + k]
        return kernel
    factory.__name__ = factory.__qualname__ = f"transpose_shared_{tile}_{rows}_{pad}"
    return factory
