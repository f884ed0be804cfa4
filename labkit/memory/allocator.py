"""A simulator of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).

It follows ``DeviceCachingAllocator`` of the source rule by rule, for one device and one
stream (no CUDA events, graphs or private pools):

* ``round_size``: requests below 512 B become 512 B; others round up to a multiple of
  512 B, or, when ``roundup_power2_divisions`` gives d > 1 divisions for that size and the
  size exceeds 512·d, to the next of d equal steps between two powers of two.
* ``get_pool``: rounded sizes <= 1 MiB (kSmallSize) go to the small pool, others to the large.
* ``get_allocation_size`` (a new segment's size, the cudaMalloc): 2 MiB (kSmallBuffer) for
  small requests, 20 MiB (kLargeBuffer) for requests under 10 MiB (kMinLargeAlloc),
  otherwise the request rounded up to 2 MiB (kRoundLarge).
* ``get_free_block``: best fit, the smallest cached free block with size >= request
  (ties: lowest address); a request below ``max_split_size`` never takes a block of
  ``max_split_size`` or more, and a request of ``max_split_size`` or more only takes a block
  smaller than request + ``max_non_split_rounding_size`` (20 MiB by default).
* ``should_split``: small pool (or expandable segments): split if the remainder is >= 512 B;
  large pool: split if the request is below ``max_split_size`` and the remainder > 1 MiB.
* ``free_block``: a freed block merges with free neighbours of its segment.
* On a miss: allocate a segment; if the capacity is exceeded, release cached oversize
  blocks (``release_available_cached_blocks``), then every unsplit cached segment
  (``release_cached_blocks``, counted as an alloc retry), then raise
  :class:`OutOfMemoryError`, whose message says how much memory is reserved but unusable.
* ``empty_cache``: releases every cached segment that is not split (with expandable
  segments: unmaps every whole free page).
* Expandable segments (Note [Expandable Segments]; :mod:`labkit.memory.expandable`): one
  growing segment per pool; pages of 2 MiB (small pool) or 20 MiB (large pool) are mapped at
  the lowest address that fits.
* ``set_memory_fraction`` (``torch.cuda.set_per_process_memory_fraction``): a new segment
  fails once reserved + its size would exceed fraction x capacity. With it set,
  ``garbage_collection_threshold`` t makes every miss first release whole cached large
  segments whose age (``get_free_block`` calls since they were cached, ``gc_count``) is at
  least the average, oldest first by rounds, until reserved <= t x allowed
  (``garbage_collect_cached_blocks``).

A *core* (:mod:`labkit.memory.core`) replaces the three rules that decide where a request
goes — the best-fit lookup, the split rule and the merge on free — by plain functions
(``CachingAllocator(core=allocator_core(best_fit=mine))``); everything else (rounding,
pools, segments, statistics, release, expandable pages) stays the allocator's. With
expandable segments the allocator moves the core's best fit along PyTorch's extra rule (a
free block before the unmapped tail counts with the size it can expand to) and applies the
oversize rules itself, as ``get_free_block`` does after that step.

Statistics mean what they mean in ``torch.cuda.memory_stats()`` (:mod:`labkit.memory.snapshot`).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import KW_ONLY, dataclass

from labkit import validate
from labkit.memory.blocks import Block, DeviceSegment, Pool
from labkit.memory.config import NO_LIMIT, AllocatorConfig, make_config, parse_alloc_conf
from labkit.memory.constants import (
    K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER,
    K_SMALL_SIZE, SEGMENT_ALIGN, format_size,
)
from labkit.memory.core import AllocatorCore, best_fit_taken, merge_taken, split_taken
from labkit.memory.expandable import ExpandableSegments
from labkit.memory.snapshot import AllocatorSnapshot


@dataclass(eq=False, repr=False)     # an exception: compared by identity, repr as usual
class OutOfMemoryError(MemoryError):
    """The simulated device is out of memory. Attributes give the numbers of the message."""
    message: str
    _: KW_ONLY
    requested: int                # bytes asked for
    alloc_size: int               # bytes the failed cudaMalloc would have taken
    capacity: int
    device_free: int              # capacity - reserved
    allocated: int
    reserved: int
    largest_free_block: int       # largest cached free block

    def __post_init__(self):
        super().__init__(self.message)

    @property
    def reserved_unallocated(self) -> int:
        return self.reserved - self.allocated

    @property
    def free_but_unusable(self) -> int:
        """Free on the device or cached, yet no use to this request."""
        return self.device_free + self.reserved - self.allocated


# ---- the size rules, as free functions (tests and exercises use them directly) --------

def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Round ``size`` up to the next of ``divisions`` equal steps between two powers of 2.

    Example from the source: 1200 with 4 divisions lies in [1024, 2048) whose steps are
    1024, 1280, 1536, 1792, so the result is 1280.
    """
    size = validate.integer("size", size, low=1)
    divisions = validate.power_of_two("divisions", divisions, low=2)
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def round_size(size: int, config: AllocatorConfig | None = None) -> int:
    """The block size PyTorch hands out for a request of ``size`` bytes (round_size)."""
    size = validate.integer("size", size, low=1)
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    if config is not None:
        divisions = config.roundup_power2_divisions(size)
        if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
            return roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def pool_of(rounded_size: int) -> str:
    """'small' for rounded sizes <= kSmallSize (1 MiB), else 'large' (get_pool)."""
    rounded_size = validate.integer("rounded_size", rounded_size, low=1)
    return "small" if rounded_size <= K_SMALL_SIZE else "large"


