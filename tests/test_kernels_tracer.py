"""Every library kernel matches numpy under labkit's tracer and under numba.cuda."""
import labkit  # noqa: F401  (selects the CUDA simulator before numba is imported)
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import ops, run_numba, vector_add
from labkit.kernels.tracer import OutOfBounds, run_traced
from mutants import mutant

RUNNERS = ["trace", "numba"]
rng = np.random.default_rng(1234)
A1 = rng.standard_normal(100).astype(np.float32) * 3 + 1      # 100: not a multiple of 32
B1 = rng.random(100).astype(np.float32)
M2 = rng.standard_normal((19, 37)).astype(np.float32)
N2 = rng.random((19, 37)).astype(np.float32)
X300 = (rng.standard_normal(300) + 0.25).astype(np.float32)
MA = rng.standard_normal((19, 23)).astype(np.float32)
MB = rng.standard_normal((23, 13)).astype(np.float32)
SX = (rng.standard_normal((11, 37)) * 3).astype(np.float32)


def softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES = {
    "add": (lambda r: ops.add(A1, B1, runner=r), A1 + B1),
    "add_ten": (lambda r: ops.elementwise(lib.add_ten, A1, runner=r), A1 + 10),
    "branchy": (lambda r: ops.elementwise(lib.branchy, A1, runner=r),
                np.where(np.arange(100) % 2 == 0, A1 * 2, A1 + 1)),
    "add_2d": (lambda r: ops.add_matrices(M2, N2, runner=r), M2 + N2),
    "add_2d_T": (lambda r: ops.add_matrices(M2, N2, transposed=True, runner=r), M2 + N2),
    "broadcast": (lambda r: ops.broadcast(A1[:13], B1[:21], runner=r),
                  A1[:13, None] + B1[None, :21]),
    "conv_shared": (lambda r: ops.conv1d(A1, B1[:5], runner=r),
                    np.convolve(A1, B1[:5][::-1], "same")),
    "conv_naive": (lambda r: ops.conv1d(A1, B1[:5], shared=False, runner=r),
                   np.convolve(A1, B1[:5][::-1], "same")),
    "scan": (lambda r: ops.prefix_sum(X300, runner=r), np.cumsum(X300)),
    "softmax_block": (lambda r: ops.softmax(SX, variant="block", runner=r), softmax_np(SX)),
}
for _v in ("atomic", "interleaved", "strided", "shared"):
    CASES[f"reduce_{_v}"] = (lambda r, v=_v: ops.reduce_sum(X300, variant=v, runner=r),
                             np.array([X300.sum()]))
CASES["reduce_fast"] = (lambda r: ops.reduce_sum(X300, variant="fast", block=32, runner=r),
                       np.array([X300.sum()]))
CASES["reduce_warp"] = (lambda r: ops.reduce_sum(X300[:100], variant="warp", runner=r),
                        np.array([X300[:100].sum()]))
CASES["matmul_register2d_small"] = (
    lambda r: ops.matmul(MA, MB, variant="register2d", runner=r,
                         blocked=dict(bm=16, bn=16, bk=4, tm=2, tn=2)), MA @ MB)
MC = rng.standard_normal((19, 17)).astype(np.float32)
MD = rng.standard_normal((17, 18)).astype(np.float32)
# (19, 17) @ (17, 18) in 16 x 16 tiles: block (0, 0) lies inside a and b for its first
# phase (the unguarded loads of a full tile) and is cut by k in its last; the other three
# are cut by m or n throughout. No time budget: these check values, not the tracer's guard.
CASES["matmul_register2d_full_and_cut_tiles"] = (
    lambda r: ops.matmul(MC, MD, variant="register2d", runner=r,
                         blocked=dict(bm=16, bn=16, bk=4, tm=2, tn=2), budget_s=None), MC @ MD)
CASES["matmul_register_full_and_cut_tiles"] = (
    lambda r: ops.matmul(MC, MD, variant="register", tile=16, rows=4, runner=r, budget_s=None),
    MC @ MD)
for _v in ("naive", "shared", "padded"):
    CASES[f"transpose_{_v}"] = (lambda r, v=_v: ops.transpose(M2, variant=v, runner=r), M2.T)
for _v in ops.MATMULS:
    CASES[f"matmul_{_v}"] = (lambda r, v=_v: ops.matmul(MA, MB, variant=v, runner=r), MA @ MB)
for _v in ("naive", "online"):
    CASES[f"softmax_{_v}"] = (lambda r, v=_v: ops.softmax(SX, variant=v, runner=r),
                              softmax_np(SX))


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_numpy(name, runner):
    run, want = CASES[name]
    got = run(runner)
    np.testing.assert_allclose(got.value, want, rtol=1e-4, atol=1e-4)
    assert bool(got.traces) == (runner == "trace")


def test_a_trace_counts_its_threads():
    # 100 elements in blocks of 32: 4 blocks, 128 threads launched (28 do nothing)
    trace = ops.add(A1[:100], B1[:100], block=32).trace
    assert (trace.n_blocks, trace.threads_per_block, trace.n_threads) == (4, 32, 128)


