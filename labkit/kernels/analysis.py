"""What a trace says: traffic, coalescing, bank conflicts, divergence, races, and budgets.

Warp instructions. Threads of one warp (32 consecutive linear thread ids of a block) that
make the same access (source line, array, op) for the k-th time make one warp instruction;
the lanes that took part are its *active mask*. Warp shuffles group the same way.

* Coalescing: a global warp instruction is served in 32-byte sectors; it needs as many
  sectors as distinct ``byte_address // 32`` among its lanes (CUDA C++ Best Practices
  Guide, "Coalesced Access to Global Memory"). Arrays are taken as 256-byte aligned.
* Local memory lives in device memory and is "subject to the same requirements for
  memory coalescing" as global memory, but "organized such that consecutive 32-bit words
  are accessed by consecutive thread IDs" (CUDA C++ Programming Guide, "Device Memory
  Accesses", Local Memory). Modelled so: 32-bit word ``w`` of lane ``L``'s copy of a local
  array lies at byte ``4 (32 w + L)`` of its warp's (128-byte aligned) region, each array
  a region of its own; a local warp instruction needs the distinct 32-byte sectors of the
  words its lanes touch. A warp reading one index of its lanes' arrays takes 4 sectors
  (fully coalesced); one lane alone takes a sector per access. Local arrays the tracer
  judges to be registers (every index a compile-time constant, see
  :mod:`labkit.kernels.tracer`) are not memory: no instructions, sectors or accesses.
* Bank conflicts: shared memory has 32 banks of 4-byte words, bank = word mod 32; lanes
  reading the same word get a broadcast, lanes reading different words of one bank are
  serialized: "the hardware splits a memory request with bank conflicts into as many
  separate conflict-free requests as necessary" (CUDA C++ Programming Guide, "Shared
  Memory", and "Compute Capability 5.x" through 9.0: "successive 32-bit words map to
  successive banks"; no conflict "between two threads that access any address within the
  same 32-bit word"). An instruction's *requests* = the largest number of distinct words
  in one bank. 64-bit (and wider) accesses: for compute capability 5.x and later the
  guide gives no rule of their own (the 64-bit bank mode was Kepler's, 3.x); an 8-byte
  element covers two consecutive words, in two banks, and counts as both. A warp's request
  then needs at least ``ceil(distinct words / 32)`` requests (32 banks x 4 bytes = 128
  bytes per request): 2 for 32 consecutive float64. Its *ways* = requests / that minimum,
  rounded up (1 = conflict-free, 32 = fully serialized), and its *replays* = requests -
  minimum. For float64 read by a warp with stride 1 (words 0..63): 2 requests, the minimum,
  1-way; with stride 2 (words 4k, 4k + 1): 16 banks hold 4 words each, 4 requests, 2-way,
  2 replays. For 4-byte (and narrower) elements the minimum is 1: ways = requests.
* Divergence: SIMT efficiency = active lanes / threads of the warp, averaged over warp
  instructions: memory instructions (global, shared, local) and warp shuffles.
* Races (:func:`races`): two accesses of different threads of a block to one shared
  element, at least one a write (atomics against atomics do not race), with no
  ``syncthreads`` between them — for two lanes of one warp, no ``syncthreads`` and no
  ``syncwarp``: under Volta's independent thread scheduling "applications that assume
  reads and writes are implicitly visible to other threads in the same warp need to insert
  the new __syncwarp() warp-wide barrier synchronization instruction between steps where
  data is exchanged between threads via global or shared memory" (CUDA C++ Programming
  Guide, "Compute Capability 7.x", Independent Thread Scheduling; the same in the Volta
  Tuning Guide). "No barrier between" is read off the barrier epochs each thread counts
  (:mod:`labkit.kernels.tracer`): equal ``epoch`` (different warps), or equal ``epoch``
  and ``warp_epoch`` (one warp). A thread that exits stops counting, and a barrier does
  not complete until every running thread has reached it or exited, so an access before a
  thread's exit is ordered before every later barrier the others pass: idle threads that
  ``return`` early are not races. The model assumes threads meet their barriers in the
  same order (the k-th barrier of one thread is the k-th of the others).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.hardware import WARP_SIZE
from labkit.kernels.trace import (ATOMIC, GLOBAL, LOCAL, MEMORY_SPACES, OP_NAMES, READ,
                                  SHARED, WRITE, Trace)
from labkit.validate import ceil_div

SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4


@dataclass(frozen=True)
class WarpInstructions:
    """One row per warp instruction of the selected accesses."""
    block: np.ndarray
    warp: np.ndarray
    site: np.ndarray
    array: np.ndarray
    op: np.ndarray
    space: np.ndarray
    active: np.ndarray     # active lanes
    mask: np.ndarray       # active-lane bit mask (bit k = lane k)
    warp_threads: np.ndarray  # threads that exist in this warp (32 unless the block is short)
    sectors: np.ndarray    # 32-byte sectors touched (global, local) ; 0 for shared
    ideal_sectors: np.ndarray  # sectors if the same bytes were contiguous
    ways: np.ndarray       # bank-conflict ways: requests / min_requests, rounded up (shared)
    first_row: np.ndarray  # index of one access of the instruction in the trace
    requests: np.ndarray   # shared: conflict-free requests needed (most words in one bank)
    min_requests: np.ndarray   # shared: the fewest possible, ceil(distinct words / 32)

    def __len__(self) -> int:
        return int(self.block.size)


def _words(byte: np.ndarray, itemsize: np.ndarray, inst: np.ndarray, lane: np.ndarray):
    """Each access's 4-byte words (an 8-byte element covers two): repeated (inst, lane)
    and the word index, one entry per word."""
    per = np.maximum(itemsize // BANK_BYTES, 1)
    rep = np.repeat(np.arange(byte.size), per)
    offset = np.arange(rep.size) - np.repeat(np.cumsum(per) - per, per)
    return inst[rep], lane[rep], byte[rep] // BANK_BYTES + offset


def _group(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of ``cols`` stacked as columns, sorted, with the index of each
    one's first occurrence and each row's group (what ``np.unique(..., axis=0,
    return_index=True, return_inverse=True)`` returns), by one stable lexsort: unique with
    axis=0 is several times slower."""
    keys = np.stack(cols)
    order = np.lexsort(keys[::-1])
    ranked = keys[:, order]
    starts = np.ones(order.size, dtype=bool)
    starts[1:] = np.any(ranked[:, 1:] != ranked[:, :-1], axis=0)
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return ranked[:, starts].T, order[starts], inverse


