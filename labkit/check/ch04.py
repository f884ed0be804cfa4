"""Chapter 04's exercises: kernels written as ``fn(cuda)``, checked for results and work.

Each kernel check launches the learner's kernel and labkit's reference on the same inputs
drawn from ``rng`` (non-uniform values, sizes that are not multiples of the block) through
:func:`launch_report`, a labkit function that traces the launch and returns plain data:
the arrays after it, and the work of the whole launch. The verdict is decided on those
numbers, in this order: the launch ran (no out-of-bounds index, no deadlock), no
shared-memory race (:func:`labkit.kernels.analysis.races`: racy code can give right
values by luck), right values, then **budgets on the total work measured on the
reference**: total global and local sectors within :data:`SECTOR_FACTOR` of the
reference's (a loop in one thread costs a sector per access; local arrays are memory
traffic), no thread making more than :data:`BUSIEST_FACTOR` times the memory accesses of
the reference's busiest thread (the work is spread over the threads), and per exercise the
reads of each element, the global atomics, bank-conflict replays or SIMT efficiency.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import HANDED_OUT, Wrong, exercise, expect_close, get
from labkit.hardware import KB, WARP_SIZE, sm_limits
from labkit.kernels import library as lib
from labkit.kernels.analysis import format_races, races, summarize
from labkit.kernels.occupancy import occupancy
from labkit.kernels.trace import (ATOMIC, GLOBAL, LOCAL, READ, WRITE, Deadlock, OutOfBounds,
                                  TraceLimitExceeded)
from labkit.kernels.tracer import run_traced
from labkit.validate import ceil_div as cdiv

BLOCK = 32
RADIUS = 2
HALO_TILE = BLOCK + 2 * RADIUS
"""4.4's shared tile: numba-cuda needs a shared array's shape as a constant, a number or
a name bound to one (``BLOCK + 2 * RADIUS`` written in the kernel does not compile)."""
SECTOR_FACTOR = 1.5
"""A kernel's global and local sectors may be this many times the reference's."""
BUSIEST_FACTOR = 4
"""Its busiest thread may make this many times the memory accesses of the reference's."""


# ---- the derive function: one traced launch as plain data ----------------------------------

def launch_report(kernel_fn, griddim, blockdim, *args) -> dict:
    """Trace ``kernel_fn`` on ``griddim`` x ``blockdim`` threads with ``args`` (copies:
    the arguments are not changed) and return, as plain data, ``arrays`` (every array
    argument after the launch) and the work of the launch: ``total_sectors`` (global and
    local 32-byte sectors) and ``local_sectors``, ``sectors_per_request`` (global),
    ``busiest`` (the most memory accesses of one thread), ``replays`` and ``ways``
    (shared-memory bank conflicts), ``simt`` (SIMT efficiency, shuffles counted),
    ``races`` and ``race_text`` (shared-memory races), ``syncs_max`` (the most
    ``syncthreads`` one thread passed), ``shuffles``, ``syncwarps``, ``shared_reads``,
    ``register_words`` / ``memory_arrays`` (local arrays kept in registers / in local
    memory) and, per array argument, ``max_reads``, ``max_writes``, ``reads``,
    ``writes`` and ``atomics``. A launch that indexes out of bounds, deadlocks or passes
    the tracer's work limits returns ``{"error": kind, "message": ...}`` instead."""
    args = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)
    try:
        trace = run_traced(kernel_fn, griddim, blockdim, *args)
    except OutOfBounds as exc:
        return {"error": "bounds", "message": str(exc)}
    except Deadlock as exc:
        return {"error": "deadlock", "message": str(exc)}
    except TraceLimitExceeded as exc:
        return {"error": "work", "message": str(exc)}
    s = summarize(trace)
    found = races(trace)
    c = trace.columns
    per_array = []
    for k, info in enumerate(trace.arrays):
        if info.space != GLOBAL:
            continue
        sel = (c["space"] == GLOBAL) & (c["array"] == k)
        size = max(math.prod(info.shape), 1)

        def counts(op):
            return np.bincount(c["index"][sel & (c["op"] == op)], minlength=size)
        reads, writes = counts(READ), counts(WRITE)
        per_array.append({"max_reads": int(reads.max()), "reads": int(reads.sum()),
                          "max_writes": int(writes.max()), "writes": int(writes.sum()),
                          "atomics": int(np.count_nonzero(sel & (c["op"] == ATOMIC)))})
    local = [a for a in trace.arrays if a.space == LOCAL]
    return {
        "error": None,
        "arrays": [a for a in args if isinstance(a, np.ndarray)],
        "per_array": per_array,
        "total_sectors": s.total_sectors, "local_sectors": s.local_sectors,
        "sectors_per_request": s.sectors_per_request,
        "busiest": s.busiest_thread_accesses,
        "replays": s.conflict_replays, "ways": s.max_conflict_ways,
        "simt": s.simt_efficiency,
        "races": len(found), "race_text": format_races(found),
        "syncs_max": int(trace.thread_syncs.max()) if trace.n_threads else 0,
        "shuffles": trace.shuffles, "syncwarps": trace.syncwarps,
        "shared_reads": s.traffic.shared_reads,
        "register_words": sum(math.ceil(math.prod(a.shape) * a.itemsize / 4)
                              for a in local if a.registers),
        "memory_arrays": [a.name for a in local if not a.registers],
    }


