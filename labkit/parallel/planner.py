"""A 3D-parallel planner: a GPT model and a cluster → every (dp, tp, pp, micro-batch,
interleaving, ZeRO stage, recomputation) plan, its memory per GPU and estimated step time;
plans that do not fit are rejected with the reason, the rest ranked by step time with their
MFU.

A plan's memory and step time come from the cost model of
:mod:`labkit.parallel.planner_cost` (Narayanan et al., "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC'21, §2-§5 and its appendix); the comparison
with that paper's Table 1 is :mod:`labkit.parallel.planner_table1`.

ZeRO-2 and -3 are refused together with pipeline parallelism, as DeepSpeed's pipeline engine
refuses them (``deepspeed/runtime/pipe/engine.py``, ``PipelineEngine.__init__``: ``assert
self.zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are
incompatible with pipeline parallelism"``). Without a pipeline they are allowed and charged
per micro-batch (:func:`~labkit.parallel.planner_cost.plan_time`).

MFU (Chowdhery et al. 2022, PaLM, App. B) counts model FLOPs only; ``hfu`` also counts the
recomputation and is what Narayanan et al. report as "% of theoretical peak".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit import validate as V
from labkit.hardware.clusters import GPUCluster, gpu_cluster as cluster  # noqa: F401
from labkit.parallel.planner_cost import DEFAULT_EFFICIENCY, GPTModel, plan_memory, plan_time

RECOMPUTE = ("none", "selective", "full")
MICROBATCHES = (1, 2, 4, 8)
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Plan:
    dp: int
    tp: int
    pp: int
    microbatch: int
    zero: int
    recompute: str
    microbatches: int = 0
    memory: float = 0.0
    memory_parts: dict = field(default_factory=dict, compare=False)
    step_time: float = 0.0
    time_parts: dict = field(default_factory=dict, compare=False)
    mfu: float = 0.0
    hfu: float = 0.0
    reason: str = ""
    chunks: int = 1

    @property
    def fits(self) -> bool:
        return not self.reason

    @property
    def rejected_by(self) -> str:
        """The kind of reason (a key of :data:`REASONS`), "" for a plan that fits."""
        return self.reason.split(":")[0]

    @property
    def label(self) -> str:
        v = f" v={self.chunks}" if self.chunks > 1 else ""
        return (f"dp={self.dp} tp={self.tp} pp={self.pp}{v} b={self.microbatch} "
                f"ZeRO-{self.zero} rc={self.recompute}")


REASONS = ("heads", "GPU count", "batch", "ZeRO", "ZeRO with pipeline", "interleaving",
           "memory")
"""Why a plan is rejected, in the order the tests run (the text before ':' of
:attr:`Plan.reason`)."""


@dataclass(frozen=True)
class PlanSet:
    model: GPTModel
    cluster: GPUCluster
    ranked: tuple[Plan, ...]
    rejected: tuple[Plan, ...]

    def rank_of(self, tp: int, pp: int) -> int:
        """1-based rank of the (tp, pp) pair among pairs ordered by their best plan."""
        pairs: list[tuple[int, int]] = []
        for p in self.ranked:
            if (p.tp, p.pp) not in pairs:
                pairs.append((p.tp, p.pp))
        return pairs.index((tp, pp)) + 1 if (tp, pp) in pairs else 0

    def best(self, **where) -> Plan | None:
        for p in self.ranked:
            if all(getattr(p, k) == v for k, v in where.items()):
                return p
        return None

    def relative_time(self, plan: Plan) -> float:
        """``plan``'s step time over the fastest plan's (1.0 for the best)."""
        return plan.step_time / self.ranked[0].step_time

    def reasons(self) -> dict[str, int]:
        """Rejected plans counted by :attr:`Plan.rejected_by`."""
        out: dict[str, int] = {}
        for p in self.rejected:
            out[p.rejected_by] = out.get(p.rejected_by, 0) + 1
        return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _structural_reason(model: GPTModel, n: int, t: int, p: int, b: int, z: int) -> str:
    """The first divisibility (or ZeRO) test plan (t, p, b, ZeRO-z) fails on n GPUs, or ""."""
    d = n // (t * p) if n % (t * p) == 0 else 0
    if model.heads % t:
        return f"heads: tp={t} does not divide {model.heads} heads"
    if not d:
        return f"GPU count: tp·pp = {t * p} does not divide {n} GPUs"
    if model.batch % (d * b):
        return f"batch: dp·b = {d * b} does not divide the global batch {model.batch}"
    if z and d == 1:
        return "ZeRO: needs dp > 1"
    if z >= 2 and p > 1:
        return (f"ZeRO with pipeline: ZeRO-{z} with pp={p} (DeepSpeed's pipeline engine "
                f"allows only ZeRO stages 0 and 1)")
    return ""


def _tps(max_tp: int) -> list[int]:
    return [1 << i for i in range(V.integer("max_tp", max_tp, low=1).bit_length())]


def plan(model: GPTModel, cl: GPUCluster, *, efficiency: float = DEFAULT_EFFICIENCY,
         microbatches=MICROBATCHES, zero_stages=ZERO_STAGES, recompute=RECOMPUTE,
         sequence_parallel: bool = False, max_tp: int = 64,
         interleave: bool = True) -> PlanSet:
    """Every plan for ``model`` on ``cl``: the ones that fit ranked by step time, the
    others with the reason they were rejected. ``interleave`` also tries v = 2, 3, …
    chunks per GPU (every v dividing the l/p layers of a stage; Megatron-LM needs m to be
    a multiple of p)."""
    if not isinstance(model, GPTModel):
        raise TypeError(f"model must be a GPTModel, got {type(model).__name__}")
    if not isinstance(cl, GPUCluster):
        raise TypeError(f"cl must be a GPUCluster, got {type(cl).__name__}")
    eff = V.number("efficiency", efficiency, low=0, high=1, low_open=True)
    for r in recompute:
        V.one_of("recompute", r, RECOMPUTE)
    V.boolean("interleave", interleave)
    n = cl.gpus
    ok, bad = [], []
    for t in _tps(max_tp):
        for p in _divisors(model.layers):
            d = n // (t * p) if n % (t * p) == 0 else 0
            chunk_options = [c for c in _divisors(model.layers // p)
                             if c == 1 or (interleave and p > 1)]
            for b in microbatches:
                for z in zero_stages:
                    for rc in recompute:
                        reason = _structural_reason(model, n, t, p, b, z)
                        if reason:
                            bad.append(Plan(d, t, p, b, z, rc, reason=reason))
                            continue
                        m = model.batch // (d * b)
                        for v in chunk_options:
                            if v > 1 and m % p:
                                bad.append(Plan(d, t, p, b, z, rc, m, chunks=v, reason=(
                                    f"interleaving: m={m} is not a multiple of pp={p}")))
                                continue
                            mem = plan_memory(model, t, p, d, b, z, rc, sequence_parallel, v)
                            total = sum(mem.values())
                            if total > cl.memory:
                                bad.append(Plan(d, t, p, b, z, rc, m, total, mem, chunks=v,
                                                reason=f"memory: {total / 1e9:.1f} GB > "
                                                       f"{cl.memory / 1e9:.0f} GB"))
                                continue
                            tm = plan_time(model, cl, t, p, d, b, z, rc, eff, v,
                                           sequence_parallel)
                            step = sum(tm.values())
                            ok.append(Plan(d, t, p, b, z, rc, m, total, mem, step, tm,
                                           model.flops("none") / (step * n * cl.peak_flops),
                                           model.flops(rc) / (step * n * cl.peak_flops),
                                           chunks=v))
    ok.sort(key=lambda q: (q.step_time, q.memory))
    return PlanSet(model, cl, tuple(ok), tuple(bad))


def divisible_gpu_counts(model: GPTModel, gpus_per_node: int, nodes: int, *,
                         microbatches=MICROBATCHES, max_tp: int = 64,
                         search: int = 64) -> tuple[int | None, int | None]:
    """The nearest node counts below and above ``nodes`` (within ``search``) on which at
    least one (t, p, b) passes the divisibility tests (heads, GPU count, batch), or None."""
    def possible(k: int) -> bool:
        n = k * gpus_per_node
        return any(not _structural_reason(model, n, t, p, b, 0)
                   for t in _tps(max_tp) for p in _divisors(model.layers)
                   for b in microbatches)
    below = next((k for k in range(nodes - 1, max(0, nodes - search), -1) if possible(k)),
                 None)
    above = next((k for k in range(nodes + 1, nodes + search + 1) if possible(k)), None)
    return below, above


def advice(ps: PlanSet) -> list[str]:
    """What to change when nothing fits, built from the reasons the plans were rejected
    (:meth:`PlanSet.reasons`): more or bigger GPUs only when the plans that pass every
    divisibility test fail on memory; another GPU count when none passes them."""
    if ps.ranked:
        return []
    why = ps.reasons()
    cl, model = ps.cluster, ps.model
    if "memory" in why:
        closest = min((p for p in ps.rejected if p.rejected_by == "memory"),
                      key=lambda p: p.memory)
        return [f"{why['memory']} plans pass the divisibility tests but none fits in "
                f"{cl.memory / 1e9:.0f} GB (the smallest needs {closest.memory / 1e9:.0f} GB, "
                f"{closest.label}): add GPUs, or use a GPU with more memory"]
    counts = ", ".join(f"{k} {why[k]}" for k in REASONS if k in why)
    below, above = divisible_gpu_counts(model, cl.gpus_per_node, cl.nodes)
    near = " or ".join(f"{k} nodes" for k in (below, above) if k)
    return [f"no plan passes the divisibility tests on {cl.gpus} GPUs ({counts}): "
            f"t·p must divide the GPU count and d·b the batch of {model.batch}; memory is "
            f"not the problem" + (f"; try {near}" if near else "")]
