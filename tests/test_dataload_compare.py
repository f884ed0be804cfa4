"""Chapter 07's comparisons (labkit.dataload.compare) and the calibration they rest on:
the bottleneck law's terms, the plateau of the simulated curve, measured against predicted
with both spreads, exercise 8 as three measured experiments, the CPU-time calibration."""
import numpy as np
import pytest

from labkit.dataload import compare, sim
from labkit.dataload.calibrate import calibrate_trials, calibrated_config
from labkit.dataload.costs import StageCosts
from labkit.dataload.measure import LoaderRun, Trials
from labkit.dataload.model import (bottleneck, pipeline_bounds, steady_throughput,
                                   workers_needed)


def run(workers, wait, compute, batch=32, steps=80, **kw):
    return LoaderRun.from_steps(np.full(steps, wait), np.full(steps, compute), batch_size=batch,
                                num_workers=workers, **kw)


def test_pipeline_bounds_are_the_bottleneck_laws_terms():
    b = pipeline_bounds(0.06, 0.01, 3, 2)
    assert b == pytest.approx({"training step": 0.01, "loading (per worker)": 0.02,
                               "cores": 0.035})
    assert 1 / max(b.values()) == pytest.approx(steady_throughput(0.06, 0.01, 3, 2))
    assert bottleneck(0.06, 0.01, 3, 2) == "cores"
    assert bottleneck(0.06, 0.01, 1, 8) == "loading (per worker)"
    assert bottleneck(0.01, 0.05, 4, 8) == "training step"
    assert bottleneck(0.06, 0.01, 0, 2) == "loading and step in series"   # not "loading"
    assert pipeline_bounds(0.06, 0.01, 0, 2)["loading (per worker)"] == 0.06
    with pytest.raises(ValueError, match="workers"):
        pipeline_bounds(0.06, 0.01, -1, 2)


def test_the_plateau_of_an_accelerator_pipeline_is_at_workers_needed():
    # L = 32 · 1 ms = 32 ms per batch, C = 6.4 ms on the accelerator: L / C = 5 workers
    cfg = sim.PipelineConfig(batch_size=32, cores=32, decode_s=5e-4, augment_s=5e-4,
                             compute_s=0.0064, compute_on_cpu=False, batches=60)
    assert workers_needed(cfg.load_cpu_s, cfg.compute_s) == 5
    assert sim.workers_to_plateau(cfg, 12) == 5
    assert sim.workers_to_plateau(cfg, 3) == 3       # still rising at the end of the range
    with pytest.raises(ValueError, match="fraction"):
        sim.workers_to_plateau(cfg, 12, fraction=1.5)
    rates = [r.samples_per_s for r in sim.sweep_workers(cfg, range(13))]
    assert sim.plateau_workers(rates, 0.97) == 5
    assert sim.plateau_workers([10.0, 50.0, 98.0, 99.0, 100.0], 0.99) == 3   # not the argmax
    assert sim.plateau_workers([10.0, 50.0, 98.0, 99.0, 100.0], 0.98) == 2
    assert sim.plateau_workers([10.0, 50.0, 98.0, 99.0, 100.0], 1.0) == 4
    with pytest.raises(ValueError, match="rates"):
        sim.plateau_workers([], 0.9)


