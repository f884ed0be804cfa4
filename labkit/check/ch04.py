"""Chapter 04's exercises: kernels written as ``fn(cuda)``, checked for results and budget.

Each checker runs the learner's kernel under labkit's tracer on seeded, non-uniform inputs
whose sizes are not multiples of the block, compares with numpy, then enforces a memory
budget from the trace (a correct but wasteful kernel fails).
"""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.hardware import KB, WARP_SIZE, sm_limits
from labkit.kernels import library as lib
from labkit.kernels.analysis import BudgetExceeded, element_counts, enforce, summarize
from labkit.validate import ceil_div as cdiv
from labkit.kernels.tracer import OutOfBounds, WRITE, run_traced

BLOCK = 32
RADIUS = 2
SIZES_1D = (1, 31, 33, 100)


def _run(kernel_fn, griddim, blockdim, *args):
    try:
        return run_traced(kernel_fn, griddim, blockdim, *args)
    except OutOfBounds as exc:
        raise Wrong(f"{exc}. Threads past the end must do nothing: guard with "
                    "`if i < out.size:`.") from None


def _budget(trace, hint: str, **limits):
    try:
        return enforce(trace, **limits)
    except BudgetExceeded as exc:
        raise Wrong(f"right values, but over budget: {exc}. {hint}") from None


def _rng(seed: int):
    return np.random.default_rng(seed)


@exercise("4.1", "a map kernel with a bounds guard", reference=lib.add_ten, binds="add_ten")
def _(answer):
    for seed, n in enumerate(SIZES_1D):
        a = _rng(seed).standard_normal(n).astype(np.float32) * 5
        out = np.zeros_like(a)
        trace = _run(answer, cdiv(n, BLOCK), BLOCK, a, out)
        expect_close(out, a + 10, f"out for n={n}", hint="out[i] should be a[i] + 10",
                     rtol=1e-6, atol=1e-5)
        _budget(trace, "each thread should read its a[i] once and write out[i] once",
                max_reads_per_element={"a": 1}, max_global_reads=n, max_global_writes=n)


def _check_2d(answer, reference, make_inputs, want_fn, what, extra_hint, limits_fn):
    for seed, (rows, cols) in enumerate([(5, 37), (19, 23), (1, 70)]):
        inputs = make_inputs(_rng(seed + 10), rows, cols)
        out = np.zeros((rows, cols), dtype=np.float32)
        grid, block = (cdiv(cols, 16), cdiv(rows, 8)), (16, 8)
        trace = _run(answer, grid, block, *inputs, out)
        expect_close(out, want_fn(*inputs), f"out for shape {(rows, cols)}", hint=what,
                     rtol=1e-6, atol=1e-5)
        ref_out = np.zeros_like(out)
        ref = summarize(run_traced(reference, grid, block, *inputs, ref_out))
        _budget(trace, extra_hint, max_sectors_per_request=ref.sectors_per_request,
                **limits_fn(rows, cols))


@exercise("4.2", "a coalesced 2-D kernel", reference=lib.add_2d, binds="add_2d")
def _(answer):
    _check_2d(answer, lib.add_2d,
              lambda rng, r, c: (rng.standard_normal((r, c)).astype(np.float32),
                                 rng.random((r, c)).astype(np.float32)),
              lambda a, b: a + b, "out[r, c] should be a[r, c] + b[r, c]; check which of "
              "x and y is the row",
              "Consecutive threads (threadIdx.x) must touch consecutive addresses: in a "
              "row-major array that is the column index c.",
              lambda r, c: {"max_global_reads": 2 * r * c, "max_global_writes": r * c})


@exercise("4.3", "a broadcast kernel", reference=lib.broadcast_add, binds="broadcast_add")
def _(answer):
    _check_2d(answer, lib.broadcast_add,
              lambda rng, r, c: (rng.standard_normal(r).astype(np.float32) * 3,
                                 rng.standard_normal(c).astype(np.float32)),
              lambda col, row: col[:, None] + row[None, :],
              "out[r, c] should be col[r] + row[c]",
              "Each thread reads one value of col and one of row, and threadIdx.x walks "
              "the columns.",
              lambda r, c: {"max_global_reads": 2 * r * c, "max_global_writes": r * c,
                            "max_reads_per_element": {"col": c, "row": r}})


def conv_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """out[i] = sum_k w[k] a[i + k - r], zero outside a (numpy)."""
    return np.convolve(a, w[::-1], mode="same").astype(np.float32)


@exercise("4.4", "a 1-D convolution through shared memory",
          reference=lib.conv1d_shared(BLOCK, RADIUS), binds="conv1d_shared")
