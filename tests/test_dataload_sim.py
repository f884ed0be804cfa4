"""The pipeline simulator: the closed-form bounds in their limit cases, fair sharing of the
cores with other processes (whatever the request size), and what the bound cannot show —
the prefetch queue, the start-up transient, variable costs."""
import hashlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.dataload import sim

from labkit.dataload.model import Machine, steady_throughput
from labkit.dataload.sim import (PipelineConfig, bound_rate, linux_slice_s, simulate,
                                 steady_config, sweep_workers)

BASE = PipelineConfig(batch_size=16, decode_s=4e-4, augment_s=6e-4, compute_s=6e-3, batches=120)


@pytest.mark.parametrize("quantum", [0.0, 1.5e-3])
@pytest.mark.parametrize("workers, cores", [(0, 2), (1, 2), (2, 2), (5, 2), (1, 8), (3, 8),
                                            (8, 8), (2, 1)])
def test_cpu_compute_matches_the_bound(workers, cores, quantum):
    r = simulate(BASE, num_workers=workers, cores=cores, quantum_s=quantum)
    want = BASE.batch_size * steady_throughput(BASE.load_cpu_s, BASE.compute_s, workers, cores)
    assert bound_rate(r.config) == pytest.approx(want, rel=1e-12)
    assert r.samples_per_s == pytest.approx(want, rel=0.03)


def test_hand_over_costs_enter_the_bound_and_the_simulation():
    cfg = PipelineConfig(batch_size=16, decode_s=2e-4, augment_s=3e-4, collate_s=1e-3,
                         transfer_s=2e-3, receive_s=1e-3, compute_s=4e-3, cores=8, batches=120)
    L, Lw, M = 16 * 5e-4 + 1e-3, 16 * 5e-4 + 3e-3, 5e-3
    assert (cfg.load_cpu_s, cfg.worker_batch_s, cfg.step_cpu_s) == pytest.approx((L, Lw, M))
    assert bound_rate(cfg, 0) == pytest.approx(16 / (L + 4e-3))        # no hand-over at W = 0
    assert bound_rate(cfg, 1) == pytest.approx(16 / Lw)                 # one worker binds
    assert bound_rate(cfg, 4) == pytest.approx(16 / M)                  # the training process
    for w in (0, 1, 4):
        assert simulate(cfg, num_workers=w).samples_per_s == pytest.approx(bound_rate(cfg, w),
                                                                           rel=0.03)


def test_accelerator_compute_scales_with_workers_until_the_step_binds():
    rates = [r.samples_per_s for r in sweep_workers(
        PipelineConfig(batch_size=16, decode_s=4e-4, augment_s=6e-4, compute_s=4e-3,
                       compute_on_cpu=False, cores=16, batches=120), workers=range(7))]
    L, C = 16 * 1e-3, 4e-3
    assert rates[0] == pytest.approx(16 / (L + C), rel=0.02)
    for w in (1, 2, 3):
        assert rates[w] == pytest.approx(16 * w / L, rel=0.03)
    for w in (4, 5, 6):
        assert rates[w] == pytest.approx(16 / C, rel=0.03)


def test_wait_fraction_and_events():
    r = simulate(BASE, num_workers=0)
    # without workers every step waits L for its batch: share L / (L + C)
    assert r.wait_fraction == pytest.approx(0.016 / 0.022, rel=1e-6)
    # one event per sample and per step, and the epoch's start
    assert r.events == BASE.batches * (BASE.batch_size + 1) + 1
    assert np.all(np.diff(r.step_end) > 0) and np.all(r.step_got >= r.step_start)
    assert 0 < r.core_utilisation <= 1


def test_a_run_too_short_for_a_steady_window_has_no_rate():
    r = simulate(BASE, num_workers=4, batches=20)           # 8 in flight: 8 + 8 + 8 > 20
    with pytest.raises(ValueError, match=r"steps must be >= 24"):
        r.samples_per_s
    long = steady_config(BASE, 4)
    assert long.batches == 120 and steady_config(BASE, 40).batches == 2 * 80 + 64
    assert simulate(steady_config(r.config, 4)).samples_per_s > 0


