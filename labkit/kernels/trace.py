"""What one traced launch records (:func:`labkit.kernels.tracer.run_traced`), and the
errors that stop one.

A :class:`Trace` holds every read and write of global memory, of a shared array and of a
local array, one row each, with its block, thread, element index, *site* (the source line
that made it) and the barrier epochs of the thread. Threads that make the same access
(site, array, op) for the k-th time form one warp instruction, which is what SIMT hardware
issues once for the whole warp: the analysis in :mod:`labkit.kernels.analysis` groups by it
to count 32-byte sectors (coalescing), bank conflicts and active masks. Warp shuffles are
recorded the same way (a table of their own: they move registers, not memory), so that SIMT
efficiency counts them.

Memory spaces. GLOBAL: the array arguments. SHARED: ``cuda.shared.array``, one copy per
block. LOCAL: ``cuda.local.array``, one copy per thread (which of those are registers:
:mod:`labkit.kernels.traced_cuda`).

Barrier epochs. Each access records how many ``syncthreads`` its thread had passed
(``epoch``) and how many ``syncthreads`` and ``syncwarp`` (``warp_epoch``). Two accesses of
different threads with equal epochs had no barrier between them: the shared-memory race
detector (:func:`labkit.kernels.analysis.races`) works from these counts, never from the
order in which OS threads happened to run. The trace itself is put in a canonical order
(rows by block, then thread, then program order; sites by source position), so a launch
gives the same trace however the OS schedules its threads.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GLOBAL, SHARED, LOCAL = 0, 1, 2
MEMORY_SPACES = (GLOBAL, SHARED, LOCAL)
READ, WRITE, ATOMIC = 0, 1, 2
SPACE_NAMES = {GLOBAL: "global", SHARED: "shared", LOCAL: "local"}
OP_NAMES = {READ: "read", WRITE: "write", ATOMIC: "atomic"}
_COLUMNS = ("block", "thread", "space", "op", "array", "index", "site", "occurrence",
            "epoch", "warp_epoch")
_SHUFFLE_COLUMNS = ("block", "thread", "site", "occurrence")


class OutOfBounds(IndexError):
    """A thread indexed outside an array (on a GPU: a wrong value or a crash)."""


class TraceLimitExceeded(ValueError):
    """A launch too big to trace (refused before it runs) or doing more work than the
    tracer's cap (stopped while it runs); the message names the size and the limit."""


class Deadlock(RuntimeError):
    """Every running thread of a block waits at a barrier that cannot complete."""


@dataclass(frozen=True)
class ArrayInfo:
    """One array the kernel touched: an argument (global), a shared array of one block, or
    a local array (one per ``cuda.local.array`` call site; each thread has its own copy)."""
    name: str
    space: int
    shape: tuple[int, ...]
    itemsize: int
    block: int = -1   # the block that owns a shared array; -1 for global and local arrays
    registers: bool = False   # a local array the compiler keeps in registers (no traffic)


@dataclass
class Trace:
    """Every memory access of one launch, as columns (one row per access).

    ``block`` is the linear block index, ``thread`` the linear thread index inside the block
    (x fastest, then y, then z, as CUDA numbers threads into warps), ``space`` GLOBAL,
    SHARED or LOCAL, ``op`` READ, WRITE or ATOMIC, ``array`` an index into ``arrays``,
    ``index`` the flat element index (in the thread's own copy, for a local array), ``site``
    an index into ``sites`` (source line of the access), ``occurrence`` how many times this
    thread had already made this access (same site, array and op), ``epoch`` how many
    ``syncthreads`` the thread had passed and ``warp_epoch`` how many ``syncthreads`` and
    ``syncwarp``. Rows are ordered by block, thread, then program order.
    ``shuffle_columns`` holds one row per warp shuffle a thread made (block, thread, site,
    occurrence), for the warp instructions that move registers between lanes.
    ``thread_syncs[b, t]`` is how many ``syncthreads`` thread t of block b passed (a
    thread that returns early stops counting).
    """
    griddim: tuple[int, int, int]
    blockdim: tuple[int, int, int]
    arrays: list[ArrayInfo]
    sites: list[int]                       # source line of each site
    columns: dict[str, np.ndarray]
    shuffles: int = 0                      # warp shuffle calls (register traffic)
    syncs: int = 0                         # syncthreads calls, summed over threads
    syncwarps: int = 0                     # syncwarp calls, summed over threads
    shuffle_columns: dict[str, np.ndarray] = field(default_factory=lambda: {
        name: np.zeros(0, dtype=np.int64) for name in _SHUFFLE_COLUMNS})
    thread_syncs: np.ndarray | None = None  # (blocks, threads): syncthreads each passed

    @property
    def threads_per_block(self) -> int:
        return int(np.prod(self.blockdim))

    @property
    def n_blocks(self) -> int:
        return int(np.prod(self.griddim))

    @property
    def n_threads(self) -> int:
        """Threads launched: blocks x threads per block."""
        return self.n_blocks * self.threads_per_block

    @property
    def n_accesses(self) -> int:
        return int(self.columns["block"].size)

    def array_id(self, name: str, space: int = GLOBAL) -> list[int]:
        ids = [k for k, a in enumerate(self.arrays) if a.name == name and a.space == space]
        if not ids:
            known = sorted({f"{a.name} ({SPACE_NAMES[a.space]})" for a in self.arrays})
            raise ValueError(f"no array named {name!r} in {SPACE_NAMES.get(space, space)} "
                             f"memory in this trace; arrays: {known}")
        return ids

    def select(self, *, space: int | None = None, op: int | None = None,
               name: str | None = None) -> np.ndarray:
        """Boolean mask of the rows with this space, op and array name (None: any; a name
        without a space is a global array's)."""
        c = self.columns
        mask = np.ones(self.n_accesses, dtype=bool)
        if space is not None:
            mask &= c["space"] == space
        if op is not None:
            mask &= c["op"] == op
        if name is not None:
            ids = self.array_id(name, GLOBAL if space is None else space)
            mask &= np.isin(c["array"], ids)
        return mask

    def memory_rows(self) -> np.ndarray:
        """Boolean mask of the rows that touch memory: all but the accesses to local
        arrays kept in registers."""
        regs = [k for k, a in enumerate(self.arrays) if a.registers]
        c = self.columns
        return ~np.isin(c["array"], regs) if regs else np.ones(c["array"].size, dtype=bool)

    def thread_index(self, linear: int) -> tuple[int, int, int]:
        """threadIdx (x, y, z) of the thread with this linear index in its block."""
        bx, by, _ = self.blockdim
        return linear % bx, (linear // bx) % by, linear // (bx * by)

    def block_index(self, linear: int) -> tuple[int, int, int]:
        """blockIdx (x, y, z) of the block with this linear index."""
        gx, gy, _ = self.griddim
        return linear % gx, (linear // gx) % gy, linear // (gx * gy)

