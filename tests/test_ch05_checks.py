"""Chapter 05's checkers accept the reference and reject wrong, wasteful and missing answers."""
import labkit  # noqa: F401
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.kernels import library as lib
from mutants import mutant


def _stub_kernel(cuda):
    def kernel(*args):
        raise NotImplementedError("write this")
    return kernel


@pytest.mark.parametrize("ex", ["5.1", "5.2", "5.3"])
def test_kernel_reference_passes_and_missing_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == PASS
    assert evaluate(ex, None).status == MISSING
    assert evaluate(ex, _stub_kernel).status == MISSING


def test_5_1_conflicting_and_divergent_trees():
    v = evaluate("5.1", lib.reduce_strided(64))
    assert v.status == FAIL and "bank conflicts" in v.message
    # the interleaved tree is correct and conflict-free at this size, but divergent
    v = evaluate("5.1", lib.reduce_interleaved(64))
    assert v.status == FAIL and "SIMT efficiency" in v.message


REDUCE = get("5.1").reference           # lib.reduce_shared(64)


def test_5_1_thread_zero_serial_loop_fails():
    serial = mutant(REDUCE, "s = block // 2", """
        if t == 0:                  # thread 0 adds the block in a loop, no barrier ...
            for k in range(1, block):
                buf[0] += buf[k]
        s = 0                       # ... and the tree loop never runs
    """)
    v = evaluate("5.1", serial)
    assert v.status == FAIL and "tree levels" in v.message, v.message


def test_5_1_serial_loop_with_barriers_fails_on_divergence():
    # log2(64) barriers, but thread 0 does every level's additions
    serial_synced = mutant(REDUCE, """
        if t < s:
            buf[t] += buf[t + s]
    """, """
        if t == 0:
            for k in range(s):
                buf[k] += buf[k + s]
    """)
    v = evaluate("5.1", serial_synced)
    assert v.status == FAIL and "SIMT efficiency" in v.message, v.message


@pytest.mark.parametrize("old, new, hint", [
    pytest.param("""
            buf[t] += buf[t + s]
        cuda.syncthreads()
    """, """
            buf[t] += buf[t + s]
    """, "tree levels", id="no-barrier-per-level"),
    pytest.param("""
        buf[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
    """, """
        buf[t] = a[i] if i < a.size else 0.0
    """, "syncthreads", id="no-barrier-after-load"),
    # The tracer's shared memory starts poisoned (NaN), as a GPU's starts with garbage: the
    # lanes past the end add NaN, so the values are wrong, not just the SIMT efficiency.
    pytest.param("buf[t] = a[i] if i < a.size else 0.0", """
        if i < a.size:
            buf[t] = a[i]
    """, "holds NaN at index", id="no-zero-padding"),
])
def test_5_1_missing_sync_or_padding_is_wrong(old, new, hint):
    v = evaluate("5.1", mutant(REDUCE, old, new))
    assert v.status == FAIL and hint in v.message, v.message


