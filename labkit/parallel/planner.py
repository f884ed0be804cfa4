"""A 3D-parallel planner: a GPT model and a cluster → every (dp, tp, pp, micro-batch, ZeRO
stage, recomputation) plan, its memory per GPU and estimated step time; plans that do not
fit are rejected with the reason, the rest ranked by step time with their MFU.

The model follows Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC'21), §5.1 and its appendix:

* parameters P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h));
* FLOPs per step with full activation recomputation F = 96·B·s·l·h²·(1 + s/(6h) +
  V/(16·l·h)) (four passes: forward, recomputed forward, backward = 2× forward). Without
  recomputation the transformer layers need 3 passes, so the *model* FLOPs are
  72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·V·h; selective recomputation (Korthikanti et al. 2022)
  re-runs only the attention core, 4·B·l·s²·h more.

A plan (t tensor-, p pipeline-, d data-parallel ranks, micro-batch b, m = B/(d·b)
micro-batches, 1F1B schedule) costs, per GPU:

* memory = model states of P/(t·p) parameters, mixed-precision Adam, ZeRO over d
  (:func:`labkit.memory.estimator.model_state_bytes`) + activations: the first stage keeps
  min(p, m) micro-batches in flight (1F1B), each with l/p layers of
  :func:`~labkit.memory.estimator.activation_bytes_per_layer` (full recomputation keeps
  2sbh per layer plus one layer's full activations while recomputing);
* time = (m + p - 1)·(compute + tensor-parallel all-reduces of one micro-batch on one stage)
  + pipeline sends + the data-parallel gradient reduction (not overlapped, as in the 2021
  Megatron-LM). Compute runs at ``efficiency`` × peak: a measured-GEMM stand-in, the one
  free parameter, fitted once to Table 1 (below), not per row.

MFU (Chowdhery et al. 2022, PaLM, App. B) counts model FLOPs only; ``hfu`` also counts the
recomputation and is what Narayanan et al. report as "% of theoretical peak".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit import validate as V
from labkit.hardware import gpu as _gpu
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes
from labkit.parallel.pipeline import bubble_formula
from labkit.parallel.tensor_parallel import layer_comm_bytes

RECOMPUTE = ("none", "selective", "full")
MICROBATCHES = (1, 2, 4, 8)
ZERO_STAGES = (0, 1, 2, 3)
DEFAULT_EFFICIENCY = 0.57

# Narayanan et al. SC'21 Table 1 ("Weak-scaling throughput for GPT models ranging from 1
# billion to 1 trillion parameters"), Selene: DGX A100 nodes of 8 × A100 80 GB, NVLink and
# NVSwitch inside a node, 8 × 200 Gb/s HDR InfiniBand per node; vocabulary 51,200, sequence
# 2048, mixed precision, activation recomputation.
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
HDR_INFINIBAND = 25e9      # 200 Gb/s per HDR port = 25 GB/s, one port per GPU on Selene


@dataclass(frozen=True)
class GPTModel:
    """A GPT-style model and its training batch (Narayanan et al. §5.1 notation)."""
    layers: int
    hidden: int
    heads: int
    vocab: int = 51200
    seq: int = 2048
    batch: int = 512
    name: str = ""

    def __post_init__(self):
        for n, lo in (("layers", 1), ("hidden", 1), ("heads", 1), ("vocab", 1), ("seq", 1),
                      ("batch", 1)):
            V.integer(n, getattr(self, n), low=lo)
        V.divides("heads", self.heads, "hidden", self.hidden)

    @property
    def params(self) -> float:
        l, h, v, s = self.layers, self.hidden, self.vocab, self.seq
        return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))

    def flops(self, recompute: str = "none") -> float:
        """FLOPs of one step: model FLOPs with ``none``; plus what recomputation re-runs."""
        B, s, l, h, v = self.batch, self.seq, self.layers, self.hidden, self.vocab
        model = 72 * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * v * h
        if recompute == "full":
            return model + 24 * B * s * l * h * h * (1 + s / (6 * h))
        if recompute == "selective":
            return model + 4 * B * l * s * s * h
        return model


@dataclass(frozen=True)
class Cluster:
    """GPUs per node × nodes; memory (bytes), peak (FLOP/s), bandwidths (B/s per GPU, one
    direction) inside a node and between nodes."""
    gpus_per_node: int
    nodes: int
    memory: float
    peak_flops: float
    intra_bw: float
    inter_bw: float
    name: str = ""

    def __post_init__(self):
        V.integer("gpus_per_node", self.gpus_per_node, low=1)
        V.integer("nodes", self.nodes, low=1)
        for n in ("memory", "peak_flops", "intra_bw", "inter_bw"):
            V.positive(n, getattr(self, n))

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def cluster(gpu: str = "A100", gpus: int = 8, gpus_per_node: int = 8,
            inter_bw: float = HDR_INFINIBAND, precision: str = "bf16") -> Cluster:
    """A cluster of ``gpus`` data-sheet GPUs (labkit.hardware) in nodes of ``gpus_per_node``,
    NVLink inside a node, ``inter_bw`` per GPU between nodes (default HDR InfiniBand)."""
    g = _gpu(gpu)
    precision = V.one_of("precision", precision, tuple(g.flops))
    n = V.integer("gpus", gpus, low=1)
    k = V.integer("gpus_per_node", gpus_per_node, low=1)
    if n > k:
        V.divides("gpus_per_node", k, "gpus", n)
    return Cluster(min(k, n), max(1, n // k), g.memory_bytes, g.peak(precision),
                   g.nvlink_per_direction, V.positive("inter_bw", inter_bw),
                   f"{n} × {g.key}")


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

    @property
    def fits(self) -> bool:
        return not self.reason

    @property
    def label(self) -> str:
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} b={self.microbatch} "
                f"ZeRO-{self.zero} rc={self.recompute}")


@dataclass(frozen=True)
class PlanSet:
    model: GPTModel
    cluster: Cluster
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
        out: dict[str, int] = {}
        for p in self.rejected:
            key = p.reason.split(":")[0]
            out[key] = out.get(key, 0) + 1
        return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def plan_memory(model: GPTModel, tp: int, pp: int, dp: int, microbatch: int,
                zero: int = 0, recompute: str = "full",
                sequence_parallel: bool = False) -> dict[str, float]:
    """Bytes per GPU of the busiest (first) pipeline stage, by part."""
    m = model.batch // (dp * microbatch)
    local = int(-(-model.params // (tp * pp)))
    st = model_state_bytes(local, "mixed", "adam", zero, dp)
    lps = -(-model.layers // pp)
    in_flight = min(pp, max(m, 1))
    s, b, h, a = model.seq, microbatch, model.hidden, model.heads
    if recompute == "full":
        act = in_flight * lps * activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel,
                                                           "full")
        act += activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel, "none")
    else:
        act = in_flight * lps * activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel,
                                                           recompute)
    return {"params": st.params, "grads": st.grads, "optimizer": st.optimizer,
            "activations": act}


def plan_time(model: GPTModel, cl: Cluster, tp: int, pp: int, dp: int, microbatch: int,
              zero: int = 0, recompute: str = "full",
              efficiency: float = DEFAULT_EFFICIENCY) -> dict[str, float]:
    """Seconds of one step, by part (see the module docstring)."""
    n = tp * pp * dp
    m = model.batch // (dp * microbatch)
    compute_mb = model.flops(recompute) / (n * m * cl.peak_flops * efficiency)
    tp_bw = cl.intra_bw if tp <= cl.gpus_per_node else cl.inter_bw
    tp_bytes = (-(-model.layers // pp)) * layer_comm_bytes(model.seq, microbatch, model.hidden,
                                                           tp) * (1.5 if recompute == "full" else 1)
    tp_mb = tp_bytes / tp_bw if tp > 1 else 0.0
    pipe = (compute_mb + tp_mb) * m * (1 + bubble_formula("1f1b", pp, m))
    p2p = 0.0
    if pp > 1:   # forward activation and backward gradient per micro-batch, split over t
        link = cl.inter_bw if tp * pp > cl.gpus_per_node else cl.intra_bw
        p2p = (m + pp - 1) * 2 * (2 * model.seq * microbatch * model.hidden / tp) / link
    dp_t = 0.0
    if dp > 1:
        link = cl.inter_bw if n > cl.gpus_per_node else cl.intra_bw
        factor = 3 if zero == 3 else 2          # zero.step_traffic: 2Ψ or 3Ψ
        dp_t = factor * (dp - 1) / dp * 2 * model.params / (tp * pp) / link
    return {"compute": compute_mb * m, "tensor-parallel comm": tp_mb * m,
            "pipeline bubble": pipe - (compute_mb + tp_mb) * m, "pipeline sends": p2p,
            "data-parallel comm": dp_t}


def plan(model: GPTModel, cl: Cluster, *, efficiency: float = DEFAULT_EFFICIENCY,
         microbatches=MICROBATCHES, zero_stages=ZERO_STAGES, recompute=RECOMPUTE,
         sequence_parallel: bool = False, max_tp: int = 64) -> PlanSet:
    """Every plan for ``model`` on ``cl``: the ones that fit ranked by step time, the
    others with the reason they were rejected."""
    if not isinstance(model, GPTModel):
        raise TypeError(f"model must be a GPTModel, got {type(model).__name__}")
    if not isinstance(cl, Cluster):
        raise TypeError(f"cl must be a Cluster, got {type(cl).__name__}")
    eff = V.number("efficiency", efficiency, low=0, high=1, low_open=True)
    for r in recompute:
        V.one_of("recompute", r, RECOMPUTE)
    n = cl.gpus
    ok, bad = [], []
    tps = [1 << i for i in range(V.integer("max_tp", max_tp, low=1).bit_length())]
    for t in tps:
        for p in _divisors(model.layers):
            d = n // (t * p) if n % (t * p) == 0 else 0
            for b in microbatches:
                for z in zero_stages:
                    for rc in recompute:
                        reason = ""
                        if model.heads % t:
                            reason = f"heads: tp={t} does not divide {model.heads} heads"
                        elif t > cl.gpus_per_node:
                            reason = (f"tensor parallel across nodes: tp={t} > "
                                      f"{cl.gpus_per_node} GPUs per node")
                        elif not d:
                            reason = f"GPU count: tp·pp = {t * p} does not divide {n} GPUs"
                        elif model.batch % (d * b):
                            reason = (f"batch: dp·b = {d * b} does not divide the global "
                                      f"batch {model.batch}")
                        elif z and d == 1:
                            reason = "ZeRO: needs dp > 1"
                        if reason:
                            bad.append(Plan(d, t, p, b, z, rc, reason=reason))
                            continue
                        mem = plan_memory(model, t, p, d, b, z, rc, sequence_parallel)
                        total = sum(mem.values())
                        m = model.batch // (d * b)
                        if total > cl.memory:
                            bad.append(Plan(d, t, p, b, z, rc, m, total, mem, reason=(
                                f"memory: {total / 1e9:.1f} GB > {cl.memory / 1e9:.0f} GB")))
                            continue
                        tm = plan_time(model, cl, t, p, d, b, z, rc, eff)
                        step = sum(tm.values())
                        ok.append(Plan(d, t, p, b, z, rc, m, total, mem, step, tm,
                                       model.flops("none") / (step * n * cl.peak_flops),
                                       model.flops(rc) / (step * n * cl.peak_flops)))
    ok.sort(key=lambda q: (q.step_time, q.memory))
    return PlanSet(model, cl, tuple(ok), tuple(bad))


# Brown et al. 2020 ("Language Models are Few-Shot Learners"), Table 2.1: GPT-3 175B has 96
# layers, d_model 12288, 96 heads and batches of 3.2M tokens (1536 sequences of 2048)
GPT3 = GPTModel(96, 12288, 96, batch=1536, name="GPT-3 175B")


def table1_models() -> list[tuple[GPTModel, Cluster, dict]]:
    """Table 1's rows as (model, Selene-like cluster, published numbers)."""
    out = []
    for (b_params, a, h, l, t, p, n, batch, tflops, pct, agg) in TABLE1:
        model = GPTModel(l, h, a, 51200, 2048, batch, f"GPT {b_params}B")
        out.append((model, cluster("A100", n, 8),
                    dict(params_b=b_params, tp=t, pp=p, gpus=n, tflops=tflops,
                         peak_percent=pct, aggregate_pflops=agg)))
    return out


