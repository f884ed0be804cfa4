"""MemoryTrace replay, PyTorch snapshot loading, a real torch step recorded and replayed."""
import pickle

import matplotlib
import numpy as np
import pytest

from labkit.memory import (
    CachingAllocator, MemoryTrace, load_snapshot, replay, save_snapshot,
)
from labkit.memory.constants import MiB

matplotlib.use("Agg")


def test_replay_list_of_events_matches_direct_calls():
    events = [("alloc", 1, 3 * MiB), ("alloc", 2, 1000), ("free", 1, 3 * MiB),
              ("alloc", 3, 2 * MiB), ("free", 2, 1000), ("free", 3, 2 * MiB)]
    tl = replay(MemoryTrace.from_events(events))
    assert tl.allocated.tolist() == [3 * MiB, 3 * MiB + 1024, 1024, 2 * MiB + 1024,
                                     2 * MiB, 0]
    assert tl.reserved.tolist() == [20 * MiB] + [22 * MiB] * 5
    assert tl.peak_requested == 3 * MiB + 1000 and tl.oom_at is None


def test_replay_bad_traces():
    with pytest.raises(ValueError, match="not allocated"):
        replay(MemoryTrace.from_events([("alloc", 1, 10), ("free", 2, 10)]))
    with pytest.raises(ValueError, match="twice"):
        replay(MemoryTrace.from_events([("alloc", 1, 10), ("alloc", 1, 10)]))
    with pytest.raises(ValueError, match="action"):
        MemoryTrace.from_events([("malloc!", 1, 10)])
    with pytest.raises(ValueError, match="size"):
        MemoryTrace.from_events([("alloc", 1, -3)])
    tl = replay(MemoryTrace.from_events([("free", 9, 10), ("alloc", 1, 0), ("free", 1, 0)]),
                ignore_unknown_frees=True)
    assert tl.allocated.tolist() == [0, 0, 0]


def test_replay_stops_at_oom():
    events = [("alloc", i, 30 * MiB) for i in range(5)]
    tl = replay(MemoryTrace.from_events(events), CachingAllocator(capacity=100 * MiB))
    assert tl.oom_at == 3 and "out of memory" in tl.oom_message and len(tl.allocated) == 3


def _snapshot_shaped_dict():
    base = 0x7F0000000000
    return {
        "segments": [
            {"device": 0, "address": base, "total_size": 20 * MiB, "allocated_size": 3 * MiB,
             "active_size": 3 * MiB, "requested_size": 3 * MiB - 100, "stream": 0,
             "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": [],
             "blocks": [{"address": base, "size": 3 * MiB, "requested_size": 3 * MiB - 100,
                         "state": "active_allocated", "frames": []},
                        {"address": base + 3 * MiB, "size": 17 * MiB, "requested_size": 0,
                         "state": "inactive", "frames": []}]},
            {"device": 0, "address": base - 4 * MiB, "total_size": 2 * MiB,
             "allocated_size": 512, "active_size": 512, "requested_size": 8, "stream": 0,
             "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
             "frames": [],
             "blocks": [{"address": base - 4 * MiB, "size": 512, "requested_size": 8,
                         "state": "active_allocated", "frames": []},
                        {"address": base - 4 * MiB + 512, "size": 2 * MiB - 512,
                         "requested_size": 0, "state": "inactive", "frames": []}]},
        ],
        "device_traces": [[
            {"action": "segment_alloc", "addr": base, "size": 20 * MiB, "stream": 0,
             "time_us": 1, "frames": []},
            {"action": "alloc", "addr": base, "size": 3 * MiB - 100, "stream": 0,
             "time_us": 2, "frames": [{"name": "forward", "filename": "x.py", "line": 3}]},
            {"action": "alloc", "addr": base + 3 * MiB, "size": 5 * MiB, "stream": 0,
             "time_us": 3, "frames": []},
            {"action": "free_requested", "addr": base + 3 * MiB, "size": 5 * MiB,
             "stream": 0, "time_us": 4, "frames": []},
            {"action": "free_completed", "addr": base + 3 * MiB, "size": 5 * MiB,
             "stream": 0, "time_us": 5, "frames": []},
            {"action": "free_completed", "addr": base + 99 * MiB, "size": 7, "stream": 0,
             "time_us": 6, "frames": []},
        ]],
        "allocator_settings": {},
    }


