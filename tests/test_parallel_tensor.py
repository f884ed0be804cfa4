"""Tensor parallelism: sharded == dense to 1e-12 (float64), and the bytes each rank sends,
read from the collectives' logs, equal Shoeybi et al. (2019) and Korthikanti et al. (2022)."""
import numpy as np
import pytest

from labkit.parallel import tensor_parallel as tp_

RNG = np.random.default_rng(10)


def _mlp(s=6, h=8, f=32):
    return (RNG.normal(size=(s, h)), RNG.normal(size=(h, f)) / 3, RNG.normal(size=f),
            RNG.normal(size=(f, h)) / 5, RNG.normal(size=h))


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_column_and_row_parallel_equal_dense(t):
    x, w, b = RNG.normal(size=(5, 16)), RNG.normal(size=(16, 24)), RNG.normal(size=24)
    assert np.max(np.abs(tp_.column_parallel_linear(x, w, b, t).output - (x @ w + b))) < 1e-12
    w = RNG.normal(size=(16, 24))
    r = tp_.row_parallel_linear(x, w, b, t)
    assert np.max(np.abs(r.output - (x @ w + b))) < 1e-12
    # bias once, not t times; one all-reduce of 5·24 float64 = 960 bytes
    assert r.bytes_per_rank(0) == pytest.approx(2 * (t - 1) / t * 960)
    assert [c.op for c in r.comms] == ["all_reduce"]


@pytest.mark.parametrize("t", [1, 2, 4])
def test_megatron_mlp_forward_backward_equal_dense(t):
    x, w1, b1, w2, b2 = _mlp()
    dy = RNG.normal(size=(6, 8))
    ref = tp_.mlp_dense(x, w1, b1, w2, b2, dy)
    got = tp_.megatron_mlp(x, w1, b1, w2, b2, t, dy)
    assert np.max(np.abs(got.output - ref["y"])) < 1e-12
    for k in ("dx", "dw1", "db1", "dw2", "db2"):
        assert np.max(np.abs(got.extra[k] - ref[k])) < 1e-12, k
    # one all-reduce forward (g), one backward (f), each 2(t-1)/t of s·h·8 bytes
    assert [c.op for c in got.comms] == ["all_reduce", "all_reduce"]
    for r in range(t):
        assert got.bytes_per_rank(r) == pytest.approx(2 * tp_.ring_allreduce_bytes(6 * 8 * 8, t))


def test_mlp_gradient_matches_central_difference():
    x, w1, b1, w2, b2 = _mlp(3, 4, 8)
    dy = RNG.normal(size=(3, 4))
    got = tp_.megatron_mlp(x, w1, b1, w2, b2, 2, dy).extra["dw1"]
    eps, i, j = 1e-6, 1, 5
    wp, wm = w1.copy(), w1.copy()
    wp[i, j] += eps
    wm[i, j] -= eps
    num = (np.sum(tp_.mlp_dense(x, wp, b1, w2, b2)["y"] * dy)
           - np.sum(tp_.mlp_dense(x, wm, b1, w2, b2)["y"] * dy)) / (2 * eps)
    assert got[i, j] == pytest.approx(num, rel=1e-6)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_attention_by_heads_equals_dense(t):
    s, h, a = 7, 16, 4
    x = RNG.normal(size=(s, h))
    ws = [RNG.normal(size=(h, h)) / 4 for _ in range(4)]
    got = tp_.megatron_attention(x, *ws, heads=a, tp=t)
    assert np.max(np.abs(got.output - tp_.attention_dense(x, *ws, heads=a))) < 1e-12
    assert got.bytes_per_rank(0) == pytest.approx(tp_.ring_allreduce_bytes(s * h * 8, t))


