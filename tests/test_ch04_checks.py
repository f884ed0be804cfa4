"""Chapter 04's checkers accept the reference and reject wrong, wasteful and missing kernels."""
import labkit  # noqa: F401
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get, stub
from labkit.kernels import library as lib


def _stub_kernel(cuda):
    def kernel(*args):
        raise NotImplementedError("write this")
    return kernel


@pytest.mark.parametrize("ex", ["4.1", "4.2", "4.3", "4.4"])
def test_reference_passes_and_missing_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == PASS
    assert evaluate(ex, None).status == MISSING
    assert evaluate(ex, _stub_kernel).status == MISSING
    assert evaluate(ex, stub(lambda cuda: None)).status == MISSING


def test_4_1_unguarded_kernel_gets_the_guard_hint():
    def unguarded(cuda):
        def kernel(a, out):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            out[i] = a[i] + 10
        return kernel
    v = evaluate("4.1", unguarded)
    assert v.status == FAIL and "guard" in v.message


def test_4_1_wrong_value_and_wasteful_reads():
    def plus_one(cuda):
        def kernel(a, out):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if i < out.size:
                out[i] = a[i] + 1
        return kernel

    def reads_twice(cuda):
        def kernel(a, out):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if i < out.size:
                out[i] = a[i] + 5
                out[i] = a[i] + 10
        return kernel
    assert evaluate("4.1", plus_one).status == FAIL
    v = evaluate("4.1", reads_twice)
    assert v.status == FAIL and "budget" in v.message


def test_4_2_transposed_mapping_fails():
    v = evaluate("4.2", lib.add_2d_transposed)
    assert v.status == FAIL


def test_4_2_uncoalesced_but_correct_kernel_fails_the_budget():
    def column_walk(cuda):
        # correct values, but each block walks a column: lanes stride whole rows
        def kernel(a, b, out):
            bx = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            by = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
            flat = by * (cuda.gridDim.x * cuda.blockDim.x) + bx
            span = cuda.gridDim.y * cuda.blockDim.y
            r = flat % span
            c = flat // span
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = a[r, c] + b[r, c]
        return kernel
    v = evaluate("4.2", column_walk)
    assert v.status == FAIL and "coalesced" in v.message


def test_4_3_swapped_broadcast_fails():
    def swapped(cuda):
        def kernel(col, row, out):
            c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = col[r] - row[c]
        return kernel
    assert evaluate("4.3", swapped).status == FAIL


def test_4_4_naive_convolution_is_over_budget():
    v = evaluate("4.4", lib.conv1d_naive)
    assert v.status == FAIL and "read 5 times" in v.message


def test_4_4_missing_halo_is_wrong():
    def no_halo(cuda):
        def kernel(a, w, out):
            tile = cuda.shared.array(36, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * 32 + t
            tile[t + 2] = a[i] if i < a.size else 0.0
            if t < 2:
                tile[t] = 0.0
                tile[t + 34] = 0.0
            cuda.syncthreads()
            if i < out.size:
                acc = 0.0
                for k in range(5):
                    acc += w[k] * tile[t + k]
                out[i] = acc
        return kernel
    v = evaluate("4.4", no_halo)
    assert v.status == FAIL and "halo" in v.message
