"""labkit.kernels.registry (issue 26): every entry of KERNELS runs under the tracer on a small
non-uniform input and matches numpy, through its own launch rule and through the op; every
closed form an entry holds equals the tracer's counts; lookup's errors; and a new entry
reaches the ops, the models' tuples and the checks without another edit."""
import dataclasses
import math
from pathlib import Path

import labkit  # noqa: F401  (selects the CUDA simulator before numba is imported)
import numpy as np
import pytest

from labkit.kernels import library as lib
from labkit.kernels import models, ops, registry, timing
from labkit.kernels.analysis import element_counts, total_sectors, traffic
from labkit.kernels.registry import (ATTENTION, KERNELS, MATMUL, REDUCTION, SOFTMAX,
                                     TRANSPOSE, lookup, variants)
from labkit.kernels.trace import WRITE
from labkit.kernels.tracer import run_traced

REPO = Path(__file__).resolve().parents[1]
rng = np.random.default_rng(2026)
X = (rng.standard_normal(201) * 2 + 0.3).astype(np.float32)          # 201: no block divides
A = rng.standard_normal((13, 11)).astype(np.float32)
B = rng.standard_normal((11, 9)).astype(np.float32)
T = rng.standard_normal((19, 37)).astype(np.float32)
S = (rng.standard_normal((7, 45)) * 3).astype(np.float32)
Q, K, V = (rng.standard_normal((13, 8)).astype(np.float32) for _ in range(3))
SMALL_2D = dict(bm=16, bn=16, bk=4, tm=2, tn=2)
ENTRIES = [(f, v) for f in KERNELS for v in KERNELS[f]]


def softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def attention_np(q, k, v):
    s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
    return softmax_np(s) @ v


def matmul_shape(kernel):
    """A small shape of the rung: the 2-D tiles at 16 x 16, else 8 x 8 tiles of 2 rows."""
    return kernel.shape(8, 2, SMALL_2D if kernel.blocked else None)


def by_entry(family, kernel):
    """(value, traces) of the entry's own launch rule under the tracer."""
    if family == MATMUL:
        grid, block, fn = kernel.plan(A.shape[0], B.shape[1], matmul_shape(kernel))
        c = np.zeros((A.shape[0], B.shape[1]), np.float32)
        return c, [run_traced(fn, grid, block, A.copy(), B.copy(), c)]
    if family == TRANSPOSE:
        grid, block, fn = kernel.plan(*T.shape)
        out = np.zeros(T.T.shape, np.float32)
        return out, [run_traced(fn, grid, block, T.copy(), out)]
    if family == SOFTMAX:
        grid, block, fn = kernel.plan(S.shape[0], kernel.block(64))
        out = np.zeros_like(S)
        return out, [run_traced(fn, grid, block, S.copy(), out)]
    if family == REDUCTION:
        run = kernel.run(X.copy(), kernel.block(64), None, "trace")
    else:
        run = kernel.run(Q, K, V, "trace", None, 8)
    return run.value, list(run.traces)


def by_op(family, variant):
    kernel = KERNELS[family][variant]
    if family == MATMUL:
        return ops.matmul(A, B, variant=variant, **kernel.keywords(matmul_shape(kernel)))
    if family == TRANSPOSE:
        return ops.transpose(T, variant=variant)
    if family == SOFTMAX:
        return ops.softmax(S, variant=variant, block=64)
    if family == REDUCTION:
        return ops.reduce_sum(X, variant=variant)
    return ops.attention(Q, K, V, variant=variant)


WANT = {MATMUL: A @ B, TRANSPOSE: T.T, SOFTMAX: softmax_np(S),
        REDUCTION: np.array([X.astype(np.float64).sum()]), ATTENTION: attention_np(Q, K, V)}