# ---- judging a report against the reference's ------------------------------------------------

BOUNDS_HINT = "Threads past the end must do nothing: guard with `if i < out.size:`."


def launch_both(answer, ref, griddim, blockdim, *args) -> tuple[dict, dict]:
    """The reference's report and the answer's (the reference first: its calls never
    depend on the answer), after checking that the answer's launch ran and is race-free."""
    want = ref.derive(launch_report, griddim, blockdim, *args)
    got = answer.derive(launch_report, griddim, blockdim, *args)
    expect_ran(got)
    return got, want


def launch_matching(answer, ref, griddim, blockdim, *args, output: int, what: str,
                    hint: str, rtol: float, atol: float) -> tuple[dict, dict]:
    """:func:`launch_both`, then Wrong unless the answer's array ``args[output]`` after the
    launch matches the reference's (:func:`~labkit.check.core.expect_close` with ``what``,
    ``hint``, ``rtol`` and ``atol``); the two reports."""
    got, want = launch_both(answer, ref, griddim, blockdim, *args)
    expect_close(got["arrays"][output], want["arrays"][output], what, hint=hint, rtol=rtol,
                 atol=atol)
    return got, want


def expect_ran(got: dict, bounds_hint: str = BOUNDS_HINT) -> None:
    """Wrong unless the launch ran and has no shared-memory race (checked before values:
    a racy kernel's values depend on luck)."""
    if got["error"] == "bounds":
        raise Wrong(f"{got['message']}. {bounds_hint}")
    if got["error"] == "deadlock":
        raise Wrong(got["message"])
    if got["error"] == "work":
        raise Wrong(f"{got['message']}")
    if got["races"]:
        raise Wrong(f"{got['race_text']}. Between one thread's write to a shared element "
                    "and another's access to it there must be a cuda.syncthreads() (or, "
                    "inside one warp, a cuda.syncwarp()): without it the result depends on "
                    "timing.")


def expect_within(got: dict, want: dict, hint: str, *, names: tuple[str, ...],
                  sectors: float = SECTOR_FACTOR, busiest: float = BUSIEST_FACTOR,
                  reads: tuple[int, ...] = (), writes: tuple[int, ...] = (),
                  atomics: tuple[int, ...] = (), replays: float | None = None,
                  simt: bool = False, depth: int | None = None,
                  depth_hint: str = "") -> None:
    """Wrong listing every budget ``got`` breaks, each set from the reference's ``want``:
    total sectors within ``sectors`` x, the busiest thread within ``busiest`` x, the most
    reads (writes) of one element of the array arguments at positions ``reads``
    (``writes``) and the global atomics on ``atomics`` no more than the reference's,
    bank-conflict replays within ``replays`` x (+ 0), SIMT efficiency at least the
    reference's (``simt``), and each launched thread's ``syncthreads`` reaching ``depth``
    unless the kernel uses warp shuffles or ``syncwarp``. ``names``: the array arguments'
    names, for the messages."""
    broken = []
    for k in reads:
        g, w = got["per_array"][k]["max_reads"], want["per_array"][k]["max_reads"]
        if g > w:
            broken.append(f"an element of {names[k]} was read {g} times from global memory "
                          f"(budget {w})")
    for k in writes:
        g, w = got["per_array"][k]["max_writes"], want["per_array"][k]["max_writes"]
        if g > w:
            broken.append(f"an element of {names[k]} was written {g} times (budget {w})")
    for k in atomics:
        g, w = got["per_array"][k]["atomics"], want["per_array"][k]["atomics"]
        if g > w:
            broken.append(f"{g} global atomics on {names[k]} (budget {w})")
    limit = sectors * want["total_sectors"]
    if got["total_sectors"] > limit:
        local = (f", {got['local_sectors']} of them local memory (cuda.local.array)"
                 if got["local_sectors"] else "")
        broken.append(f"{got['total_sectors']} sectors of global and local memory traffic "
                      f"(budget {limit:g}: {sectors:g} x the reference's "
                      f"{want['total_sectors']}{local}; {got['sectors_per_request']:.2f} "
                      f"sectors per warp request against its "
                      f"{want['sectors_per_request']:.2f}): accesses not coalesced, or "
                      "done one lane at a time")
    limit = busiest * want["busiest"]
    if got["busiest"] > limit:
        broken.append(f"one thread made {got['busiest']} memory accesses (budget {limit:g}: "
                      f"{busiest:g} x the reference's busiest thread, {want['busiest']}): "
                      "the work is not spread over the threads")
    if replays is not None:
        limit = replays * want["replays"]
        if got["replays"] > limit:
            broken.append(f"{got['replays']} shared-memory bank-conflict replays, up to "
                          f"{got['ways']}-way shared-memory bank conflicts (budget "
                          f"{limit:g} replays, the reference's {want['replays']})")
    if simt and got["simt"] < want["simt"] - 1e-9:
        broken.append(f"SIMT efficiency {got['simt']:.0%} (the reference reaches "
                      f"{want['simt']:.0%}): lanes sit idle in most warp instructions")
    if (depth is not None and got["syncs_max"] < depth and not got["shuffles"]
            and not got["syncwarps"]):
        broken.append(f"no thread passed more than {got['syncs_max']} cuda.syncthreads() "
                      f"(a tree over the block needs {depth}): {depth_hint}")
    if broken:
        raise Wrong(f"right values, but over budget: {'; '.join(broken)}. {hint}")


