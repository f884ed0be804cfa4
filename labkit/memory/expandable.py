"""Expandable segments (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; Note
[Expandable Segments] in ``c10/cuda/CUDACachingAllocator.cpp``).

Each pool has growing segments instead of many cudaMalloc'd ones: a segment reserves
address space for 1 1/8 of the device's memory and maps physical pages into it on demand —
2 MiB pages in the small pool, 20 MiB in the large — at the lowest address where the
request fits with the free blocks around it (``find_expandable_block``, ``map_block``);
``empty_cache`` and the release on a miss unmap every whole free page (``unmap_block``),
and a segment with nothing mapped is released. Mapping adds to ``reserved_bytes`` but never
to the ``segment`` count.

:class:`ExpandableSegments` is a base of
:class:`~labkit.memory.allocator.CachingAllocator`: its methods work on the allocator's
blocks (``_blocks_at``), segments (``_segments``), address counter (``_next_addr``),
``reserved`` counters, and its ``_merge`` and ``_cache``.
"""
from __future__ import annotations

from bisect import bisect_left, insort

from labkit.memory.blocks import Block, DeviceSegment, Pool
from labkit.validate import ceil_div


class ExpandableSegments:
    """The expandable-segment methods of :class:`~labkit.memory.allocator.CachingAllocator`
    (names follow the C++ source)."""

    def _new_expandable_segment(self, pool: Pool) -> Block:
        page = pool.page
        space = (self.capacity if self.capacity is not None else 1 << 40)
        space = space + space // 8   # "1 1/8 the total memory on the GPU"
        space = ceil_div(space, page) * page
        addr = ceil_div(self._next_addr, page) * page
        self._next_addr = addr + space
        seg = DeviceSegment(addr, space, pool, True)
        self._segments[addr] = seg
        block = Block(addr, space, pool, seg, self, mapped=False)
        self._blocks_at[addr] = block
        insort(pool.unmapped, addr)
        return block

    def _find_expandable_block(self, pool: Pool, size: int) -> Block:
        def available(b):
            total = 0
            while total < size and b is not None and not b.allocated:
                total += b.size
                b = b.next
            return total >= size
        for addr in pool.unmapped:
            c = self._blocks_at[addr]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if available(c):
                return c
        return self._new_expandable_segment(pool)

    def _map_block(self, to_map: Block, size: int) -> bool:
        pool = to_map.pool
        mapped = min(ceil_div(size, pool.page) * pool.page, to_map.size)
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return False
        del pool.unmapped[bisect_left(pool.unmapped, to_map.addr)]
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.addr + mapped, to_map.size - mapped, pool, to_map.seg, self,
                         mapped=False)
            rest.prev, rest.next = to_map, to_map.next
            if to_map.next is not None:
                to_map.next.prev = rest
            to_map.next = rest
            self._blocks_at[rest.addr] = rest
            insort(pool.unmapped, rest.addr)
            to_map.size = mapped
        for nb in (to_map.prev, to_map.next):
            if nb is not None and not nb.allocated and nb.mapped:
                self._merge(to_map, nb, pool)
        self._cache(pool, to_map)
        self.reserved += mapped
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_device_alloc += 1
        return True

    def _try_allocate_expandable_block(self, pool: Pool, size: int) -> Block | None:
        c = self._find_expandable_block(pool, size)
        if not c.mapped and not self._map_block(c, min(c.size, size)):
            return None
        while c.size < size:
            nc = c.next
            if not self._map_block(nc, min(size - c.size, nc.size)):
                return None
            c = nc
        keys = pool.keys
        del keys[bisect_left(keys, (c.size, c.addr))]
        return c

    def _unmap_block(self, block: Block) -> None:
        pool, seg, page = block.pool, block.seg, block.pool.page
        start, end = block.addr, block.addr + block.size
        ustart = seg.base + ceil_div(start - seg.base, page) * page
        uend = seg.base + ((end - seg.base) // page) * page
        if uend <= ustart:
            return
        keys = pool.keys
        del keys[bisect_left(keys, (block.size, block.addr))]
        del self._blocks_at[block.addr]
        if ustart > start:
            before = Block(start, ustart - start, pool, seg, self)
            before.prev, before.next = block.prev, block
            if block.prev is not None:
                block.prev.next = before
            block.prev = before
            self._blocks_at[start] = before
            self._cache(pool, before)
        if end > uend:
            after = Block(uend, end - uend, pool, seg, self)
            after.prev, after.next = block, block.next
            if block.next is not None:
                block.next.prev = after
            block.next = after
            self._blocks_at[uend] = after
            self._cache(pool, after)
        block.addr, block.size, block.mapped = ustart, uend - ustart, False
        self._blocks_at[ustart] = block
        for nb in (block.prev, block.next):
            if nb is not None and not nb.allocated and not nb.mapped:
                self._merge(block, nb, pool)
        insort(pool.unmapped, block.addr)
        self.reserved -= uend - ustart
        self.num_device_free += 1
        if block.prev is None and block.next is None:   # release_expandable_segment
            del pool.unmapped[bisect_left(pool.unmapped, block.addr)]
            del self._blocks_at[block.addr]
            del self._segments[seg.base]

