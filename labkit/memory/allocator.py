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
* Expandable segments (Note [Expandable Segments]): one growing segment per pool; pages of
  2 MiB (small pool) or 20 MiB (large pool) are mapped at the lowest address that fits.
  Mapping pages adds to ``reserved_bytes`` but never to the ``segment`` count (``map_block``
  updates only ``reserved_bytes``), so ``memory_stats()`` reports 0 segments for them.
* ``set_memory_fraction`` (``torch.cuda.set_per_process_memory_fraction``): a new segment
  fails once reserved + its size would exceed fraction x capacity. With it set,
  ``garbage_collection_threshold`` t makes every miss first release whole cached large
  segments whose age (``get_free_block`` calls since they were cached, ``gc_count``) is at
  least the average, oldest first by rounds, until reserved <= t x allowed
  (``garbage_collect_cached_blocks``).

Statistics mean what they mean in ``torch.cuda.memory_stats()``: ``allocated_bytes`` is the
sum of the (rounded) sizes of the blocks handed out, ``requested_bytes`` the sum of the
sizes asked for, ``reserved_bytes`` the memory held from the device (segments, or mapped
pages of expandable segments).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import KW_ONLY, dataclass, field

from labkit import validate
from labkit.memory.config import NO_LIMIT, AllocatorConfig, make_config, parse_alloc_conf
from labkit.memory.constants import (
    K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER,
    K_SMALL_SIZE, LARGE_PAGE, SEGMENT_ALIGN, SMALL_PAGE, format_size,
)


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


# ---- data ---------------------------------------------------------------------------

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


class _Pool:
    __slots__ = ("small", "keys", "unmapped", "page", "free_calls")

    def __init__(self, small: bool):
        self.small = small
        self.free_calls = 0                     # get_free_blocks_call_count (gc only)
        self.keys: list[tuple[int, int]] = []   # free mapped blocks, sorted (size, addr)
        self.unmapped: list[int] = []           # addresses of unmapped blocks, sorted
        self.page = SMALL_PAGE if small else LARGE_PAGE


@dataclass(slots=True, eq=False)
class _Segment:
    base: int
    size: int
    pool: _Pool
    expandable: bool


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


# ---- the allocator --------------------------------------------------------------------

class CachingAllocator:
    """PyTorch's caching allocator on one simulated device.

    ``capacity`` (bytes, None = unlimited) is the device memory; options are PyTorch's
    ``PYTORCH_CUDA_ALLOC_CONF`` keys, as keywords or as a string in ``conf``.
    """

    def __init__(self, capacity: int | None = None, *, max_split_size_mb: int | None = None,
                 roundup_power2_divisions=None, expandable_segments: bool = False,
                 max_non_split_rounding_mb: int | None = None,
                 garbage_collection_threshold: float | None = None, conf: str | None = None):
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
        self._pools = (_Pool(True), _Pool(False))
        self._blocks_at: dict[int, Block] = {}
        self._segments: dict[int, _Segment] = {}
        self._next_addr = 1 << 32
        self._expandable: dict[bool, _Segment] = {}
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
            size = -(-nbytes // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE
        small = size <= K_SMALL_SIZE
        pool = self._pools[0] if small else self._pools[1]
        block = self._get_free_block(pool, size)
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
        if small or self.config.expandable_segments:
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

    # -- internals (names follow the C++ source) -------------------------------------------

    def _cache(self, pool: _Pool, block: Block) -> None:
        """insert_into_blocks: cache a free block and remember when (its gc age base)."""
        block.gc_base = pool.free_calls
        insort(pool.keys, (block.size, block.addr))

    def _get_free_block(self, pool: _Pool, size: int) -> Block | None:
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

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int) -> Block | None:
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
            self._next_addr += -(-alloc_size // SEGMENT_ALIGN) * SEGMENT_ALIGN
        seg = _Segment(addr, alloc_size, pool, False)
        self._segments[addr] = seg
        block = Block(addr, alloc_size, pool, seg, self)
        self._blocks_at[addr] = block
        self.reserved += alloc_size
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_device_alloc += 1
        return block

    def _merge(self, dst: Block, src: Block, pool: _Pool) -> None:
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

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
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

    # -- expandable segments ---------------------------------------------------------------

    def _new_expandable_segment(self, pool: _Pool) -> Block:
        page = pool.page
        space = (self.capacity if self.capacity is not None else 1 << 40)
        space = space + space // 8   # "1 1/8 the total memory on the GPU"
        space = -(-space // page) * page
        addr = -(-self._next_addr // page) * page
        self._next_addr = addr + space
        seg = _Segment(addr, space, pool, True)
        self._segments[addr] = seg
        block = Block(addr, space, pool, seg, self, mapped=False)
        self._blocks_at[addr] = block
        insort(pool.unmapped, addr)
        return block

    def _find_expandable_block(self, pool: _Pool, size: int) -> Block:
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
        mapped = min(-(-size // pool.page) * pool.page, to_map.size)
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

    def _try_allocate_expandable_block(self, pool: _Pool, size: int) -> Block | None:
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
        ustart = seg.base + -(-(start - seg.base) // page) * page
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


def _segment_info(run: list[BlockInfo], kind: str, expandable: bool) -> SegmentInfo:
    return SegmentInfo(run[0].address, sum(b.size for b in run), kind, expandable, tuple(run))
