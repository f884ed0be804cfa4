"""Allocation patterns the chapter runs through the simulator.

* :func:`request_walkthrough`: a few requests, then frees, then one more — each step's
  segment map (the allocator step by step).
* :func:`growing_batch_pattern`: the pattern that runs out of memory with plenty free:
  each step allocates a slightly larger activation, keeps a small tensor (a logged
  metric, a cache entry) and frees the activation. The kept tensor is carved out of the
  freed activation's segment, pinning it, so the next larger activation needs a new
  segment. :data:`FIXES` lists settings to compare (expandable segments is the remedy).
* :func:`holes_oom_pattern`: free memory that no request fits; :data:`HOLE_FIXES`.
* :func:`seed_monitor_example`: the seed's ``print_gpu_memory`` example on the simulator.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass

from labkit.memory.allocator import CachingAllocator, OutOfMemoryError
from labkit.memory.constants import MiB
from labkit.memory.snapshot import MemoryStats, SegmentInfo
from labkit.validate import integer, nonnegative, one_of, positive


@dataclass(frozen=True)
class Step:
    action: str            # "malloc 3.00 MiB", "free #2", "empty_cache"
    stats: MemoryStats
    segments: tuple[SegmentInfo, ...]


def request_walkthrough(sizes_mb, free_indices=(), then_mb: float | None = None, *,
                        max_split_size_mb: int | None = None,
                        expandable_segments: bool = False,
                        empty_cache: bool = False, core=None) -> list[Step]:
    """Allocate ``sizes_mb`` (MiB, floats allowed) in order, free the requests at
    ``free_indices``, optionally allocate ``then_mb``, optionally ``empty_cache()``; the
    allocator runs ``core`` (:func:`labkit.memory.core.allocator_core`) when given."""
    if isinstance(sizes_mb, (str, bytes)) or not hasattr(sizes_mb, "__iter__"):
        raise TypeError(f"sizes_mb must be a list of sizes in MiB, got {sizes_mb!r}")
    sizes = [positive(f"sizes_mb[{i}]", s) for i, s in enumerate(sizes_mb)]
    if not sizes:
        raise ValueError(f"sizes_mb must be a non-empty list of sizes > 0, got {sizes_mb}")
    for i in free_indices:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(sizes):
            raise ValueError(f"free_indices must be ints in [0, {len(sizes) - 1}], got {i!r}")
    if then_mb is not None:
        then_mb = positive("then_mb", then_mb)
    alloc = CachingAllocator(max_split_size_mb=max_split_size_mb,
                             expandable_segments=expandable_segments, core=core)
    steps, blocks = [], []

    def snap(action):
        steps.append(Step(action, alloc.stats(), tuple(alloc.segments())))

    for i, s in enumerate(sizes):
        blocks.append(alloc.malloc(max(1, int(s * MiB))))
        snap(f"#{i}: malloc {s:g} MiB")
    for i in dict.fromkeys(free_indices):
        alloc.free(blocks[i])
        snap(f"free #{i}")
    if then_mb is not None:
        alloc.malloc(max(1, int(float(then_mb) * MiB)))
        snap(f"malloc {float(then_mb):g} MiB")
    if empty_cache:
        alloc.empty_cache()
        snap("empty_cache()")
    return steps


@dataclass(frozen=True)
class PatternResult:
    steps_done: int
    steps_wanted: int
    oom: OutOfMemoryError | None
    stats: MemoryStats
    segments: tuple[SegmentInfo, ...]
    allocated: tuple[int, ...]      # after each step
    reserved: tuple[int, ...]

    @property
    def succeeded(self) -> bool:
        return self.oom is None


class _PatternRun:
    """A pattern's allocator, and its allocated and reserved bytes after each step
    (:meth:`mark`). Fixes named after an allocator setting switch it on
    (``max_split_size_mb`` at the pattern's value); the others change the program."""

    def __init__(self, fix: str, capacity_mb: int, *, max_split_size_mb: int, core=None):
        split = max_split_size_mb if fix == "max_split_size_mb" else None
        self.alloc = CachingAllocator(capacity=capacity_mb * MiB, max_split_size_mb=split,
                                      expandable_segments=fix == "expandable_segments",
                                      core=core)
        self.allocated: list[int] = []
        self.reserved: list[int] = []

    def mark(self) -> None:
        self.allocated.append(self.alloc.allocated)
        self.reserved.append(self.alloc.reserved)

    def result(self, done: int, wanted: int, oom: OutOfMemoryError | None) -> PatternResult:
        return PatternResult(done, wanted, oom, self.alloc.stats(),
                             tuple(self.alloc.segments()), tuple(self.allocated),
                             tuple(self.reserved))


FIXES = {
    "none": "the default allocator",
    "max_split_size_mb": "max_split_size_mb:64 — no help here: every growing activation "
                         "still misses the cache and gets a new segment",
    "expandable_segments": "expandable_segments:True — one segment grows page by page, the "
                           "freed activation merges with the unmapped tail",
    "allocate_kept_first": "allocate the long-lived tensor before the temporary one — no "
                           "help here either: the activation sizes still grow",
}


def growing_batch_pattern(fix: str = "none", *, capacity_mb: int = 1024, steps: int = 24,
                          start_mb: float = 96.0, growth_mb: float = 6.0,
                          kept_mb: float = 3.0, core=None) -> PatternResult:
    """Step i allocates an activation of start + i·growth MiB, keeps a ``kept_mb`` tensor
    and frees the activation. ``fix`` is one of :data:`FIXES`; ``core`` the allocator's
    rules (:func:`labkit.memory.core.allocator_core`)."""
    fix = one_of("fix", fix, FIXES)
    capacity_mb = integer("capacity_mb", capacity_mb, low=1)
    steps = integer("steps", steps, low=1)
    start_mb, kept_mb = positive("start_mb", start_mb), positive("kept_mb", kept_mb)
    growth_mb = nonnegative("growth_mb", growth_mb)
    run = _PatternRun(fix, capacity_mb, max_split_size_mb=64, core=core)
    alloc = run.alloc
    kept, oom, done = [], None, 0
    try:
        for i in range(steps):
            act_bytes = int((start_mb + i * growth_mb) * MiB)
            if fix == "allocate_kept_first":
                kept.append(alloc.malloc(int(kept_mb * MiB)))
                act = alloc.malloc(act_bytes)
            else:
                act = alloc.malloc(act_bytes)
                kept.append(alloc.malloc(int(kept_mb * MiB)))
            alloc.free(act)
            run.mark()
            done += 1
    except OutOfMemoryError as exc:
        oom = exc
    return run.result(done, steps, oom)


@dataclass(frozen=True)
class MonitorLine:
    when: str
    allocated: int
    reserved: int

    @property
    def free_in_cache(self) -> int:
        return self.reserved - self.allocated


def seed_monitor_example(device: str = "auto") -> tuple[str, list[MonitorLine]]:
    """The seed's example 2 (allocate a 1000×1000 fp32 tensor, delete it, empty the cache)
    on a real GPU when there is one (``device='cuda'``/'auto'), else on the simulator.
    Returns (the device used, one line per stage)."""
    if device not in ("auto", "cuda", "simulator"):
        raise ValueError(f"device must be 'auto', 'cuda' or 'simulator', got {device!r}")
    use_cuda = False
    if device in ("auto", "cuda"):
        try:
            import torch  # deferred: torch
            use_cuda = torch.cuda.is_available()
        except ImportError:
            use_cuda = False
        if device == "cuda" and not use_cuda:
            raise ValueError("device='cuda' but no CUDA GPU is available")
    lines = []
    if use_cuda:
        import torch  # deferred: torch

        def read(when):
            lines.append(MonitorLine(when, torch.cuda.memory_allocated(),
                                     torch.cuda.memory_reserved()))
        base_a, base_r = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        read("start")
        x = torch.randn(1000, 1000, device="cuda")
        read("after allocating a 1000x1000 fp32 tensor")
        del x
        gc.collect()
        read("after del")
        torch.cuda.empty_cache()
        read("after empty_cache()")
        del base_a, base_r
        return "cuda", lines
    alloc = CachingAllocator()

    def read(when):
        lines.append(MonitorLine(when, alloc.allocated, alloc.reserved))
    read("start")
    x = alloc.malloc(1000 * 1000 * 4)
    read("after allocating a 1000x1000 fp32 tensor")
    alloc.free(x)
    read("after del")
    alloc.empty_cache()
    read("after empty_cache()")
    return "simulator", lines


HOLE_FIXES = {
    "none": "the default allocator",
    "max_split_size_mb": "max_split_size_mb:256 — the cached 512 MiB block is 'oversize': "
                         "16 MiB requests may not split it, they get their own segments, "
                         "which are unsplit and can be released",
    "empty_cache_after_load": "torch.cuda.empty_cache() right after freeing the big "
                              "temporary, so the 16 MiB tensors do not carve it up",
    "expandable_segments": "expandable_segments:True — does not help here: the holes sit "
                           "between live tensors and no 20 MiB page is entirely free",
}


def holes_oom_pattern(fix: str = "none", *, capacity_mb: int = 768, big_mb: int = 512,
                      n_small: int = 32, small_mb: int = 16,
                      final_mb: int = 300, core=None) -> PatternResult:
    """Free memory that cannot be used: a big temporary (loading a checkpoint, say) of
    ``big_mb`` is freed and cached; ``n_small`` tensors of ``small_mb`` are carved out of
    it; every other one is freed (half of them live on, e.g. kept for logging); then a
    ``final_mb`` request finds no hole big enough, and no segment can be released
    because each is split. ``fix`` is one of :data:`HOLE_FIXES`; ``core`` the allocator's
    rules (:func:`labkit.memory.core.allocator_core`)."""
    fix = one_of("fix", fix, HOLE_FIXES)
    capacity_mb, big_mb, n_small, small_mb, final_mb = (
        integer(name, v, low=1) for name, v in (
            ("capacity_mb", capacity_mb), ("big_mb", big_mb), ("n_small", n_small),
            ("small_mb", small_mb), ("final_mb", final_mb)))
    run = _PatternRun(fix, capacity_mb, max_split_size_mb=256, core=core)
    alloc, mark = run.alloc, run.mark
    oom, done = None, 0
    try:
        big = alloc.malloc(big_mb * MiB)
        mark()
        alloc.free(big)
        if fix == "empty_cache_after_load":
            alloc.empty_cache()
        mark()
        done = 1
        small = [alloc.malloc(small_mb * MiB) for _ in range(n_small)]
        mark()
        for b in small[::2]:
            alloc.free(b)
        mark()
        done = 2
        alloc.malloc(final_mb * MiB)
        mark()
        done = 3
    except OutOfMemoryError as exc:
        oom = exc
    return run.result(done, 3, oom)
