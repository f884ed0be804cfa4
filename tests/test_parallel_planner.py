"""The 3D planner against Narayanan et al. SC'21 Table 1, honestly: every published plan
fits and its estimated % of peak (recomputation counted, the paper's measure) is within 2.5
points of the published one; the estimate rises with model size as the paper's does (a
constant, or the planner without its memory-bound kernels, fails that test); and the
planner's fastest plan is the published (t, p) in only 2 of the 10 rows (pinned, so that a
change to the model shows up here)."""
import math

import pytest

from labkit.hardware import DGX_A100_COMPUTE_NICS, GPUS, INFINIBAND_HDR
from labkit.memory.estimator import activation_bytes_per_layer
from labkit.parallel import planner as P
from labkit.parallel import planner_cost as C
from labkit.parallel import planner_table1 as T
from labkit.parallel import zero

ROWS = T.table1_models()
A100 = GPUS["A100"]


@pytest.fixture(scope="module")
def comparison():
    return T.table1_comparison()


@pytest.fixture(scope="module")
def gpt3_1024():
    return P.plan(C.GPT3, P.cluster("A100", 1024))


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[m.name for m, _, _ in ROWS])
def test_table1_published_plan_fits_and_its_estimate_is_close(comparison, i):
    model, cl, pub = ROWS[i]
    r = comparison[i]
    assert model.params / 1e9 == pytest.approx(pub["params_b"], abs=0.06)
    assert r.mine is not None and r.mine.fits and r.mine.memory <= A100.memory_bytes
    assert (r.mine.tp, r.mine.pp, r.mine.dp) == r.published_tpd == (
        pub["tp"], pub["pp"], pub["gpus"] // (pub["tp"] * pub["pp"]))
    assert abs(r.estimate - r.published) <= 2.5
    assert r.time_vs_best >= 1.0 and 1 <= r.rank <= r.pairs
    # the published throughput is consistent: TFLOP/s per GPU / A100 bf16 peak = % of peak
    assert 1e12 * pub["tflops"] / A100.peak("bf16") == pytest.approx(
        pub["peak_percent"] / 100, abs=0.006)
    assert r.mine.mfu == pytest.approx(r.mine.hfu * model.flops("none") / model.flops("full"))
    # ... and so is the aggregate: TFLOP/s per GPU x GPUs = petaFLOP/s (rounded in the paper)
    assert pub["tflops"] * pub["gpus"] / 1e3 == pytest.approx(pub["aggregate_pflops"], rel=0.01)


def test_table1_trend_rises_with_model_size_like_the_paper(comparison):
    tr = T.table1_trend(comparison)
    assert tr.published_change == 8 and tr.published_slope == pytest.approx(3.05, abs=0.01)
    assert tr.same_direction and tr.estimated_slope > 1.5 and tr.estimated_change > 3
    assert tr.rank_correlation > 0.8
    # what passed the old check fails this one: a constant 48 % is within 9 points of every
    # small row and 5 of every large one, but has no trend at all
    assert all(abs(48 - r.published) <= (5 if r.pub["params_b"] >= 39 else 9)
               for r in comparison)
    const = T.table1_trend(comparison, estimates=[48.0] * 10)
    assert not const.same_direction and const.rank_correlation == 0
    with pytest.raises(ValueError, match="estimates"):
        T.table1_trend(comparison, estimates=[48.0] * 9)


def test_memory_bound_kernels_turn_the_trend(comparison):
    # without them (infinite HBM bandwidth) the estimate falls from the smallest model to
    # the 18.4B one while the paper's stays flat, and its slope over all rows is negative
    from dataclasses import replace
    est = [100 * T.table1_planset(model, replace(cl, hbm_bw=1e30)).best(
        tp=pub["tp"], pp=pub["pp"]).hfu for model, cl, pub in ROWS]
    old = T.table1_trend(comparison, estimates=est)
    assert old.estimated_slope < 0 < T.table1_trend(comparison).estimated_slope
    assert est[0] - est[3] > 8 and not old.same_direction


def test_table1_matches_only_two_rows(comparison):
    """The published (t, p, d) is the planner's fastest for 1.7B and 1T only; elsewhere it
    prefers less tensor parallelism (fewer all-reduces, fewer replicated layer norms)."""
    assert [r.matches for r in comparison] == [True] + [False] * 8 + [True]
    assert T.table1_trend(comparison).matches == 2
    by = {r.pub["params_b"]: r for r in comparison}
    assert by[18.4].best_tpd == (1, 4, 64) and by[18.4].time_vs_best == pytest.approx(1.17, abs=0.01)
    assert by[1008.0].best_tpd == (8, 64, 6) and by[1008.0].best.chunks == 2
    # the 1T plan interleaves v = 2 chunks: its bubble is (p - 1)/(v·m) of the work
    b = by[1008.0].best
    work = b.time_parts["compute"] + b.time_parts["memory-bound ops"] + \
        b.time_parts["tensor-parallel comm"]
    assert b.time_parts["pipeline bubble"] == pytest.approx(work * 63 / (2 * 512))


def test_format_table1(comparison):
    text = T.format_table1(comparison).splitlines()
    assert len(text) == 12 and text[1].startswith("GPT 1.7B") and " yes " in text[1]
    assert "8,64,6 (2)" in text[10] and "fastest in 2 of 10 rows" in text[11]
    assert "published +8" in text[11] and "estimated +4.1" in text[11]


def test_default_efficiency_is_the_table1_fit():
    assert T.fit_table1_efficiency() == pytest.approx(C.DEFAULT_EFFICIENCY, abs=0.005)


def test_params_and_flops_formulas():
    m = C.GPTModel(128, 25600, 160, batch=3072)
    assert m.params == pytest.approx(1.008e12, rel=1e-3)
    B, s, l, h, V = 3072, 2048, 128, 25600, 51200
    assert m.flops("full") == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)))
    assert m.flops("none") == pytest.approx(m.flops("full") * 3 / 4, rel=0.01)


