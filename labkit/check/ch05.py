"""Chapter 05's exercises: a reduction, a tiled matmul, online softmax, arithmetic
intensity, a scan, and the labs: a register-blocked matmul, a warp-per-row softmax and a
FlashAttention-style fused attention.

Kernels are judged as in chapter 04 (:mod:`labkit.check.ch04`): the learner's kernel and
labkit's reference are traced on the same inputs from ``rng`` (non-uniform values, sizes
not multiples of the block) by :func:`~labkit.check.ch04.launch_report`; the launch must
run and be free of shared-memory races, then give the right values, then keep to budgets
on the whole launch's work measured on the reference.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.check.ch04 import (expect_within, launch_both, launch_matching, not_multiple,
                               sizes_1d, whose)  # noqa: F401 (whose: chapter 05's cells use it)
from labkit.check.core import Wrong, exercise, expect_close
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.kernels import library as lib
from labkit.validate import ceil_div as cdiv

BLOCK = 64
TILE = 8
LEVELS = int(math.log2(BLOCK))


def _family(*factories) -> tuple:
    """What to refuse for labkit's cached kernel factories: each factory (its name, for
    the answer cell's text) and one kernel it makes (its code, which every kernel the
    factory makes shares, for the call watch and code copies)."""
    out = []
    for name, example in factories:
        out += [f"labkit.kernels.library:{name}", example]
    return tuple(out)


# the device functions labkit's kernels share: a tree or a warp sum is the exercise itself
TREES = ("labkit.kernels.library.reductions:sequential_tree", lib.reductions.sequential_tree,
         "labkit.kernels.library.reductions:warp_sum", lib.reductions.warp_sum)
REDUCTIONS = _family(("reduce_shared", lib.reduce_shared(BLOCK)),
                     ("reduce_strided", lib.reduce_strided(BLOCK)),
                     ("reduce_interleaved", lib.reduce_interleaved(BLOCK)),
                     ("reduce_warp", lib.reduce_warp(BLOCK))) + TREES
MATMULS = (lib.matmul_naive, lib.matmul_coalesced) + _family(
    ("matmul_tiled", lib.matmul_tiled(TILE)),
    ("matmul_register_blocked", lib.matmul_register_blocked(16, 4)),
    ("matmul_2d_blocked", lib.matmul_2d_blocked(16, 16, 8, 2, 2)))
SOFTMAXES = (lib.softmax_rows_naive, lib.softmax_rows_online) + _family(
    ("softmax_rows_block", lib.softmax_rows_block(32)),
    ("softmax_rows_warp", lib.softmax_rows_warp(4))) + TREES

def _block_inputs(rng, fixed: tuple[int, ...], shift: float):
    """The inputs of the one-block-per-BLOCK-elements kernels (5.1, 5.5): per size (the
    ``fixed`` ones and one drawn, not a multiple of BLOCK), a float32 array (mean
    ``shift``, heavy-tailed) and its number of blocks."""
    for n in sizes_1d(rng, fixed, 65, 190, BLOCK):
        a = (rng.standard_t(3, size=n) + shift).astype(np.float32)
        yield a, cdiv(n, BLOCK)


@exercise("5.1", "a shared-memory tree reduction", reference=lib.reduce_shared(BLOCK),
          binds="reduce_block", answers=REDUCTIONS)
def _(answer, ref, rng):
    for a, blocks in _block_inputs(rng, (1, 63), shift=0.5):
        got, want = launch_matching(
            answer, ref, blocks, BLOCK, a, np.zeros(blocks, dtype=np.float32), output=1,
            what=f"partial sums for n={a.size}", rtol=1e-4, atol=1e-4,
            hint="out[blockIdx.x] is the sum of that block's elements; threads past the end "
            "contribute 0; call cuda.syncthreads() after each step")
        expect_within(got, want, "Load each element once; halve the number of active "
                      "threads each step with `if t < s: buf[t] += buf[t + s]` so the "
                      "active lanes stay contiguous and read consecutive words.",
                      names=("a", "out"), reads=(0,), writes=(1,), replays=1, simt=True,
                      depth=LEVELS,
                      depth_hint="halve the active threads each step and synchronise after "
                      "every step — one thread adding in a loop is a serial sum")


def _matmul_launches(answer, ref, shapes, tile: int, block: tuple[int, int], hint: str):
    """For each (m, k, n) of ``shapes``: a (m, k) and b (k, n) drawn in ``shapes``' order,
    both kernels launched on (ceil(n / tile), ceil(m / tile)) blocks of ``block``, c checked
    against numpy; yields (the answer's report, the reference's, n)."""
    for (m, k, n), (a, b) in shapes:
        got, want = launch_both(answer, ref, (cdiv(n, tile), cdiv(m, tile)), block, a, b,
                                np.zeros((m, n), dtype=np.float32))
        expect_close(got["arrays"][2], a @ b, f"c for a {a.shape} @ b {b.shape}",
                     rtol=1e-4, atol=1e-4, hint=hint)
        yield got, want, n


def _matmul_inputs(rng, drawn: tuple, fixed: tuple) -> list:
    """((m, k, n), (a, b)) for a drawn shape and a fixed one: a normal, b heavy-tailed."""
    out = []
    for m, k, n in (drawn, fixed):
        out.append(((m, k, n), (rng.standard_normal((m, k)).astype(np.float32),
                                rng.laplace(size=(k, n)).astype(np.float32))))
    return out


@exercise("5.2", "a shared-memory tiled matmul", reference=lib.matmul_tiled(TILE),
          binds="matmul_tiled", answers=MATMULS)
def _(answer, ref, rng):
    # k > TILE: at least two phases, so a missing second barrier races
    shapes = _matmul_inputs(rng, (not_multiple(rng, 9, 17, TILE), not_multiple(rng, 9, 24, TILE),
                                  not_multiple(rng, 9, 17, TILE)), (17, 16, 5))
    for got, want, n in _matmul_launches(
            answer, ref, shapes, TILE, (TILE, TILE),
            "threadIdx.x is the column j, threadIdx.y the row i; load zeros outside a and b; "
            "syncthreads after loading and after using a tile"):
        expect_within(got, want, f"Each element of a may be read at most ceil(n / TILE) = "
                      f"{cdiv(n, TILE)} times: load tiles into shared memory with "
                      "threadIdx.x on the column (consecutive lanes, consecutive "
                      "addresses) and read the inner products from there.",
                      names=("a", "b", "c"), reads=(0, 1), writes=(2,), sectors=1.25,
                      replays=1)


@exercise("5.3", "online softmax, one thread per row", reference=lib.softmax_rows_online,
          binds="softmax_online", answers=SOFTMAXES)
def _(answer, ref, rng):
    for rows, cols in [(not_multiple(rng, 20, 40, 32), not_multiple(rng, 12, 30, 8)), (5, 9)]:
        x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
        x[0, -1] = 60.0  # a late maximum: the running sum must be rescaled
        got, want = launch_matching(
            answer, ref, cdiv(rows, 32), 32, x, np.zeros_like(x), output=1,
            what=f"softmax for shape {x.shape}", rtol=1e-4, atol=1e-6,
            hint="when the max grows from m to m', multiply the running sum by exp(m - m'); "
            "subtract the final max before exp in the second pass")
        # every access counts, local copies included: the busiest thread within 1.5 x
        expect_within(got, want, "Keep the running max and sum in registers (one pass "
                      "reading x), then one pass that reads x and writes out once; no copy "
                      "of the row in cuda.local.array (local memory is device memory).",
                      names=("x", "out"), reads=(0,), writes=(1,), busiest=1.5)


def tiled_intensity(n: int, tile: int) -> float:
    """FLOP per byte of global traffic of the tiled matmul of two n x n float32 matrices:
    2 n^3 / (4 (2 n^2 ceil(n / tile) + n^2))."""
    t = math.ceil(n / tile)
    return 2 * n ** 3 / (4 * (2 * n * n * t + n * n))


formula_exercise(
    "5.4", "arithmetic intensity of the tiled matmul", tiled_intensity,
    cases=[(1024, 16), (1024, 32), (100, 16), (7, 8), (4096, 64)],
    call=lambda n, tile: f"tiled_intensity({n}, {tile})", rtol=1e-6, atol=1e-8,
    shortcuts=[
        (scaled(tiled_intensity, 4, rtol=1e-6),
         "count bytes, not elements (float32 is 4 bytes)."),
        (equals(lambda n, tile: 2 * n ** 3 / (4 * (2 * n ** 3 + n * n)), rtol=1e-6),
         "that is the naive kernel's: with tiles each element of a and b is read "
         "ceil(n / tile) times.")],
    hint="count the FLOPs of the product, then the tiled kernel's global loads (how many "
         "times is each element of a and of b loaded, also when tile does not divide n?) and "
         "its stores, 4 bytes each.")


# ---- 5.5 a block scan --------------------------------------------------------------------

@exercise("5.5", "an inclusive block scan (Hillis-Steele)", reference=lib.scan_block(BLOCK),
          binds="scan_block", answers=_family(("scan_block", lib.scan_block(BLOCK))))
def _(answer, ref, rng):
    for a, blocks in _block_inputs(rng, (64, 1), shift=0.25):
        n = a.size
        got, want = launch_both(answer, ref, blocks, BLOCK, a, np.zeros_like(a),
                                np.zeros(blocks, dtype=np.float32))
        out, sums = got["arrays"][1], got["arrays"][2]
        padded = np.zeros(blocks * BLOCK, dtype=np.float32)
        padded[:n] = a
        if np.allclose(out, want["arrays"][1] - a, atol=1e-4) and n > 1:
            raise Wrong("out is the exclusive scan (out[i] leaves a[i] out): the inclusive "
                        "scan adds a[i] too.")
        expect_close(out, want["arrays"][1], f"out for n={n}", rtol=1e-4, atol=1e-4,
                     hint="step d (1, 2, 4, ...) adds the value d places to the left when "
                     "t >= d; read from one buffer and write the other, syncthreads, swap")
        expect_close(sums, want["arrays"][2], f"sums for n={n}", rtol=1e-4, atol=1e-4,
                     hint="the last thread of each block writes the block's total to "
                     "sums[blockIdx.x]")
        expect_within(got, want, "Load each element once and write out once; every step "
                      "ends at a barrier.", names=("a", "out", "sums"), reads=(0,),
                      writes=(1, 2), simt=True, depth=LEVELS,
                      depth_hint="every thread adds in every step — one thread looping "
                      "over the block is a serial scan")


# ---- 5.6 the lab: a register-blocked matmul -----------------------------------------------

REG_TILE = 16
REG_ROWS = 4


@exercise("5.6", "a register-blocked matmul",
          reference=lib.matmul_register_blocked(REG_TILE, REG_ROWS),
          binds="matmul_register", answers=MATMULS)
def _(answer, ref, rng):
    shapes = _matmul_inputs(rng, (not_multiple(rng, 17, 32, REG_TILE),
                                  not_multiple(rng, 9, 30, REG_TILE),
                                  not_multiple(rng, 17, 32, REG_TILE)), (5, 16, 7))
    for got, want, _ in _matmul_launches(
            answer, ref, shapes, REG_TILE, (REG_TILE, REG_TILE // REG_ROWS),
            "thread (tx, ty) computes c[i0 + ty * ROWS + r, j0 + tx] for r < ROWS; each "
            "phase loads ROWS elements of each tile per thread (rows ty, ty + TILE / ROWS, "
            "...), zeros outside a and b"):
        if got["shared_reads"] > 1.1 * want["shared_reads"]:
            raise Wrong(f"right values, but {got['shared_reads']} shared-memory reads (the "
                        f"register-blocked reference: {want['shared_reads']}): read sb[k, tx] "
                        "once per k into a register and use it for all ROWS outputs, which "
                        "sit in cuda.local.array(ROWS, cuda.float32) indexed by the "
                        "constants of `for r in range(ROWS)` (registers, not memory).")
        expect_within(got, want, "Each element of a and b is loaded once per block tile, "
                      "coalesced (threadIdx.x on the column); the accumulators live in "
                      "registers.", names=("a", "b", "c"), reads=(0, 1), writes=(2,),
                      sectors=1.25)


# ---- 5.7 the lab: softmax with one warp per row ------------------------------------------

WARPS = 4


@exercise("5.7", "online softmax, one warp per row, with shuffles",
          reference=lib.softmax_rows_warp(WARPS), binds="softmax_warp", answers=SOFTMAXES)
def _(answer, ref, rng):
    for rows, cols in [(not_multiple(rng, 5, 13, WARPS), not_multiple(rng, 40, 100, 32)),
                       (3, 7)]:
        x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
        x[-1, -1] = 50.0            # a late maximum in one lane's last column
        got, want = launch_matching(
            answer, ref, cdiv(rows, WARPS), (32, WARPS), x, np.zeros_like(x), output=1,
            what=f"softmax for shape {x.shape}", rtol=1e-4, atol=1e-6,
            hint="lane L keeps (m, d) over the columns L, L + 32, ...; combine two lanes' "
            "(m, d) and (m2, d2) as M = max(m, m2), d e^(m - M) + d2 e^(m2 - M), with "
            "shfl_xor_sync at offsets 16, 8, 4, 2, 1 so every lane ends with the row's")
        if not got["shuffles"]:
            raise Wrong("right values, but no warp shuffle: combine the 32 lanes' running "
                        "(max, sum) with cuda.shfl_xor_sync(0xFFFFFFFF, value, offset), "
                        "registers to registers, not through memory.")
        expect_within(got, want, "One warp per row: lane L reads the columns L, L + 32, ... "
                      "(a warp reads 32 consecutive columns), one pass for max and sum, one "
                      "to write.", names=("x", "out"), reads=(0,), writes=(1,),
                      sectors=1.25, busiest=1.5)


# ---- 5.8 the lab: FlashAttention's fused forward pass --------------------------------------

HEAD_DIM = 8
ATT_ROWS = 8
HEAD_PAD = HEAD_DIM + 1      # 5.8's padded key tile, a constant for numba


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """torch's ``scaled_dot_product_attention`` of one head (float32)."""
    import torch  # deferred: torch costs about a second to import

    t = [torch.from_numpy(np.ascontiguousarray(x))[None] for x in (q, k, v)]
    return torch.nn.functional.scaled_dot_product_attention(*t)[0].numpy()