def test_read_io_does_not_hold_a_core():
    # 1 ms of I/O per sample: 2 workers on 2 cores are I/O-bound, 8 workers overlap the I/O
    cfg = PipelineConfig(batch_size=16, decode_s=2e-4, augment_s=3e-4, read_s=1e-3,
                         compute_s=2e-3, compute_on_cpu=False, cores=2, batches=120)
    r2, r8 = simulate(cfg, num_workers=2), simulate(cfg, num_workers=8)
    assert r2.samples_per_s == pytest.approx(2 / 1.5e-3, rel=0.03)
    assert r8.samples_per_s == pytest.approx(2 / 0.5e-3, rel=0.05)       # now the cores bind


def test_persistent_workers_pay_startup_once():
    kw = dict(num_workers=2, epochs=3, batches=30, worker_startup_s=0.5)
    fresh = simulate(BASE, **kw)
    kept = simulate(BASE, persistent_workers=True, **kw)
    assert fresh.total_s - kept.total_s == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("background", [0.5, 1.0, 2.0, 2.5, 3.0, 6.0])
def test_background_processes_take_a_fair_share(background):
    # one CPU-bound training process beside other CPU-bound processes of total weight b on
    # 2 cores gets min(1, 2 / (1 + b)) of a core; samples of 165 µs are far shorter than the
    # 1.5 ms slice: a process that goes on computing keeps its core (before, it gave the
    # core up after every sample and got a fifth of its share with two others)
    cfg = PipelineConfig(batch_size=32, decode_s=2e-5, augment_s=1.45e-4, compute_s=1.9e-3,
                         batches=60, background=background, quantum_s=1.5e-3)
    share = Machine(2, background).share(1)
    want = 32 * share / (cfg.load_cpu_s + cfg.compute_s)
    assert bound_rate(cfg, 0) == pytest.approx(want, rel=1e-12)
    assert simulate(cfg).samples_per_s == pytest.approx(want, rel=0.03)


def test_workers_beside_other_processes_stay_under_the_bound_and_lose_with_more_others():
    cfg = PipelineConfig(batch_size=32, decode_s=2e-5, augment_s=1.45e-4, compute_s=1.9e-3,
                         batches=100, quantum_s=1.5e-3)
    for w in (1, 2, 3):
        rates = []
        for b in (0.0, 0.5, 1.0, 2.0, 3.0):
            r = simulate(cfg, num_workers=w, background=b)
            assert r.samples_per_s <= bound_rate(r.config) * 1.01
            rates.append(r.samples_per_s)
        assert np.all(np.diff(rates) <= 1e-9) and rates[-1] < 0.6 * rates[0]


def test_time_slicing_alone_keeps_the_bounds():
    for w in (0, 1, 2, 4):
        r = simulate(BASE, num_workers=w, quantum_s=1e-3)
        want = BASE.batch_size * steady_throughput(BASE.load_cpu_s, BASE.compute_s, w, 2)
        assert r.samples_per_s == pytest.approx(want, rel=0.05)
    with pytest.raises(ValueError, match="quantum_s"):
        PipelineConfig(background=2)
    assert linux_slice_s(1) == 0.75e-3 and linux_slice_s(2) == 1.5e-3
    assert linux_slice_s(8) == linux_slice_s(64) == 3e-3


def test_prefetch_absorbs_variable_costs_the_bound_cannot_see():
    # balanced: 4 workers deliver a batch every 4 ms, the accelerator takes 4 ms a step
    cfg = PipelineConfig(batch_size=32, decode_s=2.5e-4, augment_s=2.5e-4, compute_s=4e-3,
                         compute_on_cpu=False, cores=8, num_workers=4, batches=400)
    bound = bound_rate(cfg)
    steady = [simulate(cfg, prefetch_factor=pf).samples_per_s for pf in (1, 4)]
    assert steady == pytest.approx([bound, bound], rel=1e-9)     # no variation: no effect
    varied = [simulate(cfg, prefetch_factor=pf, jitter=1.0).samples_per_s for pf in (1, 2, 4)]
    assert varied[0] < 0.92 * bound                              # measured 0.87
    assert varied[0] < varied[1] < varied[2] <= bound * 1.01     # 0.98, 0.99 of it
    assert simulate(cfg, jitter=1.0, seed=1).samples_per_s != varied[1]
    assert simulate(cfg, jitter=1.0).samples_per_s == varied[1]   # seeded


