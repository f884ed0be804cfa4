"""The kernels behind chapter 04's and 05's labs (histogram, blur, warp-per-row softmax,
FlashAttention) against numpy and torch, their traffic against closed forms, the attention
traffic sweep and plot, registers per thread, and — where a CUDA toolchain is installed —
every lab kernel and every solution kernel compiled by numba-cuda."""
import json
import subprocess
import sys
from pathlib import Path

import labkit  # noqa: F401
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import models, ops
from labkit.kernels.analysis import element_counts, races, summarize, traffic
from labkit.kernels.tracer import run_traced

rng = np.random.default_rng(7)
REPO = Path(__file__).resolve().parents[1]


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sdpa(q, k, v):
    import torch
    t = [torch.from_numpy(a)[None] for a in (q, k, v)]
    return torch.nn.functional.scaled_dot_product_attention(*t)[0].numpy()


# ---- histogram and blur -------------------------------------------------------------------

@pytest.mark.parametrize("runner", ["trace", "numba"])
def test_histograms_count_like_bincount(runner):
    a = np.minimum(rng.geometric(0.3, size=700) - 1, 15).astype(np.int32)
    want = np.bincount(a, minlength=16)
    for fn in (lib.histogram_shared(16), lib.histogram_global):
        counts = np.zeros(16, np.int32)
        ops.launch(fn, 3, 64, a, counts, runner=runner)
        np.testing.assert_array_equal(counts, want)


def test_privatization_makes_one_global_atomic_per_bin_and_block():
    a = np.arange(700, dtype=np.int32) % 16
    shared = run_traced(lib.histogram_shared(16), 3, 64, a, np.zeros(16, np.int32))
    naive = run_traced(lib.histogram_global, 3, 64, a, np.zeros(16, np.int32))
    assert traffic(shared).global_atomics == 3 * 16 and traffic(naive).global_atomics == 700
    assert element_counts(shared, "a").max() == 1 and races(shared) == []


def _blur_reference(img):
    padded = np.pad(img, 1)
    return sum(padded[1 + dr:1 + dr + img.shape[0], 1 + dc:1 + dc + img.shape[1]]
               for dr in (-1, 0, 1) for dc in (-1, 0, 1)) / 9.0


@pytest.mark.parametrize("runner", ["trace", "numba"])
def test_blurs_equal_the_padded_mean(runner):
    img = rng.gamma(2.0, size=(19, 37)).astype(np.float32)
    for fn in (lib.blur_shared(16, 8), lib.blur_naive):
        out = np.zeros_like(img)
        ops.launch(fn, (3, 3), (16, 8), img, out, runner=runner)
        np.testing.assert_allclose(out, _blur_reference(img), rtol=1e-5, atol=1e-6)


def test_the_tiled_blur_reads_an_element_at_most_four_times():
    img = np.ones((24, 40), np.float32)
    tiled = run_traced(lib.blur_shared(16, 8), (3, 3), (16, 8), img, np.zeros_like(img))
    naive = run_traced(lib.blur_naive, (3, 3), (16, 8), img, np.zeros_like(img))
    reads = element_counts(tiled, "img")
    # a corner of a block's tile lies in four blocks' halo'd tiles; an inner element in one
    assert reads.max() == 4 and reads[1, 1] == 1 and element_counts(naive, "img").max() == 9
    assert races(tiled) == []


# ---- softmax, one warp per row ---------------------------------------------------------

@pytest.mark.parametrize("runner", ["trace", "numba"])
def test_warp_softmax_equals_numpy(runner):
    x = (rng.standard_normal((7, 70)) * 4).astype(np.float32)
    x[3, 69] = 60.0
    out = np.zeros_like(x)
    ops.launch(lib.softmax_rows_warp(4), 2, (32, 4), x, out, runner=runner)
    np.testing.assert_allclose(out, _softmax(x), rtol=1e-4, atol=1e-6)


def test_warp_softmax_is_coalesced_and_shuffles_ten_times_per_lane():
    x = rng.standard_normal((8, 64)).astype(np.float32)
    warp = run_traced(lib.softmax_rows_warp(4), 2, (32, 4), x, np.zeros_like(x))
    thread = run_traced(lib.softmax_rows_online, 1, 32, x, np.zeros_like(x))
    w, t = summarize(warp), summarize(thread)
    assert element_counts(warp, "x").max() == 2 and w.traffic.global_writes == x.size
    assert warp.shuffles == 8 * 32 * 10
    # a warp reads 32 consecutive floats: 4 sectors; one thread per row: a sector a lane
    assert w.sectors_per_request == 4 and t.sectors_per_request == 8
    assert t.total_sectors == 8 * w.total_sectors


