"""Real DataLoader runs, kept to seconds, and the timed loop on the virtual-time machine:
the loop's exact numbers, the three experiments of exercise 8, trials in alternation, a
learner's loop and sampler driving the runs, the epoch reaching persistent workers, and
which random streams repeat in workers. No assert on a duration of a real run: structure,
counts and equalities."""
import itertools

import numpy as np
import pytest

from labkit.dataload import fake, measure
from labkit.dataload.costs import cache_tradeoff, measure_stage_costs
from labkit.dataload.measure import (compute_alone, experiment, interleave,
                                     interleaved_trials, loader_alone, measure_loader,
                                     timed_loop)
from labkit.dataload.randomness import epoch_augmentations, worker_randomness
from labkit.dataload.model import EncodedImages, EpochSampler, make_images


@pytest.fixture(scope="module")
def ds():
    images, labels = make_images(16, seed=0)
    return EncodedImages(images, labels, seed=0)


def test_timed_loop_on_a_machine_of_constant_costs_measures_them_exactly():
    r = fake.FakeMachine(fake.constant_spec(load_s=0.010, step_s=0.005)).run(timed_loop)
    assert r["wait_s"] == pytest.approx(np.full(8, 0.010), rel=1e-12)
    assert r["compute_s"] == pytest.approx(np.full(8, 0.005), rel=1e-12)
    assert r["wait_cpu_s"] == pytest.approx(r["wait_s"]) and r["samples_per_s"] == \
        pytest.approx(32 / 0.015, rel=1e-12)
    # a step that launches 4 ms of accelerator work after 1 ms on the CPU: synced, the step
    # takes 5 ms of wall time and 1 ms of CPU
    m = fake.FakeMachine(fake.constant_spec(load_s=0.010, step_s=0.001, device_s=0.004))
    r = m.run(timed_loop)
    assert r["compute_s"] == pytest.approx(np.full(8, 0.005), rel=1e-12)
    assert r["step_cpu_s"] == pytest.approx(np.full(8, 0.001), rel=1e-12)
    assert r["samples_per_s"] == pytest.approx(32 / 0.015, rel=1e-12)
    assert len(m.syncs) == 10 and m.log()["iters"] == 1


def test_timed_loop_with_workers_waits_without_cpu_and_skips_the_fill():
    spec = fake.draw_spec(np.random.default_rng(3), "workers")
    out = fake.run_loop(timed_loop, spec)
    r, log = out["result"], out["log"]
    n, warm = spec["warmup"] + spec["window"], spec["warmup"]
    assert len(log["nexts"]) == n and np.array_equal(log["steps"][:, 2], np.arange(n))
    # taking a batch from a worker costs receive_s of CPU, however long the wait
    assert r["wait_cpu_s"] == pytest.approx(spec["receive_s"][warm:n], rel=1e-9)
    assert r["step_cpu_s"] == pytest.approx(spec["host_s"][warm:n], rel=1e-9)
    assert r["compute_s"] == pytest.approx(spec["host_s"][warm:n] * (1 + spec["steal"]), rel=1e-9)
    # the first batch waits for the workers' start-up; none of the window's waits do
    assert log["nexts"][0, 1] - log["nexts"][0, 0] > spec["startup_s"] > r["wait_s"].max()
    span = log["t_end"] - log["nexts"][warm, 0]
    assert r["samples_per_s"] == pytest.approx(spec["batch_size"] * spec["window"] / span)


def test_timed_loop_validates_and_runs_out():
    with pytest.raises(TypeError, match="step"):
        timed_loop([(0, 0)], 3, batch_size=1, warmup=0, window=1)
    with pytest.raises(StopIteration):
        timed_loop([(0, 0)], lambda x, y: None, batch_size=1, warmup=1, window=1)
    with pytest.raises(ValueError, match="window"):
        timed_loop([(0, 0)], lambda x, y: None, batch_size=1, warmup=0, window=0)


def test_the_experiments_feed_the_loop_what_they_are_about():
    calls = []
    step = lambda x, y: calls.append(y)                 # noqa: E731
    batches, fn = experiment("loader alone", iter([(0, 1), (0, 2)]), step)
    fn(0, 1)
    assert calls == [] and list(batches) == [(0, 1), (0, 2)]
    source = iter([(0, 7), (0, 8)])
    batches, fn = experiment("compute alone", source, step)
    assert list(itertools.islice(batches, 3)) == [(0, 7)] * 3 and fn is step
    assert next(source) == (0, 8)                       # one batch taken, no more
    assert experiment("pipeline", source, step) == (source, step)
    with pytest.raises(ValueError, match="kind"):
        experiment("loader", source, step)


