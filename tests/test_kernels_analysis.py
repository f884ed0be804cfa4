"""Trace counts equal their closed forms; budgets fail wasteful kernels."""
import labkit  # noqa: F401
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import models, ops
from labkit.kernels.analysis import (BudgetExceeded, element_counts, element_owner, enforce,
                                     summarize, traffic, warp_instructions)
from labkit.kernels.tracer import READ, SHARED, WRITE, run_traced

rng = np.random.default_rng(7)


@pytest.mark.parametrize("variant", [v for v in ops.MATMULS if v != "register2d"])
@pytest.mark.parametrize("m,k,n", [(19, 23, 13), (8, 16, 8)])
def test_matmul_traffic_matches_closed_form(variant, m, k, n):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    trace = ops.matmul(a, b, variant=variant, tile=8, rows=2).trace
    t = traffic(trace)
    want = models.matmul_traffic(m, n, k, variant, tile=8, rows=2)
    assert t.per_array["a"]["reads"] == want.a_reads
    assert t.per_array["b"]["reads"] == want.b_reads
    assert t.per_array["c"]["writes"] == want.c_writes
    assert t.global_reads == want.global_reads            # a's and b's, nothing else
    assert t.shared_reads == want.shared_reads
    assert t.shared_writes == want.shared_writes
    assert element_counts(trace, "a").max() == want.max_reads_a
    assert element_counts(trace, "b").max() == want.max_reads_b


def test_tiled_reads_each_element_n_over_tile_times():
    a = rng.standard_normal((16, 16)).astype(np.float32)
    naive = ops.matmul(a, a, variant="naive", tile=8).trace
    tiled = ops.matmul(a, a, variant="tiled", tile=8).trace
    assert (element_counts(naive, "a") == 16).all()
    assert (element_counts(tiled, "a") == 16 // 8).all()
    enforce(tiled, max_reads_per_element={"a": 2, "b": 2})
    with pytest.raises(BudgetExceeded, match=r"read 16 times \(budget 2\)"):
        enforce(naive, max_reads_per_element={"a": 2, "b": 2})


@pytest.mark.parametrize("variant", ["interleaved", "strided", "shared"])
@pytest.mark.parametrize("n,block", [(300, 64), (33, 32)])
def test_reduction_traffic_matches_closed_form(variant, n, block):
    x = rng.standard_normal(n).astype(np.float32)
    t = traffic(ops.reduce_sum(x, variant=variant, block=block).trace)
    want = models.reduction_traffic(n, variant, block)
    assert (t.global_reads, t.global_writes, t.shared_reads, t.shared_writes) == (
        want.global_reads, want.global_writes, want.shared_reads, want.shared_writes)


def test_atomic_reduction_counts():
    t = traffic(ops.reduce_sum(np.ones(77, np.float32), variant="atomic").trace)
    assert (t.global_reads, t.global_atomics, t.global_writes) == (77, 77, 0)


@pytest.mark.parametrize("stride,ways", [(1, 1), (2, 2), (4, 4), (8, 8), (16, 16),
                                         (32, 32), (33, 1)])
def test_shared_stride_bank_conflicts(stride, ways):
    trace = run_traced(lib.shared_stride(32, stride), 2, 32,
                       np.arange(64, dtype=np.float32), np.zeros(64, np.float32))
    s = summarize(trace)
    # one write and one read instruction per block: lockstep threads must share site ids
    assert s.shared_requests == 4 and len(set(trace.sites)) == len(trace.sites)
    assert s.max_conflict_ways == ways
    assert s.conflict_replays == 2 * 2 * (ways - 1)  # 2 blocks x (write + read)


def test_broadcast_read_is_not_a_conflict():
    def same_word(cuda):
        def kernel(out):
            buf = cuda.shared.array(32, cuda.float32)
            if cuda.threadIdx.x == 0:
                buf[0] = 3.0
            cuda.syncthreads()
            out[cuda.threadIdx.x] = buf[0]
        return kernel
    out = np.zeros(32, np.float32)
    s = summarize(run_traced(same_word, 1, 32, out))
    assert s.max_conflict_ways == 1 and (out == 3).all()


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (4, 16), (8, 32), (32, 32)])
def test_coalescing_sectors_per_warp_read(stride, sectors):
    a = np.arange(32 * 64, dtype=np.float32)
    trace = run_traced(lib.strided_copy, 1, 32, a, np.zeros(32, np.float32), stride)
    wi = warp_instructions(trace)
    reads = wi.op == READ
    assert wi.sectors[reads].tolist() == [sectors]
    assert wi.ideal_sectors[reads].tolist() == [4]
    assert wi.sectors[wi.op == WRITE].tolist() == [4]


