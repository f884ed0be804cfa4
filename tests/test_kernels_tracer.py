"""Every library kernel matches numpy under labkit's tracer and under numba.cuda."""
import inspect
import subprocess
import sys

import labkit  # noqa: F401  (selects the CUDA simulator before numba is imported)
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import ops, run_numba, vector_add
from labkit.kernels.analysis import element_counts, traffic
from labkit.kernels.registry import (ATTENTION, KERNELS, MATMUL, REDUCTION, SOFTMAX,
                                     TRANSPOSE)
from labkit.kernels.trace import LOCAL, WRITE, Deadlock, OutOfBounds, TraceLimitExceeded
from labkit.kernels.tracer import run_traced
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
}
# every variant of every family in the registry, on one input per family (a new entry is
# tested here without a line of this file); then the shapes a family's default misses
FAMILIES = {
    REDUCTION: lambda v: (lambda r: ops.reduce_sum(X300, variant=v, runner=r),
                          np.array([X300.sum()])),
    MATMUL: lambda v: (lambda r: ops.matmul(MA, MB, variant=v, runner=r), MA @ MB),
    TRANSPOSE: lambda v: (lambda r: ops.transpose(M2, variant=v, runner=r), M2.T),
    SOFTMAX: lambda v: (lambda r: ops.softmax(SX, variant=v, runner=r), softmax_np(SX)),
}
for _family, _case in FAMILIES.items():
    for _v in KERNELS[_family]:
        CASES[f"{_family}_{_v}"] = _case(_v)
CASES["reduce_fast_one_warp"] = (
    lambda r: ops.reduce_sum(X300, variant="fast", block=32, runner=r), np.array([X300.sum()]))
CASES["reduce_warp_one_block"] = (
    lambda r: ops.reduce_sum(X300[:100], variant="warp", runner=r), np.array([X300[:100].sum()]))
CASES["matmul_register2d_small"] = (
    lambda r: ops.matmul(MA, MB, variant="register2d", runner=r,
                         blocked=dict(bm=16, bn=16, bk=4, tm=2, tn=2)), MA @ MB)
MC = rng.standard_normal((19, 17)).astype(np.float32)
MD = rng.standard_normal((17, 18)).astype(np.float32)
# (19, 17) @ (17, 18) in 16 x 16 tiles: block (0, 0) lies inside a and b for its first
# phase (the unguarded loads of a full tile) and is cut by k in its last; the other three
# are cut by m or n throughout.
CASES["matmul_register2d_full_and_cut_tiles"] = (
    lambda r: ops.matmul(MC, MD, variant="register2d", runner=r,
                         blocked=dict(bm=16, bn=16, bk=4, tm=2, tn=2)), MC @ MD)
CASES["matmul_register_full_and_cut_tiles"] = (
    lambda r: ops.matmul(MC, MD, variant="register", tile=16, rows=4, runner=r), MC @ MD)


def test_every_family_of_the_registry_has_a_case():
    assert set(FAMILIES) | {ATTENTION} == set(KERNELS)     # attention: test_kernels_labs
    assert {f"reduction_{v}" for v in ("atomic", "shared", "warp", "fast")} | {
        f"softmax_{v}" for v in ("naive", "online", "block")} <= set(CASES)


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
    run_traced(fn, grid, block, MC, MD, out)
    np.testing.assert_allclose(out, MC @ MD, rtol=1e-4, atol=1e-4)
    with pytest.raises(OutOfBounds):
        run_traced(mutant(fn, old, new), grid, block, MC, MD, out)


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
    trace = run_traced(early_exit, 1, 64, out)
    assert out.sum() == 40
    assert trace.thread_syncs.tolist() == [[1] * 40 + [0] * 24]


def test_barriers_are_counted_per_thread():
    """The busiest thread of a tree whose idle threads return early still passes every
    level's barrier, though the mean per thread is lower."""
    from test_kernels_analysis import early_exit_tree
    x = X300[:128]
    tree = run_traced(lib.reduce_shared(64), 2, 64, x, np.zeros(2, np.float32))
    early = run_traced(early_exit_tree, 2, 64, x, np.zeros(2, np.float32))
    assert (tree.thread_syncs == 7).all() and tree.syncs == 2 * 64 * 7
    # thread t < 32 passes 1 + (levels with s > t); t >= 32 only the load's barrier
    want = [1 + sum(s > t for s in (32, 16, 8, 4, 2, 1)) for t in range(64)]
    assert early.thread_syncs.tolist() == [want, want] and early.thread_syncs.max() == 7
    assert early.syncs == 2 * sum(want) < tree.syncs


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
    assert traffic(trace).global_writes == 32 and traffic(trace).global_reads == 32