def test_layer_traffic_by_hand():
    s, b, h, a = 2048, 1, 4096, 32
    sbh, core = s * b * h, a * s * s * b
    t1 = C.layer_traffic_bytes(s, b, h, a, 1)
    assert t1["forward"] == pytest.approx(38 * sbh + 9 * core)      # 8 + 14 + 16 sbh
    assert t1["backward"] == pytest.approx(46 * sbh + 11 * core)     # 12 + 10 + 24 sbh
    t8 = C.layer_traffic_bytes(s, b, h, a, 8)
    assert t8["forward"] == pytest.approx(24 * sbh + 9 * core / 8)   # norms, adds replicated
    sp = C.layer_traffic_bytes(s, b, h, a, 8, sequence_parallel=True)
    assert sp["forward"] == pytest.approx(22 / 8 * sbh + 2 * sbh + 9 * core / 8)
    # in plan_time: full recomputation reads and writes the forward's bytes twice
    model = C.GPTModel(32, h, a, batch=64)
    cl = P.cluster("A100", 8)
    t = C.plan_time(model, cl, 1, 1, 8, 1, 0, "full")
    assert t["memory-bound ops"] == pytest.approx(8 * 32 * (2 * t1["forward"] + t1["backward"])
                                                  / A100.hbm_bandwidth)


def test_bus_bandwidth_and_megatron_layout():
    cl = P.cluster("A100", 64, nics_per_node=DGX_A100_COMPUTE_NICS)
    assert C.bus_bandwidth(cl, 8, False) == A100.nvlink_per_direction
    # a group with all 8 GPUs of each node shares its 8 HDR ports: 200 GB/s < NVLink
    assert C.bus_bandwidth(cl, 8, True) == pytest.approx(8 * INFINIBAND_HDR)
    assert C.bus_bandwidth(cl, 1, True) == pytest.approx(INFINIBAND_HDR)   # one per node
    g = C._groups(cl, 8, 2, 4)
    assert g == {"tp": (8, False), "dp": (1, True), "pp": (1, True)}
    assert C._groups(cl, 1, 1, 64)["dp"] == (8, True)
    assert C._groups(cl, 16, 1, 4)["tp"] == (8, True)
    assert C._groups(P.cluster("A100", 8), 2, 2, 2) == {"tp": (2, False), "dp": (2, False),
                                                        "pp": (1, False)}


def test_tensor_parallel_across_nodes_is_priced_and_loses(gpt3_1024):
    ps = gpt3_1024
    assert "tensor parallel across nodes" not in ps.reasons()
    t16, t8 = ps.best(tp=16), ps.best(tp=8)
    assert t16 is not None and t16.fits            # it fits: only its cost rules it out
    assert ps.relative_time(t16) > 1.1 and ps.relative_time(ps.best(tp=32)) > 1.3
    assert ps.ranked[0].tp <= 8 and ps.relative_time(t8) < 1.05
    # its all-reduces go over both nodes' 8 HDR ports, not NVLink
    tr = C.plan_time(C.GPT3, ps.cluster, 16, t16.pp, t16.dp, t16.microbatch, t16.zero,
                     t16.recompute, chunks=t16.chunks)
    from labkit.parallel.tensor_parallel import layer_comm_bytes
    lps = 96 // t16.pp
    sent = t16.microbatches * lps * layer_comm_bytes(2048, t16.microbatch, 12288, 16)
    sent *= 1.5 if t16.recompute == "full" else 1
    assert tr["tensor-parallel comm"] == pytest.approx(sent / (8 * INFINIBAND_HDR))


