"""The 3D planner against Narayanan et al., "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM" (SC'21, arXiv:2104.04473), Table 1: its ten GPT models on
Selene (:func:`table1_models`), the published plan of each row beside the planner's fastest
(:func:`table1_comparison`, :func:`format_table1`), the trend of the estimated % of peak
with model size against the paper's (:func:`table1_trend`: Spearman's ρ and least-squares
points per decade of parameters), and the one GEMM efficiency fitted to all rows
(:func:`fit_table1_efficiency`, what :data:`~labkit.parallel.planner_cost.DEFAULT_EFFICIENCY`
is). The % of peak compared is ``hfu`` (recomputation counted), what the paper reports.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.hardware import DGX_A100_COMPUTE_NICS
from labkit.hardware.clusters import GPUCluster, gpu_cluster as cluster
from labkit.parallel.planner import Plan, PlanSet, plan
from labkit.parallel.planner_cost import DEFAULT_EFFICIENCY, GPTModel

# Narayanan et al. SC'21 Table 1 ("Weak-scaling throughput for GPT models ranging from 1
# billion to 1 trillion parameters"), Selene: DGX A100 nodes of 8 × A100 80 GB, NVLink and
# NVSwitch inside a node, 8 × 200 Gb/s HDR InfiniBand per node; vocabulary 51,200, sequence
# 2048, mixed precision, activation recomputation, the interleaved schedule with the
# scatter/gather optimization (§5.1).
# (billions of parameters, heads, hidden, layers, tensor-parallel, pipeline-parallel, GPUs,
#  global batch, achieved teraFLOP/s per GPU, % of peak, aggregate petaFLOP/s)
TABLE1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0),
)
TABLE1_SOURCE = ("Narayanan et al., Efficient Large-Scale Language Model Training on GPU "
                 "Clusters Using Megatron-LM, SC'21 (arXiv:2104.04473), Table 1")


def table1_models() -> list[tuple[GPTModel, GPUCluster, dict]]:
    """Table 1's rows as (model, Selene-like cluster, published numbers): DGX A100 nodes,
    :data:`labkit.hardware.DGX_A100_COMPUTE_NICS` HDR ports per node (§5)."""
    out = []
    for (b_params, a, h, l, t, p, n, batch, tflops, pct, agg) in TABLE1:
        model = GPTModel(l, h, a, 51200, 2048, batch, f"GPT {b_params}B")
        out.append((model, cluster("A100", n, 8, nics_per_node=DGX_A100_COMPUTE_NICS),
                    dict(params_b=b_params, tp=t, pp=p, dp=n // (t * p), gpus=n,
                         tflops=tflops, peak_percent=pct, aggregate_pflops=agg)))
    return out


def table1_planset(model: GPTModel, cl: GPUCluster,
                   efficiency: float = DEFAULT_EFFICIENCY) -> PlanSet:
    """The paper's search space (§5.1): full recomputation, no ZeRO, the interleaved
    schedule allowed, micro-batches of :data:`~labkit.parallel.planner.MICROBATCHES`."""
    return plan(model, cl, zero_stages=(0,), recompute=("full",), efficiency=efficiency)


@dataclass(frozen=True)
class Table1Check:
    """One row of SC'21 Table 1 against this planner: the published (t, p, d) plan ``mine``
    (its fastest variant: micro-batch, chunks) in the paper's search space
    (:func:`table1_planset`), the planner's own fastest plan ``best``, the published
    plan's ``rank`` among the ``pairs`` (t, p) pairs ordered by their best plan, its step
    time over the fastest plan's (``time_vs_best``), and its estimated % of peak
    (``estimate``: ``mine.hfu``, recomputation counted, the paper's measure) beside the
    published one (``published``)."""
    model: GPTModel
    pub: dict
    mine: Plan | None
    best: Plan
    rank: int
    pairs: int
    time_vs_best: float

    @property
    def published_tpd(self) -> tuple[int, int, int]:
        return self.pub["tp"], self.pub["pp"], self.pub["dp"]

    @property
    def best_tpd(self) -> tuple[int, int, int]:
        return self.best.tp, self.best.pp, self.best.dp

    @property
    def matches(self) -> bool:
        """Is the published (t, p) the planner's fastest?"""
        return self.best_tpd == self.published_tpd

    @property
    def estimate(self) -> float:
        return 100 * self.mine.hfu if self.mine else float("nan")

    @property
    def published(self) -> float:
        return float(self.pub["peak_percent"])


def table1_comparison(efficiency: float = DEFAULT_EFFICIENCY) -> list[Table1Check]:
    """:func:`table1_planset` for every row of :data:`TABLE1` (source
    :data:`TABLE1_SOURCE`)."""
    out = []
    for model, cl, pub in table1_models():
        ps = table1_planset(model, cl, efficiency)
        mine = ps.best(tp=pub["tp"], pp=pub["pp"])
        out.append(Table1Check(model, pub, mine, ps.ranked[0],
                               ps.rank_of(pub["tp"], pub["pp"]),
                               len({(q.tp, q.pp) for q in ps.ranked}),
                               ps.relative_time(mine) if mine else float("nan")))
    return out


@dataclass(frozen=True)
class Table1Trend:
    """How the estimated % of peak moves with model size against the published one, over
    the rows of :func:`table1_comparison` (in the paper's order, smallest model first):
    ``*_change`` last row minus first, in points; ``rank_correlation`` Spearman's ρ of the
    estimates against the published values; ``slope`` least-squares points per decade
    of parameters; ``matches`` rows whose published (t, p) is the planner's fastest."""
    published: tuple[float, ...]
    estimated: tuple[float, ...]
    published_slope: float
    estimated_slope: float
    rank_correlation: float
    matches: int

    @property
    def published_change(self) -> float:
        return self.published[-1] - self.published[0]

    @property
    def estimated_change(self) -> float:
        return self.estimated[-1] - self.estimated[0]

    @property
    def same_direction(self) -> bool:
        return self.published_slope * self.estimated_slope > 0


def table1_trend(rows: list[Table1Check] | None = None, estimates=None) -> Table1Trend:
    """The trend of :func:`table1_comparison`'s estimates (or of other ``estimates``, one
    per row, in % of peak: a constant, another model's) against the paper's."""
    from scipy.stats import spearmanr  # deferred: scipy

    rows = table1_comparison() if rows is None else rows
    pub = np.array([r.published for r in rows])
    est = np.array([r.estimate for r in rows] if estimates is None else estimates, float)
    if est.shape != pub.shape:
        raise ValueError(f"estimates must have one value per row ({len(rows)}), got "
                         f"{est.size}")
    x = np.log10([r.pub["params_b"] for r in rows])
    rho = float(spearmanr(est, pub)[0]) if np.ptp(est) > 0 else 0.0
    return Table1Trend(tuple(pub), tuple(float(e) for e in est),
                       float(np.polyfit(x, pub, 1)[0]), float(np.polyfit(x, est, 1)[0]),
                       rho, sum(r.matches for r in rows))


def format_table1(rows: list[Table1Check] | None = None) -> str:
    """:func:`table1_comparison` as a table, then :func:`table1_trend`'s summary."""
    rows = table1_comparison() if rows is None else rows
    tr = table1_trend(rows)
    lines = [f"{'model':11s} {'GPUs':>5s} {'published t,p,d':>15s} {'best t,p,d (v)':>17s} "
             f"{'same':>4s} {'rank':>8s} {'time/best':>9s} {'est. %peak':>10s} "
             f"{'published':>9s}"]
    for r in rows:
        t, p, d = r.best_tpd
        lines.append(f"{r.model.name:11s} {r.pub['gpus']:5d} "
                     f"{'%d,%d,%d' % r.published_tpd:>15s} "
                     f"{f'{t},{p},{d} ({r.best.chunks})':>17s} {'yes' if r.matches else 'no':>4s} "
                     f"{f'{r.rank} of {r.pairs}':>8s} {r.time_vs_best:9.3f} "
                     f"{r.estimate:9.1f}% {r.published:8.0f}%")
    lines.append(f"published (t, p) is the planner's fastest in {tr.matches} of {len(rows)} "
                 f"rows; % of peak from the smallest to the largest model: estimated "
                 f"{tr.estimated_change:+.1f} points, published {tr.published_change:+.0f} "
                 f"(slopes {tr.estimated_slope:+.1f} and {tr.published_slope:+.1f} points per "
                 f"decade of parameters, Spearman ρ {tr.rank_correlation:.2f})")
    return "\n".join(lines)


def fit_table1_efficiency(low: float = 0.3, high: float = 1.0) -> float:
    """The GEMM efficiency that minimises the squared error, in points of % of peak, of
    the published plans' estimates over Table 1's rows (what :data:`DEFAULT_EFFICIENCY`
    is, rounded)."""
    from scipy.optimize import minimize_scalar  # deferred: scipy

    rows = table1_models()

    def err(eff: float) -> float:
        total = 0.0
        for model, cl, pub in rows:
            ps = plan(model, cl, zero_stages=(0,), recompute=("full",), efficiency=eff,
                      max_tp=pub["tp"])
            mine = ps.best(tp=pub["tp"], pp=pub["pp"])
            total += (100 * mine.hfu - pub["peak_percent"]) ** 2
        return total

    return float(minimize_scalar(err, bounds=(low, high), method="bounded",
                                 options={"xatol": 1e-4}).x)