def test_a_launch_too_big_to_trace_is_refused_by_its_size_before_it_runs():
    big = np.ones((128, 128), np.float32)
    with pytest.raises(TraceLimitExceeded, match=r"256 blocks x 64 threads = 16384 threads, "
                       r"over the tracer's limit of 8192 \(max_threads\).*runner='numba'"):
        ops.matmul(big, big)
    # refused before it runs: no thread wrote anything
    a = np.ones(3 * 10**5, np.float32)
    out = np.zeros_like(a)
    with pytest.raises(ValueError, match=r"its arrays hold 900000 elements \(a 300000, b "
                       r"300000, out 300000\), over the tracer's limit of 262144 "
                       r"\(max_elements\).*runner='numba'.*smaller size"):
        run_traced(lib.vector_add, 1, 32, a, a, out)
    assert not out.any()
    # the limits are the caller's to lift
    run_traced(lib.vector_add, 1, 32, a, a, out, max_elements=None)
    assert (out[:32] == 2).all() and not out[32:].any()


def test_the_old_time_budget_is_accepted_and_changes_nothing():
    """budget_s (seconds) no longer decides anything: a budget no launch could meet before
    (it raised on any multi-block launch) now gives the same trace as none at all."""
    runs = []
    for budget in (1e-9, None, 10.0):
        out = np.zeros(100, np.float32)
        runs.append(run_traced(lib.vector_add, 4, 32, A1, B1, out, budget_s=budget))
        np.testing.assert_allclose(out, A1 + B1)
    assert all(_signature(t) == _signature(runs[0]) for t in runs)


def _forever(cuda):
    def kernel(out):
        t = cuda.threadIdx.x
        s = 1
        while s > 0:                # s never changes: the loop never ends
            out[t] += 1.0
    return kernel


def _spin_at_barrier(cuda):
    def kernel(out):
        while out[0] == 0.0:        # nobody writes out[0]: barriers forever
            cuda.syncthreads()
    return kernel


def test_a_kernel_that_never_ends_stops_at_the_work_cap():
    with pytest.raises(TraceLimitExceeded, match=r"over 5000 memory accesses and shuffles "
                       r"\(max_accesses\).*by block \(0, 0, 0\).*never ends"):
        run_traced(_forever, 2, 32, np.zeros(64, np.float32), max_accesses=5000)
    with pytest.raises(TraceLimitExceeded, match=r"over 640 barrier waits.*max_barrier_waits"):
        run_traced(_spin_at_barrier, 1, 64, np.zeros(64, np.float32), max_barrier_waits=640)


def test_the_work_cap_is_exact():
    """A launch is stopped iff its total work exceeds the cap, whatever the schedule: the
    add kernel makes 3 accesses per element (a, b, out)."""
    out = np.zeros(100, np.float32)
    run_traced(lib.vector_add, 4, 32, A1, B1, out, max_accesses=300)
    with pytest.raises(TraceLimitExceeded, match="over 299 memory accesses"):
        run_traced(lib.vector_add, 4, 32, A1, B1, out, max_accesses=299)
    # 5 blocks x 64 threads x (1 + 6) barriers in the sequential tree of 64
    run_traced(lib.reduce_shared(64), 5, 64, X300, np.zeros(5, np.float32),
               max_barrier_waits=5 * 64 * 7)
    with pytest.raises(TraceLimitExceeded, match="by block \\(4, 0, 0\\)"):
        run_traced(lib.reduce_shared(64), 5, 64, X300, np.zeros(5, np.float32),
                   max_barrier_waits=5 * 64 * 7 - 1)