def sizes_1d(rng, fixed: tuple[int, ...], low: int, high: int, block: int,
             draws: int = 1) -> list[int]:
    """``fixed`` sizes and ``draws`` sizes from [low, high) that are not multiples of
    ``block``."""
    out = list(fixed)
    while len(out) < len(fixed) + draws:
        n = int(rng.integers(low, high))
        if n % block:
            out.append(n)
    return out


def not_multiple(rng, low: int, high: int, of: int) -> int:
    """A size drawn from [low, high) that is not a multiple of ``of``."""
    while True:
        n = int(rng.integers(low, high))
        if n % of:
            return n


def whose(kernel, exercise_id: str) -> str:
    """'your kernel' when ``kernel`` is the learner's, else the sentence that says labkit's
    reference ran because the learner's answer to ``exercise_id`` has not passed."""
    ex = get(exercise_id)
    if getattr(kernel, "__labkit_stub__", False):
        return f"nothing yet (finish exercise {exercise_id} first)"
    if kernel is ex.reference or HANDED_OUT.get(id(kernel)) == exercise_id:
        return (f"labkit's reference (your answer to {exercise_id} has not passed its "
                f"check yet)")
    return "your kernel"


# ---- 4.1 - 4.3 maps --------------------------------------------------------------------

@exercise("4.1", "a map kernel with a bounds guard", reference=lib.add_ten, binds="add_ten")
def _(answer, ref, rng):
    for n in sizes_1d(rng, (1, 33), 100, 300, BLOCK):
        a = (rng.standard_normal(n) * 5).astype(np.float32)
        got, want = launch_matching(answer, ref, cdiv(n, BLOCK), BLOCK, a, np.zeros_like(a),
                                    output=1, what=f"out for n={n}",
                                    hint="out[i] should be a[i] + 10", rtol=1e-6, atol=1e-5)
        expect_within(got, want, "Each thread reads its a[i] once and writes its out[i] "
                      "once: i = blockIdx.x * blockDim.x + threadIdx.x.",
                      names=("a", "out"), reads=(0,), writes=(1,))


def _check_2d(answer, ref, rng, make_inputs, what, extra_hint, **budgets):
    shapes = [(not_multiple(rng, 5, 30, 8), not_multiple(rng, 17, 60, 16)), (1, 70)]
    for rows, cols in shapes:
        inputs = make_inputs(rng, rows, cols)
        grid, block = (cdiv(cols, 16), cdiv(rows, 8)), (16, 8)
        out = np.zeros((rows, cols), dtype=np.float32)
        got, want = launch_matching(answer, ref, grid, block, *inputs, out, output=2,
                                    what=f"out for shape {(rows, cols)}", hint=what,
                                    rtol=1e-6, atol=1e-5)
        expect_within(got, want, extra_hint, **budgets)


@exercise("4.2", "a coalesced 2-D kernel", reference=lib.add_2d, binds="add_2d",
          answers=(lib.add_2d_transposed,))