def test_compare_workers_against_the_bound_and_the_simulator():
    cfg = sim.PipelineConfig(batch_size=32, cores=2, decode_s=2e-4, augment_s=5e-4,
                             compute_s=0.008, batches=40)
    measured = [1000.0, 1200.0, 1500.0, 1500.0]
    rows = compare.compare_workers(measured, cfg)
    L, C = cfg.load_cpu_s, cfg.compute_s
    assert [r.bound for r in rows] == pytest.approx(
        [32 / (L + C), 32 / max(C, L, (L + C) / 2), 32 / max(C, L / 2, (L + C) / 2),
         32 / max(C, L / 3, (L + C) / 2)])
    # without workers nothing overlaps: the simulator is the bound exactly
    assert rows[0].simulated == pytest.approx(rows[0].bound, rel=1e-9)
    assert rows[2].simulated == sim.simulate(sim.steady_config(cfg, 2)).samples_per_s
    assert rows[1].ratio == pytest.approx(1200.0 / rows[1].simulated)
    assert rows[3].shared is None and rows[3].shared_ratio is None
    shared = sim.PipelineConfig(batch_size=32, cores=2, decode_s=2e-4, augment_s=5e-4,
                                compute_s=0.008, batches=40, background=2, quantum_s=0.002)
    rows = compare.compare_workers(measured, cfg, shared)
    assert rows[0].shared == pytest.approx(rows[0].simulated * 2 / 3, rel=0.03)   # fair share
    assert isinstance(rows[0].shared_ratio, float)
    line = compare.format_worker_rows(rows).splitlines()[0]
    assert line.startswith("num_workers=0: measured   1,000  simulated")
    with pytest.raises(ValueError, match="measured"):
        compare.compare_workers([], cfg)


def test_compare_trials_states_both_spreads_and_pairs_the_ratio_by_trial():
    base = sim.PipelineConfig(batch_size=32, cores=2, decode_s=2e-4, augment_s=5e-4,
                              compute_s=0.008)
    configs = [base, sim.PipelineConfig(**{**base.__dict__, "compute_s": 0.010})]
    L = base.load_cpu_s
    p0 = [32 / (L + 0.008), 32 / (L + 0.010)]              # the simulator is exact at W = 0
    rows = compare.compare_trials({0: [p0[0] * 1.1, p0[1] * 0.9], 2: [900.0, 1100.0]}, configs)
    r0, r2 = rows
    assert r0.predicted.values == pytest.approx(tuple(p0), rel=1e-9)
    assert r0.ratio.values == pytest.approx((1.1, 0.9))     # trial k against calibration k
    assert r0.agrees and not r0.above_bound
    assert r2.bound.values == pytest.approx(tuple(32 / max(C, L / 2, (L + C) / 2)
                                                  for C in (0.008, 0.010)))
    far = compare.compare_trials({2: [5000.0, 5200.0]}, configs)[0]
    assert not far.agrees and far.above_bound
    text = compare.format_agreement(rows + [far]).splitlines()
    assert text[0].startswith("num_workers=0: measured ") and "(ranges overlap)" in text[0]
    assert "measured/predicted 1.00 (0.90–1.10)" in text[0]
    assert text[2].endswith("(ranges apart, MEASURED ABOVE THE BOUND)")
    single = compare.compare_trials({0: [1000.0, 1100.0, 1200.0]}, configs)[0]
    assert single.ratio.values == pytest.approx((1100.0 / np.median(p0),))   # medians
    with pytest.raises(TypeError, match="configs"):
        compare.compare_trials({0: [1.0]}, [])


def test_diagnose_experiments_from_loader_alone_compute_alone_and_the_pipeline():
    loader = Trials((run(1, 0.010, 0.0, kind="loader alone"),) * 2)     # 3,200 samples/s
    comp = Trials((run(0, 0.0, 0.004, kind="compute alone"),) * 2)      # 8,000 samples/s
    bound = Trials((run(1, 0.0075, 0.0025),) * 2)                       # 3,200: loading binds
    shared = Trials((run(1, 0.011, 0.0026),) * 2)                       # 2,353: they compete
    d = compare.diagnose_experiments(loader, comp, bound)
    assert d.slower_alone == "loading" and d.of_slower.median == pytest.approx(1.0)
    assert d.verdict() == "loading binds: the pipeline runs at its rate alone"
    d = compare.diagnose_experiments(loader, comp, shared)
    assert d.of_slower.median == pytest.approx(0.01 / 0.0136)
    assert d.verdict().startswith("loading and the step compete: together they reach 74%")
    text = compare.format_experiments(d)
    assert "loader alone (num_workers=1): 3,200 (3,200–3,200) samples/s" in text
    assert "training step alone (one cached batch): 8,000" in text
    step_bound = compare.diagnose_experiments(Trials((run(1, 0.002, 0.0),)),
                                              Trials((run(0, 0.0, 0.004),)),
                                              Trials((run(1, 0.0, 0.004),)))
    assert step_bound.slower_alone == "the training step"
    with pytest.raises(ValueError, match="same loader"):
        compare.diagnose_experiments(loader, comp, Trials((run(2, 0.01, 0.003),)))


