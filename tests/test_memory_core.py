"""The allocator's core as plain functions (labkit.memory.core): labkit's rules plugged into
CachingAllocator give the allocator's own result step by step; the rules against
c10/cuda/CUDACachingAllocator.cpp's cases; what the allocator refuses from a core."""
import numpy as np
import pytest

from labkit.memory import CachingAllocator, MiB, scenarios
from labkit.memory.core import (
    NO_LIMIT, AllocatorCore, CoreError, allocator_core, best_fit_block, merge_free_block,
    split_rule,
)
from labkit.memory.core_replay import (
    core_agreement, first_difference, random_events, replay_summary, trace_events,
)
from labkit.memory.trace import MemoryTrace

OPTIONS = [{}, {"max_split_size_mb": 20}, {"max_split_size_mb": 48},
           {"expandable_segments": True},
           {"expandable_segments": True, "max_split_size_mb": 24},
           {"capacity": 160 * MiB}, {"capacity": 96 * MiB, "max_split_size_mb": 32}]


@pytest.mark.parametrize("options", OPTIONS)
def test_labkit_rules_as_a_core_replay_exactly_like_the_allocator(options):
    rng = np.random.default_rng(len(repr(options)))
    for _ in range(6):
        events = random_events(rng, 150, large=0.25)
        plugged = replay_summary(allocator_core(), "core", events, options)
        own = replay_summary(None, "default", events, options)
        assert first_difference(plugged, own) is None
        assert plugged["steps"] and plugged["error"] == own["error"]


def test_best_fit_takes_the_smallest_block_that_fits_not_the_first():
    free = [(0, 30 * MiB), (64 * MiB, 17 * MiB)]          # the walkthrough's two free blocks
    assert best_fit_block(free, 12 * MiB) == 64 * MiB
    assert best_fit_block([(0, 4 * MiB), (8 * MiB, 4 * MiB)], 3 * MiB) == 0     # ties: low addr
    assert best_fit_block(free, 31 * MiB) is None


def test_best_fit_oversize_rules_of_get_free_block():
    # "Do not return an oversized block for a large request"; "Allow oversized block size
    # to be rounded up but within a limit" (kLargeBuffer, 20 MiB)
    big = [(0, 100 * MiB)]
    assert best_fit_block(big, 30 * MiB, 64 * MiB) is None
    assert best_fit_block(big, 90 * MiB, 64 * MiB) == 0
    assert best_fit_block(big, 80 * MiB, 64 * MiB) is None          # 100 >= 80 + 20
    assert best_fit_block(big, 80 * MiB, 64 * MiB, rounding=40 * MiB) == 0


def test_split_rule_thresholds():
    assert split_rule(2 * MiB, 2 * MiB - 512, True, NO_LIMIT)
    assert not split_rule(2 * MiB, 2 * MiB - 511, True, NO_LIMIT)
    assert not split_rule(20 * MiB, 19 * MiB, False, NO_LIMIT)      # remainder == 1 MiB
    assert split_rule(20 * MiB, 19 * MiB - 512, False, NO_LIMIT)
    assert not split_rule(100 * MiB, 64 * MiB, False, 64 * MiB)


def test_merge_only_with_free_neighbours_of_the_same_segment():
    block = {"addr": 4096, "size": 1024, "segment": 0}
    before = {"addr": 0, "size": 4096, "segment": 0, "free": True}
    after = {"addr": 5120, "size": 512, "segment": 0, "free": True}
    assert merge_free_block(block, before, after) == (0, 5632)
    assert merge_free_block(block, dict(before, free=False), after) == (4096, 1536)
    assert merge_free_block(block, None, dict(after, segment=5120)) == (4096, 1024)


def test_the_walkthrough_takes_the_17_mib_remainder():
    steps = scenarios.request_walkthrough([30, 3, 0.5], free_indices=[0], then_mb=12,
                                          core=allocator_core())
    large = [s for s in steps[-1].segments if s.segment_type == "large"]
    by_size = {s.total_size: [(b.size, b.state) for b in s.blocks] for s in large}
    assert by_size[30 * MiB] == [(30 * MiB, "inactive")]
    assert by_size[20 * MiB] == [(3 * MiB, "active_allocated"), (12 * MiB, "active_allocated"),
                                 (5 * MiB, "inactive")]