def test_load_snapshot_from_a_pickle_file(tmp_path):
    path = tmp_path / "snapshot.pickle"
    path.write_bytes(pickle.dumps(_snapshot_shaped_dict()))
    snap = load_snapshot(path)
    assert [s.segment_type for s in snap.segments] == ["small", "large"]   # sorted by address
    assert snap.reserved_bytes == 22 * MiB and snap.allocated_bytes == 3 * MiB + 512
    assert snap.trace.events() == [("alloc", 0x7F0000000000, 3 * MiB - 100),
                                   ("alloc", 0x7F0000000000 + 3 * MiB, 5 * MiB),
                                   ("free", 0x7F0000000000 + 3 * MiB, 5 * MiB),
                                   ("free", 0x7F0000000000 + 99 * MiB, 7)]
    assert snap.trace.labels[0] == "forward"
    tl = replay(snap.trace, ignore_unknown_frees=True)
    assert tl.allocated.tolist() == [3 * MiB, 8 * MiB, 3 * MiB, 3 * MiB]
    with pytest.raises(ValueError, match="snapshot"):
        load_snapshot({"not": "a snapshot"})
    with pytest.raises(ValueError, match="does not exist"):
        load_snapshot(tmp_path / "missing.pickle")


def test_save_then_load_round_trip(tmp_path):
    a = CachingAllocator()
    x, y = a.malloc(3 * MiB), a.malloc(700)
    a.free(x)
    trace = MemoryTrace.from_events([("alloc", 5, 100), ("free", 5, 100)])
    snap = load_snapshot(save_snapshot(a, tmp_path / "s.pickle", trace))
    assert tuple(a.segments()) == snap.segments
    assert snap.trace.events() == trace.events()
    del y


def test_tile_needs_a_balanced_trace():
    t = MemoryTrace.from_events([("alloc", 1, 10), ("free", 1, 10)])
    assert len(t.tile(3)) == 6
    with pytest.raises(ValueError, match="balanced"):
        MemoryTrace.from_events([("alloc", 1, 10)]).tile(2)


@pytest.fixture(scope="module")
def step_trace():
    from labkit.memory.record import StepSpec, record_training_step
    return record_training_step(StepSpec(widths=(64, 96, 10), batch=16, steps=2))


def test_recorded_torch_step_replays(step_trace):
    widths, batch = (64, 96, 10), 16
    n_params = 64 * 96 + 96 + 96 * 10 + 10
    kinds = step_trace.kind
    assert len(step_trace) > 50 and set(step_trace.phases) >= {
        "setup", "forward", "backward", "optimizer"}
    # setup allocates exactly the parameters (fp32)
    setup = [s for k, s, p in zip(kinds, step_trace.size, step_trace.phases)
             if k and p == "setup"]
    assert sum(setup) == 4 * n_params
    tl = replay(step_trace, ignore_unknown_frees=True)
    # after step 2 live: parameters + Adam's m, v (+ step counters), grads set to None
    live = int(np.sum(np.where(kinds == 1, step_trace.size, -step_trace.size)))
    assert 12 * n_params <= live <= 12 * n_params + 4096
    assert tl.requested[-1] == live and tl.peak_requested > 4 * n_params + 4 * batch * 96
    del widths


def test_plots_draw(step_trace):
    import matplotlib.pyplot as plt

    from labkit.memory.plots import plot_segment_map, plot_timeline
    tl = replay(step_trace, ignore_unknown_frees=True)
    fig = plot_timeline(tl)
    assert len(fig.axes[0].lines) >= 2
    plt.close(fig)
    fig = plot_segment_map(tl.segments)
    assert len(fig.axes[0].patches) >= len(tl.segments)
    plt.close(fig)


def test_oom_pattern_and_its_fixes():
    from labkit.memory.scenarios import growing_batch_pattern, holes_oom_pattern
    failed = holes_oom_pattern("none")
    assert not failed.succeeded and failed.oom.free_but_unusable == 512 * MiB
    assert failed.oom.largest_free_block == 16 * MiB
    assert holes_oom_pattern("max_split_size_mb").succeeded
    assert holes_oom_pattern("empty_cache_after_load").succeeded
    assert not holes_oom_pattern("expandable_segments").succeeded
    default = growing_batch_pattern("none").stats.reserved_bytes
    assert growing_batch_pattern("expandable_segments").stats.reserved_bytes < default / 2
    with pytest.raises(ValueError):
        holes_oom_pattern("magic")


def test_seed_monitor_example_on_the_simulator():
    from labkit.memory.scenarios import seed_monitor_example
    device, lines = seed_monitor_example("simulator")
    assert device == "simulator"
    assert [(x.allocated, x.reserved) for x in lines] == [
        (0, 0), (4_000_256, 20 * MiB), (0, 20 * MiB), (0, 0)]