def test_transposed_mapping_is_uncoalesced():
    a = rng.standard_normal((32, 32)).astype(np.float32)
    good = summarize(ops.add_matrices(a, a, block=(32, 4)).trace)
    bad = summarize(ops.add_matrices(a, a, transposed=True, block=(32, 4)).trace)
    assert good.sectors_per_request == 4          # 32 lanes x 4 bytes = 4 sectors
    assert bad.sectors_per_request == 32          # each lane in its own row
    with pytest.raises(BudgetExceeded, match="not coalesced"):
        enforce(ops.add_matrices(a, a, transposed=True, block=(32, 4)).trace,
                max_sectors_per_request=4)


def test_divergence_active_masks():
    trace = ops.elementwise(lib.branchy, np.ones(64, np.float32)).trace
    wi = warp_instructions(trace)
    even = 0x55555555
    assert set(wi.mask.tolist()) == {even, even << 1}
    assert summarize(trace).simt_efficiency == 0.5
    straight = summarize(ops.elementwise(lib.add_ten, np.ones(64, np.float32)).trace)
    assert straight.simt_efficiency == 1.0


def test_tail_warp_has_partial_mask():
    trace = ops.elementwise(lib.add_ten, np.ones(40, np.float32), block=64).trace
    wi = warp_instructions(trace)
    assert sorted(wi.active.tolist()) == [8, 8, 32, 32]
    assert set(wi.mask[wi.warp == 1].tolist()) == {0xFF}


def test_interleaved_reduction_diverges_more_than_sequential():
    x = np.ones(256, np.float32)
    inter = summarize(ops.reduce_sum(x, variant="interleaved", block=128).trace)
    seq = summarize(ops.reduce_sum(x, variant="shared", block=128).trace)
    strided = summarize(ops.reduce_sum(x, variant="strided", block=128).trace)
    assert inter.simt_efficiency < seq.simt_efficiency
    assert seq.max_conflict_ways == 1 and strided.max_conflict_ways == 4


def test_conv_shared_reads_each_element_at_most_twice():
    a = rng.standard_normal(100).astype(np.float32)
    w = np.ones(5, np.float32)
    shared = ops.conv1d(a, w).trace
    naive = ops.conv1d(a, w, shared=False).trace
    assert element_counts(shared, "a").max() == 2
    assert element_counts(naive, "a").max() == 5
    assert traffic(shared).global_reads < traffic(naive).global_reads


def test_softmax_reads_per_element():
    x = rng.standard_normal((4, 9)).astype(np.float32)
    assert (element_counts(ops.softmax(x, variant="naive").trace, "x") == 3).all()
    assert (element_counts(ops.softmax(x, variant="online").trace, "x") == 2).all()