def test_scenarios_give_the_same_numbers_with_labkits_rules_as_a_core():
    for fix in scenarios.HOLE_FIXES:
        a = scenarios.holes_oom_pattern(fix)
        b = scenarios.holes_oom_pattern(fix, core=allocator_core())
        assert (a.succeeded, a.stats.reserved_bytes) == (b.succeeded, b.stats.reserved_bytes)
    for fix in scenarios.FIXES:
        a = scenarios.growing_batch_pattern(fix)
        b = scenarios.growing_batch_pattern(fix, core=allocator_core())
        assert a.reserved == b.reserved and a.stats == b.stats


def test_segments_placed_side_by_side_are_never_merged():
    def greedy(block, before, after):
        lo, hi = block["addr"], block["addr"] + block["size"]
        for nb in (before, after):
            if nb is not None and nb["free"]:
                lo, hi = min(lo, nb["addr"]), max(hi, nb["addr"] + nb["size"])
        return lo, hi - lo
    a = CachingAllocator(core=allocator_core(merge=greedy))
    x, y, w = a.malloc(1000), a.malloc(MiB), a.malloc(MiB - 1024)   # fill a 2 MiB segment
    z = a.malloc(1000)                                       # a second one, right after it
    assert z.addr == x.addr + 2 * MiB and a.stats().num_segments == 2
    a.free(w)
    with pytest.raises(CoreError, match="blocks of two segments never merge"):
        a.free(z)


@pytest.mark.parametrize("rule, value, match", [
    ("best_fit", lambda free, size, ms, r: 12345, "not the address of a free block"),
    ("best_fit", lambda free, size, ms, r: free[0][0] if free else None, "does not fit"),
    ("merge", lambda block, before, after: (block["addr"], 1), "returned"),
    ("merge", lambda block, before, after: "x", r"must return \(addr, size\)"),
    ("should_split", lambda b, s, small, ms: "yes", "True or False"),
])
def test_a_core_that_returns_nonsense_is_refused_with_a_reason(rule, value, match):
    a = CachingAllocator(core=allocator_core(**{rule: value}))
    with pytest.raises(CoreError, match=match):
        blocks = [a.malloc(n) for n in (3 * MiB, 700, 5 * MiB, 300)]
        for b in blocks[:2]:
            a.free(b)
        a.malloc(4 * MiB)
        a.malloc(600)


def test_core_argument_and_description():
    with pytest.raises(TypeError, match="core must be an AllocatorCore"):
        CachingAllocator(core=best_fit_block)
    with pytest.raises(TypeError, match="best_fit must be a function"):
        AllocatorCore(best_fit=3)
    core = allocator_core(best_fit=lambda *a: None)
    assert core.owner("best_fit") == "yours" and core.owner("merge") == "labkit's"
    assert "exercise 6.7 has not passed" in core.describe() and not core.is_labkit
    assert allocator_core().is_labkit


def test_trace_events_and_agreement():
    trace = MemoryTrace.from_events([("alloc", 0x10, 3 * MiB), ("alloc", 0x20, 0),
                               ("free", 0x99, 0), ("alloc", 0x30, 700), ("free", 0x10, 0),
                               ("free", 0x30, 0)])
    events = trace_events(trace)
    assert events == [("alloc", 0, 3 * MiB), ("alloc", 1, 700), ("free", 0, 0),
                      ("free", 1, 0)]
    agreement = core_agreement(allocator_core(), events)
    assert agreement.identical and agreement.agree == 4 and agreement.segments == (2, 2)

    def first_fit(free, size, ms, r):
        return next((addr for addr, s in free if s >= size), None)
    rng = np.random.default_rng(3)
    events = random_events(rng, 200)
    bad = core_agreement(allocator_core(best_fit=first_fit), events)
    assert not bad.identical and bad.agree == bad.first_difference < len(events)