def _(answer):
    for seed, n in enumerate((7, 45, 100, 2 * BLOCK)):   # 2 * BLOCK: a full last block
        rng = _rng(seed + 20)
        a = rng.standard_normal(n).astype(np.float32)
        w = rng.standard_normal(2 * RADIUS + 1).astype(np.float32)
        out = np.zeros_like(a)
        trace = _run(answer, cdiv(n, BLOCK), BLOCK, a, w, out)
        want = conv_reference(a, w)
        if np.allclose(out, np.convolve(a, w, mode="same"), atol=1e-4) and not np.allclose(
                out, want, atol=1e-4):
            raise Wrong("out is the convolution with w reversed: use w[k] * a[i + k - RADIUS].")
        expect_close(out, want, f"out for n={n}", rtol=1e-4, atol=1e-4,
                     hint="outside a the input counts as 0; the halo has RADIUS elements "
                     "on each side; did every thread wait at cuda.syncthreads() before "
                     "reading the tile?")
        worst = int(element_counts(trace, "a").max())
        if worst > 2:
            raise Wrong(f"right values, but an element of a was read {worst} times from "
                        "global memory (budget 2): load the tile and its halo into "
                        "cuda.shared.array once, then read neighbours from shared memory.")
        writes = element_counts(trace, "out", WRITE)
        if writes.max() > 1:
            raise Wrong("each out[i] should be written once (accumulate in a local "
                        "variable, then store).")


# ---- 4.5 a padded shared-memory transpose ---------------------------------------------

TILE = 32
ROWS = 8


@exercise("4.5", "a transpose through padded shared memory",
          reference=lib.transpose_shared(TILE, ROWS, 1), binds="transpose_tile")
def _(answer):
    reference = lib.transpose_shared(TILE, ROWS, 1)
    for seed, (rows, cols) in enumerate([(37, 45), (5, 40)]):
        a = _rng(seed + 60).standard_normal((rows, cols)).astype(np.float32)
        out = np.zeros((cols, rows), dtype=np.float32)
        grid, block = (cdiv(cols, TILE), cdiv(rows, TILE)), (TILE, ROWS)
        trace = _run(answer, grid, block, a, out)
        expect_close(out, a.T, f"out for a of shape {a.shape}", rtol=0, atol=0,
                     hint="each block handles a TILE x TILE tile with TILE x ROWS threads: "
                     "loop k = 0, ROWS, 2 ROWS, ... over the tile's rows; out[c, r] = a[r, c]")
        ref = summarize(run_traced(reference, grid, block, a, np.zeros_like(out)))
        _budget(trace, "Read a row of the tile per warp (coalesced), wait at "
                "cuda.syncthreads(), then write a row of the *output* per warp, reading the "
                "tile by column; pad the tile to (TILE, TILE + 1) so that column read hits "
                "32 different banks.", max_global_reads=a.size, max_global_writes=a.size,
                max_sectors_per_request=ref.sectors_per_request,
                max_conflict_ways=ref.max_conflict_ways)


# ---- 4.6 predict occupancy ------------------------------------------------------------

def blocks_per_sm_reference(threads_per_block: int, registers_per_thread: int,
                            shared_bytes: int) -> int:
    """Blocks of one kernel resident on an A100 SM (the four limits of section 6)."""
    from labkit.kernels.occupancy import occupancy
    return occupancy("A100", threads_per_block, registers_per_thread,
                     shared_bytes).blocks_per_sm


OCCUPANCY_CASES = ((256, 32, 0), (128, 37, 0), (320, 37, 0), (96, 40, 1000), (32, 16, 0),
                   (256, 32, 48 * 1024), (512, 64, 0), (64, 33, 2048), (1024, 64, 0),
                   (128, 24, 20 * 1024), (192, 72, 0))


@exercise("4.6", "predict blocks per SM on an A100", reference=blocks_per_sm_reference,
          binds="blocks_per_sm")
def _(answer):
    sm = sm_limits("A100")
    for threads, regs, smem in OCCUPANCY_CASES:
        got = answer(threads, regs, smem)
        want = blocks_per_sm_reference(threads, regs, smem)
        if got == want:
            continue
        # the limits as a learner computes them, each shortcut leaving one rule out
        warps = cdiv(threads, WARP_SIZE)
        per_warp = cdiv(regs * WARP_SIZE, sm.register_unit) * sm.register_unit
        by_warps = sm.max_warps_per_sm // warps
        by_regs = (sm.registers_per_sm // sm.sub_partitions // per_warp) * sm.sub_partitions \
            // warps
        reserved = sm.reserved_shared_per_block
        hints = []
        if got == min(by_warps, sm.max_blocks_per_sm, sm.registers_per_sm // (regs * threads),
                      sm.shared_per_sm // max(smem + reserved, 1)):
            hints.append(f"registers are allocated per warp in units of {sm.register_unit} "
                         f"({regs} x {WARP_SIZE} = {regs * WARP_SIZE} rounds up to {per_warp})")
        if smem and got == min(by_warps, sm.max_blocks_per_sm, by_regs, sm.shared_per_sm // smem):
            hints.append(f"the runtime reserves {reserved // KB} KB of shared memory per block")
        if got == min(by_warps, by_regs,
                      sm.shared_per_sm // (cdiv(smem + reserved, sm.shared_unit) * sm.shared_unit)):
            hints.append(f"an SM holds at most {sm.max_blocks_per_sm} blocks")
        raise Wrong(f"blocks_per_sm({threads}, {regs}, {smem}) = {got}, expected {want}"
                    + (": " + "; ".join(hints) if hints else ": take the minimum of the "
                       "warp, block, register and shared-memory limits"))