def test_element_owner_maps_threads():
    trace = ops.add(np.ones(70, np.float32), np.ones(70, np.float32)).trace
    assert element_owner(trace, "out").tolist() == list(range(70))
    assert element_owner(trace, "out", by="block").tolist() == [i // 32 for i in range(70)]
    with pytest.raises(ValueError, match="by"):
        element_owner(trace, "out", by="lane")
    with pytest.raises(ValueError, match="no array"):
        element_counts(trace, "zzz")
    shared = ops.reduce_sum(np.ones(64, np.float32)).trace
    assert element_counts(shared, "buf", WRITE, SHARED).sum() == 2 * 64 - 1


def test_enforce_reports_every_broken_limit():
    a = rng.standard_normal((8, 8)).astype(np.float32)
    trace = ops.matmul(a, a, variant="naive").trace
    with pytest.raises(BudgetExceeded) as err:
        enforce(trace, max_global_reads=10, max_global_writes=10, max_shared_reads=-1)
    assert "global reads" in str(err.value) and "global writes" in str(err.value)
    assert enforce(trace, max_global_reads=2 * 8 ** 3).traffic.global_reads == 2 * 8 ** 3


def test_model_kernel_cost_intensity():
    assert models.kernel_cost("vector add", 1000).intensity == pytest.approx(1 / 12)
    naive = models.kernel_cost("matmul naive", 1024).intensity
    tiled = models.kernel_cost("matmul tiled 32", 1024).intensity
    assert naive == pytest.approx(2 * 1024 ** 3 / (4 * (2 * 1024 ** 3 + 1024 ** 2)))
    assert tiled == pytest.approx(2 * 1024 ** 3 / (4 * (2 * 1024 ** 2 * 32 + 1024 ** 2)))
    with pytest.raises(ValueError, match="kernel"):
        models.kernel_cost("matmul magic", 8)
    with pytest.raises(ValueError, match="variant"):
        models.matmul_traffic(4, 4, 4, "magic")


def test_element_read_maps_share_one_colour_scale():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.kernels import plots

    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 7)).astype(np.float32)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    traces = {v: ops.matmul(a, b, variant=v, tile=4).trace for v in ("coalesced", "tiled")}
    fig = plots.plot_element_reads(traces, "a")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert [im.get_array().shape for im in images] == [(9, 7), (9, 7)]
    assert images[0].get_clim() == images[1].get_clim()
    # the coalesced kernel reads each a[i, k] once per output column; tiling cuts that
    assert images[0].get_array().max() == 5 and images[1].get_array().max() < 5
    with pytest.raises(ValueError, match="at least one kernel"):
        plots.plot_element_reads({}, "a")


SMALL_2D = dict(bm=16, bn=16, bk=8, tm=2, tn=2)


@pytest.mark.parametrize("m,k,n", [(19, 23, 13), (32, 16, 32), (5, 3, 40)])
def test_register2d_traffic_matches_closed_form(m, k, n):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    run = ops.matmul(a, b, variant="register2d", blocked=SMALL_2D)
    np.testing.assert_allclose(run.value, a @ b, rtol=1e-4, atol=1e-4)
    t = traffic(run.trace)
    want = models.matmul_traffic(m, n, k, "register2d", blocked=SMALL_2D)
    assert t.per_array["a"]["reads"] == want.a_reads
    assert t.per_array["b"]["reads"] == want.b_reads
    assert t.per_array["c"]["writes"] == want.c_writes
    assert (t.shared_reads, t.shared_writes) == (want.shared_reads, want.shared_writes)
    assert element_counts(run.trace, "a").max() == want.max_reads_a


def test_register2d_is_conflict_free_and_its_loads_coalesce():
    a = rng.standard_normal((32, 32)).astype(np.float32)
    trace = ops.matmul(a, a, variant="register2d", blocked=SMALL_2D).trace
    s = summarize(trace)
    assert s.max_conflict_ways == 1     # padded a tile; tm <= bn / tn: a warp's a reads
    assert s.coalescing_efficiency == pytest.approx(1.0)
    # ~5x fewer shared reads per FMA than the tiled kernel: (tm + tn) / (tm tn) vs 2
    tiled = summarize(ops.matmul(a, a, variant="tiled", tile=8).trace)
    assert tiled.traffic.shared_reads / s.traffic.shared_reads == pytest.approx(2 / 1)