def test_a_barrier_some_threads_skip_is_a_deadlock_reported_at_once():
    def skips(cuda):
        def kernel(out):
            t = cuda.threadIdx.x
            if t < 40:
                cuda.syncthreads()      # threads 40..63 never come
            else:
                out[t] = cuda.shfl_down_sync(0xFFFFFFFF, 1.0, 1)
                cuda.syncthreads()
                cuda.syncthreads()
        return kernel
    with pytest.raises(Deadlock, match=r"40 at cuda.syncthreads\(\) \(threads 0-39\); 24 at "
                       r"a shuffle or cuda.syncwarp\(\) of warp 1 \(threads 40-63\)"):
        run_traced(skips, 1, 64, np.zeros(64, np.float32))


def staged(cuda):
    """Each thread stages n products in a local array (n known at run time only)."""
    def kernel(a, out, n):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        tmp = cuda.local.array(3, cuda.float32)
        for k in range(n):
            tmp[k] = a[i] * k
        out[i] = tmp[0] + tmp[1] + tmp[2]
    return kernel


staged_unrolled = mutant(staged, "range(n)", "range(3)")


def test_local_arrays_are_recorded_as_local_memory():
    out = np.zeros(64, np.float32)
    trace = run_traced(staged, 2, 32, A1[:64], out, 3)
    np.testing.assert_allclose(out, 3 * A1[:64])
    (info,) = [x for x in trace.arrays if x.space == LOCAL]
    assert (info.name, info.shape, info.itemsize, info.registers) == ("tmp", (3,), 4, False)
    t = traffic(trace)
    assert (t.local_writes, t.local_reads, t.local_bytes) == (3 * 64, 3 * 64, 4 * 6 * 64)
    # summed over the threads' own copies
    assert element_counts(trace, "tmp", WRITE, LOCAL).tolist() == [64, 64, 64]
    with pytest.raises(OutOfBounds, match=r"tmp \(local\) has shape \(3,\)"):
        run_traced(staged, 1, 32, A1[:32], out[:32], 4)
    # a constant trip count: unrolled, tmp[0..2] are registers; recorded, but not traffic
    unrolled = run_traced(staged_unrolled, 2, 32, A1[:64], out, 3)
    assert [x.registers for x in unrolled.arrays if x.space == LOCAL] == [True]
    t = traffic(unrolled)
    assert (t.local_writes, t.local_reads, t.register_accesses) == (0, 0, 6 * 64)


_PTX_SCRIPT = """
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path[:0] = sys.argv[1:]
try:
    from numba import cuda
    from test_kernels_tracer import ptx_cases
    out = {}
    for name, (fn, sig, _) in ptx_cases().items():
        ptx, _ = cuda.compile_ptx(fn(cuda), sig, cc=(9, 0))
        out[name] = "ld.local" in ptx or "st.local" in ptx
except Exception as exc:   # no libnvvm / libnvrtc: nothing to compare with
    out = {"missing": repr(exc)[:300]}
print(json.dumps(out))
"""


def ptx_cases():
    """Kernels whose local arrays the compiler keeps in registers (False) or not (True),
    with a numba signature and a traced launch."""
    from test_kernels_analysis import thread0_local_copy
    m2 = "(float32[:, ::1], float32[:, ::1], float32[:, ::1])"
    a = np.ones((16, 16), np.float32)

    def mm(grid, block):
        return lambda fn: run_traced(fn, grid, block, a, a, np.zeros_like(a))

    def vec(fn):
        return run_traced(fn, 1, 32, A1[:32], np.zeros(32, np.float32), 3)

    return {
        "matmul_2d_blocked": (lib.matmul_2d_blocked(16, 16, 8, 2, 2), m2, mm((1, 1), (8, 8))),
        "matmul_register_blocked": (lib.matmul_register_blocked(8, 2), m2,
                                    mm((2, 2), (8, 4))),
        "reduce_fast": (lib.reduce_fast(64, 4), "(float32[::1], float32[::1])",
                        lambda fn: run_traced(fn, 1, 64, X300, np.zeros(1, np.float32))),
        "staged": (staged, "(float32[::1], float32[::1], int64)", vec),
        "staged_unrolled": (staged_unrolled, "(float32[::1], float32[::1], int64)", vec),
        "thread0_local_copy": (thread0_local_copy, m2, mm((1, 1), (8, 8))),
    }