def test_the_families_and_their_order():
    assert list(KERNELS) == [MATMUL, REDUCTION, TRANSPOSE, SOFTMAX, ATTENTION]
    assert set(WANT) == set(KERNELS)            # a new family needs an input here
    assert list(KERNELS[MATMUL]) == ["naive", "coalesced", "tiled", "register", "register2d"]
    assert list(KERNELS[REDUCTION]) == ["atomic", "interleaved", "strided", "shared", "warp",
                                        "fast"]
    assert list(KERNELS[SOFTMAX]) == ["naive", "online", "block", "warp"]
    for family, entries in KERNELS.items():
        for variant, kernel in entries.items():
            assert kernel.variant == variant and dataclasses.is_dataclass(kernel)
            with pytest.raises(dataclasses.FrozenInstanceError):
                kernel.variant = "other"


@pytest.mark.parametrize("family, variant", ENTRIES)
def test_every_entry_runs_under_the_tracer_and_matches_numpy(family, variant):
    kernel = KERNELS[family][variant]
    value, traces = by_entry(family, kernel)
    np.testing.assert_allclose(value, WANT[family], rtol=1e-4, atol=1e-4)
    assert traces and all(t.n_threads > 0 for t in traces)
    # the op reads the same entry: the same launches, bit for bit
    got = by_op(family, variant)
    np.testing.assert_array_equal(got.value, value)
    assert [total_sectors(t) for t in got.traces] == [total_sectors(t) for t in traces]
    if kernel.factory is not None:          # the standard attention is other entries' steps
        assert getattr(lib, kernel.factory.__name__) is kernel.factory
    for step in getattr(kernel, "steps", ()):
        assert step[1] in KERNELS[step[0]]


@pytest.mark.parametrize("variant", list(KERNELS[MATMUL]))
@pytest.mark.parametrize("m, k, n", [(13, 11, 9), (16, 24, 32)])
def test_each_matmul_entrys_traffic_is_the_traced_one(variant, m, k, n):
    kernel = KERNELS[MATMUL][variant]
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    p = matmul_shape(kernel)
    trace = ops.matmul(a, b, variant=variant, **kernel.keywords(p)).trace
    t, want = traffic(trace), kernel.traffic(m, n, k, p)
    assert (t.per_array["a"]["reads"], t.per_array["b"]["reads"],
            t.per_array["c"]["writes"]) == (want.a_reads, want.b_reads, want.c_writes)
    assert (t.shared_reads, t.shared_writes) == (want.shared_reads, want.shared_writes)
    assert element_counts(trace, "a").max() == want.max_reads_a
    assert want == models.matmul_traffic(m, n, k, variant, 8, 2, SMALL_2D)


@pytest.mark.parametrize("variant", list(KERNELS[REDUCTION]))
@pytest.mark.parametrize("n, block, blocks", [(201, 64, 2), (33, 32, 1)])
def test_each_reduction_entrys_first_pass_is_the_traced_one(variant, n, block, blocks):
    kernel = KERNELS[REDUCTION][variant]
    x = rng.standard_normal(n).astype(np.float32)
    run = ops.reduce_sum(x, variant=variant, block=block,
                         blocks=blocks if kernel.takes_blocks else None)
    np.testing.assert_allclose(run.value, [x.sum()], rtol=1e-5, atol=1e-5)
    assert run.trace.shuffles == kernel.shuffles(n, block, blocks)
    assert len(run.traces) == (math.ceil(math.log(n, block)) if kernel.relaunch else 1)
    if kernel.traffic is None:                    # warp: no closed form of its traffic yet
        assert variant == "warp"
        return
    t, want = traffic(run.trace), kernel.traffic(n, block, blocks)
    assert (t.global_reads, t.global_writes, t.global_atomics, t.shared_reads,
            t.shared_writes) == (want.global_reads, want.global_writes, want.global_atomics,
                                 want.shared_reads, want.shared_writes)


@pytest.mark.parametrize("variant", list(KERNELS[SOFTMAX]))
def test_each_softmax_entry_reads_x_as_often_as_it_says(variant):
    kernel = KERNELS[SOFTMAX][variant]
    trace = ops.softmax(S, variant=variant, block=64).trace
    assert (element_counts(trace, "x") == kernel.reads).all()
    assert (element_counts(trace, "out", WRITE) == 1).all()


