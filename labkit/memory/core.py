"""The allocator's core: the three rules of ``c10/cuda/CUDACachingAllocator.cpp`` that decide
where a request goes, as plain functions that :class:`~labkit.memory.allocator.CachingAllocator`
takes in place of its own (``CachingAllocator(core=allocator_core(best_fit=mine))``).

Each rule sees plain data — numbers, tuples, dicts — so a learner's function runs inside
labkit's allocator, and a check can call it directly:

* ``best_fit(free, size, max_split_size, rounding) -> addr | None`` (``get_free_block``):
  ``free`` lists the pool's cached free blocks as ``(addr, size)`` **in address order**; the
  answer is the address of the smallest block with ``size >= size`` (ties: the lowest
  address — ``BlockComparatorSize`` orders by size, then address, and the source takes
  ``pool.blocks.lower_bound(&search_key)``), or None when there is none, or when that block
  is *oversize*: a request below ``max_split_size`` never takes a block of
  ``max_split_size`` or more ("Do not return an oversized block for a large request"), and
  a request of ``max_split_size`` or more only takes a block smaller than
  ``size + rounding`` ("Allow oversized block size to be rounded up but within a limit";
  ``rounding`` is kLargeBuffer, 20 MiB, or ``max_non_split_rounding_mb``).
* ``should_split(block_size, size, small, max_split_size) -> bool`` (``should_split``): the
  remainder is ``block_size - size``; in the small pool (or with expandable segments, which
  the allocator passes as ``small=True``) split when it is at least kMinBlockSize (512 B);
  in the large pool only when ``size < max_split_size`` and the remainder is more than
  kSmallSize (1 MiB).
* ``merge(block, before, after) -> (addr, size)`` (``free_block`` → ``try_merge_blocks``):
  ``block`` is the block being freed, ``{"addr", "size", "segment"}``; ``before`` and
  ``after`` are the blocks whose memory touches it (ending at ``block["addr"]``, starting at
  its end), ``{"addr", "size", "segment", "free"}``, or None. The answer is the free block
  that results: it absorbs a neighbour that is free **and in the same segment** (``prev`` and
  ``next`` link the blocks split from one segment only; two segments that cudaMalloc placed
  side by side are never merged, or the segment could not be cudaFree'd alone).

``rounding`` and the pool's free list are the allocator's; ``free`` is rebuilt for every
call (the C++ keeps a ``std::set``), so a core of plain functions is slower than the
default one, never different (``tests/test_memory_core.py`` replays random traces through
both and compares every step; :mod:`labkit.memory.core_replay` replays event lists through a
core and compares it with labkit's allocator).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from labkit.memory.config import NO_LIMIT
from labkit.memory.constants import K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_SMALL_SIZE


class CoreError(ValueError):
    """A core rule returned something the allocator cannot carry out (a block that is not
    free, a merge across segments); the message names the rule and what it returned."""


# ---- labkit's three rules (the references of exercises 6.6, 6.3 and 6.7) ---------------

def best_fit_block(free, size, max_split_size=NO_LIMIT, rounding=K_LARGE_BUFFER):
    """The address of the cached block ``get_free_block`` takes for a request of ``size``
    rounded bytes, or None (see the module docstring)."""
    chosen = min(((bsize, addr) for addr, bsize in free if bsize >= size), default=None)
    if chosen is None:
        return None
    bsize, addr = chosen
    if size < max_split_size <= bsize:
        return None
    if size >= max_split_size and bsize >= size + rounding:
        return None
    return addr


def split_rule(block_size, rounded_size, small, max_split_size):
    """``should_split``: is the block of ``block_size`` split to serve ``rounded_size``?"""
    remaining = block_size - rounded_size
    if small:
        return remaining >= K_MIN_BLOCK_SIZE
    return rounded_size < max_split_size and remaining > K_SMALL_SIZE


def merge_free_block(block, before, after):
    """``try_merge_blocks`` with both neighbours: the ``(addr, size)`` of the free block."""
    addr, size = block["addr"], block["size"]
    for nb in (before, after):
        if nb is not None and nb["free"] and nb["segment"] == block["segment"]:
            addr = min(addr, nb["addr"])
            size += nb["size"]
    return addr, size


# ---- what the allocator makes of a rule's answer (plain data; the allocator and the checks) --

def best_fit_taken(free, size, addr) -> int | None:
    """The size of the free block that best fit's answer ``addr`` names (None: no block,
    the allocator cudaMallocs); :class:`CoreError` when ``addr`` is not the address of one
    of ``free`` or that block is smaller than ``size``."""
    if addr is None:
        return None
    bsize = dict(free).get(addr) if isinstance(addr, int) else None
    if bsize is None:
        raise CoreError(f"best_fit returned {addr!r}, which is not the address of a "
                        f"free block of this pool (the free blocks are {list(free)})")
    if bsize < size:
        raise CoreError(f"best_fit returned the block at 0x{addr:x} of {bsize} bytes "
                        f"for a request of {size} bytes: it does not fit")
    return bsize


def split_taken(got) -> bool:
    """The split rule's answer as the allocator takes it (a bool, or CoreError)."""
    if not isinstance(got, (bool, int)) and type(got).__name__ != "bool_":
        raise CoreError(f"should_split returned {got!r}; it must return True or False")
    return bool(got)


