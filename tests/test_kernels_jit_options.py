"""Kernel factories that state options for numba.cuda.jit (``jit_options``): what the
2-D blocked matmul asks for, that numba_run.compiled passes them on a GPU only, and that
the simulator runs such a kernel without them."""
import labkit  # noqa: F401  (selects the CUDA simulator before numba is imported)
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import numba_run, ops


def test_large_micro_tiles_cap_registers_small_ones_do_not():
    # 8 x 8 micro-tiles: 64 accumulators + 16 operands >= half of the 128 budget
    assert lib.matmul_2d_blocked(128, 128, 8, 8, 8).jit_options == {"max_registers": 128}
    assert lib.matmul_2d_blocked(128, 128, 4, 8, 8).jit_options == {"max_registers": 128}
    for shape in [(64, 64, 8, 4, 4), (128, 64, 8, 8, 4), (16, 16, 4, 2, 2)]:
        assert not hasattr(lib.matmul_2d_blocked(*shape), "jit_options"), shape
    # 1024 threads x 128 registers would not fit an SM's 64 K: the cap falls to 64
    assert lib.register_limit(256, 128) == 128 and lib.register_limit(1024, 128) == 64
    assert lib.matmul_2d_blocked(256, 256, 8, 8, 8).jit_options == {"max_registers": 64}


def test_compiled_passes_jit_options_on_a_gpu_only(monkeypatch):
    from numba import cuda
    seen = []
    monkeypatch.setattr(cuda, "jit", lambda fn, **options: seen.append(options) or fn)

    def factory(cuda_module):
        def kernel(out):
            out[0] = 1.0
        return kernel
    factory.jit_options = {"max_registers": 96}

    def plain(cuda_module):
        return factory(cuda_module)

    try:
        for on_simulator in (False, True):
            monkeypatch.setattr(numba_run, "on_simulator", lambda s=on_simulator: s)
            for fn in (factory, plain):
                numba_run._COMPILED.pop(fn, None)
                numba_run.compiled(fn)
    finally:
        for fn in (factory, plain):
            numba_run._COMPILED.pop(fn, None)
    assert seen == [{"max_registers": 96}, {}, {}, {}]


def test_the_simulator_runs_a_capped_kernel():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 12)).astype(np.float32)      # 3 phases of bk = 4
    b = rng.standard_normal((12, 32)).astype(np.float32)
    shape = dict(bm=64, bn=32, bk=4, tm=8, tn=8)              # 32 threads, 8 x 8 each
    assert lib.matmul_2d_blocked(*shape.values()).jit_options == {"max_registers": 128}
    got = ops.matmul(a, b, variant="register2d", runner="numba", blocked=shape)
    np.testing.assert_allclose(got.value, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["naive", "coalesced", "tiled"])
def test_ladder_kernels_guard_ragged_sizes(variant):
    # the while loops count k to a.shape[1] and the masked thread index stays in the tile:
    # sizes that are not multiples of the tile, and k shorter than one tile
    rng = np.random.default_rng(6)
    for m, k, n in [(17, 5, 9), (9, 33, 18)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        for runner in ("trace", "numba"):
            got = ops.matmul(a, b, variant=variant, runner=runner, tile=8)
            np.testing.assert_allclose(got.value, a @ b, rtol=1e-4, atol=1e-4)