def _per_instruction_count(inst: np.ndarray, *keys: np.ndarray, n: int) -> np.ndarray:
    """Distinct values of ``keys`` per instruction."""
    if inst.size == 0:
        return np.zeros(n, dtype=np.int64)
    return np.bincount(_group(inst, *keys)[0][:, 0], minlength=n)


def warp_instructions(trace: Trace, space: int | None = None) -> WarpInstructions:
    """Group the trace's memory accesses (of ``space``, or all) into warp instructions;
    accesses to local arrays kept in registers are not memory instructions."""
    c = trace.columns
    rows = np.flatnonzero(trace.select(space=space) & trace.memory_rows())
    if rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return WarpInstructions(*([empty] * 15))
    thread = c["thread"][rows]
    warp = thread // WARP_SIZE
    lane = thread % WARP_SIZE
    uniq, first, inverse = _group(c["block"][rows], warp, c["site"][rows],
                                  c["occurrence"][rows], c["array"][rows], c["op"][rows])
    n = uniq.shape[0]
    active = np.bincount(inverse, minlength=n)
    mask = np.zeros(n, dtype=np.int64)
    np.bitwise_or.at(mask, inverse, np.left_shift(np.int64(1), lane))
    tpb = trace.threads_per_block
    warp_threads = np.minimum(WARP_SIZE, tpb - uniq[:, 1] * WARP_SIZE)

    itemsize = np.array([a.itemsize for a in trace.arrays], dtype=np.int64)
    arr = c["array"][rows]
    size = itemsize[arr]
    byte = c["index"][rows] * size
    space_col = c["space"][rows]
    sectors = np.zeros(n, dtype=np.int64)
    ideal = np.zeros(n, dtype=np.int64)
    requests = np.zeros(n, dtype=np.int64)
    least = np.zeros(n, dtype=np.int64)
    inst_bytes = size[first]
    g = space_col == GLOBAL
    if g.any():
        sectors += _per_instruction_count(inverse[g], byte[g] // SECTOR_BYTES, n=n)
        distinct = _per_instruction_count(inverse[g], byte[g], n=n)
        ideal += np.where(space_col[first] == GLOBAL,
                          ceil_div(distinct * inst_bytes, SECTOR_BYTES), 0)
    loc = space_col == LOCAL
    if loc.any():
        inst, lanes, words = _words(byte[loc], size[loc], inverse[loc], lane[loc])
        sectors += _per_instruction_count(
            inst, (words * WARP_SIZE + lanes) * BANK_BYTES // SECTOR_BYTES, n=n)
        distinct = _per_instruction_count(inverse[loc], lane[loc], byte[loc], n=n)
        ideal += np.where(space_col[first] == LOCAL,
                          ceil_div(distinct * inst_bytes, SECTOR_BYTES), 0)
    s = space_col == SHARED
    if s.any():
        inst, _, words = _words(byte[s], size[s], inverse[s], lane[s])
        distinct = _group(inst, words)[0]
        inst_bank, _, which = _group(distinct[:, 0], distinct[:, 1] % BANKS)
        np.maximum.at(requests, inst_bank[:, 0], np.bincount(which))
        least = np.where(requests > 0,
                         ceil_div(np.bincount(distinct[:, 0], minlength=n), BANKS), 0)
    ways = np.where(least > 0, ceil_div(requests, np.maximum(least, 1)), 0)
    return WarpInstructions(uniq[:, 0], uniq[:, 1], uniq[:, 2], uniq[:, 4],
                            c["op"][rows][first], space_col[first], active, mask,
                            warp_threads, sectors, ideal, ways, rows[first], requests, least)


@dataclass(frozen=True)
class ShuffleInstructions:
    """One row per warp shuffle instruction (lanes of a warp at the k-th shuffle of a
    source line)."""
    block: np.ndarray
    warp: np.ndarray
    site: np.ndarray
    active: np.ndarray
    warp_threads: np.ndarray

    def __len__(self) -> int:
        return int(self.block.size)


def shuffle_instructions(trace: Trace) -> ShuffleInstructions:
    """Group the trace's warp shuffles into warp instructions."""
    c = trace.shuffle_columns
    if c["block"].size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ShuffleInstructions(*([empty] * 5))
    warp = c["thread"] // WARP_SIZE
    uniq, _, inverse = _group(c["block"], warp, c["site"], c["occurrence"])
    active = np.bincount(inverse, minlength=uniq.shape[0])
    warp_threads = np.minimum(WARP_SIZE, trace.threads_per_block - uniq[:, 1] * WARP_SIZE)
    return ShuffleInstructions(uniq[:, 0], uniq[:, 1], uniq[:, 2], active, warp_threads)


@dataclass(frozen=True)
class Traffic:
    """Element accesses of one launch (each read/write of one element counts once)."""
    global_reads: int
    global_writes: int
    global_atomics: int
    shared_reads: int
    shared_writes: int
    global_bytes: int          # bytes requested from global memory (reads+writes+atomics)
    per_array: dict            # name -> {"reads": n, "writes": n, "atomics": n}
    local_reads: int = 0       # of local arrays in local memory (device memory)
    local_writes: int = 0
    local_bytes: int = 0
    register_accesses: int = 0  # reads and writes of local arrays kept in registers


def traffic(trace: Trace) -> Traffic:
    """Count the accesses of ``trace`` by space and operation, and per global array."""
    c = trace.columns
    memory = trace.memory_rows()

    def count(space: int, op: int) -> int:
        return int(np.count_nonzero((c["space"] == space) & (c["op"] == op) & memory))

    itemsize = np.array([a.itemsize for a in trace.arrays] or [0], dtype=np.int64)

    def nbytes(space: int) -> int:
        sel = (c["space"] == space) & memory
        return int(itemsize[c["array"][sel]].sum()) if sel.any() else 0

    g = c["space"] == GLOBAL
    per_array: dict[str, dict[str, int]] = {}
    for k, info in enumerate(trace.arrays):
        if info.space != GLOBAL:
            continue
        sel = g & (c["array"] == k)
        per_array[info.name] = {name: int(np.count_nonzero(sel & (c["op"] == op)))
                                for name, op in (("reads", READ), ("writes", WRITE),
                                                 ("atomics", ATOMIC))}
    return Traffic(count(GLOBAL, READ), count(GLOBAL, WRITE), count(GLOBAL, ATOMIC),
                   count(SHARED, READ), count(SHARED, WRITE), nbytes(GLOBAL), per_array,
                   count(LOCAL, READ), count(LOCAL, WRITE), nbytes(LOCAL),
                   int(np.count_nonzero(~memory)))


def element_counts(trace: Trace, name: str, op: int | None = READ,
                   space: int = GLOBAL) -> np.ndarray:
    """How many times each element of array ``name`` was accessed (shape of the array).

    For a shared array, counts are summed over the blocks' copies; for a local array,
    over the threads' copies.
    """
    ids = trace.array_id(name, space)
    mask = trace.select(space=space, op=op) & np.isin(trace.columns["array"], ids)
    info = trace.arrays[ids[0]]
    counts = np.bincount(trace.columns["index"][mask], minlength=int(np.prod(info.shape)))
    return counts.reshape(info.shape)


def element_owner(trace: Trace, name: str, op: int = WRITE, by: str = "thread",
                  space: int = GLOBAL) -> np.ndarray:
    """Which thread (global linear id), warp or block last touched each element (-1: none).

    ``by`` is "thread", "warp" or "block" (a global id: block * per_block + local id).
    "Last" is in the trace's order (block, thread, program order): the highest such id.
    """
    if by not in ("thread", "warp", "block"):
        raise ValueError(f"by must be 'thread', 'warp' or 'block', got {by!r}")
    ids = trace.array_id(name, space)
    c = trace.columns
    mask = trace.select(space=space, op=op) & np.isin(c["array"], ids)
    info = trace.arrays[ids[0]]
    owner = np.full(int(np.prod(info.shape)), -1, dtype=np.int64)
    tpb = trace.threads_per_block
    if by == "thread":
        who = c["block"][mask] * tpb + c["thread"][mask]
    elif by == "warp":
        wpb = ceil_div(tpb, WARP_SIZE)
        who = c["block"][mask] * wpb + c["thread"][mask] // WARP_SIZE
    else:
        who = c["block"][mask]
    owner[c["index"][mask]] = who
    return owner.reshape(info.shape)


# ---- total work: what a check compares with its reference's, one line each ----------------

def total_sectors(trace: Trace) -> int:
    """32-byte sectors of all global and local warp instructions: the device-memory traffic
    the launch asks of L1/L2 (a loop of one thread costs a sector per access)."""
    wi = warp_instructions(trace)
    return int(wi.sectors.sum())


def thread_accesses(trace: Trace, spaces: tuple[int, ...] = MEMORY_SPACES) -> np.ndarray:
    """Memory accesses (of ``spaces``: global, shared and local by default; local arrays
    kept in registers are not memory) made by each thread, shape (blocks, threads per
    block): ``out[b, t]`` for thread t of block b."""
    c = trace.columns
    sel = np.isin(c["space"], spaces) & trace.memory_rows()
    flat = c["block"][sel] * trace.threads_per_block + c["thread"][sel]
    return np.bincount(flat, minlength=trace.n_threads).reshape(
        trace.n_blocks, trace.threads_per_block)


def busiest_thread_accesses(trace: Trace, spaces: tuple[int, ...] = MEMORY_SPACES) -> int:
    """The most memory accesses any one thread made (a serial loop in thread 0: all)."""
    return int(thread_accesses(trace, spaces).max()) if trace.n_threads else 0


def conflict_replays(trace: Trace) -> int:
    """Shared-memory requests beyond the fewest possible, summed over instructions
    (0 for conflict-free code; 31 for one fully serialized warp access)."""
    wi = warp_instructions(trace, SHARED)
    return int((wi.requests - wi.min_requests).sum())


def simt_efficiency(trace: Trace, wi: WarpInstructions | None = None,
                    sh: ShuffleInstructions | None = None) -> float:
    """Active lanes / threads of the warp, averaged over every warp instruction the trace
    shows: memory accesses (global, shared, local) and warp shuffles. 1.0 for no
    instruction. (``wi``, ``sh``: the trace's instructions, if already grouped.)"""
    wi = warp_instructions(trace) if wi is None else wi
    sh = shuffle_instructions(trace) if sh is None else sh
    active = np.concatenate([wi.active, sh.active])
    lanes = np.concatenate([wi.warp_threads, sh.warp_threads])
    return float(np.mean(active / lanes)) if active.size else 1.0


@dataclass(frozen=True)
class AccessSummary:
    """Headline numbers of a trace (what the notebooks print and the checks enforce)."""
    traffic: Traffic
    global_requests: int          # global warp instructions
    sectors: int                  # 32-byte sectors over all global warp instructions
    ideal_sectors: int
    sectors_per_request: float
    shared_requests: int
    max_conflict_ways: int
    conflict_replays: int         # sum over shared instructions of requests - min_requests
    simt_efficiency: float        # mean active / existing lanes, memory and shuffles
    partial_instructions: int     # memory warp instructions with some lanes idle
    local_requests: int = 0       # local warp instructions
    local_sectors: int = 0        # 32-byte sectors over all local warp instructions
    shuffle_instructions: int = 0
    busiest_thread_accesses: int = 0   # most memory accesses of one thread

    @property
    def coalescing_efficiency(self) -> float:
        return self.ideal_sectors / self.sectors if self.sectors else 1.0

    @property
    def total_sectors(self) -> int:
        """Global and local sectors: device-memory traffic."""
        return self.sectors + self.local_sectors


def summarize(trace: Trace) -> AccessSummary:
    """Traffic, coalescing, bank conflicts and SIMT efficiency of one launch."""
    wi = warp_instructions(trace)
    sh = shuffle_instructions(trace)
    g = wi.space == GLOBAL
    s = wi.space == SHARED
    loc = wi.space == LOCAL
    sectors = int(wi.sectors[g].sum())
    ideal = int(wi.ideal_sectors[g].sum())
    return AccessSummary(
        traffic=traffic(trace), global_requests=int(g.sum()), sectors=sectors,
        ideal_sectors=ideal, sectors_per_request=sectors / max(int(g.sum()), 1),
        shared_requests=int(s.sum()),
        max_conflict_ways=int(wi.ways[s].max()) if s.any() else 0,
        conflict_replays=int((wi.requests[s] - wi.min_requests[s]).sum()),
        simt_efficiency=simt_efficiency(trace, wi, sh),
        partial_instructions=int(np.sum(wi.active < wi.warp_threads)),
        local_requests=int(loc.sum()), local_sectors=int(wi.sectors[loc].sum()),
        shuffle_instructions=len(sh),
        busiest_thread_accesses=busiest_thread_accesses(trace))


# ---- shared-memory races --------------------------------------------------------------

@dataclass(frozen=True)
class RaceAccess:
    """One side of a race: the thread (threadIdx), what it did and where."""
    thread: tuple[int, int, int]
    op: str          # "read", "write" or "atomic"
    line: int        # source line


@dataclass(frozen=True)
class Race:
    """Two accesses to one shared element by different threads of a block, at least one a
    write (not both atomics), with no barrier between them (see the module docstring)."""
    block: tuple[int, int, int]
    array: str
    element: tuple[int, ...]
    first: RaceAccess
    second: RaceAccess
    same_warp: bool           # lanes of one warp: syncwarp would have ordered them
    epoch: int                # syncthreads both threads had passed

    @property
    def lines(self) -> tuple[int, int]:
        return self.first.line, self.second.line

    def message(self) -> str:
        a, b = self.first, self.second
        where = f"{self.array}[{', '.join(map(str, self.element))}]"
        text = (f"{where} in block {self.block}: thread {a.thread} {_verb(a.op)} it at line "
                f"{a.line} and thread {b.thread} {_verb(b.op)} it at line {b.line}")
        if self.same_warp:
            return text + (", lanes of one warp with no cuda.syncwarp() or "
                           "cuda.syncthreads() between them (since Volta a warp's lanes do "
                           "not run in lockstep)")
        return text + ", with no cuda.syncthreads() between them"


def _verb(op: str) -> str:
    return {"read": "reads", "write": "writes", "atomic": "atomically updates"}[op]


def _first_conflict(thread, op, warp_epoch) -> tuple[int, int] | None:
    """(i, j), i < j, the first pair of accesses (in trace order) that race, or None."""
    warp = thread // WARP_SIZE
    k = thread.size
    for start in range(0, k, 1024):               # rows i in chunks: k x 1024 at most
        i = np.arange(start, min(start + 1024, k))[:, None]
        j = np.arange(k)[None, :]
        ti, tj = thread[i], thread[j]
        oi, oj = op[i], op[j]
        clash = ((j > i) & (ti != tj) & ~((oi == READ) & (oj == READ))
                 & ~((oi == ATOMIC) & (oj == ATOMIC))
                 & ((warp[i] != warp[j]) | (warp_epoch[i] == warp_epoch[j])))
        hits = np.argwhere(clash)
        if hits.size:
            return int(start + hits[0, 0]), int(hits[0, 1])
    return None


def races(trace: Trace) -> list[Race]:
    """Every shared element that two threads of a block access with no barrier between
    them (at least one writing), once per element and barrier interval, with the first such
    pair of accesses; sorted by block, source lines and element. Deterministic: it reads
    the barrier epochs each thread counted, not the order the OS ran the threads in."""
    c = trace.columns
    rows = np.flatnonzero(c["space"] == SHARED)
    if rows.size == 0:
        return []
    thread, op = c["thread"][rows], c["op"][rows]
    groups, _, inverse = _group(c["array"][rows], c["index"][rows], c["epoch"][rows])
    n = groups.shape[0]
    low = np.full(n, np.iinfo(np.int64).max)
    high = np.full(n, -1)
    np.minimum.at(low, inverse, thread)
    np.maximum.at(high, inverse, thread)

    def has(which: int) -> np.ndarray:
        return np.bincount(inverse, weights=op == which, minlength=n) > 0

    candidate = (low != high) & (has(WRITE) | (has(ATOMIC) & has(READ)))
    order = np.argsort(inverse, kind="stable")     # each group's rows, in trace order
    ends = np.cumsum(np.bincount(inverse, minlength=n))
    found = []
    for g in np.flatnonzero(candidate):
        members = rows[order[(ends[g - 1] if g else 0):ends[g]]]
        # one row per (thread, op, warp epoch) is enough to find a pair; keep the first
        _, keep, _ = _group(c["thread"][members], c["op"][members],
                            c["warp_epoch"][members])
        members = members[np.sort(keep)]
        pair = _first_conflict(c["thread"][members], c["op"][members],
                               c["warp_epoch"][members])
        if pair is None:
            continue
        a, b = members[pair[0]], members[pair[1]]
        info = trace.arrays[int(c["array"][a])]
        side = [RaceAccess(trace.thread_index(int(c["thread"][r])), OP_NAMES[int(c["op"][r])],
                           int(trace.sites[int(c["site"][r])])) for r in (a, b)]
        found.append(Race(
            trace.block_index(int(c["block"][a])), info.name,
            tuple(int(x) for x in np.unravel_index(int(c["index"][a]), info.shape)),
            side[0], side[1],
            bool(c["thread"][a] // WARP_SIZE == c["thread"][b] // WARP_SIZE),
            int(c["epoch"][a])))
    return sorted(found, key=lambda r: (r.block[::-1], r.lines, r.array, r.element))


def format_races(found: list[Race], limit: int = 3) -> str:
    """One sentence naming the first ``limit`` races (and how many more), or saying none."""
    if not found:
        return "no shared-memory races"
    head = "; ".join(r.message() for r in found[:limit])
    more = len(found) - limit
    return (f"{len(found)} shared-memory race{'s' if len(found) > 1 else ''}: {head}"
            + (f"; and {more} more" if more > 0 else ""))


# ---- budgets ------------------------------------------------------------------------

class BudgetExceeded(AssertionError):
    """A kernel did more memory work than its budget allows; the message says what."""


def enforce(trace: Trace, *, max_reads_per_element: dict[str, float] | None = None,
            max_global_reads: int | None = None, max_global_writes: int | None = None,
            max_sectors_per_request: float | None = None,
            max_conflict_ways: int | None = None,
            max_shared_reads: int | None = None,
            max_total_sectors: float | None = None,
            max_thread_accesses: float | None = None,
            max_conflict_replays: float | None = None,
            min_simt_efficiency: float | None = None,
            no_races: bool = False) -> AccessSummary:
    """Raise :class:`BudgetExceeded` listing every limit the launch broke; else the summary.

    ``max_reads_per_element`` maps a global array name to the most times any one of its
    elements may be read (a tiled matmul: ceil(N / tile)). The totals are budgets on the
    whole launch's work, to be set from a reference's trace, e.g.
    ``max_total_sectors=2 * total_sectors(ref)`` (global + local sectors),
    ``max_thread_accesses=4 * busiest_thread_accesses(ref)`` (the busiest thread),
    ``max_conflict_replays=conflict_replays(ref)``,
    ``min_simt_efficiency=simt_efficiency(ref)``; ``no_races=True`` fails any
    shared-memory race (:func:`races`).
    """
    summary = summarize(trace)
    t = summary.traffic
    broken = []
    for name, limit in (max_reads_per_element or {}).items():
        worst = int(element_counts(trace, name).max())
        if worst > limit:
            broken.append(f"an element of {name} was read {worst} times (budget {limit:g})")
    if max_global_reads is not None and t.global_reads > max_global_reads:
        broken.append(f"{t.global_reads} global reads (budget {max_global_reads})")
    if max_global_writes is not None and t.global_writes > max_global_writes:
        broken.append(f"{t.global_writes} global writes (budget {max_global_writes})")
    if (max_sectors_per_request is not None
            and summary.sectors_per_request > max_sectors_per_request + 1e-9):
        broken.append(f"{summary.sectors_per_request:.2f} sectors per warp request (budget "
                      f"{max_sectors_per_request:g}): accesses are not coalesced")
    if max_conflict_ways is not None and summary.max_conflict_ways > max_conflict_ways:
        broken.append(f"{summary.max_conflict_ways}-way shared-memory bank conflicts "
                      f"(budget {max_conflict_ways})")
    if max_shared_reads is not None and t.shared_reads > max_shared_reads:
        broken.append(f"{t.shared_reads} shared reads (budget {max_shared_reads})")
    if max_total_sectors is not None and summary.total_sectors > max_total_sectors:
        broken.append(f"{summary.total_sectors} sectors of global and local memory traffic "
                      f"(budget {max_total_sectors:g}; {summary.local_sectors} of them local)")
    if (max_thread_accesses is not None
            and summary.busiest_thread_accesses > max_thread_accesses):
        broken.append(f"one thread made {summary.busiest_thread_accesses} memory accesses "
                      f"(budget {max_thread_accesses:g} per thread): the work is not "
                      "spread over the threads")
    if max_conflict_replays is not None and summary.conflict_replays > max_conflict_replays:
        broken.append(f"{summary.conflict_replays} shared-memory bank-conflict replays "
                      f"(budget {max_conflict_replays:g})")
    if (min_simt_efficiency is not None
            and summary.simt_efficiency < min_simt_efficiency - 1e-9):
        broken.append(f"SIMT efficiency {summary.simt_efficiency:.0%} (at least "
                      f"{min_simt_efficiency:.0%}): lanes sit idle")
    if no_races:
        found = races(trace)
        if found:
            broken.append(format_races(found))
    if broken:
        raise BudgetExceeded("; ".join(broken))
    return summary
