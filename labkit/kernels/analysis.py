"""What a trace says: traffic, coalescing, bank conflicts, divergence, and budgets.

Warp instructions. Threads of one warp (32 consecutive linear thread ids of a block) that
make the same access (source line, array, op) for the k-th time make one warp instruction;
the lanes that took part are its *active mask*.

* Coalescing: a global warp instruction is served in 32-byte sectors; it needs as many
  sectors as distinct ``byte_address // 32`` among its lanes (CUDA C++ Best Practices
  Guide, "Coalesced Access to Global Memory"). Arrays are taken as 256-byte aligned.
* Bank conflicts: shared memory has 32 banks of 4-byte words, bank = word mod 32; lanes
  reading the same word get a broadcast, lanes reading different words of one bank are
  serialized. The instruction's *ways* = the largest number of distinct words in a bank
  (1 = conflict-free, 32 = fully serialized) (CUDA C++ Programming Guide, "Shared Memory").
* Divergence: SIMT efficiency = active lanes / threads of the warp, per warp instruction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.kernels.tracer import (ATOMIC, GLOBAL, READ, SHARED, WARP_SIZE, WRITE, Trace)
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
    sectors: np.ndarray    # 32-byte sectors touched (global) ; 0 for shared
    ideal_sectors: np.ndarray  # sectors if the same bytes were contiguous
    ways: np.ndarray       # bank-conflict ways (shared); 0 for global
    first_row: np.ndarray  # index of one access of the instruction in the trace

    def __len__(self) -> int:
        return int(self.block.size)


def warp_instructions(trace: Trace, space: int | None = None) -> WarpInstructions:
    """Group the trace's accesses (of ``space``, or all) into warp instructions."""
    c = trace.columns
    rows = np.flatnonzero(trace.select(space=space))
    thread = c["thread"][rows]
    warp = thread // WARP_SIZE
    lane = thread % WARP_SIZE
    keys = np.stack([c["block"][rows], warp, c["site"][rows], c["occurrence"][rows],
                     c["array"][rows], c["op"][rows]], axis=1)
    if rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return WarpInstructions(*([empty] * 13))
    uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    n = uniq.shape[0]
    active = np.bincount(inverse, minlength=n)
    mask = np.zeros(n, dtype=np.int64)
    np.bitwise_or.at(mask, inverse, np.left_shift(np.int64(1), lane))
    tpb = trace.threads_per_block
    warp_threads = np.minimum(WARP_SIZE, tpb - uniq[:, 1] * WARP_SIZE)

    itemsize = np.array([a.itemsize for a in trace.arrays], dtype=np.int64)
    arr = c["array"][rows]
    byte = c["index"][rows] * itemsize[arr]
    space_col = c["space"][rows]
    sectors = np.zeros(n, dtype=np.int64)
    ideal = np.zeros(n, dtype=np.int64)
    ways = np.zeros(n, dtype=np.int64)
    is_global = space_col[first] == GLOBAL
    if np.any(space_col == GLOBAL):
        g = space_col == GLOBAL
        pairs = np.unique(np.stack([inverse[g], byte[g] // SECTOR_BYTES], axis=1), axis=0)
        sectors = np.bincount(pairs[:, 0], minlength=n)
        distinct_bytes = np.unique(np.stack([inverse[g], byte[g]], axis=1), axis=0)
        nbytes = np.bincount(distinct_bytes[:, 0], minlength=n) * itemsize[arr[first]]
        ideal = np.where(is_global, ceil_div(nbytes, SECTOR_BYTES), 0)
    if np.any(space_col == SHARED):
        s = space_col == SHARED
        words = byte[s] // BANK_BYTES
        distinct = np.unique(np.stack([inverse[s], words], axis=1), axis=0)
        per_bank = np.unique(np.stack([distinct[:, 0], distinct[:, 1] % BANKS], axis=1),
                             axis=0, return_counts=True)
        (inst_bank, counts) = per_bank
        np.maximum.at(ways, inst_bank[:, 0], counts)
    return WarpInstructions(uniq[:, 0], uniq[:, 1], uniq[:, 2], uniq[:, 4],
                            c["op"][rows][first], space_col[first], active, mask,
                            warp_threads, sectors, ideal, ways, rows[first])


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


def traffic(trace: Trace) -> Traffic:
    """Count the accesses of ``trace`` by space and operation, and per global array."""
    c = trace.columns

    def count(space: int, op: int) -> int:
        return int(np.count_nonzero((c["space"] == space) & (c["op"] == op)))

    itemsize = np.array([a.itemsize for a in trace.arrays] or [0], dtype=np.int64)
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
                   count(SHARED, READ), count(SHARED, WRITE),
                   int(itemsize[c["array"][g]].sum()) if g.any() else 0, per_array)


def element_counts(trace: Trace, name: str, op: int | None = READ,
                   space: int = GLOBAL) -> np.ndarray:
    """How many times each element of array ``name`` was accessed (shape of the array).

    For a shared array, counts are summed over the blocks' copies.
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
    conflict_replays: int         # sum over shared instructions of (ways - 1)
    simt_efficiency: float        # mean active / existing lanes over all warp instructions
    partial_instructions: int     # warp instructions with some lanes idle

    @property
    def coalescing_efficiency(self) -> float:
        return self.ideal_sectors / self.sectors if self.sectors else 1.0


def summarize(trace: Trace) -> AccessSummary:
    """Traffic, coalescing, bank conflicts and SIMT efficiency of one launch."""
    wi = warp_instructions(trace)
    g = wi.space == GLOBAL
    s = wi.space == SHARED
    sectors = int(wi.sectors[g].sum())
    ideal = int(wi.ideal_sectors[g].sum())
    eff = float(np.mean(wi.active / wi.warp_threads)) if len(wi) else 1.0
    return AccessSummary(
        traffic=traffic(trace), global_requests=int(g.sum()), sectors=sectors,
        ideal_sectors=ideal, sectors_per_request=sectors / max(int(g.sum()), 1),
        shared_requests=int(s.sum()),
        max_conflict_ways=int(wi.ways[s].max()) if s.any() else 0,
        conflict_replays=int(np.maximum(wi.ways[s] - 1, 0).sum()),
        simt_efficiency=eff, partial_instructions=int(np.sum(wi.active < wi.warp_threads)))


# ---- budgets ------------------------------------------------------------------------

class BudgetExceeded(AssertionError):
    """A kernel did more memory work than its budget allows; the message says what."""


def enforce(trace: Trace, *, max_reads_per_element: dict[str, float] | None = None,
            max_global_reads: int | None = None, max_global_writes: int | None = None,
            max_sectors_per_request: float | None = None,
            max_conflict_ways: int | None = None,
            max_shared_reads: int | None = None) -> AccessSummary:
    """Raise :class:`BudgetExceeded` listing every limit the launch broke; else the summary.

    ``max_reads_per_element`` maps a global array name to the most times any one of its
    elements may be read (a tiled matmul: ceil(N / tile)).
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
    if broken:
        raise BudgetExceeded("; ".join(broken))
    return summary
