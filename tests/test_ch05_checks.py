"""Chapter 05's checkers accept the reference and reject wrong, wasteful and missing answers."""
import labkit  # noqa: F401
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.kernels import library as lib


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


def test_5_1_thread_zero_serial_loop_fails():
    def serial(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 64 + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            if t == 0:
                total = 0.0
                for k in range(64):
                    total += buf[k]
                out[cuda.blockIdx.x] = total
        return kernel
    v = evaluate("5.1", serial)
    assert v.status == FAIL and "tree levels" in v.message


def test_5_1_serial_loop_with_barriers_fails_on_divergence():
    def serial_synced(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 64 + t
            buf[t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            s = 32
            while s > 0:               # log2(64) barriers, but thread 0 does all the work
                if t == 0:
                    for k in range(1, 2 * s):
                        if k < 2 * s and s == 32:
                            buf[0] += buf[k]
                cuda.syncthreads()
                s //= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0]
        return kernel
    v = evaluate("5.1", serial_synced)
    assert v.status == FAIL and "SIMT efficiency" in v.message, v.message


def test_5_1_missing_sync_or_padding_is_wrong():
    def no_padding(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(64, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 64 + t
            if i < a.size:
                buf[t] = a[i]
            cuda.syncthreads()
            s = 32
            while s > 0:
                if t < s and i + s < a.size:
                    buf[t] += buf[t + s]
                cuda.syncthreads()
                s //= 2
            if t == 0:
                out[cuda.blockIdx.x] = buf[0] * 2
        return kernel
    assert evaluate("5.1", no_padding).status == FAIL


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
    def exp_in_out(cuda):
        import math

        def kernel(x, out):
            r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if r < x.shape[0]:
                m = -math.inf
                for c in range(x.shape[1]):
                    m = max(m, x[r, c])
                d = 0.0
                for c in range(x.shape[1]):
                    e = math.exp(x[r, c] - m)
                    out[r, c] = e
                    d += e
                for c in range(x.shape[1]):
                    out[r, c] = out[r, c] / d
        return kernel
    v = evaluate("5.3", exp_in_out)
    assert v.status == FAIL and "global reads" in v.message and "global writes" in v.message


def test_5_3_no_rescale_is_wrong():
    def no_rescale(cuda):
        import math

        def kernel(x, out):
            r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if r < x.shape[0]:
                m = -math.inf
                d = 0.0
                for c in range(x.shape[1]):
                    v = x[r, c]
                    m = max(m, v)
                    d += math.exp(v - m)
                for c in range(x.shape[1]):
                    out[r, c] = math.exp(x[r, c] - m) / d
        return kernel
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


def _scan(variant):
    def factory(cuda):
        def kernel(a, out, sums):
            buf = cuda.shared.array((2, 64), cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 64 + t
            buf[0, t] = a[i] if i < a.size else 0.0
            cuda.syncthreads()
            src = 0
            if variant == "serial":
                if t == 0:
                    acc = 0.0
                    for k in range(64):
                        acc += buf[0, k]
                        buf[1, k] = acc
                cuda.syncthreads()
                src = 1
            else:
                d = 1
                while d < 64:
                    v = buf[src, t]
                    if (t > d) if variant == "off_by_one" else (t >= d):
                        v += buf[src, t - d]
                    buf[1 - src, t] = v
                    cuda.syncthreads()
                    src = 1 - src
                    d *= 2
            if i < out.size:
                out[i] = buf[src, t]
            if t == 63:
                sums[cuda.blockIdx.x] = buf[src, t]
        return kernel
    return factory


def test_5_5_thread_zero_serial_scan_fails():
    v = evaluate("5.5", _scan("serial"))
    assert v.status == FAIL and "serial scan" in v.message


def test_5_5_off_by_one_is_wrong():
    v = evaluate("5.5", _scan("off_by_one"))
    assert v.status == FAIL and "t >= d" in v.message


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