def test_interleave_alternates():
    order = []
    runs = {k: (lambda k=k: order.append(k) or len(order)) for k in "ABC"}
    assert interleave(runs, 2) == {"A": [1, 4], "B": [2, 5], "C": [3, 6]}
    assert order == list("ABCABC")


def my_loop(batches, step, *, batch_size, warmup, window, clock, cpu_clock, sync):
    """A learner's loop (one clock read per boundary)."""
    it = iter(batches)
    for _ in range(warmup):
        step(*next(it))
    t, c, got = [clock()], [cpu_clock()], []
    for _ in range(window):
        x, y = next(it)
        got.append((clock(), cpu_clock()))
        step(x, y)
        sync()
        t.append(clock())
        c.append(cpu_clock())
    t, c, g = np.array(t), np.array(c), np.array(got)
    return {"wait_s": g[:, 0] - t[:-1], "compute_s": t[1:] - g[:, 0],
            "wait_cpu_s": g[:, 1] - c[:-1], "step_cpu_s": c[1:] - g[:, 1],
            "samples_per_s": batch_size * window / (t[-1] - t[0])}


def test_the_three_experiments(ds):
    full = measure_loader(ds, batch_size=8, num_workers=1, window=8)
    assert full.kind == "pipeline" and (full.warmup, full.window, full.steps) == (2, 8, 10)
    assert full.batches == 12                          # the tail: taken after the window
    assert full.samples_per_s > 0 and 0 <= full.wait_fraction < 1
    assert full.workers_cpu_s > 0 and full.worker_batch_cpu_s > 0   # reaped worker, counted
    assert full.cpu_s > 0 and full.wall_s > full.window_wall_s > 0
    assert full.timed_by == "labkit's timed_loop" and len(full.epoch_first_batch_s) == 1
    alone = loader_alone(ds, batch_size=8, window=8)
    assert alone.kind == "loader alone" and alone.num_workers == 1
    assert np.all(alone.step_cpu_s < 1e-3)
    comp = compute_alone(ds, batch_size=8, window=8)
    assert comp.kind == "compute alone" and comp.num_workers == 0 and comp.steps == 9
    assert comp.workers_cpu_s == 0.0 and np.all(comp.wait_cpu_s < 1e-3)
    zero = measure_loader(ds, batch_size=8, num_workers=0, window=8, loop=my_loop)
    assert zero.timed_by == "your my_loop" and (zero.warmup, zero.steps) == (1, 9)
    assert zero.worker_batch_cpu_s == 0
    assert 0 < zero.cpu_share < 1.05 and zero.load_cpu_s > 0 and zero.step_cpu_mean_s > 0
    with pytest.raises(ValueError, match="num_workers > 0"):
        measure_loader(ds, num_workers=0, persistent_workers=True)
    with pytest.raises(TypeError, match="EncodedImages"):
        measure_loader([1, 2, 3])
    with pytest.raises(ValueError, match="kind"):
        measure.run_experiment(ds, "loader")
    with pytest.raises(ValueError, match="samples_per_s"):
        measure_loader(ds, batch_size=8, window=8,
                       loop=lambda *a, **k: {"wait_s": np.zeros(8)})
    with pytest.raises(TypeError, match="loop"):
        measure_loader(ds, batch_size=8, window=8, loop=3)


def test_persistent_workers_run_every_epoch_and_start_once(ds):
    r = measure_loader(ds, batch_size=8, num_workers=1, window=8, persistent_workers=True,
                       epochs=2)
    assert r.steps == 2 * (r.warmup + r.window) and len(r.epoch_first_batch_s) == 2
    assert r.batches == r.steps + 2 * 2


def test_a_learners_sampler_drives_the_loader(ds):
    seen = []

    class Mine(EpochSampler):
        def __iter__(self):
            seen.append(self.epoch)
            return super().__iter__()
    measure_loader(ds, batch_size=8, window=8, epochs=2, sampler=Mine)
    assert seen == [0, 1]


