"""The op-by-op comparison with torch.cuda: its program and logic on the CPU, the real
comparison on a GPU (skipped here)."""
import pytest

import labkit
from labkit.memory.constants import MiB
from labkit.memory.fidelity import (
    KEYS, SETTINGS, compare, first_mismatch, random_ops, replay_labkit,
)

CAPACITY = 141 * 10**9


def test_random_ops_are_seeded_and_cross_every_boundary():
    ops = random_ops(3, 400)
    assert ops == random_ops(3, 400) and ops != random_ops(4, 400)
    sizes = {op[2] for op in ops if op[0] == "malloc"}
    for lo, hi in [(0, 512), (512, MiB), (MiB, 10 * MiB), (10 * MiB, 20 * MiB),
                   (20 * MiB, 64 * MiB), (64 * MiB, 400 * MiB)]:
        assert any(lo < s <= hi for s in sizes), (lo, hi)
    assert {op[0] for op in ops} == {"malloc", "free", "empty_cache"}
    live, peak = {}, 0
    for op in ops:
        if op[0] == "malloc":
            live[op[1]] = op[2]
        elif op[0] == "free":
            live.pop(op[1])
        peak = max(peak, sum(live.values()))
    assert peak <= 4 << 30


@pytest.mark.parametrize("conf, fraction", SETTINGS)
def test_labkit_replays_every_setting(conf, fraction):
    ops = random_ops(1, 200)
    stats = replay_labkit(ops, conf, capacity=CAPACITY, fraction=fraction)
    assert len(stats) == len(ops) and all(set(KEYS) <= set(s) for s in stats)
    for s in stats:
        assert s["allocated_bytes.all.current"] <= s["reserved_bytes.all.current"]
        assert s["requested_bytes.all.current"] <= s["allocated_bytes.all.current"]
    if "expandable" in conf:
        assert all(s["segment.all.current"] == 0 for s in stats)
    else:
        assert max(s["segment.all.current"] for s in stats) > 0


def test_first_mismatch_names_the_op_and_the_key():
    ops = random_ops(0, 50)
    mine = replay_labkit(ops, "", capacity=CAPACITY)
    assert first_mismatch(ops, mine, mine) == (None, "equal after every op")
    theirs = [dict(s) for s in mine]
    theirs[7]["reserved_bytes.all.current"] += 512
    index, detail = first_mismatch(ops, mine, theirs)
    assert index == 7 and "reserved_bytes.all.current" in detail and str(ops[7]) in detail


@pytest.mark.gpu
@pytest.mark.skipif(labkit.CUDA_BACKEND != "gpu", reason="needs a real CUDA GPU")
@pytest.mark.parametrize("conf, fraction", SETTINGS)
def test_allocator_equals_torch_cuda_op_by_op(conf, fraction):
    result = compare(conf, fraction=fraction, seed=0, n=300)
    assert result.equal, result.detail


def test_replayed_segment_addresses_decide_best_fit_ties():
    # Two 2 MiB requests get segments at the replayed addresses; the later one lies lower,
    # as cudaMalloc may place it. After both are freed, a 1.5 MiB request takes the
    # lower-addressed 20 MiB segment (ties break by address), the one made second.
    from labkit.memory import CachingAllocator
    a = CachingAllocator(1 << 34)
    a.segment_addresses = iter([0x7F0000000000, 0x7E0000000000])
    x, y = a.malloc(19 * MiB + 1), a.malloc(19 * MiB + 1)
    assert (x.addr, y.addr) == (0x7F0000000000, 0x7E0000000000)
    a.free(x), a.free(y)
    assert a.malloc(19 * MiB).addr == 0x7E0000000000
    a.segment_addresses = iter([])                  # exhausted: labkit's own addresses
    assert a.malloc(30 * MiB).addr < 0x7E0000000000
    a.check_invariants()