@dataclass(frozen=True)
class Table1Check:
    """One row of SC'21 Table 1 against this planner: the published (t, p) plan ``mine`` in
    the paper's search space (full recomputation, no ZeRO) — its ``rank`` among the
    ``pairs`` (t, p) pairs ordered by their best plan, its step time over the fastest plan's
    (``time_vs_best``), and its estimated % of peak (``mine.hfu``, recomputation counted,
    the paper's measure) beside the published ``pub["peak_percent"]``."""
    model: GPTModel
    pub: dict
    mine: Plan | None
    rank: int
    pairs: int
    time_vs_best: float


def table1_comparison() -> list[Table1Check]:
    """:func:`plan` for every row of :data:`TABLE1` (source :data:`TABLE1_SOURCE`)."""
    out = []
    for model, cl, pub in table1_models():
        ps = plan(model, cl, zero_stages=(0,), recompute=("full",))
        mine = ps.best(tp=pub["tp"], pp=pub["pp"])
        out.append(Table1Check(model, pub, mine, ps.rank_of(pub["tp"], pub["pp"]),
                               len({(q.tp, q.pp) for q in ps.ranked}),
                               ps.relative_time(mine) if mine else float("nan")))
    return out


@dataclass(frozen=True)
class LayerCommCompute:
    """One transformer layer, one micro-batch, on one of ``tp`` tensor-parallel GPUs:
    bytes it sends (forward + backward, :func:`layer_comm_bytes`) and the time they take
    inside a node (``intra_s``, NVLink) and between nodes (``inter_s``), against the time
    of its arithmetic (``compute_s``: model FLOPs / layers / tp at ``efficiency`` × peak)."""
    tp: int
    nbytes: float
    flops: float
    intra_bw: float
    inter_bw: float
    efficiency: float
    intra_s: float
    inter_s: float
    compute_s: float


def layer_comm_vs_compute(model: GPTModel, tp: int, cl: Cluster, *,
                          efficiency: float = DEFAULT_EFFICIENCY) -> LayerCommCompute:
    """Why tensor parallelism stays inside a node (Narayanan et al. SC'21 §3.2, takeaway #1):
    the 4 all-reduces of the s·b·h activation per layer (Shoeybi et al. 2019 §3) over
    NVLink vs InfiniBand, beside the layer's arithmetic. ``model.batch`` is the
    micro-batch."""
    tp = V.integer("tp", tp, low=1)
    efficiency = V.fraction("efficiency", efficiency)
    if efficiency == 0:
        raise ValueError("efficiency must be in (0, 1], got 0")
    if not isinstance(cl, Cluster):
        raise TypeError(f"cl must be a planner.Cluster, got {type(cl).__name__}")
    nbytes = layer_comm_bytes(model.seq, model.batch, model.hidden, tp)
    flops = model.flops("none") / model.layers / tp
    return LayerCommCompute(tp, nbytes, flops, cl.intra_bw, cl.inter_bw, efficiency,
                            nbytes / cl.intra_bw, nbytes / cl.inter_bw,
                            flops / (cl.peak_flops * efficiency))