@pytest.mark.parametrize("blocked, ways", [
    (SMALL_2D, 1),
    (dict(bm=64, bn=32, bk=8, tm=8, tn=8), 2),       # tm = 8 > bn / tn = 4
    (dict(bm=64, bn=16, bk=8, tm=8, tn=4), 2),       # tm = 8 > bn / tn = 4
])
def test_register2d_a_reads_conflict_only_when_tm_exceeds_the_threads_along_a_row(blocked, ways):
    """A thread's tm rows of a are adjacent words; a warp spans 32 / (bn / tn) values of ty,
    whose reads are tm words apart: distinct banks while tm <= bn / tn, 2-way beyond."""
    a = rng.standard_normal((32, 32)).astype(np.float32)
    run = ops.matmul(a, a, variant="register2d", blocked=blocked)
    np.testing.assert_allclose(run.value, a @ a, rtol=1e-4, atol=1e-4)
    assert summarize(run.trace).max_conflict_ways == ways


def test_conflict_free_pad_search():
    assert lib._conflict_free_pad(128, 8, 256) == 4      # the [8][132] a tile at 128 x 128
    assert lib._conflict_free_pad(16, 4, 64) == 8


@pytest.mark.parametrize("n,block,blocks", [(1000, 64, 3), (300, 32, 2), (5, 32, 1)])
def test_fast_reduction_traffic_matches_closed_form(n, block, blocks):
    x = rng.standard_normal(n).astype(np.float32)
    run = ops.reduce_sum(x, variant="fast", block=block, blocks=blocks)
    np.testing.assert_allclose(run.value, [x.sum()], rtol=1e-5, atol=1e-5)
    t = traffic(run.trace)
    want = models.fast_reduction_traffic(n, block, blocks)
    assert (t.global_reads, t.global_writes, t.global_atomics, t.shared_reads,
            t.shared_writes) == (want.global_reads, want.global_writes, want.global_atomics,
                                 want.shared_reads, want.shared_writes)
    assert run.trace.shuffles == models.fast_reduction_shuffles(block, blocks)
    assert (element_counts(run.trace, "a") == 1).all()
    assert summarize(run.trace).coalescing_efficiency == pytest.approx(1.0)


def test_fast_reduction_grid_is_sized_for_the_work():
    assert ops.fast_reduction_blocks(2 ** 28, 256) == 2 ** 28 // (256 * 8)
    assert ops.fast_reduction_blocks(10, 256) == 1


def test_dram_model_reuses_tiles_within_a_wave():
    n = 4096
    requests = models.matmul_traffic(n, n, n, "tiled", 32).global_accesses * 4
    dram = models.dram_bytes(n, n, n, "tiled", "H100")
    assert dram < requests / 3                         # L2 serves the repeats of a wave
    assert dram >= 4 * 3 * n * n                       # never below the compulsory bytes
    # one wave (small n): every input comes from DRAM exactly once
    assert models.dram_bytes(256, 256, 256, "tiled", "H100") == 4 * 3 * 256 ** 2
    # hand count for a 2 x 2-block grid whose wave holds everything
    assert models.dram_bytes(64, 64, 64, "tiled", "A100", dict(tile=32)) == 4 * 3 * 64 ** 2


def test_tiled_matmul_crosses_the_h100_fp32_ridge_under_the_dram_model():
    from labkit.hardware import gpu
    ridge = gpu("H100").ridge("fp32")
    cost = lambda n: models.kernel_cost("matmul tiled 32", n, "H100").intensity  # noqa: E731
    assert cost(96) < ridge < cost(128)                # the exercise's crossing exists
    assert models.kernel_cost("matmul tiled 32", 4096).intensity < ridge  # requests: never
    assert cost(4096) > ridge


def test_ladder_prediction_rises_and_names_its_limiter():
    preds = [models.predict_matmul(4096, v, "H100") for v in models.LADDER]
    speeds = [p.tflops for p in preds]
    assert speeds == sorted(speeds)                    # each rung faster than the last
    assert [p.limiter for p in preds[:4]] == ["L1", "L1", "shared memory", "shared memory"]
    # tiled: 2 shared wavefronts per warp FMA, 4 warp FMAs per clock -> 1/8 of FP32 peak
    assert preds[2].tflops == pytest.approx(67 / 8, rel=0.01)
    assert preds[-1].tflops <= 67.0 + 1e-9
    assert models.predict_reduction(2 ** 28, "H200") == pytest.approx(4 * 2 ** 28 / 4.8e12)
