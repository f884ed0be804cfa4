"""What a caching allocator holds, read out as PyTorch reports it.

* :meth:`AllocatorSnapshot.segments` — the segment/block map in address order, as
  ``torch.cuda.memory_snapshot()`` lists it (:class:`SegmentInfo` of :class:`BlockInfo`;
  an expandable segment is one segment per contiguous mapped range);
* :meth:`AllocatorSnapshot.stats` — :class:`MemoryStats`, and
  :meth:`AllocatorSnapshot.memory_stats` a subset of ``torch.cuda.memory_stats()`` under
  PyTorch's key names: ``allocated_bytes`` the sum of the (rounded) sizes of the blocks
  handed out, ``requested_bytes`` of the sizes asked for, ``reserved_bytes`` the memory held
  from the device (segments, or mapped pages of expandable segments), ``segment`` the
  cudaMalloc'd segments (0 for expandable ones: ``map_block`` updates only
  ``reserved_bytes``);
* :meth:`AllocatorSnapshot.check_invariants` — the bookkeeping checked (property tests).

:class:`AllocatorSnapshot` is a base of :class:`~labkit.memory.allocator.CachingAllocator`:
it reads the allocator's segments (``_segments``), blocks by address (``_blocks_at``),
pools (``_pools``) and counters.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BlockInfo:
    address: int
    size: int
    requested_size: int
    state: str          # "active_allocated" | "inactive" | "unmapped" (snapshot names)


@dataclass(frozen=True)
class SegmentInfo:
    address: int
    total_size: int
    segment_type: str   # "small" | "large"
    is_expandable: bool
    blocks: tuple[BlockInfo, ...]

    @property
    def allocated_size(self) -> int:
        return sum(b.size for b in self.blocks if b.state == "active_allocated")

    @property
    def requested_size(self) -> int:
        return sum(b.requested_size for b in self.blocks if b.state == "active_allocated")


@dataclass(frozen=True)
class MemoryStats:
    """``torch.cuda.memory_stats()`` in short: current and peak bytes, counts."""
    allocated_bytes: int
    reserved_bytes: int
    requested_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_requested_bytes: int
    num_allocations: int
    num_segments: int
    inactive_split_bytes: int     # cached free bytes inside split segments
    largest_free_block: int
    num_alloc_retries: int
    num_ooms: int
    num_device_alloc: int
    num_device_free: int
    by_pool: dict = field(default_factory=dict)
    device_segments: int = 0      # cudaMalloc'd segments: torch's segment.all.current


    @property
    def cached_free_bytes(self) -> int:
        """Reserved but not allocated: what ``empty_cache`` might give back."""
        return self.reserved_bytes - self.allocated_bytes

    @property
    def fragmentation(self) -> float:
        """1 - allocated / reserved (0 when nothing is reserved)."""
        return 0.0 if self.reserved_bytes == 0 else 1.0 - self.allocated_bytes / self.reserved_bytes


class AllocatorSnapshot:
    """The read-out methods of :class:`~labkit.memory.allocator.CachingAllocator`."""

    def stats(self) -> MemoryStats:
        segments = self.segments()
        inactive_split = largest = 0
        by_pool = {"small": {"allocated_bytes": 0, "reserved_bytes": 0, "segments": 0},
                   "large": {"allocated_bytes": 0, "reserved_bytes": 0, "segments": 0}}
        for seg in segments:
            p = by_pool[seg.segment_type]
            p["reserved_bytes"] += seg.total_size
            p["allocated_bytes"] += seg.allocated_size
            p["segments"] += 0 if seg.is_expandable else 1
            split = len(seg.blocks) > 1
            for b in seg.blocks:
                if b.state == "inactive":
                    largest = max(largest, b.size)
                    if split and not seg.is_expandable:
                        inactive_split += b.size
        return MemoryStats(
            allocated_bytes=self.allocated, reserved_bytes=self.reserved,
            requested_bytes=self.requested, peak_allocated_bytes=self.peak_allocated,
            peak_reserved_bytes=self.peak_reserved, peak_requested_bytes=self.peak_requested,
            num_allocations=self.num_allocations, num_segments=len(segments),
            inactive_split_bytes=inactive_split, largest_free_block=largest,
            num_alloc_retries=self.num_alloc_retries, num_ooms=self.num_ooms,
            num_device_alloc=self.num_device_alloc, num_device_free=self.num_device_free,
            by_pool=by_pool,
            device_segments=sum(p["segments"] for p in by_pool.values()))

    def memory_stats(self) -> dict[str, int]:
        """A subset of ``torch.cuda.memory_stats()`` with PyTorch's key names."""
        s = self.stats()
        out = {
            "allocated_bytes.all.current": s.allocated_bytes,
            "allocated_bytes.all.peak": s.peak_allocated_bytes,
            "reserved_bytes.all.current": s.reserved_bytes,
            "reserved_bytes.all.peak": s.peak_reserved_bytes,
            "requested_bytes.all.current": s.requested_bytes,
            "requested_bytes.all.peak": s.peak_requested_bytes,
            "allocation.all.current": s.num_allocations,
            "segment.all.current": s.device_segments,
            "inactive_split_bytes.all.current": s.inactive_split_bytes,
            "num_alloc_retries": s.num_alloc_retries,
            "num_ooms": s.num_ooms,
            "num_device_alloc": s.num_device_alloc,
            "num_device_free": s.num_device_free,
        }
        for name, p in s.by_pool.items():
            out[f"allocated_bytes.{name}_pool.current"] = p["allocated_bytes"]
            out[f"reserved_bytes.{name}_pool.current"] = p["reserved_bytes"]
            out[f"segment.{name}_pool.current"] = p["segments"]
        return out

    def segments(self) -> list[SegmentInfo]:
        """The segment/block map, sorted by address (like ``torch.cuda.memory_snapshot()``).

        An expandable segment is listed as one segment per contiguous mapped range.
        """
        out = []
        for seg in sorted(self._segments.values(), key=lambda s: s.base):
            b = self._blocks_at[seg.base]
            kind = "small" if seg.pool.small else "large"
            run: list[BlockInfo] = []
            while b is not None:
                if b.mapped:
                    run.append(BlockInfo(b.addr, b.size, b.requested,
                                         "active_allocated" if b.allocated else "inactive"))
                elif run:
                    out.append(_segment_info(run, kind, seg.expandable))
                    run = []
                b = b.next
            if run:
                out.append(_segment_info(run, kind, seg.expandable))
        return out

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent (used by property tests)."""
        alloc = req = reserved = 0
        free_keys = {0: [], 1: []}
        for seg in self._segments.values():
            b = self._blocks_at[seg.base]
            assert b.prev is None, "segment head has a predecessor"
            end = seg.base
            while b is not None:
                assert b.addr == end, f"gap or overlap at 0x{b.addr:x}"
                assert self._blocks_at[b.addr] is b
                assert b.size > 0
                if b.allocated:
                    alloc += b.size
                    req += b.requested
                    assert b.mapped
                elif b.mapped:
                    free_keys[0 if b.pool.small else 1].append((b.size, b.addr))
                    nb = b.next
                    assert nb is None or nb.allocated or not nb.mapped, "unmerged free blocks"
                if b.mapped:
                    reserved += b.size
                end = b.addr + b.size
                if b.next is not None:
                    assert b.next.prev is b
                b = b.next
            assert end == seg.base + seg.size, "blocks do not cover the segment"
        assert alloc == self.allocated, (alloc, self.allocated)
        assert req == self.requested, (req, self.requested)
        assert reserved == self.reserved, (reserved, self.reserved)
        for i, pool in enumerate(self._pools):
            assert pool.keys == sorted(free_keys[i]), "free lists out of sync"
        assert self.peak_allocated >= self.allocated and self.peak_reserved >= self.reserved
        if self.capacity is not None:
            assert self.reserved <= self.capacity


def _segment_info(run: list[BlockInfo], kind: str, expandable: bool) -> SegmentInfo:
    return SegmentInfo(run[0].address, sum(b.size for b in run), kind, expandable, tuple(run))