def test_diagnose_names_the_binding_resource_at_the_best_run():
    cfg = sim.PipelineConfig(batch_size=32, cores=2, decode_s=1.5e-3 / 2, augment_s=1.5e-3 / 2,
                             compute_s=0.008)          # L = 48 ms, C = 8 ms
    runs = {0: run(0, 0.048, 0.008), 1: run(1, 0.040, 0.008), 2: run(2, 0.020, 0.008),
            3: run(3, 0.022, 0.008)}
    d = compare.diagnose(runs, cfg)
    assert d.wait_share_no_workers == pytest.approx(48 / 56)
    assert d.step_alone == pytest.approx(32 / 0.008)
    assert d.loading_one_core == pytest.approx(32 / 0.048)
    assert d.cores_limit == pytest.approx(32 * 2 / 0.056)
    assert d.best_workers == 2 and d.best_rate == pytest.approx(32 / 0.028)
    assert d.best_wait_share == pytest.approx(20 / 28)
    assert d.bottleneck == "cores"        # max(8, 48/2, 56/2) ms: the cores
    text = compare.format_diagnosis(d)
    assert "both on 2 cores at most 1,143 samples/s" in text
    assert text.endswith("the binding resource per the bound: cores")
    with pytest.raises(ValueError, match="num_workers=0"):
        compare.diagnose({1: runs[1]}, cfg)


def test_stage_costs_shares_and_batch_load():
    c = StageCosts(decode_s=25e-6, augment_s=75e-6, compute_s=0.003, collate_s=0.5e-3)
    assert c.decode_share == pytest.approx(0.25)
    cfg = sim.PipelineConfig(decode_s=25e-6, augment_s=75e-6)
    assert cfg.decode_share == c.decode_share == sim.decode_share(25e-6, 75e-6)
    assert sim.PipelineConfig(decode_s=0.0, augment_s=0.0).decode_share == 0.5
    with pytest.raises(ValueError, match="augment_s"):
        sim.decode_share(1e-4, -1e-4)
    assert c.batch_load_s(32) == pytest.approx(32 * 100e-6 + 0.5e-3)
    with pytest.raises(ValueError, match="batch_size"):
        c.batch_load_s(0)


COSTS = StageCosts(decode_s=50e-6, augment_s=150e-6, compute_s=0.002, collate_s=0.6e-3)


def test_calibration_is_in_cpu_time_and_hits_its_calibration_point():
    # the training thread ran 10 ms (load) + 3 ms (step) of CPU per step, but got half a
    # core: each step took 26 ms of wall time
    r0 = run(0, 0.020, 0.006, wait_cpu_s=np.full(80, 0.010), step_cpu_s=np.full(80, 0.003))
    assert r0.cpu_share == pytest.approx(0.5) and r0.load_cpu_s == pytest.approx(0.010)
    cfg = calibrated_config(r0, COSTS, cores=2)
    assert cfg.background == pytest.approx(3.0)            # others used 1.5 cores: weight 3
    assert cfg.load_cpu_s == pytest.approx(0.010) and cfg.compute_s == pytest.approx(0.003)
    assert cfg.collate_s == pytest.approx(0.6e-3)
    assert cfg.decode_s / cfg.augment_s == pytest.approx(1 / 3)
    assert cfg.quantum_s == sim.linux_slice_s(2)
    hit = sim.simulate(sim.steady_config(cfg, 0)).samples_per_s
    assert hit == pytest.approx(r0.samples_per_s, rel=0.02)   # 32 / 26 ms
    # measured others (/proc/stat) beside a full share: weight = their cores, nothing scaled
    quiet = run(0, 0.010, 0.003, others_cores=0.4)
    cfg = calibrated_config(quiet, COSTS, cores=2)
    assert cfg.background == pytest.approx(0.4) and cfg.load_cpu_s == pytest.approx(0.010)
    assert sim.simulate(sim.steady_config(cfg, 0)).samples_per_s == pytest.approx(
        quiet.samples_per_s, rel=1e-6)
    alone = calibrated_config(quiet, COSTS, cores=2, shared=False)
    assert alone.background == 0.0
    with pytest.raises(ValueError, match="num_workers=0"):
        calibrated_config(run(1, 0.01, 0.003), COSTS)


