"""Simulated collectives: exact sums, message counts vs the α-β formulas, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.parallel.collectives import (all_gather, all_reduce, broadcast, chunk_bounds,
                                         coverage, reduce_scatter, simulated_time)
from labkit.parallel.cost import ALGORITHMS, POW2_ONLY, cost_terms, collective_time

WORLDS = range(1, 10)


def _data(p, n, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
            for _ in range(p)]


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["all_reduce"])
def test_all_reduce_is_the_sum(p, alg):
    data = _data(p, 3 * p + 2, seed=p)          # size not a multiple of p
    run = all_reduce(data, alg)
    want = np.sum(data, axis=0)
    for out in run.outputs:
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-9)
    assert all(np.array_equal(a, b) for a, b in zip(data, _data(p, 3 * p + 2, seed=p)))


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["all_reduce"])
def test_all_reduce_integer_data_is_exact(p, alg):
    rng = np.random.default_rng(100 + p)
    data = [rng.integers(-1000, 1000, size=2 * p + 1).astype(np.float32) for _ in range(p)]
    for out in all_reduce(data, alg).outputs:
        assert np.array_equal(out, np.sum(data, axis=0))


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["all_reduce"])
def test_all_reduce_counts_and_time_match_formulas(p, alg):
    q = 1 << (p.bit_length() - 1)
    n = 4 * p * q                                   # divisible by p and by p'
    run = all_reduce(_data(p, n, 1, np.float32), alg)
    terms = cost_terms("all_reduce", alg, run.nbytes, p)
    assert run.messages == terms.messages
    assert run.steps == terms.latency_count
    assert run.bytes_sent == pytest.approx(terms.total_bytes)
    kw = dict(alpha=3e-6, beta=1e-9, gamma=2e-10)
    assert simulated_time(run, **kw) == pytest.approx(
        collective_time("all_reduce", alg, run.nbytes, p, **kw), rel=1e-12)
    assert (coverage(run)[-1] == p).all()


def test_ring_hand_counts():
    run = all_reduce(_data(4, 8, 0, np.float32), "ring")
    assert (run.steps, run.messages) == (6, 24)      # 2(p-1) steps, 2p(p-1) messages
    assert all(m.nbytes == 8 for m in run.log)       # 2 float32 per chunk
    assert all(m.receiver == (m.sender + 1) % 4 for m in run.log)
    links = run.link_bytes()
    assert links[0, 1] == 6 * 8 and links[1, 0] == 0


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["reduce_scatter"])
def test_reduce_scatter(p, alg):
    if (("reduce_scatter", alg) in POW2_ONLY) and p & (p - 1):
        with pytest.raises(ValueError, match="power of two"):
            reduce_scatter(_data(p, 2 * p, 0), alg)
        return
    data = _data(p, 2 * p + 3, seed=7 * p)
    run = reduce_scatter(data, alg)
    for got, want in zip(run.outputs, np.array_split(np.sum(data, axis=0), p)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    terms = cost_terms("reduce_scatter", alg, run.nbytes, p)
    assert (run.messages, run.steps) == (terms.messages, terms.latency_count)
    assert run.bytes_sent == pytest.approx(terms.total_bytes)


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["all_gather"])
def test_all_gather(p, alg):
    rng = np.random.default_rng(p)
    chunks = [rng.standard_normal(rng.integers(1, 5)) for _ in range(p)]
    if (("all_gather", alg) in POW2_ONLY) and p & (p - 1):
        with pytest.raises(ValueError, match="power of two"):
            all_gather(chunks, alg)
        return
    run = all_gather(chunks, alg)
    for out in run.outputs:
        assert np.array_equal(out, np.concatenate(chunks))
    even = all_gather([rng.standard_normal(3) for _ in range(p)], alg)
    terms = cost_terms("all_gather", alg, even.nbytes, p)
    assert (even.messages, even.steps) == (terms.messages, terms.latency_count)
    assert simulated_time(even, alpha=1.0, beta=0.5) == pytest.approx(terms.time(1.0, 0.5))


@pytest.mark.parametrize("p", WORLDS)
@pytest.mark.parametrize("alg", ALGORITHMS["broadcast"])
def test_broadcast_every_root(p, alg):
    x = np.random.default_rng(p).standard_normal(5)
    for root in range(p):
        run = broadcast(x, p, root, alg)
        assert all(np.array_equal(o, x) for o in run.outputs)
        terms = cost_terms("broadcast", alg, run.nbytes, p)
        assert (run.messages, run.steps) == (terms.messages, terms.latency_count)
        assert not any(m.receiver == root for m in run.log)


def test_tree_steps_are_ceil_log2():
    assert [all_reduce(_data(p, 4, 0), "tree").steps for p in (2, 3, 4, 5, 8, 9)] == \
        [2, 4, 4, 6, 6, 8]


def test_inplace_writes_the_callers_buffers():
    data = _data(5, 11, 3)
    want = np.sum(data, axis=0)
    all_reduce(data, "ring", inplace=True)
    for d in data:
        np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 9), extra=st.integers(0, 20), seed=st.integers(0, 10**6),
       alg=st.sampled_from(ALGORITHMS["all_reduce"]))
def test_all_reduce_property(p, extra, seed, alg):
    data = _data(p, p + extra, seed)
    for out in all_reduce(data, alg).outputs:
        np.testing.assert_allclose(out, np.sum(data, axis=0), rtol=1e-10, atol=1e-8)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="world >= 1"):
        all_reduce([], "ring")
    with pytest.raises(ValueError, match="same size"):
        all_reduce([np.ones(4), np.ones(5)], "ring")
    with pytest.raises(ValueError, match="size must be >= 3"):
        all_reduce([np.ones(2)] * 3, "ring")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        all_reduce([np.ones(2)] * 2, "butterfly")
    with pytest.raises(ValueError, match="1-D"):
        all_reduce([np.ones((2, 2))] * 2, "tree")
    with pytest.raises(ValueError, match=r"root must be an integer in \[0, 3\]"):
        broadcast(np.ones(3), 4, root=4)
    with pytest.raises(ValueError, match="world must be"):
        broadcast(np.ones(3), 0)
    with pytest.raises(ValueError, match="world must be an integer >= 1"):
        chunk_bounds(5, 0)
    assert chunk_bounds(7, 3) == (0, 3, 5, 7)


def test_compare_allreduce_counts_by_hand():
    # 4 ranks × 8 float32 = 32 B vector. Naive: rank 0 receives 3 vectors, sends 3 back.
    from labkit.parallel.collectives import compare_allreduce
    data = [np.arange(8, dtype=np.float32) * (r + 1) for r in range(4)]
    rows = {s.algorithm: s for s in compare_allreduce(data)}
    assert tuple(rows) == ALGORITHMS["all_reduce"]
    assert all(s.correct and s.world == 4 and s.nbytes == 32 for s in rows.values())
    naive, ring, tree = rows["naive"], rows["ring"], rows["tree"]
    assert (naive.steps, naive.messages, naive.bytes_sent, naive.max_bytes_into_rank) == \
        (6, 6, 192, 96)
    # ring: 2(p-1) = 6 steps of p = 4 messages of one 8-byte chunk; each rank gets 6 chunks
    assert (ring.steps, ring.messages, ring.bytes_sent, ring.max_bytes_into_rank) == \
        (6, 24, 192, 48)
    # binomial tree: rank 0 receives from 1 and 2 (2 × 32 B) in the reduce
    assert (tree.steps, tree.messages, tree.max_bytes_into_rank) == (4, 6, 64)
    assert ring.terms.latency_count == 6 and ring.terms.total_bytes == 192


def test_compare_allreduce_times_match_formulas_and_hand_values():
    from labkit.parallel.collectives import compare_allreduce, uniform_vectors
    kw = dict(alpha=5e-6, beta=1 / 25e9, gamma=1e-11)
    for p in (3, 4, 6):
        for s in compare_allreduce(uniform_vectors(p, p * 4096), **kw):
            assert s.simulated_s == pytest.approx(s.formula_s, rel=1e-12)
            assert s.steps == s.terms.latency_count and s.messages == s.terms.messages
            assert s.bytes_sent == s.terms.total_bytes
    ring = compare_allreduce(uniform_vectors(4, 16384), **kw)[1]
    n = 16384 * 4
    assert ring.formula_s == pytest.approx(6 * 5e-6 + 1.5 * n / 25e9 + 0.75 * n * 1e-11)
    assert ring.formula_s * 1e6 == pytest.approx(34.424, abs=1e-3)   # the notebook's row


def test_compare_allreduce_flags_a_wrong_sum(monkeypatch):
    import dataclasses
    from labkit.parallel import collectives
    real = collectives.all_reduce

    def off_by_one(data, algorithm="ring"):     # rank 0 misses one contribution
        run = real(data, algorithm)
        return dataclasses.replace(run, outputs=(run.outputs[0] - data[-1],) + run.outputs[1:])

    monkeypatch.setattr(collectives, "all_reduce", off_by_one)
    data = [np.arange(4.0) + r for r in range(3)]
    assert not any(s.correct for s in collectives.compare_allreduce(data))
    with pytest.raises(ValueError, match="alpha"):
        collectives.compare_allreduce(data, alpha=-1.0)


def test_uniform_vectors_round_down_to_equal_chunks():
    from labkit.parallel.collectives import uniform_vectors
    assert [len(uniform_vectors(p, 250_000)[0]) for p in (2, 3, 5, 8)] == \
        [250_000, 249_984, 250_000, 249_984]
    v = uniform_vectors(3, 100)
    assert len(v) == 3 and v[0].dtype == np.float32 and len(v[0]) == 96
    assert v[0] is not v[1]        # an in-place all-reduce must not see one array three times
    with pytest.raises(ValueError, match="elements"):
        uniform_vectors(8, 10)
    with pytest.raises(ValueError, match="world"):
        uniform_vectors(0, 10)


@pytest.mark.parametrize("alg, p", [("ring", 5), ("pairwise", 4), ("recursive_halving", 4)])
def test_reduce_scatter_records_what_each_message_carried(alg, p):
    data = [np.random.default_rng(r).standard_normal(11) for r in range(p)]
    run = reduce_scatter(data, alg, record=True)
    assert len(run.payloads) == run.messages and len(run.history) == run.steps
    before = [d.copy() for d in data]
    for s in range(run.steps):
        after = [b.copy() for b in before]
        for m, pl in zip(run.log, run.payloads):
            if m.step != s:
                continue
            a, b = run.chunk_bounds[m.chunk[0]], run.chunk_bounds[m.chunk[1]]
            np.testing.assert_array_equal(pl, before[m.sender][a:b])    # sent before adding
            assert pl.nbytes == m.nbytes
            after[m.receiver][a:b] += pl
        for r in range(p):
            np.testing.assert_allclose(run.history[s][r], after[r], rtol=1e-12)
        before = [np.array(h) for h in run.history[s]]
    assert reduce_scatter(data, alg).payloads == ()                     # off by default