def test_warp_reduction_under_tracer():
    got = ops.reduce_sum(X300, variant="warp", runner="trace")
    np.testing.assert_allclose(got.value, [X300.sum()], rtol=1e-5)
    assert got.trace.shuffles == 5 * 64 * 5  # 5 blocks x 64 threads x log2(32) steps


def test_shuffles_emulated_on_simulator_match_the_tracer():
    # Numba's simulator has no shuffles; labkit's proxy emulates them with block barriers
    got = ops.reduce_sum(X300[:200], variant="warp", runner="numba", block=64)
    want = ops.reduce_sum(X300[:200], variant="warp", runner="trace", block=64)
    np.testing.assert_allclose(got.value, want.value, rtol=1e-6)


def test_register_blocked_large_tile_and_rows():
    got = ops.matmul(MA, MB, variant="register", tile=16, rows=4)
    np.testing.assert_allclose(got.value, MA @ MB, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant, old, new", [
    ("register2d", "k0 + bk <= n_k", "k0 < n_k"), ("register", "k0 + tile <= n_k", "k0 < n_k"),
    ("register2d", "inside and ", ""), ("register", "inside and ", "")])
def test_a_cut_tile_never_takes_the_unguarded_loads(variant, old, new):
    # the full-tile test is what keeps the unguarded loads inside a and b: one that lets
    # a phase cut by k through, or a block cut by m or n, reads past the end of a or b
    shape = dict(blocked=dict(bm=16, bn=16, bk=4, tm=2, tn=2)) if variant == "register2d" \
        else dict(tile=16, rows=4)
    grid, block, fn = ops.matmul_launch(variant, *(MC @ MD).shape, **shape)
    out = np.zeros((MC.shape[0], MD.shape[1]), np.float32)
    run_traced(fn, grid, block, MC, MD, out, budget_s=None)
    np.testing.assert_allclose(out, MC @ MD, rtol=1e-4, atol=1e-4)
    with pytest.raises(OutOfBounds):
        run_traced(mutant(fn, old, new), grid, block, MC, MD, out, budget_s=None)


def test_run_numba_copies_back_in_place():
    a, b = A1.copy(), B1.copy()
    out = np.zeros_like(a)
    run_numba(vector_add, 4, 32, a, b, out)
    np.testing.assert_allclose(out, a + b)
    np.testing.assert_array_equal(a, A1)


def test_out_of_bounds_is_reported_with_the_thread():
    def unguarded(cuda):
        def kernel(a, out):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            out[i] = a[i]
        return kernel
    with pytest.raises(OutOfBounds, match=r"thread \(4, 0, 0\) of block \(3, 0, 0\)"):
        run_traced(unguarded, 4, 32, A1.copy(), np.zeros(100, np.float32))


def test_negative_index_is_out_of_bounds():
    def neg(cuda):
        def kernel(a, out):
            out[0] = a[-1]
        return kernel
    with pytest.raises(OutOfBounds):
        run_traced(neg, 1, 1, A1.copy(), np.zeros(1, np.float32))


def test_syncthreads_orders_shared_writes_before_reads():
    """Thread t reads what thread t+1 wrote: wrong without a working barrier."""
    def shift(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t = cuda.threadIdx.x
            buf[t] = a[t]
            cuda.syncthreads()
            out[t] = buf[(t + 1) % 64]
        return kernel
    a = np.arange(64, dtype=np.float32)[::-1].copy()
    out = np.zeros(64, np.float32)
    trace = run_traced(shift, 1, 64, a, out)
    np.testing.assert_array_equal(out, np.roll(a, -1))
    assert trace.syncs == 64
    assert [x.name for x in trace.arrays] == ["a", "out", "buf"]


def test_shared_and_local_memory_start_poisoned_not_zeroed():
    """A GPU's shared and local memory start with garbage: a slot read before it is written
    gives NaN (floats) or a large integer here, never a lucky zero."""
    def reads_unwritten(cuda):
        def kernel(out, iout):
            buf = cuda.shared.array(64, cuda.float32)
            ibuf = cuda.shared.array(64, cuda.int32)
            loc = cuda.local.array(2, cuda.float64)
            t = cuda.threadIdx.x
            if t < 32:
                buf[t] = 1.0
                ibuf[t] = 1
            cuda.syncthreads()
            out[t] = buf[t] + loc[t % 2]
            iout[t] = ibuf[t]
        return kernel
    out, iout = np.zeros(64, np.float32), np.zeros(64, np.int32)
    run_traced(reads_unwritten, 1, 64, out, iout)
    assert np.isnan(out).all()
    assert (iout[:32] == 1).all() and (iout[32:] > 10**8).all()


def test_exited_threads_do_not_block_the_barrier():
    def early_exit(cuda):
        def kernel(out):
            t = cuda.threadIdx.x
            if t >= 40:
                return
            cuda.syncthreads()
            out[t] = 1.0
        return kernel
    out = np.zeros(64, np.float32)
    run_traced(early_exit, 1, 64, out)
    assert out.sum() == 40


def test_exceptions_in_lockstep_threads_propagate():
    def boom(cuda):
        def kernel(out):
            cuda.syncthreads()
            if cuda.threadIdx.x == 7:
                raise ZeroDivisionError("lane 7")
            cuda.syncthreads()
        return kernel
    with pytest.raises(ZeroDivisionError, match="lane 7"):
        run_traced(boom, 1, 32, np.zeros(1, np.float32))


@pytest.mark.parametrize("bad", [0, (1, 0), (2, 2, 2, 2), 1.5])
def test_bad_launch_dimensions(bad):
    with pytest.raises(ValueError, match="griddim"):
        run_traced(vector_add, bad, 32, A1, B1, np.zeros_like(A1))


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="blockdim"):
        run_traced(vector_add, 1, 2048, A1, B1, np.zeros_like(A1))
    with pytest.raises(ValueError, match="runner"):
        ops.add(A1, B1, runner="cpu")
    with pytest.raises(ValueError, match="variant"):
        ops.matmul(MA, MB, variant="fast")
    with pytest.raises(ValueError, match="inner sizes"):
        ops.matmul(MA, MA)
    with pytest.raises(ValueError, match="tile"):
        lib.matmul_tiled(12)
    with pytest.raises(ValueError, match="arguments"):
        run_traced(vector_add, 1, 32, A1, B1)


