"""Chapter 04's checkers accept the reference and reject wrong, wasteful and missing kernels."""
import labkit  # noqa: F401
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get, stub
from labkit.kernels import library as lib
from labkit.validate import ceil_div
from mutants import mutant


def _stub_kernel(cuda):
    def kernel(*args):
        raise NotImplementedError("write this")
    return kernel


@pytest.mark.parametrize("ex", ["4.1", "4.2", "4.3", "4.4", "4.5"])
def test_reference_passes_and_missing_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == PASS
    assert evaluate(ex, None).status == MISSING
    assert evaluate(ex, _stub_kernel).status == MISSING
    assert evaluate(ex, stub(lambda cuda: None)).status == MISSING


def test_4_1_unguarded_kernel_gets_the_guard_hint():
    unguarded = mutant(get("4.1").reference, """
        if i < out.size:
            out[i] = a[i] + 10
    """, "out[i] = a[i] + 10")
    v = evaluate("4.1", unguarded)
    assert v.status == FAIL and "guard" in v.message


def test_4_1_wrong_value_and_wasteful_reads():
    plus_one = mutant(get("4.1").reference, "out[i] = a[i] + 10", "out[i] = a[i] + 1")
    reads_twice = mutant(get("4.1").reference, "out[i] = a[i] + 10", """
        out[i] = a[i] + 5
        out[i] = a[i] + 10
    """)
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


def test_4_3_broadcast_with_the_wrong_sign_fails():
    subtracted = mutant(get("4.3").reference, "col[r] + row[c]", "col[r] - row[c]")
    assert evaluate("4.3", subtracted).status == FAIL


def test_4_4_naive_convolution_is_over_budget():
    v = evaluate("4.4", lib.conv1d_naive)
    assert v.status == FAIL and "read 5 times" in v.message


def test_4_4_missing_halo_is_wrong():
    no_halo = mutant(get("4.4").reference, """
        left = i - radius
        tile[t] = a[left] if left >= 0 else 0.0
        right = i + block
        tile[t + block + radius] = a[right] if right < a.size else 0.0
    """, """
        tile[t] = 0.0                       # the halo zeroed, not loaded
        tile[t + block + radius] = 0.0
    """)
    v = evaluate("4.4", no_halo)
    assert v.status == FAIL and "halo" in v.message


def test_4_4_unpadded_right_halo_reads_unwritten_shared_memory():
    """Without the `else 0.0`, a full last block reads its right halo from shared memory
    nobody wrote: garbage on a GPU, NaN in the tracer (seen at n = 2 * BLOCK)."""
    unpadded = mutant(get("4.4").reference,
                      "tile[t + block + radius] = a[right] if right < a.size else 0.0", """
                      if right < a.size:
                          tile[t + block + radius] = a[right]
                      """)
    v = evaluate("4.4", unpadded)
    assert v.status == FAIL and "n=64" in v.message and "holds NaN" in v.message, v.message


def test_4_5_unpadded_tile_has_bank_conflicts():
    v = evaluate("4.5", lib.transpose_shared(32, 8, 0))
    assert v.status == FAIL and "32-way shared-memory bank conflicts" in v.message


def test_4_5_transpose_without_shared_memory_is_uncoalesced():
    def direct(cuda):                  # right values, writes strided by a whole row
        def kernel(a, out):
            c = cuda.blockIdx.x * 32 + cuda.threadIdx.x
            for k in range(0, 32, 8):
                r = cuda.blockIdx.y * 32 + cuda.threadIdx.y + k
                if r < a.shape[0] and c < a.shape[1]:
                    out[c, r] = a[r, c]
        return kernel
    v = evaluate("4.5", direct)
    assert v.status == FAIL and "sectors per warp request" in v.message


def test_4_5_one_row_per_thread_leaves_the_tile_unfinished():
    v = evaluate("4.5", lib.transpose_naive)      # covers 8 of each tile's 32 rows
    assert v.status == FAIL and "loop k" in v.message


def test_4_6_occupancy_prediction():
    assert evaluate("4.6", get("4.6").reference).status == PASS
    assert evaluate("4.6", None).status == MISSING

    def no_granularity(threads, regs, smem):
        warps = ceil_div(threads, 32)
        return min(64 // warps, 32, 65536 // (regs * threads),
                   (164 * 1024) // (smem + 1024))
    v = evaluate("4.6", no_granularity)
    assert v.status == FAIL and "units of 256" in v.message

    def no_reserve(threads, regs, smem):
        warps = ceil_div(threads, 32)
        per_warp = ceil_div(regs * 32, 256) * 256
        limits = [64 // warps, 32, (65536 // 4 // per_warp) * 4 // warps]
        if smem:
            limits.append((164 * 1024) // smem)
        return min(limits)
    v = evaluate("4.6", no_reserve)
    assert v.status == FAIL and "reserves 1 KB" in v.message

    def no_block_cap(threads, regs, smem):
        warps = ceil_div(threads, 32)
        per_warp = ceil_div(regs * 32, 256) * 256
        return min(64 // warps, (65536 // 4 // per_warp) * 4 // warps,
                   (164 * 1024) // (ceil_div(smem + 1024, 128) * 128))
    v = evaluate("4.6", no_block_cap)
    assert v.status == FAIL and "32 blocks" in v.message

    v = evaluate("4.6", lambda t, r, s: 2048 // t)          # warps only
    assert v.status == FAIL and "take the minimum" in v.message, v.message