@exercise("5.8", "a FlashAttention-style fused attention forward",
          reference=lib.attention_flash(HEAD_DIM, ATT_ROWS), binds="attention_flash",
          answers=_family(("attention_flash", lib.attention_flash(HEAD_DIM, ATT_ROWS)))
          + ("labkit.kernels.ops:attention",))
def _(answer, ref, rng):
    for n in (not_multiple(rng, 17, 33, ATT_ROWS), 5):
        q, k = (rng.standard_normal((n, HEAD_DIM)) * 1.5).astype(np.float32), \
            rng.standard_normal((n, HEAD_DIM)).astype(np.float32)
        v = rng.uniform(-2, 2, size=(n, HEAD_DIM)).astype(np.float32)
        k[-1] = 4 * q[0]            # a late, dominant key for query 0: rescaling matters
        got, want = launch_both(answer, ref, cdiv(n, ATT_ROWS), (HEAD_DIM, ATT_ROWS),
                                q, k, v, np.zeros_like(q))
        expect_close(got["arrays"][3], sdpa(q, k, v), f"o for N={n}, d={HEAD_DIM} (against "
                     "torch's scaled_dot_product_attention)", rtol=1e-4, atol=1e-5,
                     hint="scores s = q·k / sqrt(d); per key tile m' = max(m, rowmax), "
                     "l' = e^(m - m') l + sum e^(s - m'), acc' = e^(m - m') acc + "
                     "sum e^(s - m') v; keys past N score -inf; o = acc / l at the end")
        expect_within(got, want, "Load each K and V tile into shared memory once per block "
                      "(coalesced), keep the scores of one tile in shared memory and the "
                      "running m, l and output element in registers: no N x N matrix, no "
                      "row of scores in local memory.", names=("q", "k", "v", "o"),
                      reads=(0, 1, 2), writes=(3,))