def merge_candidates(block, before, after) -> list[tuple[int, int]]:
    """Every ``(addr, size)`` a merge may leave: the block alone or with the neighbours."""
    out = [(block["addr"], block["size"])]
    if before is not None:
        out.append((before["addr"], before["size"] + block["size"]))
    if after is not None:
        out.append((block["addr"], block["size"] + after["size"]))
    if before is not None and after is not None:
        out.append((before["addr"], before["size"] + block["size"] + after["size"]))
    return out


def merge_taken(block, before, after, got) -> tuple[int, int, tuple[str, ...]]:
    """What the allocator makes of the merge rule's answer ``got`` for ``merge(block,
    before, after)``: ``(addr, size, absorbed)``, ``absorbed`` naming the neighbours the
    freed block takes in (``"before"``, ``"after"``); :class:`CoreError` when ``got`` is
    not one of :func:`merge_candidates`, or absorbs an allocated block or one of another
    segment."""
    try:
        addr, size = (int(v) for v in got)
    except (TypeError, ValueError):
        raise CoreError(f"merge returned {got!r}; it must return (addr, size) of the "
                        f"free block") from None
    lo, hi = block["addr"], block["addr"] + block["size"]
    take = []
    if before is not None and addr == before["addr"]:
        take.append("before")
        lo = before["addr"]
    if after is not None and addr + size == after["addr"] + after["size"]:
        take.append("after")
        hi = after["addr"] + after["size"]
    call = f"merge({block}, {before}, {after}) returned {(addr, size)}"
    if (addr, size) != (lo, hi - lo):
        raise CoreError(f"{call}: the freed block alone, or with a neighbour it absorbs, is "
                        + " or ".join(f"{c}" for c in merge_candidates(block, before, after)))
    for nb in (before if name == "before" else after for name in take):
        if not nb["free"]:
            raise CoreError(f"merge absorbed the allocated block at 0x{nb['addr']:x} "
                            f"({call}): only free neighbours merge")
        if nb["segment"] != block["segment"]:
            raise CoreError(f"merge joined the block at 0x{block['addr']:x} (segment "
                            f"0x{block['segment']:x}) with the block at 0x{nb['addr']:x} of "
                            f"segment 0x{nb['segment']:x}: blocks of two segments never "
                            f"merge, or neither segment could be released on its own")
    return addr, size, tuple(take)


ROLES = ("best_fit", "should_split", "merge")
LABKIT_RULES = {"best_fit": best_fit_block, "should_split": split_rule,
                "merge": merge_free_block}
EXERCISES = {"best_fit": "6.6", "should_split": "6.3", "merge": "6.7"}


@dataclass(frozen=True)
class AllocatorCore:
    """The three rules a :class:`~labkit.memory.allocator.CachingAllocator` runs, and whose
    each one is (``"yours"`` or ``"labkit's"``)."""
    best_fit: Callable = best_fit_block
    should_split: Callable = split_rule
    merge: Callable = merge_free_block

    def __post_init__(self):
        for role in ROLES:
            if not callable(getattr(self, role)):
                raise TypeError(f"{role} must be a function, got "
                                f"{type(getattr(self, role)).__name__}")

    def owner(self, role: str) -> str:
        return "labkit's" if getattr(self, role) is LABKIT_RULES[role] else "yours"

    @property
    def is_labkit(self) -> bool:
        return all(self.owner(r) == "labkit's" for r in ROLES)

    def describe(self) -> str:
        """One line per rule: whose function the allocator runs."""
        return "\n".join(
            f"{role:13s}: {self.owner(role)}"
            + ("" if self.owner(role) == "yours" else
               f" (exercise {EXERCISES[role]} has not passed yet)") for role in ROLES)


def allocator_core(best_fit: Callable | None = None, should_split: Callable | None = None,
                   merge: Callable | None = None) -> AllocatorCore:
    """A core of the given rules, labkit's where one is None."""
    given = {"best_fit": best_fit, "should_split": should_split, "merge": merge}
    return AllocatorCore(**{r: LABKIT_RULES[r] if f is None else f for r, f in given.items()})
