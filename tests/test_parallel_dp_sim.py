"""Data-parallel step simulator: bucketing, overlap, DP vs DDP, stragglers, errors."""
import numpy as np
import pytest

from labkit.parallel import dp_sim
from labkit.parallel.cost import collective_time

HW = dp_sim.HARDWARE["8× V100 NVLink (DGX-1)"]
M = dp_sim.MODELS["ResNet-50"]


def test_make_buckets():
    assert dp_sim.make_buckets([4, 4, 4, 4], 8) == [[0, 1], [2, 3]]
    assert dp_sim.make_buckets([10, 1, 1, 1, 30, 2], 12) == [[0, 1, 2], [3, 4], [5]]
    assert dp_sim.make_buckets([50], 10) == [[0]]
    with pytest.raises(ValueError, match="cap_bytes"):
        dp_sim.make_buckets([1], 0)


def test_single_bucket_no_overlap_equals_compute_plus_allreduce():
    r = dp_sim.simulate_step(M, HW, 8, "ddp_no_overlap", bucket_mb=1e6)
    nbytes = M.params * 4
    a, b = HW.alpha_beta(8)
    ar = collective_time("all_reduce", "ring", nbytes, 8, alpha=a, beta=b,
                         gamma=4 / HW.gpu_flops / 4)
    assert len(r.buckets) == 1 and r.buckets[0] == pytest.approx(nbytes)
    assert r.exposed_comm == pytest.approx(ar)
    assert r.comm_time == pytest.approx(ar)


def test_overlap_hides_communication():
    ov = dp_sim.simulate_step(M, HW, 8, "ddp")
    no = dp_sim.simulate_step(M, HW, 8, "ddp_no_overlap")
    assert ov.compute_time == pytest.approx(no.compute_time)
    assert ov.step_time < no.step_time
    assert 0 <= ov.exposed_comm < no.exposed_comm
    assert sum(ov.buckets) == pytest.approx(M.params * 4)


def test_world_one_has_no_communication_and_ideal_efficiency():
    for mode in dp_sim.MODES:
        r = dp_sim.simulate_step(M, HW, 1, mode)
        assert r.comm_time == 0 and r.exposed_comm == pytest.approx(0, abs=1e-15)
    s = dp_sim.scaling(M, HW, (1, 2, 4, 8), "ddp")
    assert s.efficiency[0] == 1.0 and all(0 < e <= 1 for e in s.efficiency)


def test_dp_scales_worse_than_ddp():
    for hw in dp_sim.HARDWARE.values():
        dp = dp_sim.scaling(M, hw, (1, 2, 4, 8), "dp")
        ddp = dp_sim.scaling(M, hw, (1, 2, 4, 8), "ddp")
        assert all(a <= b + 1e-12 for a, b in zip(dp.efficiency, ddp.efficiency))
        assert dp.efficiency[-1] < ddp.efficiency[-1]


def test_stragglers_slow_the_step():
    base = dp_sim.simulate_step(M, HW, 8, "ddp")
    slow = dp_sim.simulate_step(M, HW, 8, "ddp", slow_rank=1.5)
    assert slow.compute_time == pytest.approx(1.5 * base.compute_time)
    jit = dp_sim.simulate_step(M, HW, 8, "ddp", jitter=0.2, seed=1)
    assert jit.step_time > base.step_time


def test_multi_node_uses_the_network():
    a8, b8 = HW.alpha_beta(8)
    a16, b16 = HW.alpha_beta(16)
    assert b16 == pytest.approx(1 / min(HW.link_bandwidth, HW.network_bandwidth)) and b16 > b8


def test_scaling_efficiency_formula_and_errors():
    np.testing.assert_allclose(dp_sim.scaling_efficiency([100, 180, 320], [1, 2, 4]),
                               [1.0, 0.9, 0.8])
    with pytest.raises(ValueError, match="worlds\\[0\\] must be 1"):
        dp_sim.scaling_efficiency([1, 2], [2, 4])
    with pytest.raises(ValueError, match="mode must be"):
        dp_sim.simulate_step(M, HW, 2, "horovod")
    with pytest.raises(ValueError, match="world must be"):
        dp_sim.simulate_step(M, HW, 0)
    with pytest.raises(ValueError, match="per_gpu_batch"):
        dp_sim.simulate_step(M, HW, 2, per_gpu_batch=0)


def test_model_totals():
    assert M.params == pytest.approx(25.6e6)
    assert dp_sim.MODELS["BERT-base (seq 128)"].params == pytest.approx(110e6)


def test_bucket_sweep_trades_message_count_against_overlap():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel import draw

    model, hw = dp_sim.MODELS["ResNet-50"], dp_sim.HARDWARE["8× V100 PCIe 3.0"]
    sweep = dp_sim.bucket_sweep(model, hw, 8, caps_mb=(0.5, 25, 1000))
    assert sweep.buckets[0] > sweep.buckets[1] > sweep.buckets[2] == 1
    for cap, t in zip(sweep.caps_mb, sweep.step_time):
        assert t == dp_sim.simulate_step(model, hw, 8, "ddp", bucket_mb=cap).step_time
    # one bucket for everything cannot overlap with backward: the worst exposed communication
    assert sweep.exposed_comm[2] == max(sweep.exposed_comm)
    assert len(draw.plot_bucket_sweep(sweep).axes[0].lines) == 2
    with pytest.raises(ValueError, match="caps_mb must be positive"):
        dp_sim.bucket_sweep(model, hw, 8, caps_mb=(0, 1))


def test_link_byte_maps_side_by_side():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel import draw
    from labkit.parallel.collectives import all_reduce

    runs = [all_reduce(draw.demo_data(4), alg) for alg in ("naive", "ring")]
    fig = draw.plot_link_bytes(*runs)
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert [np.asarray(im).sum() for im in images] == [r.link_bytes().sum() for r in runs]
    with pytest.raises(ValueError, match="at least one"):
        draw.plot_link_bytes()