def test_queue_and_start_up_transient():
    # compute-bound (fast loaders, accelerator step): the queue stays full
    fast = PipelineConfig(batch_size=16, decode_s=1e-4, augment_s=1e-4, compute_s=8e-3,
                          compute_on_cpu=False, cores=8, num_workers=4, batches=100)
    r = simulate(fast)
    q = r.queue()
    assert q.in_flight[0] == 8 and np.all(q.ready + q.in_flight <= 8) and np.all(q.ready >= 0)
    w = r.window
    full = q.mean_ready(r.step_end[w.start], r.step_end[w.stop - 1])
    assert 7 <= full <= 8                                        # measured 7.6
    assert r.first_batch_s == pytest.approx(fast.load_cpu_s)      # W <= cores: one batch's L
    # loader-bound: whatever is built is taken at once
    slow = PipelineConfig(batch_size=16, decode_s=1e-3, augment_s=1e-3, compute_s=2e-3,
                          compute_on_cpu=False, cores=8, num_workers=2, batches=100)
    r = simulate(slow)
    w = r.window
    assert r.queue().mean_ready(r.step_end[w.start], r.step_end[w.stop - 1]) < 0.2
    started = simulate(slow, worker_startup_s=0.5)
    assert started.first_batch_s == pytest.approx(0.5 + slow.load_cpu_s)
    assert started.startup_excess_s >= 0.5
    assert simulate(slow, num_workers=0).queue().ready.max() == 0


def test_validation():
    with pytest.raises(ValueError, match="cores"):
        PipelineConfig(cores=0)
    with pytest.raises(ValueError, match="decode_s"):
        PipelineConfig(decode_s=-1)
    with pytest.raises(ValueError, match="jitter"):
        PipelineConfig(jitter=-0.1)
    with pytest.raises(ValueError, match="cost something"):
        simulate(PipelineConfig(decode_s=0, augment_s=0, compute_s=0))


def test_the_prefetch_recurrence_against_closed_forms():
    # constant costs: the steady period is max(C, L/W), the bound, at any prefetch_factor
    for L, C, W in [(0.02, 0.006, 2), (0.01, 0.012, 1), (0.03, 0.004, 4)]:
        for pf in (1, 2, 4):
            wait, end = sim.prefetch_recurrence(np.full(60, L), np.full(60, C), W, pf)
            # over whole rounds of W batches (the workers finish together)
            period = (end[-1] - end[-1 - 8 * W]) / (8 * W)
            assert period == pytest.approx(max(C, L / W), rel=1e-9)
            assert wait[0] == pytest.approx(L)           # the first batch: nothing is ready
    # one worker, one index out: index k + 1 goes out when batch k is taken, so the worker
    # builds batch k + 1 during step k — they overlap: max(L, C) per step, not L + C
    wait, end = sim.prefetch_recurrence(np.full(10, 0.01), np.full(10, 0.004), 1, 1)
    assert np.diff(end) == pytest.approx(np.full(9, 0.010))
    assert wait[1:] == pytest.approx(np.full(9, 0.006))
    with pytest.raises(ValueError, match="compute_s"):
        sim.prefetch_recurrence(np.ones(3), np.ones(2), 1, 1)
    with pytest.raises(ValueError, match="workers"):
        sim.prefetch_recurrence(np.ones(3), np.ones(3), 0, 1)


def test_a_longer_queue_absorbs_costs_that_vary():
    from labkit.dataload import compare

    cfg = sim.PipelineConfig(batch_size=32, cores=4, decode_s=3e-5, augment_s=2.5e-4,
                             compute_s=32 * 2.8e-4 / 2, compute_on_cpu=False)
    load, step = sim.jittered_costs(cfg, 400, jitter=1.0, seed=1)
    assert load.mean() == pytest.approx(cfg.load_cpu_s, rel=0.05)
    rows = compare.recurrence_rows(sim.prefetch_recurrence, load, step, 2, (1, 2, 4))
    fractions = [r.of_bound for r in rows]
    assert fractions[0] < fractions[1] <= fractions[2] <= 1.0 + 1e-9
    assert fractions[0] < 0.97
    flat = compare.recurrence_rows(sim.prefetch_recurrence, np.full(400, load.mean()), step, 2)
    assert [r.of_bound for r in flat] == pytest.approx([1.0] * 3, rel=1e-6)


# ---- the simulator as a state class: the same results as the closures it replaced ----------

