"""α-β-γ cost models of collectives, and bandwidths as nccl-tests reports them.

Model (Hockney; Thakur, Rabenseifner and Gropp, IJHPCA 2005, §2 — "T05"): sending a
message of m bytes costs α + mβ; reducing m bytes costs mγ. With p ranks and a vector of
n bytes (``nbytes``), :func:`cost_terms` gives T = a·α + b·β + c·γ:

================================  ================  =====================  ==================
op / algorithm                    a (latencies)     b (bytes on the path)  c (bytes reduced)
================================  ================  =====================  ==================
all_reduce naive (reduce+bcast)   2(p-1)            2(p-1)·n               (p-1)·n
all_reduce ring                   2(p-1)            2(p-1)/p·n             (p-1)/p·n
all_reduce tree (binomial)        2⌈lg p⌉           2⌈lg p⌉·n              ⌈lg p⌉·n
all_reduce rec. halving/doubling  2 lg p'+2e        (2(p'-1)/p'+2e)·n      ((p'-1)/p'+e)·n
reduce_scatter ring / pairwise    p-1               (p-1)/p·n              (p-1)/p·n
reduce_scatter recursive halving  lg p              (p-1)/p·n              (p-1)/p·n
all_gather ring                   p-1               (p-1)/p·n              0
all_gather recursive doubling     lg p              (p-1)/p·n              0
broadcast naive                   p-1               (p-1)·n                0
broadcast tree (binomial)         ⌈lg p⌉            ⌈lg p⌉·n               0
================================  ================  =====================  ==================

p' = 2^⌊lg p⌋ and e = 1 when p is not a power of two (the extra ranks fold in and out,
T05 §4.4), else 0. The ring rows are Patarasuk and Yuan (JPDC 2009), which prove
2(p-1)/p·n bytes per rank is the least any all-reduce can send.

nccl-tests (``doc/PERFORMANCE.md``): algbw = S / t, and busbw = algbw × factor with factor
2(p-1)/p for all-reduce, (p-1)/p for reduce-scatter and all-gather (S the full
vector), 1 for broadcast and reduce. busbw is comparable to the link's peak bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit import validate as V

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
ALGORITHMS = {
    "all_reduce": ("naive", "ring", "tree", "recursive_halving_doubling"),
    "reduce_scatter": ("ring", "pairwise", "recursive_halving"),
    "all_gather": ("ring", "recursive_doubling"),
    "broadcast": ("naive", "tree"),
}
POW2_ONLY = {("reduce_scatter", "recursive_halving"), ("all_gather", "recursive_doubling")}


@dataclass(frozen=True)
class CostTerms:
    """T = latency_count·α + path_bytes·β + reduced_bytes·γ; plus total messages/bytes."""
    latency_count: int
    path_bytes: float
    reduced_bytes: float
    messages: int
    total_bytes: float

    def time(self, alpha: float, beta: float, gamma: float = 0.0) -> float:
        return self.latency_count * alpha + self.path_bytes * beta + self.reduced_bytes * gamma


def _check(op: str, algorithm: str, nbytes: float, world: int) -> tuple[float, int]:
    """Validated (nbytes, world); errors name the parameter (labkit.validate)."""
    V.one_of("op", op, OPS)
    V.one_of(f"algorithm (for {op})", algorithm, ALGORITHMS[op])
    world = V.integer("world", world, low=1)
    nbytes = V.nonnegative("nbytes", nbytes)
    if (op, algorithm) in POW2_ONLY and world & (world - 1):
        raise ValueError(f"world must be a power of two for {op} {algorithm}, got {world}")
    return nbytes, world


def algorithms_for(op: str, world: int) -> tuple[str, ...]:
    """The algorithms of ``op`` that run on ``world`` ranks: the power-of-two-only ones
    (:data:`POW2_ONLY`) only when ``world`` is a power of two."""
    V.one_of("op", op, OPS)
    world = V.integer("world", world, low=1)
    pow2 = not world & (world - 1)
    return tuple(alg for alg in ALGORITHMS[op] if pow2 or (op, alg) not in POW2_ONLY)


def ceil_log2(p: int) -> int:
    return (V.integer("p", p, low=1) - 1).bit_length()


def cost_terms(op: str, algorithm: str, nbytes: float, world: int) -> CostTerms:
    """The coefficients of α, β, γ and the message/byte totals (table in the module doc)."""
    n, p = _check(op, algorithm, nbytes, world)
    if p == 1:
        return CostTerms(0, 0.0, 0.0, 0, 0.0)
    lg = ceil_log2(p)
    f = (p - 1) / p
    if op == "all_reduce":
        if algorithm == "naive":
            return CostTerms(2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n, 2 * (p - 1),
                             2 * (p - 1) * n)
        if algorithm == "ring":
            return CostTerms(2 * (p - 1), 2 * f * n, f * n, 2 * p * (p - 1), 2 * (p - 1) * n)
        if algorithm == "tree":
            return CostTerms(2 * lg, 2 * lg * n, lg * n, 2 * (p - 1), 2 * (p - 1) * n)
        q = 1 << (p.bit_length() - 1)
        e = 0 if q == p else 1
        fq = (q - 1) / q
        r = p - q
        lgq = q.bit_length() - 1
        return CostTerms(2 * lgq + 2 * e, (2 * fq + 2 * e) * n, (fq + e) * n,
                         2 * q * lgq + 2 * r, 2 * (q - 1) * n + 2 * r * n)
    if op == "reduce_scatter":
        steps = p - 1 if algorithm in ("ring", "pairwise") else lg
        return CostTerms(steps, f * n, f * n, p * steps, (p - 1) * n)
    if op == "all_gather":
        steps = p - 1 if algorithm == "ring" else lg
        return CostTerms(steps, f * n, 0.0, p * steps, (p - 1) * n)
    if algorithm == "naive":
        return CostTerms(p - 1, (p - 1) * n, 0.0, p - 1, (p - 1) * n)
    return CostTerms(lg, lg * n, 0.0, p - 1, (p - 1) * n)


def collective_time(op: str, algorithm: str, nbytes: float, world: int, *, alpha: float,
                    beta: float, gamma: float = 0.0) -> float:
    """Seconds for ``op`` by ``algorithm`` on ``world`` ranks, vector of ``nbytes`` bytes.

    ``alpha`` seconds per message, ``beta`` seconds per byte (1 / link bandwidth), ``gamma``
    seconds per byte reduced. Formulas: module docstring (T05; Patarasuk and Yuan 2009).
    """
    alpha, beta, gamma = (V.nonnegative(k, v) for k, v in
                          (("alpha", alpha), ("beta", beta), ("gamma", gamma)))
    return cost_terms(op, algorithm, nbytes, world).time(alpha, beta, gamma)


BUS_FACTOR_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw / algbw: 2(p-1)/p all-reduce; (p-1)/p reduce-scatter, all-gather; 1."""
    V.one_of("op", op, BUS_FACTOR_OPS)
    p = V.integer("world", world, low=1)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("reduce_scatter", "all_gather"):
        return (p - 1) / p
    return 1.0


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth, bytes/s: S / t (nccl-tests)."""
    return V.nonnegative("nbytes", nbytes) / V.positive("seconds", seconds)


def busbw(op: str, nbytes: float, seconds: float, world: int) -> float:
    """Bus bandwidth, bytes/s: algbw × :func:`bus_factor` (nccl-tests PERFORMANCE.md)."""
    return algbw(nbytes, seconds) * bus_factor(op, world)


def best_algorithm(op: str, nbytes: float, world: int, *, alpha: float, beta: float,
                   gamma: float = 0.0) -> str:
    """The algorithm with the least modelled time (skipping power-of-two-only ones)."""
    V.one_of("op", op, OPS)
    world = V.integer("world", world, low=1)
    times = {alg: collective_time(op, alg, nbytes, world, alpha=alpha, beta=beta, gamma=gamma)
             for alg in algorithms_for(op, world)}
    return min(times, key=times.get)


def crossover_bytes(world: int, *, alpha: float, beta: float) -> float:
    """Size where ring all-reduce starts to beat binomial tree (γ = 0), or inf if never.

    Solve 2(p-1)α + 2(p-1)/p·nβ = 2⌈lg p⌉(α + nβ) for n.
    """
    p = V.integer("world", world, low=1)
    alpha, beta = V.nonnegative("alpha", alpha), V.positive("beta", beta)
    lg = ceil_log2(p)
    da = 2 * (p - 1) - 2 * lg          # ring pays this many more latencies
    db = 2 * lg - 2 * (p - 1) / p      # tree pays this much more per byte
    if db <= 0:
        return math.inf
    return max(0.0, da * alpha / (db * beta))
