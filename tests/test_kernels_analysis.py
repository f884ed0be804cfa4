"""Trace counts equal their closed forms; budgets fail wasteful kernels."""
import labkit  # noqa: F401
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels.library.matmul import _conflict_free_pad
from labkit.kernels import models, ops
from labkit.kernels.analysis import (BudgetExceeded, busiest_thread_accesses,
                                     conflict_replays, element_counts, element_owner, enforce,
                                     format_races, races, shuffle_instructions,
                                     simt_efficiency, summarize, thread_accesses,
                                     total_sectors, traffic, warp_instructions)
from labkit.kernels.registry import MATMUL, REDUCTION, variants
from labkit.kernels.trace import LOCAL, READ, SHARED, WRITE
from labkit.kernels.tracer import run_traced
from mutants import mutant

rng = np.random.default_rng(7)


@pytest.mark.parametrize("variant", variants(MATMUL, blocked=False))
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


@pytest.mark.parametrize("variant", variants(REDUCTION, shared_tree=True))
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
    assert _conflict_free_pad(128, 8, 256) == 4      # the [8][132] a tile at 128 x 128
    assert _conflict_free_pad(16, 4, 64) == 8


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


# ---- local memory -----------------------------------------------------------------------

def _local_reads(pattern: str, dtype=np.float32):
    """Each lane fills a local array, then reads it at an index the compiler cannot know:
    "same" index in every lane, "lane" (lane L reads index L); or "one": lane 0 alone
    fills and reads it. A runtime index puts the array in local memory (numba-cuda 0.30's
    PTX has st.local/ld.local for all three)."""
    def factory(cuda):
        def kernel(out):
            t = cuda.threadIdx.x
            loc = cuda.local.array(32, dtype)
            if pattern == "one":
                if t == 0:
                    for j in range(out.size):
                        loc[j] = j
                    out[0] = loc[out.size % 7]
            else:
                for j in range(32):
                    loc[j] = t + j
                out[t] = loc[out.size % 7 if pattern == "same" else t]
        return kernel
    return factory


@pytest.mark.parametrize("pattern, dtype, fill, read", [
    ("same", np.float32, 4, 4),     # 32 lanes, one index: 32 consecutive words, 4 sectors
    ("same", np.float64, 8, 8),     # two words per lane: two rows of 32 words
    ("lane", np.float32, 4, 32),    # lane L's word L lies 33 words past lane L - 1's
    ("one", np.float32, 1, 1),      # one lane: a sector for each access
])
def test_local_memory_is_interleaved_across_the_warp(pattern, dtype, fill, read):
    trace = run_traced(_local_reads(pattern, dtype), 1, 32, np.zeros(32, np.float32))
    wi = warp_instructions(trace, LOCAL)
    writes, reads = wi.sectors[wi.op == WRITE], wi.sectors[wi.op == READ]
    assert writes.tolist() == [fill] * 32 and reads.tolist() == [read]
    assert summarize(trace).local_sectors == 32 * fill + read


def test_constant_indexed_local_arrays_are_registers_not_traffic():
    """The register-blocked kernels index their local arrays with unrolled constants only:
    registers (ptx_report finds no LDL/STL), recorded but no traffic. The tracer reads
    only ``for ... in range(constants)`` as constant: the same loop counted with a while
    makes acc local memory to it (conservative: NVVM unrolls that loop too)."""
    a = rng.standard_normal((16, 16)).astype(np.float32)
    trace = ops.matmul(a, a, variant="register2d", blocked=SMALL_2D).trace
    local = {x.name: x.registers for x in trace.arrays if x.space == LOCAL}
    assert local == {"acc": True, "ra": True, "rb": True}
    s = summarize(trace)
    assert (s.local_requests, s.local_sectors, s.total_sectors) == (0, 0, s.sectors)
    assert s.traffic.register_accesses == np.count_nonzero(trace.select(space=LOCAL)) > 0
    assert element_counts(trace, "acc", WRITE, LOCAL).sum() > 0       # still in the trace
    fn = lib.matmul_register_blocked(8, 2)
    grid, block = (2, 2), (8, 4)
    ok = run_traced(fn, grid, block, a, a, np.zeros_like(a))
    assert summarize(ok).local_sectors == 0
    counted = mutant(fn, "for r in range(rows):\n    acc[r] = 0.0",
                     "r = 0\nwhile r < rows:\n    acc[r] = 0.0\n    r += 1")
    out = np.zeros_like(a)
    spilled = summarize(run_traced(counted, grid, block, a, a, out))
    np.testing.assert_allclose(out, a @ a, rtol=1e-4, atol=1e-4)
    assert spilled.local_sectors > 0 and spilled.total_sectors > summarize(ok).total_sectors


