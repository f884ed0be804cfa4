"""The pipeline simulator agrees with the closed-form bounds in every regime."""
import numpy as np
import pytest

from labkit.dataload.model import steady_throughput
from labkit.dataload.sim import PipelineConfig, simulate, sweep_workers

BASE = PipelineConfig(batch_size=16, decode_s=4e-4, augment_s=6e-4, compute_s=6e-3, batches=120)


@pytest.mark.parametrize("workers, cores", [(0, 2), (1, 2), (2, 2), (5, 2), (1, 8), (3, 8),
                                            (8, 8), (2, 1)])
def test_cpu_compute_matches_the_bound(workers, cores):
    r = simulate(BASE, num_workers=workers, cores=cores)
    want = BASE.batch_size * steady_throughput(BASE.load_cpu_s, BASE.compute_s, workers, cores)
    assert r.samples_per_s == pytest.approx(want, rel=0.03)


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
    assert r.events == BASE.batches * (BASE.batch_size + 2) + 1
    assert np.all(np.diff(r.step_end) > 0) and np.all(r.step_got >= r.step_start)
    assert 0 < r.core_utilisation <= 1


def test_read_io_does_not_hold_a_core():
    # 1 ms of I/O per sample: 2 workers on 2 cores are I/O-bound, 8 workers overlap the I/O
    cfg = PipelineConfig(batch_size=16, decode_s=2e-4, augment_s=3e-4, read_s=1e-3,
                         compute_s=2e-3, compute_on_cpu=False, cores=2, batches=120)
    r2, r8 = simulate(cfg, num_workers=2), simulate(cfg, num_workers=8)
    assert r2.samples_per_s == pytest.approx(2 / 1.5e-3, rel=0.03)
    assert r8.samples_per_s == pytest.approx(2 / 0.5e-3, rel=0.05)       # now the cores bind


def test_persistent_workers_pay_startup_once():
    kw = dict(num_workers=2, epochs=3, batches=10, worker_startup_s=0.5)
    fresh = simulate(BASE, **kw)
    kept = simulate(BASE, persistent_workers=True, **kw)
    assert fresh.total_s - kept.total_s == pytest.approx(1.0, rel=1e-6)


def test_prefetch_absorbs_jitterless_bursts_and_validation():
    # prefetch cannot raise the steady rate beyond the bound
    a = simulate(BASE, num_workers=2, prefetch_factor=1).samples_per_s
    b = simulate(BASE, num_workers=2, prefetch_factor=8).samples_per_s
    assert b <= BASE.batch_size * steady_throughput(BASE.load_cpu_s, BASE.compute_s, 2, 2) * 1.03
    assert a <= b * 1.03
    with pytest.raises(ValueError, match="cores"):
        PipelineConfig(cores=0)
    with pytest.raises(ValueError, match="decode_s"):
        PipelineConfig(decode_s=-1)


@pytest.mark.parametrize("background, share", [(1, 1.0), (3, 0.5), (6, 2 / 7)])
def test_background_processes_take_a_fair_share(background, share):
    # one CPU-bound training process among `background` others on 2 cores gets 2/(b+1)
    r = simulate(BASE, num_workers=0, background=background, quantum_s=2e-3)
    want = BASE.batch_size / (BASE.load_cpu_s + BASE.compute_s) * share
    assert r.samples_per_s == pytest.approx(want, rel=0.05)


def test_time_slicing_alone_keeps_the_bounds():
    for w in (0, 1, 2, 4):
        r = simulate(BASE, num_workers=w, quantum_s=1e-3)
        want = BASE.batch_size * steady_throughput(BASE.load_cpu_s, BASE.compute_s, w, 2)
        assert r.samples_per_s == pytest.approx(want, rel=0.05)
    with pytest.raises(ValueError, match="quantum_s"):
        PipelineConfig(background=2)
