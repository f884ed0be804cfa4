"""The virtual-time machine chapter 07's checks run loops on (labkit.dataload.fake): its
loader is the DataLoader's bounded prefetch queue, its step is asynchronous, its clocks are
exact — checked against closed forms and against the prefetch recurrence."""
import copy

import numpy as np
import pytest

from labkit.dataload import fake, sim
from labkit.dataload.compare import bottleneck_verdict
from labkit.dataload.measure import timed_loop
from labkit.dataload.model import EpochSampler, wait_fraction


def drive(spec):
    m = fake.FakeMachine(spec)
    m.drive(m.loader, m.step, spec["batches"])
    return m.log()


def test_workers_follow_the_prefetch_recurrence():
    # no start-up, no receive cost, no steal, a CPU step: the fake loader is the recurrence
    rng = np.random.default_rng(0)
    for W, pf in [(1, 1), (2, 2), (3, 1)]:
        n = 30
        spec = fake.constant_spec(load_s=0.01, step_s=0.004, workers=W, window=n - 6)
        spec["prefetch"] = pf
        spec["load_s"] = rng.uniform(0.005, 0.02, spec["batches"])
        spec["host_s"] = rng.uniform(0.002, 0.008, spec["batches"])
        log = drive(spec)
        wait, end = sim.prefetch_recurrence(spec["load_s"], spec["host_s"], W, pf)
        nexts, steps = log["nexts"], log["steps"]
        assert nexts[:, 1] - nexts[:, 0] == pytest.approx(wait, abs=1e-12)
        assert steps[:, 1] == pytest.approx(end, abs=1e-12)


def test_the_steady_rate_is_the_bound_with_constant_costs():
    # two workers, 20 ms a batch each, a 6 ms step: one batch per 10 ms on average; the two
    # workers finish together, so the loop waits 8 ms for one pair and nothing for the next
    spec = fake.constant_spec(load_s=0.020, step_s=0.006, workers=2, warmup=6, window=20)
    r = fake.FakeMachine(spec).run(timed_loop)
    assert r["samples_per_s"] == pytest.approx(32 / 0.010, rel=1e-9)
    assert r["wait_s"] == pytest.approx(np.tile([0.008, 0.0], 10), abs=1e-12)
    assert wait_fraction(r["wait_s"], r["compute_s"]) == pytest.approx(0.4)


def test_wall_and_cpu_clocks_differ_where_they_should():
    spec = fake.draw_spec(np.random.default_rng(5), "no workers")
    r = fake.run_loop(timed_loop, spec)["result"]
    warm, n = spec["warmup"], spec["warmup"] + spec["window"]
    assert r["wait_cpu_s"] == pytest.approx(spec["load_s"][warm:n], rel=1e-9)
    assert r["wait_s"] == pytest.approx(spec["load_s"][warm:n] * (1 + spec["steal"]), rel=1e-9)


def test_an_unsynced_step_returns_before_its_accelerator_work():
    spec = fake.constant_spec(load_s=0.010, step_s=0.001, device_s=0.004, warmup=0, window=3)
    m = fake.FakeMachine(spec)
    x, y = next(iter(m.loader))
    m.step(x, y)
    assert m.t == pytest.approx(0.011) and m.device_free == pytest.approx(0.015)
    m.sync()
    assert m.t == pytest.approx(0.015) and m.cpu == pytest.approx(0.011)
    assert m.clock() == pytest.approx(spec["t0"] + 0.015)


def test_each_iter_is_a_new_epoch_and_the_loader_ends():
    spec = fake.constant_spec(load_s=0.01, step_s=0.01, workers=1, warmup=1, window=2)
    m = fake.FakeMachine(spec)
    assert len(list(m.loader)) == spec["batches"] == len(m.loader)
    list(iter(m.loader))
    assert m.log()["iters"] == 2


def test_draw_spec_kinds_and_validation():
    rng = np.random.default_rng(1)
    for kind in fake.SPEC_KINDS:
        spec = fake.draw_spec(rng, kind)
        assert spec["batches"] >= spec["warmup"] + spec["window"] + 4
        assert (kind == "accelerator") == bool(np.any(spec["device_s"] > 0))
        fake.FakeMachine(copy.deepcopy(spec))
    with pytest.raises(ValueError, match="kind"):
        fake.draw_spec(rng, "gpu")
    with pytest.raises(TypeError, match="spec"):
        fake.FakeMachine([1, 2])
    bad = fake.constant_spec(load_s=0.01, step_s=0.01)
    bad["load_s"] = bad["load_s"][:-1]
    with pytest.raises(ValueError, match="load_s"):
        fake.FakeMachine(bad)


def test_synthetic_experiments_give_the_verdict_asked_for():
    rng = np.random.default_rng(2)
    shares = []
    for verdict in ("data", "compute", "both") * 4:
        for thr in (0.9, 0.82):
            loader, compute, pipeline = fake.synthetic_experiments(rng, verdict, thr)
            assert bottleneck_verdict(loader, compute, pipeline, thr) == verdict
            shares.append((verdict, wait_fraction(pipeline["wait_s"], pipeline["compute_s"])))
    # the waiting share does not decide: "both" pipelines wait little and much
    both = [s for v, s in shares if v == "both"]
    assert min(both) < 0.3 and max(both) > 0.6


def test_persistent_worker_epochs_show_the_bug_and_the_fix():
    fixed = fake.persistent_worker_epochs(EpochSampler, 4, 6, 2, seed=3)
    assert fixed["len"] == [6, 6] and fixed["indices"][1][0] == [1, 0]
    assert not np.array_equal(fixed["pixels"][0], fixed["pixels"][1])

    class Plain(EpochSampler):
        def __iter__(self):
            return iter([i for _, i in super().__iter__()])
    stale = fake.persistent_worker_epochs(Plain, 4, 6, 2, seed=3)
    assert np.array_equal(stale["pixels"][0], stale["pixels"][1])


def test_try_loop_says_what_is_right():
    assert fake.try_loop(timed_loop).count("✓") == 5

    def not_yet(*a, **k):
        raise NotImplementedError
    assert "not written yet" in fake.try_loop(not_yet)