def random_config(seed):
    """A pipeline drawn from ``seed``: workers, cores, time slices, background processes,
    reads, hand-over costs, the step on a core or an accelerator, epochs, jitter."""
    r = np.random.default_rng(seed)
    quantum = float(r.choice([0.0, 5e-4, 1.5e-3]))
    cost = lambda scale, p_zero=0.4: 0.0 if r.random() < p_zero else float(r.uniform(0, scale))  # noqa: E731
    return PipelineConfig(
        batch_size=int(r.integers(1, 12)), num_workers=int(r.integers(0, 6)),
        prefetch_factor=int(r.integers(1, 4)), cores=int(r.integers(1, 5)),
        read_s=cost(4e-4), decode_s=cost(3e-4, 0.1), augment_s=cost(3e-4, 0.2),
        collate_s=cost(1e-3), transfer_s=cost(1e-3), receive_s=cost(5e-4),
        copy_s=cost(5e-4), compute_s=float(r.uniform(1e-4, 4e-3)),
        compute_on_cpu=bool(r.random() < 0.6), batches=int(r.integers(5, 40)),
        epochs=int(r.integers(1, 4)), worker_startup_s=cost(2e-2),
        persistent_workers=bool(r.random() < 0.5),
        background=float(r.choice([0.0, 0.5, 1.0, 2.5])) if quantum else 0.0,
        quantum_s=quantum, jitter=cost(1.0, 0.5), seed=int(r.integers(1000)))


# (events, busy seconds as float.hex, sha256 of the five time arrays): what the closures
# that shared a dict (the simulator before LoaderSim, commit 846e65b) gave on random_config(k)
CLOSURES = [
    (109, '0x1.a0d2b8fbec544p-5', "38f2c07b05a62114"),
    (475, '0x1.9d0c38f66e9b7p-4', "24de099a0414d78f"),
    (560, '0x1.09e40a9f371d5p-4', "ba372c9e1db12e81"),
    (366, '0x1.3b6087e9bf008p-3', "5a07a741dac6f04f"),
    (1185, '0x1.0faf763d9e416p-2', "b9b5c452110f2ffe"),
    (323, '0x1.a31a8caea13a6p-6', "54696dbb6df0bca6"),
    (330, '0x1.7a87806ded115p-4', "e68bbd96cdfa5a33"),
    (874, '0x1.38f4edbe0a0cfp-2', "5e83c2175bc1f507"),
    (252, '0x1.108b99be60dd0p-4', "086e29799f715e58"),
    (3033, '0x1.0f7736cbb3a07p-1', "0eb12c8db2565dc6"),
    (562, '0x1.6a935859f08b8p-3', "562f12bd7baab9d6"),
    (262, '0x1.1c858f8ed9896p-3', "430cc6caba521cd4"),
    (460, '0x1.8cd41fc39704ap-4', "a48be3ff41d5cbec"),
    (1541, '0x1.22af0b935bb1cp-2', "f8411f67dea5ee69"),
    (2004, '0x1.36048c8226cf3p-1', "e02e49e306758805"),
    (529, '0x1.e84aa866086b8p-3', "75a92a47c41779bf"),
    (120, '0x1.5807a11a1e88ep-6', "ea180a6a184105ae"),
    (1288, '0x1.0e50e7903bf22p-2', "d6b80c50df115474"),
    (156, '0x1.41352f1939d55p-5', "8a071232bb16842d"),
    (1048, '0x1.faefc76e26f6ep-3', "02ec344b87b88193"),
    (182, '0x1.fb54b274a5fe0p-6', "f31d6683e17fd8cc"),
    (1047, '0x1.6f66cf88d26cbp-2', "ff9c47412e03c333"),
    (244, '0x1.5da47e45c3d9ap-4', "700f463876d7453d"),
    (100, '0x1.6f6b7a3e1751cp-5', "2779c0e893e8a425"),
    (413, '0x1.247792fdb642dp-4', "9a9e185d118e56ff"),
    (100, '0x1.e9b160b61b897p-6', "3617a2eeac2eb6eb"),
    (453, '0x1.0405b3a7cfe36p-4', "838519dfdd879dbb"),
    (91, '0x1.3534151e3efc9p-6', "696c138b5994df03"),
    (1732, '0x1.ec2eed7775019p-2', "61b4ae78321d46cb"),
    (247, '0x1.427c66633cb96p-4', "44d6718b8309958f"),
]