def test_the_calibrated_model_is_monotone_in_the_cpu_share():
    preds = []
    for share in np.linspace(0.3, 1.0, 8):
        # the same CPU costs (10 ms + 3 ms); the wall time stretched by the share
        r0 = run(0, 0.010 / share, 0.003 / share, wait_cpu_s=np.full(80, 0.010),
                 step_cpu_s=np.full(80, 0.003))
        cfg = calibrated_config(r0, COSTS, cores=2, batches=80)
        preds.append([sim.simulate(sim.steady_config(cfg, w)).samples_per_s for w in (0, 1, 2)])
        assert preds[-1][0] == pytest.approx(r0.samples_per_s, rel=0.02)
    preds = np.array(preds)
    assert np.all(np.diff(preds, axis=0) > 0)              # more share, more samples/s


def test_a_run_with_workers_gives_the_hand_over_costs():
    r0 = run(0, 0.010, 0.003)
    loader = run(1, 0.011, 0.0, kind="loader alone", wait_cpu_s=np.full(80, 0.0008),
                 step_cpu_s=np.zeros(80), workers_cpu_s=80 * 0.012)
    assert loader.worker_batch_cpu_s == pytest.approx(0.012)
    cfg = calibrated_config(r0, COSTS, loader=loader, cores=2)
    assert cfg.transfer_s == pytest.approx(0.002) and cfg.receive_s == pytest.approx(0.0008)
    assert cfg.worker_batch_s == pytest.approx(0.012)
    configs = calibrate_trials({0: Trials((r0, r0, r0))}, COSTS, Trials((loader,)), cores=2)
    assert len(configs) == 3 and all(c.transfer_s == pytest.approx(0.002) for c in configs)
    with pytest.raises(ValueError, match="num_workers > 0"):
        calibrated_config(r0, COSTS, loader=r0)
    with pytest.raises(ValueError, match="num_workers=0"):
        calibrate_trials({1: Trials((loader,))})


def test_cpu_breakdown_and_load_breakdown():
    a = run(0, 0.010, 0.003)                       # always on CPU: 13 ms per batch, 1 core
    b = run(2, 0.002, 0.003, workers_cpu_s=80 * 0.012, others_cores=0.5)
    rows = compare.cpu_breakdown({0: Trials((a, a)), 2: Trials((b,))})
    assert rows[0].our_cores.median == pytest.approx(1.0)
    assert rows[0].cpu_per_batch.median == pytest.approx(0.013)
    assert rows[1].cpu_per_batch.median == pytest.approx(0.017)      # 5 ms main + 12 ms workers
    # the identity: B × cores / CPU per batch = the run's average rate
    assert 32 * rows[1].our_cores.median / rows[1].cpu_per_batch.median == pytest.approx(
        32 * b.steps / b.wall_s)
    text = compare.format_cpu_breakdown(rows).splitlines()
    assert text[0].endswith("got 1.00 (1.00–1.00) cores and spent 13.0 ms of CPU per batch "
                            "(the step 3.0 ms)")
    assert text[1].endswith("; other processes 0.50 cores")
    costs = StageCosts(decode_s=50e-6, augment_s=150e-6, compute_s=0.002, collate_s=0.6e-3,
                       item_s=230e-6)
    lb = compare.load_breakdown(a, costs)
    assert (lb.decode_augment_s, lb.item_overhead_s) == pytest.approx((32 * 200e-6, 32 * 30e-6))
    assert lb.rest_s == pytest.approx(0.010 - 0.0064 - 0.00096 - 0.0006)
    assert compare.format_load_breakdown(lb).startswith("L = 10.00 ms of CPU per batch: 32 × ")
    with pytest.raises(ValueError, match="num_workers=0"):
        compare.load_breakdown(b, costs)


