"""α-β-γ formulas against hand-computed values; nccl-tests bandwidths."""
import pytest

from labkit.parallel.cost import (algbw, best_algorithm, bus_factor, busbw, collective_time,
                                  cost_terms, crossover_bytes)

A, B, G = 1e-5, 1e-9, 1e-10


def test_ring_allreduce_by_hand():
    # p = 4, n = 1 MB: 2·3 α + 2·3/4 n β + 3/4 n γ
    want = 6 * A + 1.5e6 * B + 0.75e6 * G
    assert collective_time("all_reduce", "ring", 1e6, 4, alpha=A, beta=B, gamma=G) == \
        pytest.approx(want)


def test_other_allreduces_by_hand():
    n, p = 8e6, 8
    assert collective_time("all_reduce", "naive", n, p, alpha=A, beta=B, gamma=G) == \
        pytest.approx(14 * A + 14 * n * B + 7 * n * G)
    assert collective_time("all_reduce", "tree", n, p, alpha=A, beta=B, gamma=G) == \
        pytest.approx(6 * A + 6 * n * B + 3 * n * G)
    assert collective_time("all_reduce", "recursive_halving_doubling", n, p, alpha=A, beta=B,
                           gamma=G) == pytest.approx(6 * A + 1.75 * n * B + 0.875 * n * G)
    # p = 6: p' = 4, one extra fold step each way
    assert collective_time("all_reduce", "recursive_halving_doubling", n, 6, alpha=A, beta=B,
                           gamma=G) == pytest.approx(6 * A + 3.5 * n * B + 1.75 * n * G)
    assert collective_time("all_reduce", "tree", n, 5, alpha=A, beta=B) == \
        pytest.approx(6 * A + 6 * n * B)


def test_other_ops_by_hand():
    n = 1e6
    assert collective_time("reduce_scatter", "ring", n, 5, alpha=A, beta=B, gamma=G) == \
        pytest.approx(4 * A + 0.8 * n * B + 0.8 * n * G)
    assert collective_time("all_gather", "recursive_doubling", n, 8, alpha=A, beta=B) == \
        pytest.approx(3 * A + 0.875 * n * B)
    assert collective_time("broadcast", "tree", n, 9, alpha=A, beta=B) == \
        pytest.approx(4 * A + 4 * n * B)
    assert collective_time("broadcast", "naive", n, 3, alpha=A, beta=B) == \
        pytest.approx(2 * A + 2 * n * B)


def test_world_one_costs_nothing():
    for op, alg in (("all_reduce", "ring"), ("broadcast", "tree"), ("all_gather", "ring")):
        assert collective_time(op, alg, 1e6, 1, alpha=A, beta=B) == 0.0


def test_ring_bandwidth_is_optimal_and_tree_wins_small():
    big, small = 1e9, 1e2
    assert best_algorithm("all_reduce", big, 16, alpha=A, beta=B) in (
        "ring", "recursive_halving_doubling")
    assert best_algorithm("all_reduce", small, 16, alpha=A, beta=B) in (
        "tree", "recursive_halving_doubling")
    x = crossover_bytes(16, alpha=A, beta=B)
    t = lambda alg, n: collective_time("all_reduce", alg, n, 16, alpha=A, beta=B)  # noqa: E731
    assert t("ring", x) == pytest.approx(t("tree", x))
    assert t("ring", 2 * x) < t("tree", 2 * x) and t("ring", x / 2) > t("tree", x / 2)
    # p = 2: both take 2 steps and the ring sends half the bytes, so it always wins
    assert crossover_bytes(2, alpha=A, beta=B) == 0
    # p = 4: ring pays 2 more latencies, tree 2·2 - 2·3/4 = 2.5 n more bytes
    assert crossover_bytes(4, alpha=A, beta=B) == pytest.approx(2 * A / (2.5 * B))


def test_nccl_tests_bandwidths():
    # nccl-tests PERFORMANCE.md: busbw = algbw · 2(n-1)/n for all-reduce
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("broadcast", 8) == 1.0
    assert algbw(1e9, 0.01) == pytest.approx(1e11)
    assert busbw("all_reduce", 1e9, 0.01, 8) == pytest.approx(1.75e11)
    # a perfect ring on links of bandwidth 1/β has busbw = 1/β for large messages
    n, p = 1e10, 8
    t = collective_time("all_reduce", "ring", n, p, alpha=0.0, beta=B)
    assert busbw("all_reduce", n, t, p) == pytest.approx(1 / B)


def test_cost_errors():
    with pytest.raises(ValueError, match="op must be"):
        collective_time("scatter", "ring", 1, 2, alpha=A, beta=B)
    with pytest.raises(ValueError, match=r"algorithm \(for all_reduce\)"):
        collective_time("all_reduce", "star", 1, 2, alpha=A, beta=B)
    with pytest.raises(ValueError, match="world must be an integer >= 1"):
        collective_time("all_reduce", "ring", 1, 0, alpha=A, beta=B)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        collective_time("all_reduce", "ring", -1, 2, alpha=A, beta=B)
    with pytest.raises(ValueError, match="power of two"):
        cost_terms("all_gather", "recursive_doubling", 8, 6)
    with pytest.raises(ValueError, match="beta must be >= 0"):
        collective_time("all_reduce", "ring", 1, 2, alpha=A, beta=-1)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        algbw(1, 0)