def test_which_local_arrays_are_registers_agrees_with_the_compiler():
    """The tracer's reading of the source against numba-cuda's PTX (where a CUDA toolchain
    with libnvvm and libnvrtc is installed; no GPU needed)."""
    import json
    from pathlib import Path
    here = str(Path(__file__).parent)
    run = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, here, str(Path(here).parent)],
                         capture_output=True, text=True, timeout=600)
    ptx = json.loads(run.stdout.strip().splitlines()[-1])
    if "missing" in ptx:
        pytest.skip(f"no CUDA toolchain to compile PTX: {ptx['missing']}")
    tracer = {name: not all(x.registers for x in trace(fn).arrays if x.space == LOCAL)
              for name, (fn, _, trace) in ptx_cases().items()}
    assert tracer == ptx
    assert ptx == {"matmul_2d_blocked": False, "matmul_register_blocked": False,
                   "reduce_fast": False, "staged": True, "staged_unrolled": False,
                   "thread0_local_copy": True}


def test_shuffles_are_recorded_per_lane_and_site():
    trace = ops.reduce_sum(X300[:128], variant="warp", block=64).trace
    sh = trace.shuffle_columns
    assert sh["block"].size == trace.shuffles == 2 * 64 * 5
    assert set(sh["occurrence"].tolist()) == set(range(5))       # 5 steps per lane
    (line,) = {trace.sites[s] for s in sh["site"]}      # the line of warp_sum's shuffle
    source, first = inspect.getsourcelines(lib.reductions.warp_sum)
    assert "shfl_down_sync" in source[line - first]


def test_a_device_function_is_the_python_function_under_the_tracer():
    """``cuda.jit(device=True, ...)`` (library.sizes.device) returns the function itself
    under the tracer; a kernel is launched, never jitted there (ValueError naming device)."""
    from labkit.kernels.traced_cuda import FakeCuda

    def twice(v):
        return 2 * v
    assert FakeCuda.jit(device=True, inline="always")(twice) is twice
    assert FakeCuda.jit(twice, device=True) is twice
    with pytest.raises(ValueError, match="device"):
        FakeCuda.jit(twice)


def _signature(trace):
    """Everything a trace holds, as plain data."""
    return (trace.griddim, trace.blockdim, trace.arrays, trace.sites,
            {k: v.tolist() for k, v in trace.columns.items()},
            {k: v.tolist() for k, v in trace.shuffle_columns.items()},
            trace.shuffles, trace.syncs, trace.syncwarps, trace.thread_syncs.tolist())


def _load_independent_runs():
    """What the tracer decides about a few launches: lockstep, shuffles, a race, early
    exits, one refused by size and one stopped by the work cap."""
    from labkit.kernels.analysis import races
    from test_kernels_analysis import early_exit_tree, unrolled_last_warp
    out = []
    for fn, grid, block, args in [
            (lib.reduce_shared(64), 4, 64, (X300[:200], np.zeros(4, np.float32))),
            (lib.reduce_warp(64), 2, 64, (X300[:128], np.zeros(2, np.float32))),
            (unrolled_last_warp(False), 1, 64, (X300[:64], np.zeros(1, np.float32))),
            (early_exit_tree, 2, 64, (X300[:100], np.zeros(2, np.float32)))]:
        trace = run_traced(fn, grid, block, *args)
        out.append((_signature(trace), races(trace)))
    for fn, grid, block, args, limits in [
            (lib.vector_add, 300, 32, (A1, B1, np.zeros(100, np.float32)), {}),
            (_forever, 2, 32, (np.zeros(64, np.float32),), dict(max_accesses=3000)),
            (_spin_at_barrier, 1, 64, (np.zeros(64, np.float32),),
             dict(max_barrier_waits=300))]:
        with pytest.raises(TraceLimitExceeded) as err:
            run_traced(fn, grid, block, *args, **limits)
        out.append(str(err.value))
    return out


def test_traces_and_decisions_do_not_depend_on_the_machine_load():
    idle = _load_independent_runs()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        loaded = _load_independent_runs()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert loaded == idle
    assert len(idle[2][1]) > 0 and idle[3][1] == []    # the race is seen, the exits are not
