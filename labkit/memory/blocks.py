"""The caching allocator's memory as data: segments cut into blocks, and the pools of cached
free blocks (``Block`` and ``BlockPool`` of ``c10/cuda/CUDACachingAllocator.cpp``).

* :class:`Block` — a piece of a segment: handed out, cached free, or (in an expandable
  segment) not mapped; ``prev``/``next`` link the blocks split from one segment, in address
  order (``Block::prev``, ``Block::next``).
* :class:`Pool` — the small (<= 1 MiB) or large pool: its cached free blocks as sorted
  ``(size, addr)`` keys (the C++ ``std::set`` ordered by ``BlockComparatorSize``), the
  addresses of its unmapped blocks, its expandable page size (2 MiB small, 20 MiB large) and
  its ``get_free_block`` count (garbage collection's clock).
* :class:`DeviceSegment` — a cudaMalloc'd segment, or an expandable segment's reserved
  address range.

:class:`~labkit.memory.allocator.CachingAllocator` owns them and keeps them consistent.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.memory.constants import LARGE_PAGE, SMALL_PAGE


class Block:
    """A piece of a segment: handed out (``allocated``), cached free, or unmapped."""
    __slots__ = ("addr", "size", "requested", "allocated", "prev", "next", "pool", "seg",
                 "mapped", "owner", "gc_base")

    def __init__(self, addr, size, pool, seg, owner, mapped=True):
        self.addr = addr
        self.size = size
        self.requested = 0
        self.allocated = False
        self.prev = None
        self.next = None
        self.pool = pool
        self.seg = seg
        self.mapped = mapped
        self.owner = owner
        self.gc_base = 0            # the pool's get_free_block count when cached

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("free" if self.mapped else "unmapped")
        return (f"Block(addr=0x{self.addr:x}, size={self.size}, requested={self.requested}, "
                f"{state})")


class Pool:
    """A pool of cached free blocks (BlockPool), small or large."""
    __slots__ = ("small", "keys", "unmapped", "page", "free_calls")

    def __init__(self, small: bool):
        self.small = small
        self.free_calls = 0                     # get_free_blocks_call_count (gc only)
        self.keys: list[tuple[int, int]] = []   # free mapped blocks, sorted (size, addr)
        self.unmapped: list[int] = []           # addresses of unmapped blocks, sorted
        self.page = SMALL_PAGE if small else LARGE_PAGE


@dataclass(slots=True, eq=False)
class DeviceSegment:
    """A segment: ``size`` bytes from ``base`` (expandable: reserved, mapped page by page)."""
    base: int
    size: int
    pool: Pool
    expandable: bool