def allocation_size(rounded_size: int) -> int:
    """Size of the segment cudaMalloc'd for a miss (get_allocation_size)."""
    rounded_size = validate.integer("rounded_size", rounded_size, low=1)
    if rounded_size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded_size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((rounded_size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


def should_split(block_size: int, rounded_size: int, *, small: bool,
                 max_split_size: int = NO_LIMIT, expandable: bool = False) -> bool:
    """Whether a free block of ``block_size`` is split to serve ``rounded_size``."""
    rounded_size = validate.integer("rounded_size", rounded_size, low=1)
    block_size = validate.integer("block_size", block_size, low=rounded_size)
    remaining = block_size - rounded_size
    if small or expandable:
        return remaining >= K_MIN_BLOCK_SIZE
    return rounded_size < max_split_size and remaining > K_SMALL_SIZE


# ---- the allocator --------------------------------------------------------------------

class CachingAllocator(ExpandableSegments, AllocatorSnapshot):
    """PyTorch's caching allocator on one simulated device.

    ``capacity`` (bytes, None = unlimited) is the device memory; options are PyTorch's
    ``PYTORCH_CUDA_ALLOC_CONF`` keys, as keywords or as a string in ``conf``. The memory it
    holds is data of :mod:`labkit.memory.blocks`; its expandable segments' methods are
    :class:`~labkit.memory.expandable.ExpandableSegments`', and ``segments()``,
    ``stats()``, ``memory_stats()`` and ``check_invariants()`` are
    :class:`~labkit.memory.snapshot.AllocatorSnapshot`'s.
    """

    def __init__(self, capacity: int | None = None, *, max_split_size_mb: int | None = None,
                 roundup_power2_divisions=None, expandable_segments: bool = False,
                 max_non_split_rounding_mb: int | None = None,
                 garbage_collection_threshold: float | None = None, conf: str | None = None,
                 core: AllocatorCore | None = None):
        if core is not None and not isinstance(core, AllocatorCore):
            raise TypeError(f"core must be an AllocatorCore (labkit.memory.core."
                            f"allocator_core(...)), got {type(core).__name__}")
        self.core = core
        options = dict(max_split_size_mb=max_split_size_mb,
                       roundup_power2_divisions=roundup_power2_divisions,
                       expandable_segments=expandable_segments,
                       max_non_split_rounding_mb=max_non_split_rounding_mb,
                       garbage_collection_threshold=garbage_collection_threshold)
        if conf is not None:
            options.update(parse_alloc_conf(conf))
        self.config = make_config(**options)
        if capacity is not None:
            capacity = validate.integer("capacity", capacity, low=1)
        self.capacity = capacity
        self.allowed_memory_maximum: int | None = None   # set_memory_fraction
        # Device addresses of new segments, in cudaMalloc order (None: labkit's own, rising).
        # Best fit breaks ties between equal-size free blocks by address, and the driver's
        # addresses do not rise with time, so replaying real ones reproduces real ties.
        self.segment_addresses = None
        self._pools = (Pool(True), Pool(False))
        self._blocks_at: dict[int, Block] = {}
        self._segments: dict[int, DeviceSegment] = {}
        self._next_addr = 1 << 32
        self.allocated = self.reserved = self.requested = 0
        self.peak_allocated = self.peak_reserved = self.peak_requested = 0
        self.num_allocations = 0
        self.num_alloc_retries = self.num_ooms = 0
        self.num_device_alloc = self.num_device_free = 0
        self._round_divisions = any(d > 1 for d in self.config.divisions)

    # -- public API ----------------------------------------------------------------------

    def set_memory_fraction(self, fraction: float) -> None:
        """``torch.cuda.set_per_process_memory_fraction``: cap reserved memory at
        ``fraction`` x capacity (setMemoryFraction); also arms garbage collection."""
        if self.capacity is None:
            raise ValueError("set_memory_fraction needs a capacity (the device's total memory)")
        fraction = validate.fraction("fraction", fraction)
        self.allowed_memory_maximum = int(fraction * self.capacity)

    @property
    def _gc_enabled(self) -> bool:
        return (self.allowed_memory_maximum is not None
                and self.config.garbage_collection_threshold > 0)

    def malloc(self, nbytes: int) -> Block:
        """Allocate ``nbytes`` (> 0) and return the block (DeviceCachingAllocator::malloc)."""
        if type(nbytes) is not int:
            nbytes = validate.integer("nbytes", nbytes)
        if nbytes <= 0:
            raise ValueError(f"nbytes must be >= 1, got {nbytes} (PyTorch allocates "
                             "nothing for empty tensors)")
        if nbytes < K_MIN_BLOCK_SIZE:
            size = K_MIN_BLOCK_SIZE
        elif self._round_divisions:
            size = round_size(nbytes, self.config)
        else:
            size = validate.ceil_div(nbytes, K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
        small = size <= K_SMALL_SIZE
        pool = self._pools[0] if small else self._pools[1]
        core = self.core
        if core is None:
            block = self._get_free_block(pool, size)
        else:
            block = self._core_free_block(pool, size)
        if block is None:
            if self._gc_enabled:
                self._garbage_collect_cached_blocks()
            alloc_size = allocation_size(size)
            block = self._alloc_block(pool, size, alloc_size)
            if block is None and self._release_available_cached_blocks(pool, size):
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self.num_alloc_retries += 1
                self._release_cached_blocks()
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self._raise_oom(nbytes, size, alloc_size)
        remaining = block.size - size
        if core is not None:
            split = self._core_should_split(block.size, size, small)
        elif small or self.config.expandable_segments:
            split = remaining >= K_MIN_BLOCK_SIZE
        else:
            split = size < self.config.max_split_size and remaining > K_SMALL_SIZE
        if split:
            rest = block
            block = Block(rest.addr, size, pool, rest.seg, self)
            prev = rest.prev
            block.prev = prev
            if prev is not None:
                prev.next = block
            block.next = rest
            rest.prev = block
            rest.addr += size
            rest.size = remaining
            self._blocks_at[block.addr] = block
            self._blocks_at[rest.addr] = rest
            self._cache(pool, rest)
        block.allocated = True
        block.requested = nbytes
        self.num_allocations += 1
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        self.requested += nbytes
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        return block

    def free(self, block: Block) -> None:
        """Return ``block`` to the cache, merging it with free neighbours (free_block)."""
        if not isinstance(block, Block) or block.owner is not self:
            raise ValueError(f"free() needs a block returned by this allocator's malloc, "
                             f"got {block!r}")
        if not block.allocated:
            raise ValueError(f"double free: {block!r} is not allocated")
        block.allocated = False
        self.num_allocations -= 1
        self.allocated -= block.size
        self.requested -= block.requested
        block.requested = 0
        pool = block.pool
        if self.core is not None:
            self._core_merge(block)
            self._cache(pool, block)
            return
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated and prev.mapped == block.mapped:
            self._merge(block, prev, pool)
        if nxt is not None and not nxt.allocated and nxt.mapped == block.mapped:
            self._merge(block, nxt, pool)
        self._cache(pool, block)

    def empty_cache(self) -> None:
        """Release every cached segment that is not split (release_cached_blocks)."""
        self._release_cached_blocks()

    def reset_peak_stats(self) -> None:
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved
        self.peak_requested = self.requested

    # -- internals (names follow the C++ source) -------------------------------------------

    def _cache(self, pool: Pool, block: Block) -> None:
        """insert_into_blocks: cache a free block and remember when (its gc age base)."""
        block.gc_base = pool.free_calls
        insort(pool.keys, (block.size, block.addr))

    def _get_free_block(self, pool: Pool, size: int) -> Block | None:
        if self._gc_enabled:
            pool.free_calls += 1
        keys = pool.keys
        i = bisect_left(keys, (size, -1))
        n = len(keys)
        if i == n:
            return None
        if self.config.expandable_segments:
            def expandable_size(key):
                b = self._blocks_at[key[1]]
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < n and expandable_size(keys[i + 1]) < expandable_size(keys[i]):
                i += 1
        bsize, baddr = keys[i]
        ms = self.config.max_split_size
        if size < ms and bsize >= ms:
            return None
        if size >= ms and bsize >= size + self.config.max_non_split_rounding_size:
            return None
        del keys[i]
        return self._blocks_at[baddr]

    # -- a core's rules (labkit.memory.core): plain data in, checked on the way out --------

    def _core_free_block(self, pool: Pool, size: int) -> Block | None:
        """get_free_block with the core's best fit over the pool's free list."""
        if self._gc_enabled:
            pool.free_calls += 1
        keys = pool.keys
        if not keys:
            return None
        cfg = self.config
        expandable = cfg.expandable_segments
        free = sorted((addr, bsize) for bsize, addr in keys)
        ms = NO_LIMIT if expandable else cfg.max_split_size
        addr = self.core.best_fit(free, size, ms, cfg.max_non_split_rounding_size)
        if best_fit_taken(free, size, addr) is None:     # (free: this pool's cached blocks)
            return None
        block = self._blocks_at[addr]
        i = bisect_left(keys, (block.size, addr))
        if expandable:
            def expandable_size(key):
                b = self._blocks_at[key[1]]
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < len(keys) and expandable_size(keys[i + 1]) < expandable_size(keys[i]):
                i += 1
            bsize = keys[i][0]
            if size < cfg.max_split_size <= bsize:
                return None
            if size >= cfg.max_split_size and bsize >= size + cfg.max_non_split_rounding_size:
                return None
        bsize, baddr = keys.pop(i)
        return self._blocks_at[baddr]

    def _core_should_split(self, block_size: int, size: int, small: bool) -> bool:
        cfg = self.config
        return split_taken(self.core.should_split(
            block_size, size, bool(small or cfg.expandable_segments), cfg.max_split_size))

    def _neighbours(self, block: Block) -> tuple[Block | None, Block | None]:
        """The mapped blocks whose memory touches ``block``: its segment's prev/next, or, at a
        segment's edge, the last/first block of a segment placed right next to it."""
        before, after = block.prev, block.next
        end = block.addr + block.size
        if before is None or after is None:
            for seg in self._segments.values():
                if seg is block.seg:
                    continue
                if before is None and seg.base + seg.size == block.addr:
                    b = self._blocks_at[seg.base]
                    while b.next is not None:
                        b = b.next
                    before = b
                if after is None and seg.base == end:
                    after = self._blocks_at[seg.base]
        return (before if before is not None and before.mapped else None,
                after if after is not None and after.mapped else None)

    def _core_merge(self, block: Block) -> None:
        """free_block with the core's merge: it names the free block that results."""
        before, after = self._neighbours(block)

        def info(b):
            return None if b is None else {"addr": b.addr, "size": b.size,
                                           "segment": b.seg.base, "free": not b.allocated}
        shown = {"addr": block.addr, "size": block.size, "segment": block.seg.base}
        got = self.core.merge(dict(shown), info(before), info(after))
        _, _, absorbed = merge_taken(shown, info(before), info(after), got)
        for name in absorbed:
            self._merge(block, before if name == "before" else after, block.pool)

    def _alloc_block(self, pool: Pool, size: int, alloc_size: int) -> Block | None:
        if (self.allowed_memory_maximum is not None
                and self.reserved + alloc_size > self.allowed_memory_maximum):
            return None
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None
        if self.config.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        addr = next(self.segment_addresses, None) if self.segment_addresses is not None else None
        if addr is None:
            addr = self._next_addr
            self._next_addr += validate.ceil_div(alloc_size, SEGMENT_ALIGN) * SEGMENT_ALIGN
        seg = DeviceSegment(addr, alloc_size, pool, False)
        self._segments[addr] = seg
        block = Block(addr, alloc_size, pool, seg, self)
        self._blocks_at[addr] = block
        self.reserved += alloc_size
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_device_alloc += 1
        return block

    def _merge(self, dst: Block, src: Block, pool: Pool) -> None:
        """try_merge_blocks: ``dst`` absorbs its free neighbour ``src``."""
        if src.mapped:
            keys = pool.keys
            del keys[bisect_left(keys, (src.size, src.addr))]
        else:
            del pool.unmapped[bisect_left(pool.unmapped, src.addr)]
        blocks_at = self._blocks_at
        if dst.prev is src:
            del blocks_at[dst.addr]
            dst.addr = src.addr
            blocks_at[dst.addr] = dst
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            del blocks_at[src.addr]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    def _release_block(self, block: Block) -> None:
        keys = block.pool.keys
        del keys[bisect_left(keys, (block.size, block.addr))]
        del self._blocks_at[block.addr]
        del self._segments[block.seg.base]
        self.reserved -= block.size
        self.num_device_free += 1

    def _release_available_cached_blocks(self, pool: Pool, size: int) -> bool:
        """Free cached oversize blocks (only with max_split_size set)."""
        ms = self.config.max_split_size
        if ms == NO_LIMIT or self.config.expandable_segments:
            return False
        key = max(size, ms)
        keys = pool.keys
        i = bisect_left(keys, (key, -1))
        if i < len(keys):
            self._release_block(self._blocks_at[keys[i][1]])
            return True
        released = 0
        j = len(keys) - 1
        while released < key and j >= 0 and keys[j][0] >= ms:
            block = self._blocks_at[keys[j][1]]
            if not block.is_split():
                released += block.size
                self._release_block(block)
            j -= 1
        return released >= key

    def _garbage_collect_cached_blocks(self) -> None:
        """garbage_collect_cached_blocks: release unsplit cached large segments, those at
        least as old as the average first, until reserved <= threshold x allowed."""
        gc_threshold = int(self.config.garbage_collection_threshold * self.allowed_memory_maximum)
        if self.reserved <= gc_threshold:
            return
        target = self.reserved - gc_threshold
        pool = self._pools[1]
        ages = {addr: pool.free_calls - self._blocks_at[addr].gc_base
                for _, addr in pool.keys if not self._blocks_at[addr].is_split()}
        total_age, count = sum(ages.values()), len(ages)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and count > 0:
            threshold = total_age / count
            freed = False
            for _, addr in list(pool.keys):          # smallest first, as the C++ set
                block = self._blocks_at.get(addr)
                if block is None or block.is_split() or block.seg.expandable:
                    continue
                age = pool.free_calls - block.gc_base
                if age >= threshold:
                    freed = True
                    reclaimed += block.size
                    total_age -= age
                    count -= 1
                    self._release_block(block)

    def _release_cached_blocks(self) -> None:
        for pool in self._pools:
            to_unmap = []
            for _, addr in list(pool.keys):
                block = self._blocks_at[addr]
                if block.seg.expandable:
                    to_unmap.append(block)
                elif block.prev is None and block.next is None:
                    self._release_block(block)
            for block in to_unmap:
                self._unmap_block(block)

    def _raise_oom(self, nbytes: int, size: int, alloc_size: int):
        self.num_ooms += 1
        device_free = self.capacity - self.reserved
        largest = max((k[0] for p in self._pools for k in p.keys), default=0)
        unusable = device_free + self.reserved - self.allocated
        raise OutOfMemoryError(
            f"CUDA out of memory (simulated). Tried to allocate {format_size(alloc_size)} "
            f"(request of {format_size(nbytes)}). Device has a total capacity of "
            f"{format_size(self.capacity)} of which {format_size(device_free)} is free. "
            + (f"{format_size(self.allowed_memory_maximum)} allowed; "
               if self.allowed_memory_maximum is not None else "") +
            f"Of the allocated memory {format_size(self.allocated)} is allocated by PyTorch, "
            f"and {format_size(self.reserved - self.allocated)} is reserved by PyTorch but "
            f"unallocated (largest cached free block {format_size(largest)}). So "
            f"{format_size(unusable)} is free but unusable for this request. If reserved but "
            "unallocated memory is large try expandable_segments:True or max_split_size_mb.",
            requested=nbytes, alloc_size=alloc_size, capacity=self.capacity,
            device_free=device_free, allocated=self.allocated, reserved=self.reserved,
            largest_free_block=largest)

