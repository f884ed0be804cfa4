"""The 3D-parallel planner's cost model: a GPT model's parameters and FLOPs, and what one
plan costs per GPU, its memory and the time of one training step (what
:func:`labkit.parallel.planner.plan` searches with; :mod:`labkit.parallel.planner_table1`
compares it with Narayanan et al.'s Table 1).

The model follows Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC'21), §2-§5 and its appendix:

* parameters P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) (eq. 2);
* FLOPs per step with full activation recomputation F = 96·B·s·l·h²·(1 + s/(6h) +
  V/(16·l·h)) (eq. 3: four passes, forward, recomputed forward, backward = 2× forward).
  Without recomputation the transformer layers need 3 passes, so the *model* FLOPs are
  72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·V·h; selective recomputation (Korthikanti et al. 2022)
  re-runs only the attention core, 4·B·l·s²·h more.

A plan (t tensor-, p pipeline-, d data-parallel ranks, micro-batch b, m = B/(d·b)
micro-batches per pipeline, v model chunks per GPU: v = 1 is 1F1B, v > 1 the interleaved
1F1B of §2.2.2, which Table 1 used, §5.1) costs, per GPU:

* memory = model states of P/(t·p) parameters, mixed-precision Adam, ZeRO over d
  (:func:`labkit.memory.estimator.model_state_bytes`) + activations: the first stage's peak
  stash (:func:`labkit.parallel.pipeline.peak_stash`: min(p, m) micro-batches under 1F1B,
  chunk-forwards of l/(p·v) layers interleaved) of
  :func:`~labkit.memory.estimator.activation_bytes_per_layer` per layer (full recomputation
  keeps 2sbh per layer plus one layer's full activations while recomputing);
* time, with T_mb one micro-batch on one stage = GEMMs (FLOPs at ``efficiency`` × peak) +
  memory-bound kernels (:func:`layer_traffic_bytes` / HBM bandwidth) + the tensor-parallel
  all-reduces: m·T_mb of work, a bubble of (p - 1)/v·T_mb (§2.2), the point-to-point sends,
  and the data-parallel gradient reduction (not overlapped, as in the 2021 Megatron-LM;
  with ZeRO-2 a reduce-scatter per micro-batch and ZeRO-3 also two all-gathers per
  micro-batch, below). ``efficiency`` is the one free parameter, fitted once to Table 1
  (:func:`~labkit.parallel.planner_table1.fit_table1_efficiency`), not per row.

Ranks are laid out as Megatron-LM does (``megatron/core/parallel_state.py``,
``initialize_model_parallel``, order tp-dp-pp): tensor-parallel groups are consecutive
ranks, data-parallel groups stride t inside a block of t·d ranks, pipeline stages are t·d
ranks apart; 8 consecutive ranks share a node. A ring collective inside one node runs at
NVLink speed; one that spans nodes is bounded by the node's NICs its members own
(:func:`bus_bandwidth`). So tensor parallelism across nodes is priced, not forbidden.

ZeRO-2 and -3 (which :func:`~labkit.parallel.planner.plan` refuses together with pipeline
parallelism) are charged per micro-batch: DeepSpeed's
``DeepSpeedEngine.allreduce_gradients`` ("ZeRO stage >= 2 communicates during non gradient
accumulation boundaries as well") reduce-scatters the gradients after every micro-batch's
backward, and ZeRO-3 re-gathers the parameters it freed before every forward and backward
(Rajbhandari et al. SC'20 §7.2.2).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit import validate as V
from labkit.hardware.clusters import GPUCluster
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes
from labkit.parallel.pipeline import peak_stash
from labkit.parallel.tensor_parallel import layer_comm_bytes

DEFAULT_EFFICIENCY = 0.58   # planner_table1.fit_table1_efficiency() = 0.579


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


# Brown et al. 2020 ("Language Models are Few-Shot Learners"), Table 2.1: GPT-3 175B has 96
# layers, d_model 12288, 96 heads and batches of 3.2M tokens (1536 sequences of 2048)
GPT3 = GPTModel(96, 12288, 96, batch=1536, name="GPT-3 175B")


def bus_bandwidth(cl: GPUCluster, members_per_node: int, spans_nodes: bool) -> float:
    """Bytes/s per GPU of a ring collective (the 2(n-1)/n·S bytes it sends go at this rate)
    whose group has ``members_per_node`` ranks in each node it spans: NVLink inside one
    node; across nodes the ring's inter-node hops go through the NICs, and with every GPU
    of a node in some such collective at once a group gets its members' share of the node's
    NICs, ``inter_bw · nics_per_node · members_per_node / gpus_per_node`` (NCCL runs one ring
    per NIC: "add more NICs and you should get more bandwidth, up to ... the NVLink
    intra-node bandwidth", NVIDIA/nccl#412; 192 GB/s all-reduce bus bandwidth measured on
    DGX A100 with 8 × HDR, NVIDIA/nccl#812), never above NVLink."""
    if not spans_nodes:
        return cl.intra_bw
    share = cl.inter_bw * cl.nics_per_node * members_per_node / cl.gpus_per_node
    return min(cl.intra_bw, share)


def _groups(cl: GPUCluster, tp: int, pp: int, dp: int) -> dict[str, tuple[int, bool]]:
    """(members per node, spans nodes) of each group under Megatron-LM's tp-dp-pp order."""
    g = cl.gpus_per_node
    return {"tp": (min(tp, g), tp > g),
            "dp": (min(dp, max(1, g // tp)), tp * dp > g),
            "pp": (1, tp * pp * dp > g)}


def layer_traffic_bytes(seq: int, microbatch: int, hidden: int, heads: int, tp: int = 1,
                        sequence_parallel: bool = False) -> dict[str, float]:
    """HBM bytes read and written by the memory-bound (non-GEMM) kernels of one transformer
    layer, one micro-batch, on one of ``tp`` ranks, 2-byte activations, 1-byte dropout
    masks; the kernels of the 2021 Megatron-LM (Narayanan et al. SC'21 §4.2: fused bias +
    GeLU, bias + dropout + add, and scale + mask + softmax):

    * forward: two layer norms (read, write 2sbh each: 8sbh), two bias-dropout-adds (read the
      output and the residual, write the sum and the mask: 2·7sbh), bias-GeLU on the 4h
      activation (read, write: 16sbh/t), scale-mask-softmax of the a/t heads' s×s scores
      (read, write: 4as²b/t) and the attention dropout (read, write, mask: 5as²b/t):
      sbh(22 + 16/t) + 9as²b/t;
    * backward (each reads what it saved and the incoming gradient, writes the outgoing
      one): layer norms 2·6sbh, dropout-adds 2·5sbh, GeLU 24sbh/t, softmax 6as²b/t,
      dropout 5as²b/t: sbh(22 + 24/t) + 11as²b/t.

    With sequence parallelism (Korthikanti et al. 2022 §4.2.2) the layer norms and
    dropout-adds work on s/t of the sequence. Returns {"forward", "backward",
    "attention core"} (the softmax and dropout part of the forward, which selective
    recomputation re-runs)."""
    s, b, h, a = seq, microbatch, hidden, heads
    sbh, core = s * b * h, a * s * s * b / tp
    rep = 1 / tp if sequence_parallel else 1.0
    return {"forward": sbh * (22 * rep + 16 / tp) + 9 * core,
            "backward": sbh * (22 * rep + 24 / tp) + 11 * core,
            "attention core": 9 * core}


def plan_memory(model: GPTModel, tp: int, pp: int, dp: int, microbatch: int,
                zero: int = 0, recompute: str = "full",
                sequence_parallel: bool = False, chunks: int = 1) -> dict[str, float]:
    """Bytes per GPU of the busiest (first) pipeline stage, by part. The stash is
    :func:`~labkit.parallel.pipeline.peak_stash` of stage 0: min(p, m) micro-batches under
    1F1B (m < p keeps only m), chunk-forwards of l/(p·v) layers interleaved."""
    m = model.batch // (dp * microbatch)
    local = int(V.ceil_div(model.params, tp * pp))
    st = model_state_bytes(local, "mixed", "adam", zero, dp)
    lps = V.ceil_div(model.layers, pp)
    if chunks > 1:
        in_flight = peak_stash("interleaved", pp, m, 0, chunks) * lps / chunks
    else:
        in_flight = peak_stash("1f1b", pp, max(m, 1), 0) * lps
    s, b, h, a = model.seq, microbatch, model.hidden, model.heads
    if recompute == "full":
        act = in_flight * activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel, "full")
        act += activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel, "none")
    else:
        act = in_flight * activation_bytes_per_layer(s, b, h, a, tp, sequence_parallel,
                                                     recompute)
    return {"params": st.params, "grads": st.grads, "optimizer": st.optimizer,
            "activations": act}


def _dp_bytes(model: GPTModel, tp: int, pp: int, dp: int, m: int, zero: int) -> float:
    """Bytes one data-parallel rank sends per step (2-byte gradients and parameters): a ring
    all-reduce 2(d-1)/d·2Ψ' for DDP and ZeRO-1, Ψ' = Ψ/(t·p); ZeRO-2 reduce-scatters after
    each of the m micro-batches and all-gathers once, (m + 1)(d-1)/d·2Ψ'; ZeRO-3 also
    all-gathers the parameters before every forward and backward, 3m(d-1)/d·2Ψ'."""
    shard = (dp - 1) / dp * 2 * model.params / (tp * pp)
    return {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[zero] * shard


def plan_time(model: GPTModel, cl: GPUCluster, tp: int, pp: int, dp: int, microbatch: int,
              zero: int = 0, recompute: str = "full",
              efficiency: float = DEFAULT_EFFICIENCY, chunks: int = 1,
              sequence_parallel: bool = False) -> dict[str, float]:
    """Seconds of one step, by part (see the module docstring)."""
    n = tp * pp * dp
    m = model.batch // (dp * microbatch)
    v = chunks
    lps = V.ceil_div(model.layers, pp)
    groups = _groups(cl, tp, pp, dp)
    gemm_mb = model.flops(recompute) / (n * m * cl.peak_flops * efficiency)
    tr = layer_traffic_bytes(model.seq, microbatch, model.hidden, model.heads, tp,
                             sequence_parallel)
    passes = tr["forward"] + tr["backward"]
    passes += tr["forward"] if recompute == "full" else \
        tr["attention core"] if recompute == "selective" else 0.0
    mem_mb = lps * passes / cl.hbm_bw
    tp_mb = 0.0
    if tp > 1:
        tp_bytes = lps * layer_comm_bytes(model.seq, microbatch, model.hidden, tp) * (
            1.5 if recompute == "full" else 1)
        tp_mb = tp_bytes / bus_bandwidth(cl, *groups["tp"])
    stage_mb = gemm_mb + mem_mb + tp_mb
    p2p = 0.0
    if pp > 1:   # activation forward, gradient backward, split over t (scatter/gather, §4.1)
        link = bus_bandwidth(cl, *groups["pp"])
        p2p = (v * m + pp - 1) * 2 * (2 * model.seq * microbatch * model.hidden / tp) / link
    dp_t = 0.0
    if dp > 1:
        dp_t = _dp_bytes(model, tp, pp, dp, m, zero) / bus_bandwidth(cl, *groups["dp"])
    return {"compute": gemm_mb * m, "memory-bound ops": mem_mb * m,
            "tensor-parallel comm": tp_mb * m,
            "pipeline bubble": stage_mb * (pp - 1) / v, "pipeline sends": p2p,
            "data-parallel comm": dp_t}


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


def layer_comm_vs_compute(model: GPTModel, tp: int, cl: GPUCluster, *,
                          efficiency: float = DEFAULT_EFFICIENCY) -> LayerCommCompute:
    """Why tensor parallelism stays inside a node (Narayanan et al. SC'21 §3.2, takeaway #1):
    the 4 all-reduces of the s·b·h activation per layer (Shoeybi et al. 2019 §3) over
    NVLink vs InfiniBand, beside the layer's arithmetic. ``model.batch`` is the
    micro-batch."""
    tp = V.integer("tp", tp, low=1)
    efficiency = V.fraction("efficiency", efficiency)
    if efficiency == 0:
        raise ValueError("efficiency must be in (0, 1], got 0")
    if not isinstance(cl, GPUCluster):
        raise TypeError(f"cl must be a GPUCluster, got {type(cl).__name__}")
    nbytes = layer_comm_bytes(model.seq, model.batch, model.hidden, tp)
    flops = model.flops("none") / model.layers / tp
    return LayerCommCompute(tp, nbytes, flops, cl.intra_bw, cl.inter_bw, efficiency,
                            nbytes / cl.intra_bw, nbytes / cl.inter_bw,
                            flops / (cl.peak_flops * efficiency))
