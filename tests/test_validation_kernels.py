"""Bad arguments to labkit.kernels' public entry points get a ValueError or TypeError that
names the parameter (issue 16), before any kernel runs."""
import labkit  # noqa: F401
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import models, ops
from labkit.kernels.occupancy import occupancy
from labkit.kernels.tracer import run_traced

A = np.ones(40, np.float32)
M = np.ones((9, 9), np.float32)
Q = np.ones((12, 8), np.float32)

CASES = [
    # (call, exception, text the message must contain)
    (lambda: ops.add(A, A, block=0), ValueError, "block"),
    (lambda: ops.add(A, A, block=-32), ValueError, "block"),
    (lambda: ops.add(A, A, block=2048), ValueError, "block"),
    (lambda: ops.add(A, A, block=32.5), ValueError, "block"),
    (lambda: ops.add(A, A, block="32"), TypeError, "block"),
    (lambda: ops.add(A, A, block=True), TypeError, "block"),
    (lambda: ops.add(A, A[:5]), ValueError, "same shape"),
    (lambda: ops.add("abc", A), TypeError, "a"),
    (lambda: ops.add(None, A), TypeError, "a"),
    (lambda: ops.add([], []), ValueError, "a"),
    (lambda: ops.add(A, A, runner="cuda"), ValueError, "runner"),
    (lambda: ops.matmul(M, M, tile=0), ValueError, "tile"),
    (lambda: ops.matmul(M, M, tile=8.0 + 0.5), ValueError, "tile"),
    (lambda: ops.matmul(M, M, tile="8"), TypeError, "tile"),
    (lambda: ops.matmul(M, M, variant="coalesced", tile=64), ValueError, "tile"),
    (lambda: ops.matmul(M, M, variant="tiled", tile=12), ValueError, "tile"),
    (lambda: ops.matmul(M, M, variant="register", rows=0), ValueError, "rows"),
    (lambda: ops.matmul(M, M, variant="register", tile=64, rows=2), ValueError, "rows"),
    (lambda: ops.matmul(M, M, variant="magic"), ValueError, "variant"),
    (lambda: ops.matmul(M, M[:3]), ValueError, "inner sizes"),
    (lambda: ops.matmul(M, M, variant="tiled", blocked={"bm": 32}), ValueError, "blocked"),
    (lambda: ops.matmul(M, M, variant="register2d", blocked={"tm": 3}), ValueError, "tm"),
    (lambda: ops.reduce_sum(A, block=0), ValueError, "block"),
    (lambda: ops.reduce_sum(A, block=48), ValueError, "block"),
    (lambda: ops.reduce_sum(A, variant="warp", block=16), ValueError, "block"),
    (lambda: ops.reduce_sum(A, variant="fast", blocks=0), ValueError, "blocks"),
    (lambda: ops.reduce_sum(A, variant="shared", blocks=4), ValueError, "blocks"),
    (lambda: ops.reduce_sum(A, variant="sum"), ValueError, "variant"),
    (lambda: ops.add_matrices(M, M, block=(16,)), ValueError, "block"),
    (lambda: ops.add_matrices(M, M, block=16), TypeError, "block"),
    (lambda: ops.add_matrices(M, M, block=(64, 64)), ValueError, "block"),
    (lambda: ops.broadcast(A, A, block=(0, 8)), ValueError, "block"),
    (lambda: ops.conv1d(A, np.ones(4)), ValueError, "odd"),
    (lambda: ops.conv1d(A, np.ones(3), block=12), ValueError, "block"),
    (lambda: ops.prefix_sum(A, block=0), ValueError, "block"),
    (lambda: ops.softmax(M, variant="block", block=3), ValueError, "block"),
    (lambda: ops.softmax(M, block=0), ValueError, "block"),
    (lambda: ops.softmax(M, variant="warp", block=48), ValueError, "block"),
    (lambda: ops.softmax(M, variant="warp", block=16), ValueError, "block"),
    (lambda: ops.transpose(M, variant="diagonal"), ValueError, "variant"),
    (lambda: ops.transpose(A), ValueError, "a"),
    (lambda: run_traced(lib.vector_add, 0, 32, A, A, A), ValueError, "griddim"),
    (lambda: run_traced(lib.vector_add, 1, 2048, A, A, A), ValueError, "blockdim"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, budget_s=0), ValueError, "budget_s"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, budget_s=float("nan")), ValueError,
     "budget_s"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, max_threads=0), ValueError,
     "max_threads"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, max_elements=2.5), ValueError,
     "max_elements"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, max_accesses=-1), ValueError,
     "max_accesses"),
    (lambda: run_traced(lib.vector_add, 2, 32, A, A, A, max_barrier_waits="many"), TypeError,
     "max_barrier_waits"),
    (lambda: occupancy("A100", 0), ValueError, "threads_per_block"),
    (lambda: occupancy("A100", 128.5), ValueError, "threads_per_block"),
    (lambda: occupancy("A100", 128, "32"), TypeError, "registers_per_thread"),
    (lambda: occupancy("A100", 128, 32, -1), ValueError, "shared_per_block"),
    (lambda: models.matmul_traffic(0, 4, 4, "tiled"), ValueError, "m"),
    (lambda: models.kernel_cost("matmul tiled 32", 0), ValueError, "n"),
    (lambda: models.predict_matmul(4096, "tiled", "TPU"), ValueError, "TPU"),
    (lambda: models.predict_matmul(4096, "cublas"), ValueError, "variant"),
    (lambda: models.fast_reduction_traffic(10, 16, 1), ValueError, "block"),
    (lambda: ops.fast_reduction_blocks(0), ValueError, "n"),
    (lambda: ops.attention(Q, Q, Q[:5]), ValueError, "one shape"),
    (lambda: ops.attention(Q, Q, Q, variant="sparse"), ValueError, "variant"),
    (lambda: ops.attention(Q, Q, Q, rows=3), ValueError, "rows"),
    (lambda: ops.attention(Q, Q, Q, variant="standard", flash=lib.attention_flash(8, 8)),
     ValueError, "flash"),
    (lambda: ops.attention("q", Q, Q), TypeError, "q"),
    (lambda: ops.attention_traffic(()), ValueError, "sizes"),
    (lambda: ops.attention_traffic((8, 0)), ValueError, "sizes"),
    (lambda: ops.attention_traffic((8, 128)), ValueError, "sizes"),
    (lambda: ops.attention_traffic((8,), d=6), ValueError, "d"),
    (lambda: ops.attention_traffic((8,), model_sizes="big"), ValueError, "model_sizes"),
    (lambda: models.attention_traffic(0, 8, "flash"), ValueError, "n"),
    (lambda: models.attention_traffic(8, 8, "ring"), ValueError, "variant"),
    (lambda: models.attention_traffic(8, 8, "flash", rows=0), ValueError, "rows"),
    (lambda: ops.work_table({}), ValueError, "launches"),
    (lambda: ops.work_table({"x": lib.add_ten}, A, A), ValueError, "x"),
    (lambda: lib.softmax_rows_warp(3), ValueError, "warps"),
    (lambda: lib.attention_flash(8, 3), ValueError, "rows"),
    (lambda: lib.attention_flash(64, 32), ValueError, r"d \* rows"),
    (lambda: lib.histogram_shared(12), ValueError, "bins"),
    (lambda: lib.blur_shared(64, 32), ValueError, r"bx \* by"),
]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_bad_argument_names_the_parameter(k):
    call, exc, text = CASES[k]
    with pytest.raises(exc, match=text):
        call()


def test_integral_floats_are_accepted_as_counts():
    np.testing.assert_allclose(ops.add(A, A, block=32.0).value, 2 * A)
    np.testing.assert_allclose(ops.matmul(M, M, tile=8.0).value, M @ M)


def test_a_bool_is_not_a_block_size():
    with pytest.raises(TypeError, match="block"):
        ops.reduce_sum(A, block=True)
