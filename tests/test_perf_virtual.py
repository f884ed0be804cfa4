"""The virtual clock and device that chapter 12's check times a harness on: every cost is
known, so what a harness records can be computed exactly."""
import numpy as np
import pytest

from labkit.perf import benchmark, interleaved, virtual
from labkit.timing import Timing


def test_an_asynchronous_call_costs_the_host_its_launch_until_sync():
    work = virtual.Workload([1e-3, 2e-3], launch_s=5e-6, first_call_s=0.5)
    clock = work.clock
    work()
    assert clock() == pytest.approx(0.5 + 5e-6)           # the first call compiles on the host
    work()
    assert clock() == pytest.approx(0.5 + 10e-6)          # the second is queued: a launch
    work.sync()
    assert clock() == pytest.approx(0.5 + 5e-6 + 1e-3 + 2e-3)
    assert work.calls == 2 and work.syncs == 1 and clock.reads == 3
    cpu = virtual.Workload([1e-3], launch_s=5e-6, asynchronous=False)
    cpu()
    assert cpu.clock() == pytest.approx(1e-3 + 5e-6)
    with pytest.raises(ValueError, match="costs must be a non-empty array"):
        virtual.Workload([0.0])


def test_labkits_benchmark_records_launch_plus_kernel_for_each_timed_call():
    spec = virtual.draw_spec(np.random.default_rng(0), repeats=9, warmup=2)
    got = virtual.run(benchmark, spec)
    work = virtual.workload(spec)
    want = [work.cost(i) for i in range(2, 11)]
    np.testing.assert_allclose(got["samples"], want, rtol=1e-12)
    np.testing.assert_allclose(virtual.protocol_samples(spec), want, rtol=1e-12)
    assert got["calls"] == 11 and got["syncs"] == 18 and got["clock_reads"] == 18
    assert got["type"] == "Timing" and got["low"] <= got["median"] <= got["high"]


def test_the_mistakes_measure_what_the_hints_say():
    spec = virtual.draw_spec(np.random.default_rng(1), repeats=8, warmup=1)
    right = np.array(virtual.protocol_samples(spec))
    no_stop = np.array(virtual.protocol_samples(spec, sync_stop=False))
    np.testing.assert_allclose(no_stop, spec["launch_s"], rtol=1e-9)      # the launch only
    cold = virtual.protocol_samples(spec, warmup=0)
    assert cold[0] > spec["first_call_s"] and np.allclose(cold[1:], virtual.workload(
        spec).costs[1:8] + spec["launch_s"])
    late = np.array(virtual.protocol_samples(spec, sync_start=False))
    assert late[0] > right[0] and np.allclose(late[1:], right[1:])
    assert len(set(virtual.protocol_samples(spec, one_window=True))) == 1


def test_pitfalls_table():
    rows = virtual.pitfalls(benchmark, repeats=10)
    right, cold, nosync = rows
    assert right.median_s == pytest.approx(right.true_s, rel=0.1)
    assert cold.first_s > 0.5 and cold.mean_s > 10 * right.mean_s
    assert nosync.median_s == pytest.approx(5e-6)
    table = virtual.format_pitfalls(rows).splitlines()
    assert table[2].startswith("| warm-up and sync |") and table[4].startswith("| no sync | 5 µs")
    with pytest.raises(TypeError, match="Pitfall rows"):
        virtual.format_pitfalls([1])


def test_the_interleaved_workloads_share_a_device_and_a_neighbour():
    spec = virtual.draw_interleaved_spec(np.random.default_rng(2), names=("A", "B"),
                                         repeats=10, warmup=1)
    works, device = virtual.interleaved_workloads(spec)
    assert works["A"].clock is works["B"].clock is device.clock
    assert device.slow_from < device.slow_until and device.slowdown == 2.0
    out = virtual.run_interleaved(interleaved, spec)
    assert out["order"] == "AB" + "AB" * 10
    for k in "AB":
        s = np.array(out["timings"][k]["samples"])
        assert np.any(s > 1.8 * np.min(s))                # the neighbour hit some of them
    assert virtual.run_interleaved(lambda fns, **kw: 3, spec) == {"type": "int"}


def test_summary_and_summarised_are_plain_data():
    t = Timing((1.0, 2.0, 3.0), 2.0, 1.0, 3.0)
    assert virtual.summary(t) == {"type": "Timing", "samples": [1.0, 2.0, 3.0], "median": 2.0,
                                  "low": 1.0, "high": 3.0, "level": 0.95}
    assert virtual.summary([1.0]) == {"type": "list"}
    from labkit.timing import summarise
    got = virtual.summarised(summarise, np.array([3.0, 1.0, 2.0]), 0.9, 200, 1)
    assert got["samples"] == [3.0, 1.0, 2.0] and got["median"] == 2.0 and got["level"] == 0.9