# ---- attention ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [5, 8, 21])
def test_flash_and_standard_attention_equal_torch(n):
    q, k, v = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
    k[-1] = 5 * q[0]
    want = _sdpa(q, k, v)
    for variant in ops.ATTENTIONS:
        got = ops.attention(q, k, v, variant=variant).value
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_flash_attention_runs_on_numbas_simulator():
    q, k, v = (rng.standard_normal((11, 8)).astype(np.float32) for _ in range(3))
    got = ops.attention(q, k, v, runner="numba").value
    np.testing.assert_allclose(got, _sdpa(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [8, 16, 24])
def test_attention_traffic_equals_the_closed_forms(n):
    q, k, v = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
    for variant in ops.ATTENTIONS:
        launches = ops.attention(q, k, v, variant=variant).traces
        model = models.attention_traffic(n, 8, variant)
        requested = sum(traffic(t).global_bytes for t in launches)
        sectors = sum(summarize(t).total_sectors for t in launches)
        assert requested == model.total == 32 * sectors
    flash = ops.attention(q, k, v).trace
    assert element_counts(flash, "k").max() == -(-n // 8) and races(flash) == []
    assert summarize(flash).conflict_replays == 2 * (-(-n // 8)) ** 2   # the padded store


def test_attention_bytes_off_the_tile_grid_are_element_counts():
    n = 13
    q, k, v = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
    for variant in ops.ATTENTIONS:
        launches = ops.attention(q, k, v, variant=variant).traces
        got = sum(traffic(t).global_bytes for t in launches)
        assert got == models.attention_traffic(n, 8, variant).total
    std = models.attention_traffic(n, 8, "standard")
    assert std.scratch == 2 * 4 * n * n and models.attention_traffic(n, 8, "flash").scratch == 0


def test_the_traffic_sweep_matches_its_model_and_grows_the_gap():
    result = ops.attention_traffic((8, 16, 24))
    assert result.standard_bytes == tuple(models.attention_traffic(n, 8, "standard").total
                                          for n in result.sizes)
    assert result.flash_bytes == tuple(models.attention_traffic(n, 8, "flash").total
                                       for n in result.sizes)
    assert all(m < s for m, s in zip(result.matrix_bytes, result.standard_bytes))
    assert list(result.ratios) == sorted(result.ratios) and result.ratios[0] > 2
    # the closed forms tend to (6 N^2 + 2 N^2 d / 8 + N^2 ceil(d / 8)) / (2 N^2 d / 8)
    assert result.model_standard[-1] / result.model_flash[-1] == pytest.approx(4.5, rel=0.01)
    from labkit.kernels.plots import plot_attention_traffic
    fig = plot_attention_traffic(result)
    assert len(fig.axes[0].lines) == 5
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_the_sweep_refuses_a_fused_kernel_that_disagrees():
    from mutants import mutant
    wrong = mutant(lib.attention_flash(8, 8), "o[i, x] = acc / l", "o[i, x] = acc")
    with pytest.raises(ValueError, match="differs from the standard"):
        ops.attention_traffic((8,), flash=wrong)


# ---- work tables and registers -----------------------------------------------------------

def test_work_table_runs_each_kernel_on_fresh_copies():
    a = rng.standard_normal(100).astype(np.float32)
    out = np.zeros_like(a)
    rows = ops.work_table({"ten": (lib.add_ten, 4, 32), "again": (lib.add_ten, 4, 32)}, a, out)
    assert not out.any() and [r.name for r in rows] == ["ten", "again"]
    np.testing.assert_allclose(rows[0].arrays[1], a + 10)
    assert rows[0].total_sectors == rows[1].total_sectors == 2 * (3 * 4 + 1)
    text = ops.format_work(rows, per=100, per_what="per element")
    assert text.splitlines()[0].endswith("shared reads per element") and len(text.splitlines()) == 3


def test_registers_from_the_tracer_without_a_compiler():
    from labkit.kernels.registers import registers
    a = np.ones((20, 13), np.float32)
    b = np.ones((13, 17), np.float32)
    c = np.zeros((20, 17), np.float32)
    got = registers(lib.matmul_register_blocked(16, 4), (2, 2), (16, 4), a, b, c,
                    compiler=False)
    assert (got.ptxas, got.array_words, got.register_arrays, got.per_thread) == (
        None, 4, ("acc",), 4)
    assert "at least 4 registers" in str(got) and not c.any()
    none = registers(lib.matmul_tiled(8), (3, 3), (8, 8), a, b, c, compiler=False)
    assert none.array_words == 0 and none.memory_arrays == ()


def test_the_compilers_subprocess_imports_what_a_library_kernel_calls():
    """registers() compiles a kernel from its factory's source in a subprocess: the numbers
    the factory reads go there as values, the modules and the library's device functions it
    calls as where to import them from; a notebook's own function (``__main__``) cannot be
    imported there and is not named."""
    from labkit.kernels.registers import _constants, _imports
    fast = lib.reduce_fast(64, 4)
    assert _constants(fast) == {"GRID_MASK": lib.GRID_MASK, "block": 64, "n_warps": 2,
                                "unroll": 4}
    assert _imports(fast) == {"warp_sum": ("labkit.kernels.library.reductions", "warp_sum")}
    assert _imports(lib.softmax_rows_block(32)) == {
        "math": ("math", ""), "operator": ("operator", ""),
        "sequential_tree": ("labkit.kernels.library.reductions", "sequential_tree")}

    def helper(v):
        return v
    helper.__module__ = "__main__"      # as a function defined in a notebook is

    def factory(cuda):
        def kernel(a):
            a[0] = helper(a[0])
        return kernel
    assert _imports(factory) == {}


def _toolchain_env():
    """The environment, with ``$LABKIT_NVRTC_DIR`` (a folder holding NVIDIA's libnvrtc,
    which the course's environment does not install) on the library path if it is set."""
    import os
    env = dict(os.environ)
    d = env.get("LABKIT_NVRTC_DIR", "")
    if d:
        env["LD_LIBRARY_PATH"] = d + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    return env


_COMPILE = """
import ast, json, math, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path[:0] = sys.argv[1:2]
try:
    from numba import cuda
    from labkit.kernels import library as lib
    from labkit.kernels.registers import registers
    import labkit.check.ch04 as c4, labkit.check.ch05 as c5
    F1, F2, I1 = "float32[::1]", "float32[:, ::1]", "int32[::1]"
    kernels = {"histogram_shared": (lib.histogram_shared(16), (I1, I1)),
               "blur_shared": (lib.blur_shared(16, 8), (F2, F2)),
               "softmax_rows_warp": (lib.softmax_rows_warp(4), (F2, F2)),
               "attention_flash": (lib.attention_flash(8, 8), (F2,) * 4)}
    want = {"add_ten": (F1, F1), "add_2d": (F2,) * 3, "broadcast_add": (F1, F1, F2),
            "conv1d_shared": (F1,) * 3, "transpose_tile": (F2, F2), "histogram": (I1, I1),
            "blur": (F2, F2), "reduce_block": (F1, F1), "scan_block": (F1,) * 3,
            "matmul_tiled": (F2,) * 3, "matmul_register": (F2,) * 3,
            "softmax_online": (F2, F2), "softmax_warp": (F2, F2), "attention_flash": (F2,) * 4}
    ns = {"math": math}
    for m in (c4, c5):
        ns.update({k: getattr(m, k) for k in dir(m) if k.isupper()})
    for name in ("04_gpu_cuda", "05_fast_kernels"):
        tree = ast.parse(open(os.path.join(sys.argv[1], "solutions", name + ".py")).read())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in want:
                exec(compile(ast.Module([node], []), name, "exec"), ns)
                kernels[name + ":" + node.name] = (ns[node.name], want[node.name])
    out = {}
    for key, (fn, sig) in kernels.items():
        ptx, _ = cuda.compile_ptx(fn(cuda), "(" + ", ".join(sig) + ",)", cc=(9, 0))
        out[key] = "ld.local" in ptx or "st.local" in ptx
except Exception as exc:
    if "Failure finding" in str(exc) or "libnvrtc" in str(exc) or "NVVM" in str(exc):
        out = {"missing": repr(exc)[:300]}
    else:
        raise
print(json.dumps(out))
"""


def test_every_lab_and_solution_kernel_compiles_with_numba_cuda():
    """Run where libnvvm and libnvrtc are installed (no GPU needed): what the simulator
    accepts, the compiler must too (e.g. a shared array's shape must be a constant)."""
    run = subprocess.run([sys.executable, "-c", _COMPILE, str(REPO)], capture_output=True,
                         text=True, timeout=600, env=_toolchain_env())
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    if "missing" in got:
        pytest.skip(f"no CUDA toolchain to compile with: {got['missing']}")
    assert len(got) == 4 + 14
    # no local memory anywhere: the register-blocked matmul's accumulators are registers
    assert not any(got.values()), got
