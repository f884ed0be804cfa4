"""The caching-allocator simulator, rule by rule (c10/cuda/CUDACachingAllocator.cpp)."""
import pytest
from hypothesis import given, settings, strategies as st

from labkit.memory import (
    CachingAllocator, OutOfMemoryError, allocation_size, pool_of, round_size,
    roundup_power2_next_division, should_split,
)
from labkit.memory.config import NO_LIMIT, make_config, parse_alloc_conf
from labkit.memory.constants import MiB


@pytest.mark.parametrize("n, want", [(1, 512), (511, 512), (512, 512), (513, 1024),
                                     (1000, 1024), (MiB, MiB), (MiB + 1, MiB + 512),
                                     (4_000_000, 4_000_256)])
def test_round_size_multiples_of_512(n, want):
    assert round_size(n) == want


@pytest.mark.parametrize("n, pool, seg", [
    (MiB, "small", 2 * MiB), (MiB + 1, "large", 20 * MiB), (10 * MiB - 512, "large", 20 * MiB),
    (10 * MiB, "large", 10 * MiB), (10 * MiB + 1, "large", 12 * MiB),
    (21 * MiB + 7, "large", 22 * MiB), (2 * MiB, "large", 20 * MiB)])
def test_pool_and_segment_size_at_thresholds(n, pool, seg):
    r = round_size(n)
    assert pool_of(r) == pool and allocation_size(r) == seg


