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
    # the interleaved tree is correct and conflict-free at this size: it passes the budget
    assert evaluate("5.1", lib.reduce_interleaved(64)).status == PASS


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


def test_5_2_transposed_result_is_wrong():
    def transposed(cuda):
        inner = lib.matmul_tiled(8)(cuda)

        def kernel(a, b, c):
            inner(a, b, c)
            c[0, 0] = 0.0
        return kernel
    assert evaluate("5.2", transposed).status == FAIL


def test_5_3_three_pass_softmax_is_over_budget():
    v = evaluate("5.3", lib.softmax_rows_naive)
    assert v.status == FAIL and "one pass" in v.message


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