def test_trials_alternate_settings(monkeypatch, ds):
    order = []

    def fake_run(dataset, kind="pipeline", **kw):
        order.append(kw["num_workers"])
        return measure.LoaderRun.from_steps(np.full(12, 0.01), np.full(12, 0.01), batch_size=8,
                                            num_workers=kw["num_workers"])
    monkeypatch.setattr(measure, "run_experiment", fake_run)
    sweep = measure.sweep_trials(ds, workers=(0, 1), trials=3)
    assert order == [0, 1, 0, 1, 0, 1]                  # A B A B A B, not A A A B B B
    assert len(sweep[1]) == 3 and sweep[1].rate.median == pytest.approx(400.0)
    order.clear()

    def grouped(experiments, trials):
        return {k: [run() for _ in range(trials)] for k, run in experiments.items()}
    measure.sweep_trials(ds, workers=(0, 1), trials=2, interleave=grouped)
    assert order == [0, 0, 1, 1]                        # the interleave given is the one used
    with pytest.raises(ValueError, match="settings"):
        interleaved_trials(ds, {})
    with pytest.raises(ValueError, match="must return"):
        measure.sweep_trials(ds, workers=(0,), trials=2, interleave=lambda e, t: {})


def test_from_steps_sees_a_run_through_its_steady_window():
    wait = np.r_[0.5, 0.2, np.full(20, 0.01), 0.0, 0.0]
    r = measure.LoaderRun.from_steps(wait, np.full(24, 0.01), batch_size=8, num_workers=1)
    assert (r.warmup, r.window) == (2, 20) and r.samples_per_s == pytest.approx(400.0)
    assert r.wait_fraction == pytest.approx(0.5) and r.result["samples_per_s"] == r.samples_per_s


def test_the_epoch_reaches_persistent_workers(ds):
    # with the epoch set in the training process only, a persistent worker keeps its copy
    # of the dataset and repeats epoch 0's crops (the bug); with the epoch carried by the
    # sampler's indices, epoch 1 differs — and equals what the main process computes
    stale = epoch_augmentations(ds, num_workers=1, persistent_workers=True, epoch_sampler=False)
    assert np.array_equal(stale[0], stale[1])
    fixed = epoch_augmentations(ds, num_workers=1, persistent_workers=True, epoch_sampler=True)
    assert not np.array_equal(fixed[0], fixed[1])
    assert np.array_equal(fixed[1][2], ds[(1, 2)][0]) and np.array_equal(fixed[0][2], ds[(0, 2)][0])
    fresh = epoch_augmentations(ds, num_workers=1, persistent_workers=False, epoch_sampler=False)
    assert not np.array_equal(fresh[0], fresh[1])     # new workers copy the new epoch

    class Plain(EpochSampler):          # a sampler that drops the epoch: the bug again
        def __iter__(self):
            return iter([i for _, i in super().__iter__()])
    again = epoch_augmentations(ds, num_workers=1, persistent_workers=True, sampler=Plain)
    assert np.array_equal(again[0], again[1])


def test_which_random_streams_repeat_in_workers():
    r = dict((name, (w, e)) for name, w, e in worker_randomness().rows())
    assert r["numpy global RNG"] == (False, False)            # seeded per worker (PyTorch 1.9+)
    assert r["torch global RNG"] == (False, False)
    assert r["Generator stored on the dataset"] == (True, True)   # copied, same state
    assert r["seeded by (epoch, index)"] == (False, False)
    kept = dict((n, (w, e)) for n, w, e in worker_randomness(persistent_workers=True).rows())
    assert kept["Generator stored on the dataset"] == (True, False)


def test_stage_costs_and_the_cache_tradeoff(ds):
    c = measure_stage_costs(ds, batch_size=8, repeats=2)
    assert min(c.decode_s, c.augment_s, c.compute_s, c.collate_s) > 0
    rows = cache_tradeoff(*make_images(16, seed=0), samples=8, repeats=1)
    names = [r.name for r in rows]
    assert names == ["PNG, zlib level 1", "PNG, zlib level 6", "PNG, zlib level 9",
                     "decoded pixels (labkit's DecodedCache)"]
    assert rows[-1].bytes_per_sample == 32 * 32 * 3
    assert rows[2].bytes_per_sample <= rows[0].bytes_per_sample < rows[-1].bytes_per_sample / 3
    assert all(r.cpu_per_sample_s > 0 for r in rows)