def test_zero_2_and_3_are_refused_with_a_pipeline(gpt3_1024):
    ps = gpt3_1024
    assert not [p for p in ps.ranked if p.zero >= 2 and p.pp > 1]
    refused = [p for p in ps.rejected if p.rejected_by == "ZeRO with pipeline"]
    assert refused and all(p.zero >= 2 and p.pp > 1 for p in refused)
    assert "DeepSpeed" in refused[0].reason
    assert {p.zero for p in ps.ranked if p.pp == 1} >= {2, 3}   # fine without a pipeline


def test_zero_2_and_3_are_charged_per_microbatch():
    model, cl = C.GPTModel(24, 2304, 24, batch=512), P.cluster("A100", 32)
    d, t, p, b = 32, 1, 1, 2
    m = 512 // (d * b)
    dp = {z: C.plan_time(model, cl, t, p, d, b, z)["data-parallel comm"] for z in range(4)}
    assert dp[0] == dp[1]
    assert dp[2] == pytest.approx((m + 1) / 2 * dp[1]) and m == 8
    assert dp[3] == pytest.approx(3 * m / 2 * dp[1])
    # with one micro-batch the volumes are ZeRO's, counted by running the collectives
    psi = int(model.params)
    one = {z: C._dp_bytes(model, 1, 1, d, 1, z) for z in range(4)}
    for z, name in ((1, "zero1"), (2, "zero2"), (3, "zero3")):
        ratio = zero.step_traffic(name, psi, d).psi_units / zero.step_traffic("ddp", psi, d).psi_units
        assert one[z] / one[0] == pytest.approx(ratio, rel=1e-6)


def test_misfits_are_rejected_with_the_reason():
    gpt3 = C.GPTModel(96, 12288, 96, batch=1536, name="GPT-3")
    ps = P.plan(gpt3, P.cluster("A100", 64))
    reasons = ps.reasons()
    assert {"memory", "heads", "GPU count", "ZeRO with pipeline"} <= set(reasons) <= set(P.REASONS)
    one = [p for p in ps.rejected if p.tp == 1 and p.pp == 1 and p.zero == 0
           and p.recompute == "full" and p.microbatch == 1][0]
    assert one.reason.startswith("memory") and one.memory > 16 * gpt3.params   # > 2.8 TB
    # data parallelism alone holds GPT-3 on 64 GPUs only with ZeRO-3 (16Ψ/64 = 44 GB)
    assert {p.zero for p in ps.ranked if p.tp * p.pp == 1} == {3}
    best = ps.ranked[0]
    assert best.fits and 0 < best.mfu < 0.6