def fingerprint(r):
    arrays = np.concatenate([r.step_start, r.step_got, r.step_end, r.batch_issued,
                             r.batch_ready])
    return r.events, r.core_busy_s.hex(), hashlib.sha256(arrays.tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("seed", range(30))
def test_the_state_class_gives_the_closures_results(seed):
    assert fingerprint(simulate(random_config(seed))) == CLOSURES[seed]


# ---- invariants on configurations drawn by Hypothesis ------------------------------------------

costs = st.one_of(st.just(0.0), st.floats(1e-5, 1e-3))


@st.composite
def pipelines(draw):
    quantum = draw(st.sampled_from([0.0, 3e-4, 1.5e-3]))
    return PipelineConfig(
        batch_size=draw(st.integers(1, 8)), num_workers=draw(st.integers(0, 5)),
        prefetch_factor=draw(st.integers(1, 3)), cores=draw(st.integers(1, 4)),
        read_s=draw(costs), decode_s=draw(costs), augment_s=draw(st.floats(1e-5, 1e-3)),
        collate_s=draw(costs), transfer_s=draw(costs), receive_s=draw(costs),
        copy_s=draw(costs), compute_s=draw(st.floats(1e-5, 3e-3)),
        compute_on_cpu=draw(st.booleans()), batches=draw(st.integers(1, 25)),
        epochs=draw(st.integers(1, 2)), worker_startup_s=draw(costs),
        persistent_workers=draw(st.booleans()),
        background=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) if quantum else 0.0,
        quantum_s=quantum, jitter=draw(st.sampled_from([0.0, 0.5, 1.0])),
        seed=draw(st.integers(0, 99)))


def logged_run(cfg):
    """The result, and every run on a core as (process, start, end): those that ended and
    those still running at the end (the background's, which never end)."""
    s = sim.LoaderSim(cfg)
    s.cores.log = []
    r = s.run()
    still = [(p, start, min(start + run, r.total_s)) for p, (start, run, _, _) in
             s.cores.running.items()]
    return r, s.cores.log + still


def most_at_once(intervals):
    """The most intervals [start, end) that overlap at one instant."""
    edges = sorted([(b, 1) for b, e in intervals if e > b] + [(e, -1) for b, e in intervals
                                                               if e > b])
    return max(np.cumsum([d for _, d in edges]), default=0)   # ends sort before starts


@settings(max_examples=60, deadline=None)
@given(cfg=pipelines())
def test_work_is_conserved_no_core_is_over_committed_and_the_queue_is_bounded(cfg):
    r, runs = logged_run(cfg)
    n, B, W = cfg.batches * cfg.epochs, cfg.batch_size, cfg.num_workers
    # work: every sample's CPU time (gamma multipliers of mean 1 and CV jitter), collate and
    # hand-over per batch, receive, copy and (on a core) the step: all of it, nothing more
    m = (np.random.default_rng(cfg.seed).gamma(1 / cfg.jitter ** 2, cfg.jitter ** 2, (n, B))
         if cfg.jitter else np.ones((n, B)))
    per_batch = cfg.collate_s + cfg.copy_s + (cfg.compute_s if cfg.compute_on_cpu else 0.0) \
        + ((cfg.transfer_s + cfg.receive_s) if W else 0.0)
    want = (cfg.decode_s + cfg.augment_s) * m.sum() + n * per_batch
    assert r.core_busy_s == pytest.approx(want, rel=1e-9, abs=1e-15)
    ours = [(b, e) for p, b, e in runs if p <= W]
    assert sum(e - b for b, e in ours) == pytest.approx(want, rel=1e-9, abs=1e-15)
    # cores: never more runs at once than cores, and a process on one core at a time
    assert most_at_once([(b, e) for _, b, e in runs]) <= cfg.cores
    for p in {p for p, _, _ in runs}:
        assert most_at_once([(b, e) for q, b, e in runs if q == p]) <= 1
    # the queue: built-and-waiting plus in flight never above prefetch_factor x workers
    q = r.queue()
    assert np.all(q.ready >= 0) and np.all(q.in_flight >= 0)
    assert np.all(q.ready + q.in_flight <= cfg.prefetch_factor * W)
    # batches conserved: each of the n issued once, built after it was issued, trained on
    # once; nothing left ready or in flight at the end
    assert len(r.step_start) == len(r.step_got) == len(r.step_end) == n
    if W:
        assert len(r.batch_issued) == len(r.batch_ready) == n
        assert np.all(r.batch_issued <= r.batch_ready)
        assert q.ready[-1] == 0 and q.in_flight[-1] == 0
    # the loop: in order, a batch taken after it was built and its step started
    assert np.all(np.diff(r.step_end) > 0) and np.all(r.step_end > r.step_got)
    assert np.all(r.step_got >= r.step_start) and np.all(r.step_got >= r.batch_ready)
