"""The paged KV cache against contiguous reservation (labkit.memory.paged): block counts by
hand, waste only in each request's last block, free blocks reused, streams seeded."""
import numpy as np
import pytest

from labkit.memory import paged


def test_kv_usage_by_hand():
    # B = 4: 5 tokens → 2 blocks (3 slots empty); a 6th token fits; request 1 takes a new
    # block; request 0 finishes and its two blocks go back to the free list; request 2's
    # 7 tokens reuse them, so the pool never grows past 3
    events = [(0, 5), (0, 1), (1, 4), (0, 0), (2, 7)]
    assert paged.kv_usage(events, 4, 16) == [
        (2, 2, 3, 11), (2, 2, 2, 10), (3, 3, 2, 22), (1, 3, 0, 12), (3, 3, 1, 21)]


def test_paged_waste_is_below_one_block_per_request():
    stream = paged.RequestStream(requests=30, max_len=512, mean_prompt=60, mean_output=80,
                                 seed=4)
    events = paged.request_events(stream)
    for b in (1, 8, 16, 64):
        tokens, running = {}, set()
        for (req, n), (in_use, pool, waste, contiguous) in zip(
                events, paged.kv_usage(events, b, 512)):
            if n:
                tokens[req] = tokens.get(req, 0) + n
                running.add(req)
            else:
                running.discard(req)
                tokens.pop(req)
            stored = sum(tokens.values())
            assert waste == paged.paged_bound(tokens.values(), b)
            assert 0 <= waste < b * max(1, len(running)) and in_use <= pool
            assert contiguous == 512 * len(running) - stored
        assert (in_use, waste, contiguous) == (0, 0, 0)         # all finished


def test_request_events_are_seeded_and_within_max_len():
    s = paged.RequestStream(requests=20, max_len=128, mean_prompt=40, mean_output=60)
    a, b = paged.request_events(s), paged.request_events(s)
    assert a == b and a != paged.request_events(paged.RequestStream(
        requests=20, max_len=128, mean_prompt=40, mean_output=60, seed=1))
    lengths = {}
    for req, n in a:
        lengths[req] = lengths.get(req, 0) + n
    assert len(lengths) == 20 and max(lengths.values()) <= 128
    assert sum(1 for _, n in a if n == 0) == 20          # every request finishes


def test_simulate_with_a_block_manager_of_ones_own():
    s = paged.RequestStream(requests=12, max_len=256)
    mine = paged.simulate(s, 16, usage=paged.kv_usage)
    own = paged.simulate(s, 16)
    assert np.array_equal(mine.paged, own.paged) and mine.pool_blocks == own.pool_blocks
    assert 0 <= own.paged_waste < own.contiguous_waste < 1
    assert own.peak[0] <= own.peak[1] <= own.peak[2]
    with pytest.raises(ValueError, match="steps for"):
        paged.simulate(s, 16, usage=lambda events, b, m: [])


@pytest.mark.parametrize("call, match", [
    (lambda: paged.kv_usage([(0, 5)], 0, 16), "block_tokens"),
    (lambda: paged.kv_usage([(0, 20)], 4, 16), "more than max_len"),
    (lambda: paged.kv_usage([(0, 0)], 4, 16), "never started"),
    (lambda: paged.RequestStream(requests=0), "requests"),
    (lambda: paged.request_events("stream"), "RequestStream"),
])
def test_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