@pytest.mark.gpu
@pytest.mark.skipif(labkit.CUDA_BACKEND != "gpu", reason="needs a real CUDA GPU")
def test_warp_reduction_on_gpu():
    got = ops.reduce_sum(X300, variant="warp", runner="numba")
    np.testing.assert_allclose(got.value, [X300.sum()], rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(labkit.CUDA_BACKEND != "gpu", reason="needs a real CUDA GPU")
def test_large_tiled_matmul_on_gpu():
    a = rng.standard_normal((513, 257)).astype(np.float32)
    b = rng.standard_normal((257, 129)).astype(np.float32)
    for variant, tile in [("tiled", 16), ("tiled", 32), ("register", 64)]:
        got = ops.matmul(a, b, variant=variant, runner="numba", tile=tile, rows=4)
        np.testing.assert_allclose(got.value, a @ b, rtol=1e-3, atol=1e-3)


def _wrapped(factory):
    """A kernel whose barriers live in a helper: the wrapper's code names no sync."""
    def outer(cuda):
        inner = factory(cuda)

        def kernel(*args):
            inner(*args)
        return kernel
    return outer


@pytest.mark.parametrize("factory", [lib.matmul_tiled(8), lib.reduce_shared(64)])
def test_barrier_reached_through_a_helper_runs_in_lockstep(factory):
    from labkit.kernels.tracer import _needs_lockstep
    wrapped = _wrapped(factory)
    assert not _needs_lockstep(wrapped(None))      # the static guess misses it ...
    if factory is lib.matmul_tiled(8):
        a, b = MA.copy(), MB.copy()
        c = np.zeros((19, 13), np.float32)
        trace = run_traced(wrapped, (2, 3), (8, 8), a, b, c)
        np.testing.assert_allclose(c, MA @ MB, rtol=1e-4, atol=1e-4)   # ... the run does not
        assert trace.syncs == 6 * 64 * 2 * 3       # blocks x threads x 2 per phase x phases
    else:
        out = np.zeros(5, np.float32)
        trace = run_traced(wrapped, 5, 64, X300, out)
        np.testing.assert_allclose(out.sum(), X300.sum(), rtol=1e-5)
        assert trace.syncs == 5 * 64 * 7


def test_restart_in_lockstep_starts_from_the_original_inputs():
    def accumulate(cuda):
        def helper(a):
            cuda.syncthreads()
        def kernel(a):
            i = cuda.threadIdx.x
            a[i] += 1.0           # runs before the barrier: must not be applied twice
            helper(a)
        return kernel
    a = np.zeros(32, np.float32)
    trace = run_traced(accumulate, 1, 32, a)
    assert np.all(a == 1.0)
    from labkit.kernels.analysis import traffic
    assert traffic(trace).global_writes == 32 and traffic(trace).global_reads == 32


def test_size_guard_names_the_estimate_and_the_alternative():
    big = np.ones((128, 128), np.float32)
    with pytest.raises(ValueError, match=r"would take about \d+ s.*runner='numba'.*budget_s=None"):
        ops.matmul(big, big)
    # a tiny budget trips on any multi-block launch; budget_s=None turns the guard off
    with pytest.raises(ValueError, match="budget_s"):
        run_traced(lib.vector_add, 4, 32, A1, B1, np.zeros(100, np.float32), budget_s=1e-9)
    out = np.zeros(100, np.float32)
    run_traced(lib.vector_add, 4, 32, A1, B1, out, budget_s=None)
    np.testing.assert_allclose(out, A1 + B1)