@pytest.mark.parametrize("variant", list(KERNELS[ATTENTION]))
@pytest.mark.parametrize("n", [8, 13, 16])
def test_each_attention_entrys_bytes_are_the_traced_ones(variant, n):
    q, k, v = (rng.standard_normal((n, 8)).astype(np.float32) for _ in range(3))
    launches = ops.attention(q, k, v, variant=variant).traces
    want = KERNELS[ATTENTION][variant].traffic(n, 8, variant, 8, 8)
    assert sum(traffic(t).global_bytes for t in launches) == want.total
    assert len(launches) == max(1, len(KERNELS[ATTENTION][variant].steps))


def test_the_benchmark_fields_of_the_ladder():
    for variant, kernel in KERNELS[MATMUL].items():
        p = kernel.ladder_shape
        grid, block, fn = ops.matmul_launch(variant, 4096, 4096, **kernel.keywords(p))
        assert kernel.block_tile(p)[2] == math.prod(block)          # threads per block
        assert kernel.registers > 0 and p in kernel.checked_shapes
        assert timing.launch_shape(variant) == kernel.keywords(p)
    assert [KERNELS[MATMUL][v].ffma_per_phase(KERNELS[MATMUL][v].ladder_shape)
            for v in models.LADDER] == [None, None, 32, 256, 512]
    assert {v: k.ptx_shape for v, k in KERNELS[REDUCTION].items() if k.ptx_shape} == {
        "shared": dict(block=256), "warp": dict(block=256), "fast": dict(block=256, unroll=4)}


def test_lookup_names_the_parameter_and_lists_the_keys():
    assert lookup(MATMUL, "tiled") is KERNELS[MATMUL]["tiled"]
    with pytest.raises(ValueError, match=r"^variant must be one of 'naive', 'coalesced', "
                                         r"'tiled', 'register', 'register2d'; got 'cublas'$"):
        lookup(MATMUL, "cublas")
    with pytest.raises(ValueError, match=r"^family must be one of 'matmul', 'reduction', "
                                         r"'transpose', 'softmax', 'attention'; got 'scan'$"):
        lookup("scan", "naive")
    with pytest.raises(ValueError, match=r"variant must be one of 'standard', 'flash'; got 1$"):
        lookup(ATTENTION, 1)
    with pytest.raises(ValueError, match="variant must be one of"):
        lookup(TRANSPOSE, ["naive"])                       # unhashable: still a ValueError
    assert variants(REDUCTION, shared_tree=True) == ("interleaved", "strided", "shared")
    assert variants(MATMUL, blocked=True) == ("register2d",)
    assert registry.names(REDUCTION, takes_blocks=True) == "variant='fast'"


def test_the_published_tuples_are_the_registrys_keys():
    assert ops.MATMULS == models.LADDER == tuple(KERNELS[MATMUL])
    assert ops.REDUCTIONS == tuple(KERNELS[REDUCTION])
    assert ops.SOFTMAXES == tuple(KERNELS[SOFTMAX])
    assert ops.ATTENTIONS == tuple(KERNELS[ATTENTION])
    assert models.LADDER_REGISTERS == {v: k.registers for v, k in KERNELS[MATMUL].items()}


def test_a_new_entry_is_one_line(monkeypatch):
    """Add a softmax variant to the table only: the op launches it, lookup lists it."""
    table = dict(KERNELS[SOFTMAX])
    table["online_again"] = dataclasses.replace(table["online"], variant="online_again")
    monkeypatch.setitem(KERNELS, SOFTMAX, table)
    got = ops.softmax(S, variant="online_again")
    np.testing.assert_allclose(got.value, softmax_np(S), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="'online_again'; got 'nope'"):
        ops.softmax(S, variant="nope")


def test_no_if_chain_chooses_a_variant():
    """The places that chose variants by name read the registry now."""
    places = ["labkit/kernels/ops.py", "labkit/kernels/models.py", "labkit/kernels/timing.py",
              "benchmarks/ptx_report.py", "benchmarks/gpu_check.py",
              "solutions/04_gpu_cuda.py", "solutions/05_fast_kernels.py"]
    for place in places:
        text = (REPO / place).read_text(encoding="utf-8")
        for chain in ("variant ==", "variant !=", "variant in (", 'for variant in ("'):
            assert chain not in text, (place, chain)