def test_roundup_power2_division_example_from_source():
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(1024, 4) == 1024
    assert roundup_power2_next_division(1537, 4) == 1792
    cfg = make_config(roundup_power2_divisions=4)
    # 1 MiB + 1 with 4 divisions of [1 MiB, 2 MiB) → 1.25 MiB
    assert round_size(MiB + 1, cfg) == MiB + MiB // 4
    # below 512 * divisions the plain 512 rounding applies
    assert round_size(1500, cfg) == 1536
    # AllocatorConfig::parseRoundUpPower2Divisions: the first key also fills the intervals
    # below it, and '>' fills from the interval after the last key (measured on an H200
    # with torch 2.11: "[64:2,256:4,>:8]" rounds 296,698,582 B up to 320 MiB, 4 divisions)
    per_interval = make_config(roundup_power2_divisions="[64:1,256:2,>:4]")
    got = [per_interval.roundup_power2_divisions(m * MiB) for m in (1, 64, 128, 256, 1024)]
    assert got == [1, 1, 0, 2, 4]
    measured = CachingAllocator(conf="roundup_power2_divisions:[64:2,256:4,>:8]")
    for n, torch_allocated in [(296698582, 320 * MiB), (70 * MiB + 1, 96 * MiB),
                               (MiB + 1, 3 * MiB // 2), (600 * MiB + 1, 640 * MiB)]:
        b = measured.malloc(n)
        assert measured.allocated == torch_allocated
        measured.free(b)


def test_should_split_thresholds():
    assert should_split(2 * MiB, 2 * MiB - 512, small=True)
    assert not should_split(2 * MiB, 2 * MiB - 511, small=True)
    assert not should_split(20 * MiB, 19 * MiB, small=False)            # remainder == 1 MiB
    assert should_split(20 * MiB, 19 * MiB - 512, small=False)
    assert not should_split(100 * MiB, 64 * MiB, small=False, max_split_size=64 * MiB)
    assert should_split(100 * MiB, 64 * MiB - 512, small=False, max_split_size=64 * MiB)
    assert should_split(20 * MiB, 19 * MiB, small=False, expandable=True)


def test_seed_monitor_numbers_match_real_cuda():
    a = CachingAllocator()
    b = a.malloc(1000 * 1000 * 4)
    s = a.stats()
    assert (s.allocated_bytes, s.reserved_bytes, s.requested_bytes) == (4000256, 20 * MiB, 4 * 10**6)
    a.free(b)
    assert a.stats().allocated_bytes == 0 and a.stats().reserved_bytes == 20 * MiB
    a.empty_cache()
    assert a.stats().reserved_bytes == 0 and a.stats().peak_reserved_bytes == 20 * MiB


def test_small_requests_share_a_2mib_segment_and_reuse_best_fit():
    a = CachingAllocator()
    blocks = [a.malloc(1000) for _ in range(4)]
    assert a.stats().num_segments == 1 and a.reserved == 2 * MiB
    assert [b.addr - blocks[0].addr for b in blocks] == [0, 1024, 2048, 3072]
    a.free(blocks[1])
    again = a.malloc(700)                     # best fit: the 1024-byte hole, not the tail
    assert again.addr == blocks[1].addr and again.size == 1024


def test_large_split_and_merge_on_free():
    a = CachingAllocator()
    x = a.malloc(3 * MiB)          # 20 MiB segment split: 3 + 17
    y = a.malloc(5 * MiB)          # from the 17 MiB remainder
    seg = a.segments()
    assert len(seg) == 1 and [b.size for b in seg[0].blocks] == [3 * MiB, 5 * MiB, 12 * MiB]
    a.free(x)
    a.free(y)                      # merges with both neighbours
    seg = a.segments()
    assert [b.size for b in seg[0].blocks] == [20 * MiB] and seg[0].blocks[0].state == "inactive"
    a.check_invariants()


def test_no_split_when_remainder_is_at_most_1mib():
    a = CachingAllocator()
    b = a.malloc(19 * MiB)          # segment 20 MiB (19 MiB >= 10 MiB: rounded to 2 MiB)
    assert b.size == 20 * MiB and a.allocated == 20 * MiB and a.requested == 19 * MiB


def test_max_split_size_oversize_rules():
    a = CachingAllocator(max_split_size_mb=64)
    big = a.malloc(100 * MiB)
    a.free(big)
    small = a.malloc(30 * MiB)      # may not take the oversize 100 MiB block
    assert small.addr != big.addr and a.stats().num_segments == 2
    near = a.malloc(90 * MiB)       # oversize request within 20 MiB: reuses, unsplit
    assert near.addr == big.addr and near.size == 100 * MiB
    a.free(near)
    far = a.malloc(70 * MiB)        # 100 >= 70 + 20: not reused
    assert far.addr != big.addr


def test_empty_cache_releases_only_unsplit_segments():
    a = CachingAllocator()
    keep = a.malloc(3 * MiB)
    tmp = a.malloc(40 * MiB)
    a.free(tmp)
    a.empty_cache()
    assert a.reserved == 20 * MiB and a.stats().num_segments == 1
    a.free(keep)
    a.empty_cache()
    assert a.reserved == 0


def test_oom_reports_free_but_unusable():
    a = CachingAllocator(capacity=100 * MiB)
    blocks = [a.malloc(12 * MiB) for _ in range(4)]     # 4 segments of 12 MiB
    holder = a.malloc(40 * MiB)
    a.free(holder)
    parts = [a.malloc(12 * MiB) for _ in range(3)]      # split the cached 40 MiB block
    for b in blocks + parts[::2]:
        a.free(b)
    with pytest.raises(OutOfMemoryError) as info:
        a.malloc(61 * MiB)           # 40 reserved + 62 > 100 even after releasing
    err = info.value
    assert err.reserved == 40 * MiB and err.allocated == 12 * MiB
    assert err.free_but_unusable == 100 * MiB - 12 * MiB
    assert "reserved by PyTorch but unallocated" in str(err) and "28.00 MiB" in str(err)
    assert a.stats().num_ooms == 1 and a.stats().num_alloc_retries == 1
    a.check_invariants()


def test_retry_releases_cached_segments_before_oom():
    a = CachingAllocator(capacity=64 * MiB)
    a.free(a.malloc(40 * MiB))
    b = a.malloc(60 * MiB)           # needs the cached 40 MiB released first
    assert b.size == 60 * MiB and a.reserved == 60 * MiB and a.num_alloc_retries == 1


def test_expandable_segment_grows_in_pages_and_unmaps():
    a = CachingAllocator(expandable_segments=True)
    x = a.malloc(3 * MiB)
    assert a.reserved == 20 * MiB                      # one 20 MiB page of the large pool
    y = a.malloc(30 * MiB)
    assert a.reserved == 40 * MiB and y.addr == x.addr + 3 * MiB
    assert len(a.segments()) == 1
    a.free(y)
    a.empty_cache()
    assert a.reserved == 20 * MiB
    a.free(x)
    a.empty_cache()
    assert a.reserved == 0 and a.segments() == []
    a.check_invariants()


def test_bad_input_raises_value_error():
    a = CachingAllocator()
    for bad in (-1, 0, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="nbytes"):
            a.malloc(bad)
    for bad in ("3", True, None):
        with pytest.raises(TypeError, match="nbytes"):
            a.malloc(bad)
    assert a.malloc(2048.0).size == 2048          # an integral float is a count
    b = a.malloc(100)
    a.free(b)
    with pytest.raises(ValueError, match="double free"):
        a.free(b)
    with pytest.raises(ValueError):
        CachingAllocator().free(a.malloc(100))
    with pytest.raises(ValueError, match="Unrecognized"):
        CachingAllocator(conf="max_split_mb:64")
    with pytest.raises(ValueError, match=">= 20"):
        CachingAllocator(max_split_size_mb=19)
    with pytest.raises(ValueError, match="power of two"):
        CachingAllocator(roundup_power2_divisions=3)
    with pytest.raises(ValueError):
        CachingAllocator(capacity=-5)
    assert parse_alloc_conf("max_split_size_mb:128,expandable_segments:True") == {
        "max_split_size_mb": "128", "expandable_segments": True}
    assert CachingAllocator(conf="max_split_size_mb:128").config.max_split_size == 128 * MiB
    assert make_config().max_split_size == NO_LIMIT


SIZES = st.one_of(st.integers(1, 4096), st.integers(1, 3 * MiB), st.integers(1, 70 * MiB))
OPS = st.lists(st.tuples(st.booleans(), SIZES, st.integers(0, 10**6)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(OPS, st.sampled_from([None, 32]), st.booleans(), st.sampled_from([None, 600 * MiB]))
def test_random_sequences_never_overlap_and_stats_agree(ops, ms, expandable, capacity):
    a = CachingAllocator(capacity=capacity, max_split_size_mb=ms, expandable_segments=expandable)
    live = []
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            try:
                live.append(a.malloc(size))
            except OutOfMemoryError:
                pass
        else:
            a.free(live.pop(pick % len(live)))
        if pick % 7 == 0:
            a.empty_cache()
        a.check_invariants()
        spans = sorted((b.addr, b.addr + b.size) for b in live)
        assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:])), "live blocks overlap"
        assert all(b.size >= b.requested for b in live)
        s = a.stats()
        assert s.allocated_bytes == sum(b.size for b in live)
        assert s.requested_bytes == sum(b.requested for b in live)
        assert s.allocated_bytes <= s.reserved_bytes <= s.peak_reserved_bytes


def test_expandable_segments_count_no_device_segments_like_torch():
    # map_block adds to reserved_bytes only; the segment stat counts cudaMalloc'd segments.
    a = CachingAllocator(capacity=8 << 30, expandable_segments=True)
    blocks = [a.malloc(n) for n in (3 * MiB, 30 * MiB, 1000)]
    ms = a.memory_stats()
    assert ms["reserved_bytes.all.current"] == 2 * 20 * MiB + 2 * MiB
    assert ms["segment.all.current"] == 0 and ms["segment.large_pool.current"] == 0
    assert len(a.segments()) == 2                    # the snapshot still lists mapped ranges
    plain = CachingAllocator(capacity=8 << 30)
    for n in (3 * MiB, 30 * MiB, 1000):
        plain.malloc(n)
    assert plain.memory_stats()["segment.all.current"] == 3
    for b in blocks:
        a.free(b)
    a.check_invariants()


def test_garbage_collection_releases_the_oldest_cached_segments_first():
    a = CachingAllocator(capacity=1000 * MiB, garbage_collection_threshold=0.3)
    a.set_memory_fraction(0.5)                     # allowed 500 MiB, gc above 150 MiB
    blocks = [a.malloc(n * MiB) for n in (100, 60, 40)]
    for b in blocks:
        a.free(b)                                  # all cached at age base 3
    a.free(a.malloc(50 * MiB))                     # reuses B: B's age restarts
    a.malloc(120 * MiB)                            # miss: ages A=2, C=2, B=1, mean 5/3
    s = a.stats()
    assert a.reserved == (60 + 120) * MiB          # A and C released, B kept
    assert s.device_segments == 2 and s.num_device_free == 2
    a.check_invariants()


@pytest.mark.parametrize("kw, fraction", [({}, None), ({}, 0.5),
                                           ({"garbage_collection_threshold": 0.3}, None)])
def test_garbage_collection_needs_both_threshold_and_fraction(kw, fraction):
    a = CachingAllocator(capacity=1000 * MiB, **kw)
    if fraction is not None:
        a.set_memory_fraction(fraction)
    for b in [a.malloc(n * MiB) for n in (100, 60, 40)]:
        a.free(b)
    a.free(a.malloc(50 * MiB))
    a.malloc(120 * MiB)
    assert a.reserved == (100 + 60 + 40 + 120) * MiB and a.stats().num_device_free == 0


def test_memory_fraction_caps_reserved_memory():
    a = CachingAllocator(capacity=1000 * MiB)
    a.set_memory_fraction(0.1)
    a.malloc(60 * MiB)
    with pytest.raises(OutOfMemoryError, match="100.00 MiB allowed"):
        a.malloc(60 * MiB)
    b = CachingAllocator(capacity=1000 * MiB)
    b.malloc(60 * MiB)
    b.malloc(60 * MiB)                             # no fraction: the device has room
    with pytest.raises(ValueError, match="capacity"):
        CachingAllocator().set_memory_fraction(0.5)
    with pytest.raises(ValueError, match="fraction"):
        a.set_memory_fraction(1.5)


def test_alloc_conf_parses_garbage_collection_threshold():
    a = CachingAllocator(conf="garbage_collection_threshold:0.6,max_split_size_mb:64")
    assert a.config.garbage_collection_threshold == 0.6
    for bad in ("0", "1", "1.5", "abc", "-0.2"):
        with pytest.raises(ValueError, match="garbage_collection_threshold"):
            CachingAllocator(conf=f"garbage_collection_threshold:{bad}")


@pytest.mark.parametrize("call, exc, name", [
    (lambda: CachingAllocator(max_split_size_mb=float("inf")), ValueError, "max_split_size_mb"),
    (lambda: CachingAllocator(max_split_size_mb=20.9), ValueError, "max_split_size_mb"),
    (lambda: CachingAllocator(conf="max_split_size_mb:abc"), ValueError, "max_split_size_mb"),
    (lambda: CachingAllocator(conf="max_split_size_mb:64.5"), ValueError, "max_split_size_mb"),
    (lambda: CachingAllocator(conf="max_non_split_rounding_mb:x"), ValueError,
     "max_non_split_rounding_mb"),
    (lambda: CachingAllocator(conf="roundup_power2_divisions:[64:x]"), ValueError,
     "roundup_power2_divisions"),
    (lambda: CachingAllocator(conf="roundup_power2_divisions:[a:2]"), ValueError,
     "roundup_power2_divisions"),
    (lambda: CachingAllocator(capacity=float("nan")), ValueError, "capacity"),
    (lambda: CachingAllocator(capacity="80GB"), TypeError, "capacity"),
    (lambda: CachingAllocator(expandable_segments=1), TypeError, "expandable_segments"),
    (lambda: round_size(-5), ValueError, "size"),
    (lambda: round_size(0), ValueError, "size"),
    (lambda: allocation_size(-100), ValueError, "rounded_size"),
    (lambda: pool_of("1"), TypeError, "rounded_size"),
    (lambda: roundup_power2_next_division(1200, 3), ValueError, "divisions"),
    (lambda: roundup_power2_next_division(1200, 1), ValueError, "divisions"),
    (lambda: should_split(100, 200, small=True), ValueError, "block_size"),
])
def test_bad_arguments_name_the_parameter(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_integral_floats_are_counts():
    assert CachingAllocator(capacity=80e9).capacity == 80_000_000_000
    assert CachingAllocator(max_split_size_mb=64.0).config.max_split_size == 64 * MiB