@pytest.mark.parametrize("t", [2, 4])
def test_sequence_parallel_equals_dense_and_moves_allreduce_bytes(t):
    x, w1, b1, w2, b2 = _mlp(8, 8, 16)
    g, be = RNG.normal(size=8), RNG.normal(size=8)
    got = tp_.sequence_parallel_mlp(x, g, be, w1, b1, w2, b2, t)
    assert np.max(np.abs(got.output - tp_.ln_mlp_dense(x, g, be, w1, b1, w2, b2))) < 1e-12
    assert [c.op for c in got.comms] == ["all_gather", "reduce_scatter"]
    n = 8 * 8 * 8
    for c in got.comms:
        assert c.bytes_per_rank[0] == pytest.approx((t - 1) / t * n)
    # Korthikanti §4.2.2: all-gather + reduce-scatter = one all-reduce's bytes
    assert got.bytes_per_rank(0) == pytest.approx(tp_.ring_allreduce_bytes(n, t))


def test_layer_comm_count():
    # one GPT layer (s=2048, b=1, h=12288, fp16, t=8): 4 all-reduces of 2·s·h bytes
    n = 2048 * 12288 * 2
    assert tp_.layer_comm_bytes(2048, 1, 12288, 8) == pytest.approx(4 * 2 * 7 / 8 * n)
    # simulated: MLP (1 fwd + 1 bwd) + attention (1 fwd, and its backward mirrors it)
    x, w1, b1, w2, b2 = _mlp(4, 8, 16)
    sim = tp_.megatron_mlp(x, w1, b1, w2, b2, 4, RNG.normal(size=(4, 8))).bytes_per_rank(0)
    assert 2 * sim == pytest.approx(tp_.layer_comm_bytes(4, 1, 8, 4, bytes_per_element=8))


@pytest.mark.parametrize("call, word", [
    (lambda: tp_.row_parallel_linear(np.ones((2, 6)), np.ones((6, 3)), tp=4), "in_features"),
    (lambda: tp_.megatron_attention(np.ones((2, 8)), *[np.ones((8, 8))] * 4, heads=2, tp=4),
     "heads"),
    (lambda: tp_.column_parallel_linear(np.ones((2, 6)), np.ones((5, 4))), "w"),
    (lambda: tp_.megatron_mlp(np.ones((2, 4)), np.ones((4, 8)), np.ones(8), np.ones((8, 4)),
                              np.ones(4), tp=0), "tp"),
])
def test_bad_arguments(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_megatron_demo_equals_dense_and_counts_papers_bytes():
    d = tp_.megatron_demo()
    assert d.activation_bytes == 8 * 16 * 8
    assert [r.tp for r in d.mlp] == [1, 2, 4, 8]
    for r in d.mlp:
        assert r.max_error < 1e-12
        # Shoeybi §3: one all-reduce forward (g), one backward (f): 2 × 2(t-1)/t × 1024 B
        assert r.bytes_per_gpu == r.formula_bytes == 2 * 2 * (r.tp - 1) / r.tp * 1024
    assert [r.bytes_per_gpu for r in d.mlp] == [0, 2048, 3072, 3584]
    assert d.attention.max_error < 1e-12 and d.attention.comms[0][0] == "all_reduce"
    assert d.attention.bytes_per_gpu == d.attention.formula_bytes == 1536
    for r in d.sequence_parallel:
        assert r.max_error < 1e-12
        assert [op for op, _ in r.comms] == ["all_gather", "reduce_scatter"]
        # Korthikanti §4.2.2: (t-1)/t each, together one all-reduce's bytes
        assert [b for _, b in r.comms] == [(r.tp - 1) * 1024 // r.tp] * 2
        assert r.bytes_per_gpu == r.formula_bytes
    # a different seed draws different layers, still exact
    other = tp_.megatron_demo((2,), (2,), seed=1)
    assert other.mlp[0].max_error < 1e-12 and other.mlp[0].bytes_per_gpu == 2048
    with pytest.raises(ValueError, match="hidden"):
        tp_.megatron_demo(hidden=0)
