"""Chapter 07's comparisons (labkit.dataload.compare) and the helpers its cells call:
the bottleneck law's terms, the plateau of the simulated curve, stage-cost shares."""
import numpy as np
import pytest

from labkit.dataload import compare, sim
from labkit.dataload.measure import LoaderRun, StageCosts, sweep_loader
from labkit.dataload.model import (EncodedImages, bottleneck, make_images, pipeline_bounds,
                                   steady_throughput, workers_needed)


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
    assert rows[2].simulated == sim.simulate(cfg, num_workers=2).samples_per_s
    assert rows[1].ratio == pytest.approx(1200.0 / rows[1].simulated)
    assert rows[3].shared is None and rows[3].shared_ratio is None
    shared = sim.PipelineConfig(batch_size=32, cores=2, decode_s=2e-4, augment_s=5e-4,
                                compute_s=0.008, batches=40, background=2, quantum_s=0.002)
    rows = compare.compare_workers(measured, cfg, shared)
    assert rows[0].shared < rows[0].simulated       # two other processes slow it down
    assert isinstance(rows[0].shared_ratio, float)
    line = compare.format_worker_rows(rows).splitlines()[0]
    assert line.startswith("num_workers=0: measured   1,000  simulated")
    with pytest.raises(ValueError, match="measured"):
        compare.compare_workers([], cfg)


def _run(workers, wait, compute, batch=32):
    return LoaderRun(workers, batch, None, False, False, np.full(8, wait), np.full(8, compute),
                     (0.0,))


def test_diagnose_names_the_binding_resource_at_the_best_run():
    cfg = sim.PipelineConfig(batch_size=32, cores=2, decode_s=1.5e-3 / 2, augment_s=1.5e-3 / 2,
                             compute_s=0.008)          # L = 48 ms, C = 8 ms
    runs = {0: _run(0, 0.048, 0.008), 1: _run(1, 0.040, 0.008), 2: _run(2, 0.020, 0.008),
            3: _run(3, 0.022, 0.008)}
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
    c = StageCosts(decode_s=25e-6, augment_s=75e-6, compute_s=0.003)
    assert c.decode_share == pytest.approx(0.25)
    cfg = sim.PipelineConfig(decode_s=25e-6, augment_s=75e-6)
    assert cfg.decode_share == c.decode_share == sim.decode_share(25e-6, 75e-6)
    assert sim.PipelineConfig(decode_s=0.0, augment_s=0.0).decode_share == 0.5
    with pytest.raises(ValueError, match="augment_s"):
        sim.decode_share(1e-4, -1e-4)
    assert c.batch_load_s(32) == pytest.approx(32 * 100e-6)
    with pytest.raises(ValueError, match="batch_size"):
        c.batch_load_s(0)


def test_sweep_loader_reuses_known_runs_and_measures_the_others():
    images, labels = make_images(16, seed=0)
    ds = EncodedImages(images, labels, seed=0)
    fake = _run(1, 0.5, 0.5, batch=8)
    runs = sweep_loader(ds, (0, 1), known={1: fake}, batch_size=8)
    assert runs[1] is fake
    assert runs[0].num_workers == 0 and runs[0].batch_size == 8 and len(runs[0].wait_s) == 2