def test_the_verdict_of_three_experiments():
    assert compare.verdict_of_rates(1000, 3000, 950) == "data"        # 95 % of the loader
    assert compare.verdict_of_rates(3000, 1000, 900) == "compute"     # exactly 90 %: binds
    assert compare.verdict_of_rates(3000, 1000, 899) == "both"
    assert compare.verdict_of_rates(1000, 3000, 850, threshold=0.8) == "data"
    with pytest.raises(ValueError, match="threshold"):
        compare.verdict_of_rates(1, 1, 1, threshold=1.5)
    a = run(1, 0.010, 0.0, kind="loader alone")          # 3,200 samples/s
    c = run(0, 0.0, 0.005, kind="compute alone")         # 6,400
    p = run(1, 0.004, 0.006)                             # 3,200: waits 40 %, data-bound
    assert compare.bottleneck_verdict(a.result, c.result, p.result) == "data"
    with pytest.raises(TypeError, match="timed loop"):
        compare.bottleneck_verdict(a, c.result, p.result)
    trials = [Trials((x, x)) for x in (a, c, p)]
    assert compare.verdicts_by_trial(compare.bottleneck_verdict, *trials) == ["data", "data"]
    with pytest.raises(ValueError, match="as many trials"):
        compare.verdicts_by_trial(compare.bottleneck_verdict, Trials((a,)), *trials[1:])
    assert compare.majority(["both", "data", "both"]) == "both"
    d = compare.diagnose_experiments(*trials)
    assert d.verdict().startswith("loading binds") and "100%" in compare.format_experiments(d)


def test_the_chapters_printouts_show_measured_values():
    r = run(0, 0.010, 0.003)
    line = compare.format_run(r)
    assert "2,462 samples/s" in line and "waiting 77%" in line and "from_steps" in line
    table = compare.format_trials({"a": Trials((r, r)), "bb": Trials((r,))}, first_batch=True)
    assert table.splitlines()[0].startswith("a   2,462 (2,462–2,462) samples/s")
    assert "first batch of the last epoch after 10 ms" in table and "1, 2 trials" in table
    assert compare.same_across_epochs(np.zeros((2, 3))) and not compare.same_across_epochs(
        np.arange(6).reshape(2, 3))
    costs = StageCosts(3e-5, 2.5e-4, 3e-3, 5e-4, 3e-4)
    assert "load ≈ 9.5 ms" in compare.format_stage_costs(costs, 32)


def test_prefetch_rows_of_the_simulator_and_of_a_recurrence():
    cfg = sim.PipelineConfig(batch_size=32, cores=4, decode_s=3e-5, augment_s=2.5e-4,
                             compute_s=0.0045, compute_on_cpu=False)
    rows = compare.prefetch_rows(cfg, workers=2, factors=(1, 4))
    assert [r.of_bound for r in rows] == pytest.approx([1.0, 1.0], rel=1e-3)  # no jitter
    assert rows[0].bound == rows[1].bound
    assert "prefetch_factor=4: 1.00 of the bound" in compare.format_prefetch(rows)
    L, C = sim.jittered_costs(cfg, 200, 0.0)
    rec = compare.recurrence_rows(sim.prefetch_recurrence, L, C, 2, (1, 2))
    assert [r.rate for r in rec] == pytest.approx([r.rate for r in rows][:1] * 2, rel=1e-3)