def thread0_local_copy(cuda):
    """A wrong 5.2: thread (0, 0) of block (0, 0) copies a and b into local arrays, then
    computes all of c from there (each element of a and b read once from global memory)."""
    def kernel(a, b, c):
        if (cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0 and cuda.blockIdx.x == 0
                and cuda.blockIdx.y == 0):
            la = cuda.local.array(512, cuda.float32)
            lb = cuda.local.array(512, cuda.float32)
            m, n_k = a.shape
            n = b.shape[1]
            for i in range(m):
                for k in range(n_k):
                    la[i * n_k + k] = a[i, k]
            for k in range(n_k):
                for j in range(n):
                    lb[k * n + j] = b[k, j]
            for i in range(m):
                for j in range(n):
                    acc = 0.0
                    for k in range(n_k):
                        acc += la[i * n_k + k] * lb[k * n + j]
                    c[i, j] = acc
    return kernel


def test_a_local_copy_by_one_thread_is_expensive_not_cheap():
    m, k, n = 9, 11, 13
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    grid, block = (2, 2), (8, 8)
    c = np.zeros((m, n), np.float32)
    trace = run_traced(thread0_local_copy, grid, block, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert element_counts(trace, "a").max() == 1        # the old budget cannot tell
    # one lane per instruction: a sector per access. Global: a, b once, c once; local:
    # the copies written once, each read n (la) or m (lb) times
    want = 2 * (m * k + k * n) + 2 * m * n * k + m * n
    assert total_sectors(trace) == want == 3175
    assert busiest_thread_accesses(trace) == want        # all of it in one thread
    ref = run_traced(lib.matmul_tiled(8), grid, block, a, b, np.zeros_like(c))
    # its busiest thread: 2 phases x (a and b loaded, stored in sa and sb, 2 x 8 reads of
    # them), then c
    assert total_sectors(ref) == 143 and busiest_thread_accesses(ref) == 2 * (4 + 2 * 8) + 1
    with pytest.raises(BudgetExceeded, match=r"3175 sectors of global and local memory "
                       r"traffic \(budget 286; 2816 of them local\).*one thread made 3175 "
                       r"memory accesses \(budget 164 per thread\)"):
        enforce(trace, max_total_sectors=2 * total_sectors(ref),
                max_thread_accesses=4 * busiest_thread_accesses(ref))
    enforce(ref, max_total_sectors=2 * total_sectors(ref),
            max_thread_accesses=4 * busiest_thread_accesses(ref))


# ---- total work ----------------------------------------------------------------------

def test_total_work_helpers_match_hand_counts():
    trace = ops.add(np.ones(100, np.float32), np.ones(100, np.float32), block=32).trace
    # per array: 3 full warps x 4 sectors + 4 lanes (16 bytes) in 1 sector; a, b and out
    assert total_sectors(trace) == 3 * (3 * 4 + 1) == summarize(trace).total_sectors
    per_thread = thread_accesses(trace)
    assert per_thread.shape == (4, 32)
    assert per_thread.reshape(-1).tolist() == [3] * 100 + [0] * 28
    assert thread_accesses(trace, spaces=(SHARED,)).sum() == 0
    assert busiest_thread_accesses(trace) == 3
    # stride 4: 4-way, 3 replays per instruction; 2 blocks x (write + read)
    strided = run_traced(lib.shared_stride(32, 4), 2, 32, np.arange(64, dtype=np.float32),
                         np.zeros(64, np.float32))
    assert conflict_replays(strided) == 2 * 2 * 3 == summarize(strided).conflict_replays
    with pytest.raises(BudgetExceeded, match=r"12 shared-memory bank-conflict replays "
                       r"\(budget 0\)"):
        enforce(strided, max_conflict_replays=0)


def test_simt_efficiency_counts_warp_shuffles():
    """reduce_warp on 128 elements in 2 blocks of 64: per block 2 full loads, 2 warps x 5
    full shuffles, then lane 0 of each warp writes its sum, thread 0 reads 2 sums and
    writes out: 5 one-lane instructions. Without the shuffles: 3 % ... 31 %."""
    trace = ops.reduce_sum(np.ones(128, np.float32), variant="warp", block=64).trace
    sh = shuffle_instructions(trace)
    assert len(sh) == 2 * 2 * 5 and set(sh.active.tolist()) == {32}
    want = (2 + 10 + 5 / 32) / 17
    assert simt_efficiency(trace) == pytest.approx(want) == summarize(trace).simt_efficiency
    memory_only = warp_instructions(trace)
    assert np.mean(memory_only.active / memory_only.warp_threads) == pytest.approx(
        (2 + 5 / 32) / 7)
    # labkit's fast reduction (shuffles throughout) is no longer below the shared tree
    x = np.ones(300, np.float32)
    fast = summarize(ops.reduce_sum(x, variant="fast", block=64, blocks=2).trace)
    tree = summarize(ops.reduce_sum(x, variant="shared", block=64).trace)
    assert fast.simt_efficiency > tree.simt_efficiency
    with pytest.raises(BudgetExceeded, match=r"SIMT efficiency 41% \(at least 90%\)"):
        enforce(ops.reduce_sum(x, variant="shared", block=64).trace, min_simt_efficiency=0.9)


# ---- 64-bit shared accesses -----------------------------------------------------------

def _shared_strided(stride: int, dtype):
    def factory(cuda):
        def kernel(out):
            buf = cuda.shared.array(64, dtype)
            t = cuda.threadIdx.x
            buf[t * stride % 64] = t
            cuda.syncthreads()
            out[t] = buf[t * stride % 64]
        return kernel
    return factory


@pytest.mark.parametrize("dtype, stride, requests, least, ways", [
    (np.float64, 1, 2, 2, 1),   # words 0..63: 2 per bank, the fewest 256 bytes can take
    (np.float64, 2, 4, 2, 2),   # words 4k, 4k + 1: 16 banks of 4 words, 2-way
    (np.float32, 2, 2, 1, 2),   # for comparison: 4-byte words 2 apart, 2-way
    (np.float32, 1, 1, 1, 1),
])
def test_64_bit_shared_accesses_count_both_words(dtype, stride, requests, least, ways):
    trace = run_traced(_shared_strided(stride, dtype), 1, 32, np.zeros(32))
    wi = warp_instructions(trace, SHARED)
    assert wi.requests.tolist() == [requests] * 2          # the write and the read
    assert wi.min_requests.tolist() == [least] * 2
    assert wi.ways.tolist() == [ways] * 2
    s = summarize(trace)
    assert s.max_conflict_ways == ways
    assert s.conflict_replays == conflict_replays(trace) == 2 * (requests - least)


# ---- races --------------------------------------------------------------------------

def unrolled_last_warp(syncwarp: bool):
    """Harris's last-warp unroll (each block's sum of 64 values; warp 0 finishes without
    syncthreads), written as a loop; ``syncwarp`` puts cuda.syncwarp() between each step's
    reads and its write and after the write, as the CUDA guide asks since Volta (a right
    answer to exercise 5.1 then: tests/test_ch05_checks.py)."""
    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t, i = cuda.threadIdx.x, cuda.grid(1)
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            if t < 32:
                s = 32
                while s > 0:
                    v = buf[t] + buf[t + s]
                    if syncwarp:
                        cuda.syncwarp()
                    buf[t] = v
                    if syncwarp:
                        cuda.syncwarp()
                    s //= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0]
        return kernel
    return factory


# The sequential tree where each idle thread returns instead of waiting: later barriers
# wait only for the threads still running.
early_exit_tree = mutant(lib.reduce_shared(64), "if t < s:\n    buf[t] += buf[t + s]",
                         "if t >= s:\n    return\nbuf[t] += buf[t + s]")


def _line(factory, text):
    """Source line of the first line of ``factory`` containing ``text``."""
    import inspect
    lines, first = inspect.getsourcelines(factory)
    return first + next(k for k, line in enumerate(lines) if text in line)


def test_the_last_warp_unrolled_without_syncwarp_is_a_race():
    a = rng.standard_normal(64).astype(np.float32)
    factory = unrolled_last_warp(False)
    found = races(run_traced(factory, 1, 64, a, np.zeros(1, np.float32)))
    # each of buf[1..31] is written by its lane and read by lower lanes in one interval
    assert sorted(r.element for r in found) == [(e,) for e in range(1, 32)]
    assert all(r.same_warp and r.array == "buf" and r.epoch == 1 for r in found)
    read, write = _line(factory, "v = buf[t]"), _line(factory, "buf[t] = v")
    assert {r.lines for r in found} <= {(read, write), (write, read)}
    r16 = next(r for r in found if r.element == (16,))
    assert (r16.first.thread, r16.first.op, r16.second.thread, r16.second.op) == (
        (0, 0, 0), "read", (16, 0, 0), "write")
    text = format_races(found, limit=2)
    assert text.startswith("31 shared-memory races: buf[1] in block (0, 0, 0): thread ")
    assert "no cuda.syncwarp() or cuda.syncthreads() between them" in text
    assert text.endswith("; and 29 more")
    with pytest.raises(BudgetExceeded, match="31 shared-memory races"):
        enforce(run_traced(factory, 1, 64, a, np.zeros(1, np.float32)), no_races=True)


def test_the_same_code_with_syncwarp_is_not_a_race():
    a = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(1, np.float32)
    trace = run_traced(unrolled_last_warp(True), 1, 64, a, out)
    np.testing.assert_allclose(out, [a.sum()], rtol=1e-5, atol=1e-5)
    assert races(trace) == [] and trace.syncwarps == 32 * 6 * 2
    assert format_races([]) == "no shared-memory races"
    enforce(trace, no_races=True)


@pytest.mark.parametrize("block", [64, 128])
def test_correct_trees_are_not_races_and_a_missing_barrier_is(block):
    x = rng.standard_normal(300).astype(np.float32)
    blocks = -(-300 // block)
    out = np.zeros(blocks, np.float32)
    assert races(run_traced(lib.reduce_shared(block), blocks, block, x, out)) == []
    out = np.zeros(5, np.float32)
    early = run_traced(early_exit_tree, 5, 64, x, out)
    np.testing.assert_allclose(out.sum(), x.sum(), rtol=1e-5)
    assert races(early) == []
    # the tree without its loop barrier: buf[t + s] is read in the interval it is written
    wrong = mutant(lib.reduce_shared(block), "cuda.syncthreads()\ns //= 2", "s //= 2")
    found = races(run_traced(wrong, blocks, block, x, np.zeros(blocks, np.float32)))
    assert found and all(r.epoch == 1 for r in found)
    # 128 threads: step 64 writes buf[32..63] in warp 1, step 32 reads them from warp 0
    assert any(not r.same_warp for r in found) == (block == 128)


def test_a_tiled_matmul_without_its_second_barrier_races():
    a = rng.standard_normal((19, 23)).astype(np.float32)
    b = rng.standard_normal((23, 13)).astype(np.float32)
    grid, block = (2, 3), (8, 8)
    ok = run_traced(lib.matmul_tiled(8), grid, block, a, b, np.zeros((19, 13), np.float32))
    assert races(ok) == []
    wrong = mutant(lib.matmul_tiled(8), "cuda.syncthreads()\nk0 += tile", "k0 += tile")
    found = races(run_traced(wrong, grid, block, a, b, np.zeros((19, 13), np.float32)))
    # the next phase's store into sa/sb races with this phase's reads of them
    assert {r.array for r in found} == {"sa", "sb"}
    store, use = _line(wrong, "sa[ty, tx] ="), _line(wrong, "acc += sa")
    assert {r.lines for r in found if r.array == "sa"} <= {(store, use), (use, store)}


def test_atomics_do_not_race_with_atomics_but_do_with_reads():
    def histogram(barrier: bool):
        def factory(cuda):
            def kernel(a, out):
                hist = cuda.shared.array(4, cuda.int32)
                t = cuda.threadIdx.x
                if t < 4:
                    hist[t] = 0
                cuda.syncthreads()
                cuda.atomic.add(hist, int(a[t]) % 4, 1)
                if barrier:
                    cuda.syncthreads()
                if t < 4:
                    out[t] = hist[t]
            return kernel
        return factory
    a = np.arange(64, dtype=np.float32)
    out = np.zeros(4, np.int32)
    assert races(run_traced(histogram(True), 1, 64, a, out)) == []
    assert out.tolist() == [16] * 4
    found = races(run_traced(histogram(False), 1, 64, a, np.zeros(4, np.int32)))
    assert {(r.first.op, r.second.op) for r in found} <= {("atomic", "read"),
                                                          ("read", "atomic")}
    assert sorted(r.element for r in found) == [(0,), (1,), (2,), (3,)]
