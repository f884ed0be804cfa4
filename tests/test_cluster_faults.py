"""Checkpoint intervals (Young, Daly, simulation), stragglers and backup workers, energy."""
import math

import numpy as np
import pytest

from labkit.cluster import energy, faults, stragglers
from labkit.cluster.jobs import Job
from labkit.cluster.scheduler import Cluster, simulate
from labkit.hardware import GPUS


# ---- checkpointing ----------------------------------------------------------------------

@pytest.mark.parametrize("mtbf_min, want", [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_reproduces_his_figures(mtbf_min, want):
    # Daly (2006), figs. 3-5: δ = 5 min; M = 24 h, 6 h, 15 min -> 117, 57, 9.1 min
    assert faults.daly_interval(5, mtbf_min) == pytest.approx(want, abs=0.05 if want < 10 else 0.5)


def test_young_and_daly_formulas():
    assert faults.young_interval(120, 28800) == pytest.approx(math.sqrt(2 * 120 * 28800))
    c, m = 120.0, 28800.0
    x = c / (2 * m)
    assert faults.daly_interval(c, m) == pytest.approx(
        math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c)
    assert faults.daly_interval(7200, 3600) == 3600          # C >= 2M: τ = M
    # Daly's interval is close to the true minimiser of his wall-time model
    taus = np.linspace(1500, 4000, 25001)
    t = [faults.expected_wall_time(1e6, tau, c, 300, m) for tau in taus]
    assert taus[int(np.argmin(t))] == pytest.approx(faults.daly_interval(c, m), rel=2e-3)


def test_expected_lost_work():
    L, m = 3600.0, 8 * 3600.0
    rng = np.random.default_rng(0)
    x = rng.exponential(m, 2_000_000)
    x = x[x < L]
    assert faults.expected_lost_work(L, m) == pytest.approx(x.mean(), rel=5e-3)
    assert faults.expected_lost_work(L, m) < L / 2
    assert faults.expected_lost_work(1.0, 1e9) == pytest.approx(0.5, rel=1e-6)


def test_sampler_matches_daly_model_and_event_simulation():
    W, C, R, M = 30 * 86400.0, 120.0, 300.0, 8 * 3600.0
    tau = 2400.0                       # W / tau = 1080 whole segments
    x = faults.sample_wall_times(W, tau, C, R, M, trials=4000, seed=1)
    model = faults.expected_wall_time(W, tau, C, R, M)
    se = x.std() / math.sqrt(x.size)
    assert abs(x.mean() - model) < 4 * se
    runs = [faults.simulate_timeline(W, tau, C, R, M, seed=s).wall_time for s in range(200)]
    assert abs(np.mean(runs) - model) < 4 * np.std(runs) / math.sqrt(200)


def test_no_failures_means_work_plus_checkpoints():
    x = faults.sample_wall_times(1000.0, 100.0, 5.0, 10.0, 1e15, trials=3)
    np.testing.assert_allclose(x, 1000 + 10 * 5, rtol=1e-9)
    tl = faults.simulate_timeline(1000.0, 300.0, 5.0, 10.0, 1e15)
    assert tl.wall_time == pytest.approx(1000 + 4 * 5) and tl.lost_work == 0
    assert [k for _, _, k in tl.events].count("checkpoint") == 4


def test_timeline_accounting():
    tl = faults.simulate_timeline(20 * 3600.0, 1800.0, 60.0, 120.0, 2 * 3600.0, seed=4)
    assert len(tl.failures) > 3
    span = sum(t1 - t0 for t0, t1, _ in tl.events)
    assert span == pytest.approx(tl.wall_time)
    work = sum(t1 - t0 for t0, t1, k in tl.events if k == "work")
    assert work == pytest.approx(20 * 3600.0)


def test_simulated_optimum_is_near_young_and_daly():
    """The claim the chapter makes: the simulated minimum sits within 15 % of Daly's τ
    (grid spacing 7 %), and running at Daly's τ costs < 0.1 % more wall time than the best
    simulated interval."""
    W, C, R, M = 30 * 86400.0, 120.0, 300.0, 8 * 3600.0
    sw = faults.interval_sweep(W, C, R, M, trials=3000, seed=0)
    assert sw.best_simulated == pytest.approx(sw.daly, rel=0.15)
    assert sw.best_simulated == pytest.approx(sw.young, rel=0.15)
    assert sw.simulated_at(sw.daly) <= sw.simulated.min() * 1.001
    # and far from it costs real time: 4x too often or too rarely is > 1 % worse
    assert sw.simulated[0] > sw.simulated.min() * 1.01
    assert sw.simulated[-1] > sw.simulated.min() * 1.01
    np.testing.assert_allclose(sw.simulated, sw.model, rtol=2e-3)


def test_fault_argument_errors():
    with pytest.raises(ValueError, match="mtbf_s"):
        faults.young_interval(10, 0)
    with pytest.raises(ValueError, match="checkpoint_s"):
        faults.daly_interval(-1, 10)
    with pytest.raises(TypeError, match="work_s"):
        faults.sample_wall_times("1", 1, 1, 1, 1)


def test_measure_checkpoint(tmp_path):
    cost = faults.measure_checkpoint(200_000, repeats=1, directory=tmp_path)
    # parameters + two Adam moments in float32, plus pickle overhead
    assert 3 * 4 * cost.parameters <= cost.bytes < 3 * 4 * cost.parameters * 1.1
    assert cost.seconds > 0 and cost.bandwidth > 0


# ---- stragglers ---------------------------------------------------------------------------

def test_exponential_order_statistics_match_simulation():
    for n, b in ((1, 0), (8, 0), (8, 2), (32, 4)):
        sim = stragglers.simulate_steps(n, backups=b, steps=40000, delay=0.2, seed=n + b)
        want = stragglers.expected_step_exponential(n, 1.0, 0.2, b)
        se = sim.step_times.std() / math.sqrt(40000)
        assert abs(sim.mean_step - want) < 4 * se
    assert stragglers.expected_step_exponential(4, 1.0, 1.0) == pytest.approx(1 + 25 / 12)


def test_bernoulli_closed_form_and_backups():
    n, p, s = 16, 0.05, 3.0
    assert stragglers.expected_step_bernoulli(n, 1.0, p, s) == pytest.approx(
        1 + 2 * (1 - 0.95 ** 16))
    sim = stragglers.simulate_steps(n, model="bernoulli", p=p, slowdown=s, steps=50000, seed=2)
    assert sim.mean_step == pytest.approx(stragglers.expected_step_bernoulli(n, 1.0, p, s),
                                          rel=0.02)
    with_b = stragglers.simulate_steps(n, backups=2, model="bernoulli", p=p, slowdown=s,
                                       steps=50000, seed=3)
    assert with_b.mean_step == pytest.approx(
        stragglers.expected_step_bernoulli(n, 1.0, p, s, 2), rel=0.02)
    assert with_b.mean_step < sim.mean_step
    assert stragglers.straggle_probability(3, 0.5, 1) == pytest.approx(1 - 5 / 16)


def test_backup_tradeoff():
    t = stragglers.backup_tradeoff(16, 6, delay=0.2)
    assert np.all(np.diff(t.step_time) < 0)          # each backup shortens the step
    assert t.speedup[0] == 1 and t.speedup[-1] > 1
    np.testing.assert_allclose(t.gpu_seconds, (16 + t.backups) * t.step_time)
    # with no variability backups only cost machines
    flat = stragglers.backup_tradeoff(16, 3, delay=0.0)
    np.testing.assert_allclose(flat.step_time, 1.0)
    with pytest.raises(ValueError, match="model"):
        stragglers.backup_tradeoff(4, model="weibull")


# ---- energy -------------------------------------------------------------------------------

def test_energy_hand_worked():
    # 4 GPUs, one job of 2 GPUs × 100 s: busy 200 GPU-s, idle 200 GPU-s over 100 s
    r = simulate([Job(0, 0, 2, 100)], Cluster(1, 4), "fifo")
    pm = energy.PowerModel("A100", idle_fraction=0.1)
    e = energy.schedule_energy(r, pm)
    tdp = GPUS["A100"].tdp_watts
    assert e.busy_joules == pytest.approx(200 * tdp)
    assert e.idle_joules == pytest.approx(200 * 0.1 * tdp)
    assert e.job_joules[0] == pytest.approx(200 * tdp)
    assert e.total_kwh == pytest.approx(220 * tdp / 3.6e6)


def test_energy_counts_preempted_segments_and_errors():
    jobs = [Job(0, 0, 4, 10, 0), Job(1, 4, 2, 3, 5)]
    r = simulate(jobs, Cluster(1, 4), "priority", preempt_overhead=1.0)
    e = energy.schedule_energy(r, energy.PowerModel("H100", idle_fraction=0.0))
    assert e.job_joules[0] == pytest.approx(4 * 11 * GPUS["H100"].tdp_watts)   # 10 s + 1 s redone
    with pytest.raises(ValueError, match="gpu"):
        energy.PowerModel("Z80", 0.1)
    with pytest.raises(ValueError, match="idle_fraction"):
        energy.PowerModel("A100", idle_fraction=1.5)


def test_power_model_takes_every_number_from_one_gpu():
    # no data sheet gives an idle power: it is a required argument, with no default
    with pytest.raises(TypeError, match="idle_fraction"):
        energy.PowerModel("H200")
    with pytest.raises(TypeError):
        energy.PowerModel()
    with pytest.raises(TypeError):
        energy.schedule_energy(simulate([Job(0, 0, 1, 1)], Cluster(1, 1), "fifo"))
    for key, gpu in GPUS.items():
        pm = energy.PowerModel(key, idle_fraction=0.2)
        assert pm.busy_watts == gpu.tdp_watts and pm.idle_watts == pytest.approx(0.2 * gpu.tdp_watts)
    assert energy.PowerModel("H200", 0.2).idle_watts == pytest.approx(140)     # 700 W TDP


def test_backups_needed_against_the_binomial_tail():
    from scipy.stats import binom
    # E[step] = 1 + 2·P[Binomial(16 + b, 0.05) > b]; the least b with E < 1.05
    e = [1 + 2 * binom.sf(b, 16 + b, 0.05) for b in range(10)]
    want = next(b for b, x in enumerate(e) if x < 1.05)
    assert want == 3 and e[2] > 1.05 > e[3]              # off by one either way is wrong
    assert stragglers.backups_needed(16, 1.0, 0.05, 3.0, 1.05) == 3
    assert stragglers.backups_needed(16, 1.0, 0.05, 3.0, 10.0) == 0
    assert stragglers.backups_needed(64, 1.0, 0.01, 3.0, 1.01) == next(
        b for b in range(50) if 1 + 2 * binom.sf(b, 64 + b, 0.01) < 1.01)
    with pytest.raises(ValueError, match="target"):
        stragglers.backups_needed(16, 1.0, 0.05, 3.0, 1.0)
    with pytest.raises(ValueError, match="max_backups"):
        stragglers.backups_needed(16, 1.0, 0.05, 3.0, 1.0 + 1e-12, max_backups=3)


def test_overheads_mtbf_and_checkpoint_size_by_hand():
    # the chapter's exercise: 1024 GPUs, each failing once in 5 years, C = 3 min, R = 5 min
    m1 = faults.system_mtbf(5 * 365 * 24 * 3600, 1024)
    assert m1 == pytest.approx(5 * 365 * 24 / 1024 * 3600) and m1 / 3600 == pytest.approx(42.77, abs=0.01)
    tau = faults.daly_interval(180, m1)
    want = m1 * math.exp(300 / m1) * math.expm1((tau + 180) / m1) / tau - 1     # Daly eq. 13
    assert faults.expected_overhead(1e7, tau, 180, 300, m1) == pytest.approx(want)
    assert round(100 * want, 1) == 5.2
    # the first of N exponential failures: a simulated check of the mean
    rng = np.random.default_rng(0)
    assert rng.exponential(10.0, size=(200_000, 4)).min(1).mean() == pytest.approx(
        faults.system_mtbf(10.0, 4), rel=0.01)
    with pytest.raises(ValueError, match="components"):
        faults.system_mtbf(10.0, 0)
    # mixed-precision Adam keeps fp16 weights (2 B) + fp32 master, m, v (12 B); no gradients
    size = faults.checkpoint_size(7e9)
    assert (size.bytes_per_param, size.bytes) == (14, 98e9)
    assert faults.checkpoint_size(1e6, "fp32", "momentum").bytes_per_param == 4 + 4
    assert faults.checkpoint_size(1e6, "fp32", "sgd").bytes == 4e6     # weights only
    cost = faults.CheckpointCost(1000, 48_000_000, 0.064, 0.03)
    assert cost.time_to_write(98e9) == pytest.approx(98e9 / (48e6 / 0.064))


def test_sweep_overheads_are_relative_to_work_and_best():
    sw = faults.interval_sweep(10 * 3600, 120, 300, 8 * 3600, points=5, trials=200, seed=0)
    np.testing.assert_allclose(sw.overhead, sw.simulated / (10 * 3600) - 1)
    best = int(np.argmin(sw.simulated))
    assert sw.excess_over_best(sw.intervals[best]) == 0
    assert sw.excess_over_best(sw.intervals[0]) == pytest.approx(
        sw.simulated[0] / sw.simulated[best] - 1)
    assert np.all(sw.overhead > 0)     # checkpoints and failures only add time
    assert sw.overhead_at(sw.intervals[2]) == pytest.approx(sw.overhead[2])   # on the grid
    mid = np.sqrt(sw.intervals[1] * sw.intervals[2])                        # between points
    assert sw.overhead_at(mid) == pytest.approx(
        np.interp(mid, sw.intervals, sw.simulated) / (10 * 3600) - 1)


def test_power_model_from_the_recorded_measurement():
    from labkit.cluster.energy import PowerModel
    from labkit.hardware import GPUS, MEASURED_POWER
    pm = PowerModel.measured("H200")
    reading = MEASURED_POWER["H200"]
    assert pm.idle_watts == pytest.approx(reading.idle_watts) == pytest.approx(79.0)
    assert pm.busy_watts == GPUS["H200"].tdp_watts == 700
    assert "nvidia-smi" in reading.how and reading.idle_watts < reading.context_watts < \
        reading.busy_watts <= GPUS["H200"].tdp_watts
    with pytest.raises(ValueError, match="A100"):
        PowerModel.measured("A100")
    with pytest.raises(ValueError, match="gpu"):
        PowerModel.measured("B200")
