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
    ar = collective_time("all_reduce", "ring", nbytes, 8, alpha=a, beta=b, gamma=HW.gamma)
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


def test_constants_are_named_and_come_from_the_data_sheets():
    from labkit.hardware import GPUS
    for hw in dp_sim.HARDWARE.values():
        gpu = GPUS[hw.gpu]
        assert hw.precision == "fp16"                       # one precision for every preset
        assert hw.gpu_flops == pytest.approx(gpu.peak("fp16") * dp_sim.SUSTAINED_FRACTION)
        assert hw.gamma == pytest.approx(3 / gpu.hbm_bandwidth)
        assert hw.optimizer_time(1e9) == pytest.approx(20e9 / gpu.hbm_bandwidth)
    # H100's FP16 tensor-core peak is 989.5 TFLOPS (data sheet), sustained at 40 %
    assert dp_sim.HARDWARE["8× H100 NVLink (DGX H100)"].gpu_flops == pytest.approx(395.8e12)


def test_optimizer_and_events_per_mode():
    for mode in dp_sim.MODES:
        r = dp_sim.simulate_step(M, HW, 4, mode)
        opt = [e for e in r.events if e.kind == "optimizer"]
        assert len(opt) == 1 and opt[0].end == pytest.approx(r.step_time)
        assert opt[0].end - opt[0].start == pytest.approx(HW.optimizer_time(M.params))
    dp = dp_sim.simulate_step(M, HW, 4, "dp")
    assert {e.kind for e in dp.events} == {"overhead", "forward", "backward", "comm",
                                           "optimizer"}
    ddp = dp_sim.simulate_step(M, HW, 4, "ddp", bucket_mb=5)
    comm = [e for e in ddp.events if e.kind == "comm"]
    assert len(comm) == len(ddp.buckets) > 1
    assert all(b.start >= a.end - 1e-15 for a, b in zip(comm, comm[1:]))   # one at a time


def test_timeline_takes_any_event_kind():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel import draw
    from labkit.parallel.dp_sim import Event

    class Custom:
        events = (Event("stage 0", 0, 1e-3, "F0", "pipeline-forward"),
                  Event("stage 1", 1e-3, 2e-3, "F0", "pipeline-forward"),
                  Event("stage 1", 2e-3, 3e-3, "idle", "bubble"))
    fig = draw.plot_timeline(Custom(), title="two stages")
    ax = fig.axes[0]
    assert len(ax.patches) == 3 and ax.get_title() == "two stages"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pipeline-forward", "bubble"]
    # new kinds get colours of their own, distinct from each other and from known kinds
    from matplotlib.colors import to_hex
    mixed = type("Mixed", (), {"events": Custom.events + (
        Event("stage 0", 3e-3, 4e-3, "B0", "backward"),)})()
    fig2 = draw.plot_timeline(mixed)
    faces = {}
    for bar, e in zip(fig2.axes[0].patches, mixed.events):
        faces.setdefault(e.kind, set()).add(to_hex(bar.get_facecolor()))
    assert all(len(v) == 1 for v in faces.values()) and len(set().union(*faces.values())) == 3
    assert faces["backward"] == {to_hex("tab:orange")}
    matplotlib.pyplot.close(fig2)
    matplotlib.pyplot.close(fig)