def test_5_1_tree_then_warp_shuffles_passes():
    """The chapter's own advice (Harris's last step, lib.reduce_fast): one shared-memory
    level, then shfl_down_sync for the last 32 values: fewer barriers, and right."""
    def tree_then_shuffle(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 64 + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            if t < 32:
                v = buf[t] + buf[t + 32]
                offset = 16
                while offset > 0:
                    v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
                    offset //= 2
                if t == 0:
                    out[cuda.blockIdx.x] = v
        return kernel
    assert evaluate("5.1", tree_then_shuffle).status == PASS


def test_5_2_untiled_matmul_is_over_budget():
    v = evaluate("5.2", lib.matmul_coalesced)
    assert v.status == FAIL and "ceil(n / TILE)" in v.message


def _wrapped_tiled(mutate: bool):
    """The reference tiled matmul called through a helper (its syncthreads are not in the
    wrapper's own code), optionally with one output zeroed afterwards."""
    def factory(cuda):
        inner = lib.matmul_tiled(8)(cuda)

        def kernel(a, b, c):
            inner(a, b, c)
            if mutate and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
                c[0, 0] = 0.0
        return kernel
    return factory


def test_5_2_wrapped_reference_passes_and_its_mutation_fails():
    # the tracer must run the wrapped kernel in lockstep: unmutated it passes ...
    assert evaluate("5.2", _wrapped_tiled(False)).status == PASS
    # ... so the failure of the mutated one is the mutation's
    v = evaluate("5.2", _wrapped_tiled(True))
    assert v.status == FAIL and "c for a" in v.message


def test_5_3_three_pass_softmax_is_over_budget():
    v = evaluate("5.3", lib.softmax_rows_naive)
    assert v.status == FAIL and "one pass" in v.message


def test_5_3_three_passes_through_out_count_every_access():
    # reads x only twice, but stores exp into out and reads it back: 3 reads, 2 writes
    exp_in_out = mutant(
        mutant(lib.softmax_rows_naive, "d += math.exp(x[r, c] - m)", """
            e = math.exp(x[r, c] - m)
            out[r, c] = e
            d += e
        """),
        "out[r, c] = math.exp(x[r, c] - m) / d", "out[r, c] = out[r, c] / d")
    v = evaluate("5.3", exp_in_out)
    assert v.status == FAIL and "global reads" in v.message and "global writes" in v.message


def test_5_3_no_rescale_is_wrong():
    no_rescale = mutant(get("5.3").reference,   # lib.softmax_rows_online
                        "d = d * math.exp(m - m_new) + math.exp(v - m_new)",
                        "d = d + math.exp(v - m_new)")
    v = evaluate("5.3", no_rescale)
    assert v.status == FAIL and "exp(m - m')" in v.message


def test_5_4_intensity():
    assert evaluate("5.4", get("5.4").reference).status == PASS
    assert evaluate("5.4", None).status == MISSING
    elements = lambda n, t: 4 * get("5.4").reference(n, t)  # noqa: E731
    assert "bytes" in evaluate("5.4", elements).message
    naive = lambda n, t: 2 * n ** 3 / (4 * (2 * n ** 3 + n * n))  # noqa: E731
    assert "naive" in evaluate("5.4", naive).message
    no_ceil = lambda n, t: 2 * n ** 3 / (4 * (2 * n * n * (n / t) + n * n))  # noqa: E731
    assert evaluate("5.4", no_ceil).status == FAIL


def test_5_5_scan_reference_passes_and_missing_is_missing():
    assert evaluate("5.5", get("5.5").reference).status == PASS
    assert evaluate("5.5", None).status == MISSING
    assert evaluate("5.5", _stub_kernel).status == MISSING


SCAN = get("5.5").reference              # lib.scan_block(64)


def test_5_5_thread_zero_serial_scan_fails():
    serial = mutant(SCAN, "d = 1", """
        if t == 0:                  # thread 0 scans the block in a loop ...
            for k in range(1, block):
                buf[0, k] += buf[0, k - 1]
        cuda.syncthreads()
        d = block                   # ... and the Hillis-Steele steps never run
    """)
    v = evaluate("5.5", serial)
    assert v.status == FAIL and "serial scan" in v.message, v.message


def test_5_5_off_by_one_is_wrong():
    v = evaluate("5.5", mutant(SCAN, "if t >= d:", "if t > d:"))
    assert v.status == FAIL and "t >= d" in v.message


def test_5_5_unpadded_load_is_named_as_unwritten_shared_memory():
    """Lanes past the end that store nothing leave NaN (garbage on a GPU) in the scan; the
    hint must point at the load, not at the block total."""
    unpadded = mutant(SCAN, "buf[0, t] = a[i] if i < a.size else 0.0", """
        if i < a.size:
            buf[0, t] = a[i]
    """)
    v = evaluate("5.5", unpadded)
    assert v.status == FAIL and "holds NaN" in v.message and "padding" in v.message, v.message


def test_5_5_exclusive_scan_is_named():
    def exclusive(cuda):
        inner = lib.scan_block(64)(cuda)

        def kernel(a, out, sums):
            inner(a, out, sums)
            i = cuda.blockIdx.x * 64 + cuda.threadIdx.x
            if i < out.size:
                out[i] = out[i] - a[i]
        return kernel
    v = evaluate("5.5", exclusive)
    assert v.status == FAIL and "exclusive" in v.message
