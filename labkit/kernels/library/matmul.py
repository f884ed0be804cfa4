"""The FP32 matmul ladder c = a b (chapter 05, :data:`labkit.kernels.models.LADDER`): each
rung computes the same c and adds one idea.

* ``naive`` (:func:`matmul_naive`): one thread per element of c, ``threadIdx.x`` walking
  rows: a warp's accesses to a and c are strided (uncoalesced).
* ``coalesced`` (:func:`matmul_coalesced`): ``threadIdx.x`` walks columns: a warp reads a
  row of b and writes a row of c.
* ``tiled`` (:func:`matmul_tiled`): shared-memory tiles: an element of a is read from
  global memory ceil(N / tile) times instead of N; 2 shared reads per FMA.
* ``register`` (:func:`matmul_register_blocked`): each thread computes ``rows`` outputs of a
  column, reusing a value of b from a register: shared reads per output fall from
  2 * tile to tile * (1 + 1 / rows), and two shared loads per 4 FMAs bound a 1-D register
  block at 4 / 6 = 67 % FMAs.
* ``register2d`` (:func:`matmul_2d_blocked`): a tm x tn micro-tile per thread,
  ``bk * tm * tn`` FMAs from ``bk * (tm + tn)`` shared reads: from shared-memory-bound
  towards compute-bound.

Every rung from ``tiled`` on is written for numba's compiler: masked thread and block
indices (:data:`~labkit.kernels.library.sizes.GRID_MASK`) and ``while`` loops let it prove
every index >= 0 and drop numba's negative-index wrap-around (see :func:`matmul_naive`).

Notes (sm_90, ``benchmarks/ptx_report.py``).

* tiled, tile 32: a phase is 109 instructions for 32 FFMAs (112 without the block mask).
* register, (64, 4): a full phase is 475 instructions for 256 FFMAs (54 %; 556, 46 %, with
  the guards and the block index's wrap-around); its k loop is 63 % FFMAs.
* register2d, (128, 128, 8, 8, 8): the inner loop is 64 FFMA, 8 LDS, 2 LDS.128 and 7 others
  (64 FFMA, 16 LDS, 86 others before the masks and ``while`` loops), a phase 785
  instructions for 512 FFMAs (1602 before), 128 registers (146 before: then one 256-thread
  block per SM, not two), no local memory, no spills, the 8 global loads of a phase issued
  before the first shared store; with the full-tile path a full phase is 745 instructions
  (69 % FFMAs) in 124 registers. At (64, 64, 8, 4, 4): 221 instead of 239 (58 % FFMAs
  instead of 54 %) in 48 registers instead of 56 (five blocks per SM instead of four).
* The register cap: given one, ptxas 13.x spends registers up to it ((64, 64, 8, 4, 4) went
  from 56 to 68, with the full-tile path from 48 to 64), hence none for small micro-tiles.
  ``launch_bounds=(256, 2)`` was tried and left out: libnvvm wrote other PTX, which ptxas
  made 116 registers but 902 instructions a phase instead of 785.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.hardware import MAX_THREADS_PER_BLOCK, SM_LIMITS
from labkit.kernels.library.sizes import GRID_MASK, _check_pow2, named


def matmul_naive(cuda):
    """c[i, j] = sum_k a[i, k] b[k, j]; threadIdx.x walks *rows* i (uncoalesced c and a):
    ``i, j = cuda.grid(2)``, the thread's (x, y) in the grid, x = blockIdx.x * blockDim.x +
    threadIdx.x.

    k counts in a ``while`` loop, not ``for k in range(...)``: numba wraps negative
    indices like Python, and the compiler does not bound a ``range`` counter, so each of
    ``a[i, k]`` and ``b[k, j]`` would pay a compare, a select and 64-bit address
    arithmetic per step (see the inner loop in ``benchmarks/ptx_report.py``).
    """
    def kernel(a, b, c):
        i, j = cuda.grid(2)           # (x, y): threadIdx.x walks the rows i
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
        j, i = cuda.grid(2)           # (x, y): threadIdx.x walks the columns j
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
    index (:data:`~labkit.kernels.library.sizes.GRID_MASK`), and the phases are counted by
    a ``while`` loop: together they let the compiler prove every index >= 0 and drop
    numba's negative-index wrap-around from the tile loads (see :func:`matmul_naive`).
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
    return named(factory, f"matmul_tiled_{tile}")


@lru_cache(maxsize=None)
def matmul_register_blocked(tile: int = 16, rows: int = 4):
    """Tiled matmul where each thread computes ``rows`` outputs of one column.

    A block of (tile, tile // rows) threads computes a tile x tile block of c. Per phase a
    thread reads one value of sb and reuses it from a register for ``rows`` products, so
    shared-memory reads per output drop from 2 * tile to tile * (1 + 1 / rows). The thread
    and block indices are masked (:data:`~labkit.kernels.library.sizes.GRID_MASK`) and the
    k loops are ``while`` loops so that the compiler can prove every index >= 0 and skips
    numba's negative-index wrap-around; a phase whose tiles lie wholly inside a and b
    (``full``) skips the bounds guards: written once as ``full or (guard)``, the compiler
    makes an unguarded copy of the loads for it (see :func:`matmul_2d_blocked`). With one b
    value and one ``LDS.128`` of a per 4 FFMAs, two shared loads per 4 FFMAs bound a 1-D
    register block at 4 / 6 = 67 % FFMAs, the step that 2-D blocking takes.
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
    return named(factory, f"matmul_register_blocked_{tile}_{rows}")

REGISTER_BUDGET_2D = 128
"""Most registers per thread :func:`matmul_2d_blocked` may use (its ``jit_options``):
an SM's 64 K registers then hold two 256-thread blocks."""


def register_limit(threads: int, budget: int) -> int:
    """``max_registers`` for a kernel of ``threads`` per block: ``budget``, or less where a
    block of ``threads`` at ``budget`` would not fit the register file of one SM (the
    smallest of :data:`labkit.hardware.SM_LIMITS`, 64 K on all of them): 64 at 1024."""
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
    ``sa[kk, ...]`` would keep its wrap check). Two more for the tile loads: the block
    index is masked too (:data:`~labkit.kernels.library.sizes.GRID_MASK`), and a phase
    whose tiles lie wholly inside a and b (``full``) skips the guards — written once as
    ``full or (guard)``, from which the compiler makes an unguarded copy of the loads. What
    the SASS shows: the module's Notes.

    Where the micro-tile alone (tm tn accumulators, tm + tn operands) takes half of
    :data:`REGISTER_BUDGET_2D` or more, the factory's ``jit_options`` cap its registers at
    that budget (``max_registers``, applied when the PTX is assembled: ``ptxas
    -maxrregcount``), so that (128, 128, 8, 8, 8) keeps two 256-thread blocks per SM.
    Smaller micro-tiles go uncapped (given a cap, ptxas spends registers up to it).

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
    if 2 * (n_acc + tm + tn) >= REGISTER_BUDGET_2D:
        factory.jit_options = {"max_registers": register_limit(threads, REGISTER_BUDGET_2D)}
    return named(factory, f"matmul_2d_blocked_{bm}_{bn}_{bk}_{tm}_{tn}")