def test_plan_memory_matches_estimator_parts():
    m = C.GPTModel(48, 8192, 64, batch=1536)
    mem = C.plan_memory(m, 8, 2, 32, 1, 0, "full")
    local = -(-int(m.params) // 16)
    assert mem["params"] + mem["grads"] + mem["optimizer"] == pytest.approx(16 * local, rel=1e-6)
    # 2 in flight (p=2) × 24 layers × 2sbh + one layer without recomputation
    sbh = 2048 * 8192
    assert mem["activations"] == pytest.approx(2 * 24 * 2 * sbh + sbh * (10 + 24 / 8 + 5 * 64 * 2048 / (8192 * 8)))


def test_plan_memory_with_fewer_microbatches_than_stages():
    # m = 64 / (16 · 1) = 4 < p = 8: the first stage holds 4 micro-batches, not p = 8
    m = C.GPTModel(48, 8192, 64, batch=64)
    mem = C.plan_memory(m, 8, 8, 16, 1, 0, "full")
    sbh, lps = 2048 * 8192, 48 // 8
    one_layer = activation_bytes_per_layer(2048, 1, 8192, 64, 8)
    assert mem["activations"] == pytest.approx(4 * lps * 2 * sbh + one_layer)
    assert mem["activations"] < 8 * lps * 2 * sbh + one_layer
    # interleaved, v = 2, m = 8 = p: stage 0 stashes min((p-1)·2 + (v-1)·p + 1, v·m) = 16
    # chunk-forwards of l/(p·v) = 3 layers (the 1F1B stash would be 8 of 6 layers: the same)
    m8 = C.GPTModel(48, 8192, 64, batch=128)
    inter = C.plan_memory(m8, 8, 8, 16, 1, 0, "full", chunks=2)
    assert inter["activations"] == pytest.approx(16 * 3 * 2 * sbh + one_layer)
    # with m = 16 the 1F1B stash stays at p = 8 micro-batches; interleaved it grows to 23
    m16 = C.GPTModel(48, 8192, 64, batch=256)
    assert C.plan_memory(m16, 8, 8, 16, 1, 0, "full", chunks=2)["activations"] == \
        pytest.approx(23 * 3 * 2 * sbh + one_layer)
    assert C.plan_memory(m16, 8, 8, 16, 1, 0, "full")["activations"] == \
        pytest.approx(8 * 6 * 2 * sbh + one_layer)


def test_advice_follows_the_real_reason(gpt3_1024):
    # 127 nodes = 1016 GPUs = 8·127: every (t, p) leaves a data-parallel size with the factor
    # 127, which divides no batch of 1536: nothing is rejected for memory
    ps = P.plan(C.GPT3, P.cluster("A100", 127 * 8))
    assert not ps.ranked and "memory" not in ps.reasons()
    assert set(ps.reasons()) <= {"GPU count", "batch", "heads"}
    text = " ".join(P.advice(ps))
    assert "memory is not the problem" in text and "add GPUs" not in text
    assert P.divisible_gpu_counts(C.GPT3, 8, 127) == (96, 128) and "96 nodes or 128 nodes" in text
    # 4 nodes: the plans that divide are all too big: now more or bigger GPUs is the advice
    small = P.plan(C.GPT3, P.cluster("A100", 32))
    assert not small.ranked and "memory" in small.reasons()
    assert "add GPUs, or use a GPU with more memory" in P.advice(small)[0]
    assert P.advice(gpt3_1024) == []


@pytest.mark.parametrize("call, word", [
    (lambda: C.GPTModel(0, 1024, 16), "layers"), (lambda: C.GPTModel(2, 1000, 16), "heads"),
    (lambda: P.cluster("B200", 8), "gpu"), (lambda: P.cluster("A100", 12, 8), "gpus_per_node"),
    (lambda: P.cluster("A100", 16, nics_per_node=0), "nics_per_node"),
    (lambda: P.plan(C.GPTModel(2, 64, 4), P.cluster(), efficiency=1.5), "efficiency"),
    (lambda: P.plan(C.GPTModel(2, 64, 4), P.cluster(), interleave=1), "interleave"),
])
def test_bad_arguments(call, word):
    with pytest.raises((ValueError, TypeError), match=word):
        call()


def test_plot_plans():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel.mp_plots import plot_plans
    fig = plot_plans(P.plan(C.GPTModel(24, 2304, 24, batch=512), P.cluster("A100", 32)), top=5)
    assert len(fig.axes[0].patches) == 5 and "MFU" in fig.axes[0].texts[0].get_text()
    matplotlib.pyplot.close("all")


def test_table1_comparison_rows_and_relative_time(comparison):
    assert [r.pub["gpus"] for r in comparison] == [row[6] for row in T.TABLE1]
    model, cl, _ = ROWS[3]
    ps = T.table1_planset(model, cl)
    mine = ps.best(tp=8, pp=1)
    r = comparison[3]
    assert r.mine == mine and r.rank == ps.rank_of(8, 1) and r.best == ps.ranked[0]
    assert r.time_vs_best == pytest.approx(mine.step_time / ps.ranked[0].step_time)
    assert ps.relative_time(ps.ranked[0]) == 1.0
    assert not math.isnan(r.estimate) and r.published == 43.0


def test_layer_comm_vs_compute_by_hand():
    gpt3 = C.GPTModel(96, 12288, 96, batch=1)
    cl = P.cluster("A100", 8)
    lc = C.layer_comm_vs_compute(gpt3, 8, cl)
    # 4 ring all-reduces of s·b·h bf16: 4 × 2·7/8 × 2048·12288·2 B = 352.3 MB
    assert lc.nbytes == pytest.approx(4 * 2 * 7 / 8 * 2048 * 12288 * 2)
    assert lc.intra_s == pytest.approx(lc.nbytes / A100.nvlink_per_direction)
    assert lc.inter_s == pytest.approx(lc.nbytes / INFINIBAND_HDR)
    assert lc.compute_s == pytest.approx(
        gpt3.flops("none") / 96 / 8 / (A100.peak("bf16") * C.DEFAULT_EFFICIENCY))
    # the notebook's numbers: 1.2 ms NVLink, 14.1 ms over one HDR port, 15.9 ms arithmetic
    assert (round(lc.intra_s * 1e3, 1), round(lc.inter_s * 1e3, 1), round(lc.compute_s * 1e3, 1)) \
        == (1.2, 14.1, 15.9)
    with pytest.raises(ValueError, match="efficiency"):
        C.layer_comm_vs_compute(gpt3, 8, cl, efficiency=0)
    with pytest.raises(TypeError, match="cl"):
        C.layer_comm_vs_compute(gpt3, 8, "A100")