def _(answer, ref, rng):
    _check_2d(answer, ref, rng,
              lambda rng, r, c: (rng.standard_normal((r, c)).astype(np.float32),
                                 rng.random((r, c)).astype(np.float32) ** 3),
              "out[r, c] should be a[r, c] + b[r, c]; check which of x and y is the row",
              "Consecutive threads (threadIdx.x) must touch consecutive addresses: in a "
              "row-major array that is the column index c.",
              names=("a", "b", "out"), reads=(0, 1), writes=(2,))


@exercise("4.3", "a broadcast kernel", reference=lib.broadcast_add, binds="broadcast_add")
def _(answer, ref, rng):
    _check_2d(answer, ref, rng,
              lambda rng, r, c: ((rng.standard_normal(r) * 3).astype(np.float32),
                                 rng.exponential(size=c).astype(np.float32)),
              "out[r, c] should be col[r] + row[c]",
              "Each thread reads one value of col and one of row, and threadIdx.x walks "
              "the columns.", names=("col", "row", "out"), reads=(0, 1), writes=(2,))


# ---- 4.4 a convolution through shared memory ------------------------------------------

def conv_reference(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """out[i] = sum_k w[k] a[i + k - r], zero outside a (numpy)."""
    return np.convolve(a, w[::-1], mode="same").astype(np.float32)


@exercise("4.4", "a 1-D convolution through shared memory",
          reference=lib.conv1d_shared(BLOCK, RADIUS), binds="conv1d_shared",
          answers=("labkit.kernels.library:conv1d_shared", lib.conv1d_naive))
def _(answer, ref, rng):
    # 2 * BLOCK: a full last block, whose right halo lies past the end
    for n in sizes_1d(rng, (7, 2 * BLOCK), 40, 130, BLOCK):
        a = rng.standard_normal(n).astype(np.float32)
        w = rng.standard_normal(2 * RADIUS + 1).astype(np.float32)
        got, want = launch_both(answer, ref, cdiv(n, BLOCK), BLOCK, a, w, np.zeros_like(a))
        out = got["arrays"][2]
        if np.allclose(out, np.convolve(a, w, mode="same"), atol=1e-4) and not np.allclose(
                out, want["arrays"][2], atol=1e-4):
            raise Wrong("out is the convolution with w reversed: use w[k] * a[i + k - RADIUS].")
        expect_close(out, want["arrays"][2], f"out for n={n}", rtol=1e-4, atol=1e-4,
                     hint="outside a the input counts as 0; the halo has RADIUS elements "
                     "on each side; did every thread wait at cuda.syncthreads() before "
                     "reading the tile?")
        expect_within(got, want, "Load the tile and its halo into cuda.shared.array once, "
                      "wait at cuda.syncthreads(), then read the neighbours from shared "
                      "memory; accumulate in a local variable and store out[i] once.",
                      names=("a", "w", "out"), reads=(0,), writes=(2,))


# ---- 4.5 a padded shared-memory transpose ---------------------------------------------

TILE = 32
ROWS = 8
TILE_PADDED = TILE + 1     # 4.5's padded row length, a constant for numba


@exercise("4.5", "a transpose through padded shared memory",
          reference=lib.transpose_shared(TILE, ROWS, 1), binds="transpose_tile",
          answers=("labkit.kernels.library:transpose_shared", lib.transpose_naive))
def _(answer, ref, rng):
    shapes = [(not_multiple(rng, 9, 32, TILE), not_multiple(rng, 33, 50, TILE)), (5, 40)]
    for rows, cols in shapes:
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        grid, block = (cdiv(cols, TILE), cdiv(rows, TILE)), (TILE, ROWS)
        got, want = launch_matching(
            answer, ref, grid, block, a, np.zeros((cols, rows), dtype=np.float32), output=1,
            what=f"out for a of shape {a.shape}", rtol=0, atol=0,
            hint="each block handles a TILE x TILE tile with TILE x ROWS threads: loop k = "
            "0, ROWS, 2 ROWS, ... over the tile's rows; out[c, r] = a[r, c]")
        expect_within(got, want, "Read a row of the tile per warp (coalesced), wait at "
                      "cuda.syncthreads(), then write a row of the *output* per warp, reading "
                      "the tile by column; pad the tile to (TILE, TILE + 1) so that column "
                      "read hits 32 different banks.", names=("a", "out"), reads=(0,),
                      writes=(1,), replays=1)


# ---- 4.6 predict occupancy ------------------------------------------------------------

def blocks_per_sm_reference(threads_per_block: int, registers_per_thread: int,
                            shared_bytes: int) -> int:
    """Blocks of one kernel resident on an A100 SM (the four limits of section 6)."""
    return occupancy("A100", threads_per_block, registers_per_thread,
                     shared_bytes).blocks_per_sm


OCCUPANCY_CASES = ((256, 32, 0), (128, 37, 0), (320, 37, 0), (96, 40, 1000), (32, 16, 0),
                   (256, 32, 48 * 1024), (512, 64, 0), (64, 33, 2048), (1024, 64, 0),
                   (128, 24, 20 * 1024), (192, 72, 0))


def occupancy_cases(rng, draws: int = 6) -> list[tuple[int, int, int]]:
    """The fixed launches and ``draws`` more: any block size, 16-96 registers (a block's
    registers within 48 K), shared memory 0 or up to 40 KB."""
    cases = list(OCCUPANCY_CASES)
    while len(cases) < len(OCCUPANCY_CASES) + draws:
        threads, regs = int(rng.integers(1, 1025)), int(rng.integers(16, 97))
        smem = 0 if rng.random() < 0.4 else int(rng.integers(1, 40 * KB))
        if threads * regs <= 48 * KB:
            cases.append((threads, regs, smem))
    return cases


@exercise("4.6", "predict blocks per SM on an A100", reference=blocks_per_sm_reference,
          binds="blocks_per_sm", answers=("labkit.kernels.occupancy:occupancy",))
def _(answer, ref, rng):
    sm = sm_limits("A100")
    for threads, regs, smem in occupancy_cases(rng):
        want = ref(threads, regs, smem)
        got = answer(threads, regs, smem)
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


# ---- 4.7 a histogram privatized in shared memory --------------------------------------

BINS = 16
HIST_BLOCK = 64
HIST_BLOCKS = 3


def skewed_values(rng, n: int, bins: int) -> np.ndarray:
    """``n`` int32 values in [0, bins), most of them in the first few bins (geometric)."""
    return np.minimum(rng.geometric(0.3, size=n) - 1, bins - 1).astype(np.int32)


@exercise("4.7", "a histogram privatized in shared memory",
          reference=lib.histogram_shared(BINS), binds="histogram",
          answers=("labkit.kernels.library:histogram_shared", lib.histogram_global))
def _(answer, ref, rng):
    for n in sizes_1d(rng, (37,), 300, 900, HIST_BLOCK):
        a = skewed_values(rng, n, BINS)
        got, want = launch_matching(
            answer, ref, HIST_BLOCKS, HIST_BLOCK, a, np.zeros(BINS, dtype=np.int32), output=1,
            what=f"counts for n={n}", rtol=0, atol=0,
            hint="counts[b] is how many elements of a equal b; the grid (3 blocks of 64) is "
            "smaller than a: let each thread step by gridDim.x * blockDim.x")
        expect_within(got, want, f"Count into a cuda.shared.array({BINS}, cuda.int32) "
                      "first (zero it, syncthreads, cuda.atomic.add on it, syncthreads), "
                      "then add each shared count into counts with one global atomic per "
                      "bin and block.", names=("a", "counts"), reads=(0,), atomics=(1,))


# ---- 4.8 a 3 x 3 blur through a shared tile with a halo ---------------------------------

BX, BY = 16, 8
HALO_ROWS, HALO_COLS = BY + 2, BX + 2     # 4.8's shared tile, constants for numba


@exercise("4.8", "a 3 x 3 blur through a shared tile with a halo",
          reference=lib.blur_shared(BX, BY), binds="blur",
          answers=("labkit.kernels.library:blur_shared", lib.blur_naive))
def _(answer, ref, rng):
    for rows, cols in [(not_multiple(rng, 9, 17, BY), not_multiple(rng, 17, 33, BX)), (3, 5)]:
        img = rng.gamma(2.0, size=(rows, cols)).astype(np.float32)
        grid = (cdiv(cols, BX), cdiv(rows, BY))
        got, want = launch_matching(
            answer, ref, grid, (BX, BY), img, np.zeros_like(img), output=1,
            what=f"out for an image of shape {img.shape}", rtol=1e-5, atol=1e-5,
            hint="out[r, c] is the sum of the 3 x 3 neighbours divided by 9, neighbours "
            "outside the image counting 0; the tile is (BY + 2) x (BX + 2), its element "
            "(0, 0) the image's (blockIdx.y * BY - 1, blockIdx.x * BX - 1)")
        expect_within(got, want, "Load the (BY + 2) x (BX + 2) tile once (the block's "
                      "threads walking its elements), cuda.syncthreads(), then read the "
                      "nine neighbours from shared memory.", names=("img", "out"),
                      reads=(0,), writes=(1,))
