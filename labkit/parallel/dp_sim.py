"""Data-parallel training step simulator: DataParallel vs DistributedDataParallel.

One step of synchronous data parallelism on ``world`` GPUs, each with ``per_gpu_batch``
samples (weak scaling: the global batch grows with the world):

* ``ddp`` (DistributedDataParallel; Li et al., "PyTorch Distributed", VLDB 2020): one
  process per GPU. Backward produces gradients from the last layer to the first; they are
  packed into buckets of at least ``bucket_mb`` MB, and each bucket's ring all-reduce starts
  as soon as the bucket is full on every rank (and the previous one is done), overlapping
  communication with the rest of backward. The step ends when backward and the last
  all-reduce are done, then the optimizer runs on every GPU.
* ``ddp_no_overlap``: the same buckets, all-reduced only after backward ends.
* ``dp`` (``nn.DataParallel``): one process drives every GPU with threads. Each step GPU 0
  broadcasts the parameters (replicate), scatters the input, the threads run forward,
  outputs are gathered on GPU 0 for the loss and their gradients scattered back, the
  threads run backward — kernel launches from all threads share one Python interpreter
  (the GIL), so host time per layer is multiplied by the GPU count — then gradients are
  reduced onto GPU 0 after backward (no overlap) and only GPU 0 runs the optimizer.

Compute time of a layer = max(FLOPs / sustained FLOP/s, host launch time); backward costs
2× forward (Kaplan et al. 2020, §2.1: ≈ 6N FLOPs per token for training, 2N forward).
Communication uses :func:`labkit.parallel.cost.collective_time`. A synchronous step waits
for the slowest rank: ``jitter`` draws each rank's compute slowdown from a log-normal and
``slow_rank`` makes one rank that many times slower.

Every modelling constant is a named field of :class:`Hardware` with its source or marked
as an assumption: the GPU's data sheet comes from :data:`labkit.hardware.GPUS` at one
``precision`` for every preset (so presets compare like with like), times the
``sustained_fraction`` a real training step reaches; γ (seconds per byte reduced) and the
optimizer's time come from HBM bandwidth, since both are memory-bound streams.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit import validate as V
from labkit.hardware import GPUS
from labkit.parallel.cost import collective_time

MODES = ("ddp", "ddp_no_overlap", "dp")

SUSTAINED_FRACTION = 0.4
"""Assumed share of the data-sheet peak a training step sustains. Large-model training
reports 40–55 % model FLOPs utilisation (PaLM: 46.2 %, Chowdhery et al. 2022, Table 3;
Megatron-LM: 52 % of peak on A100, Narayanan et al. SC 2021, §5.1); 0.4 is a round,
conservative assumption, not a measurement."""

REDUCE_BYTES_PER_BYTE = 3.0
"""γ = this / HBM bandwidth: adding m bytes into a buffer reads 2m and writes m bytes."""

OPTIMIZER_BYTES_PER_PARAM = 20.0
"""SGD with momentum in fp32 reads weight, gradient and momentum and writes weight and
momentum: 5 × 4 bytes per parameter, at HBM bandwidth (a memory-bound elementwise pass)."""

PRECISION = "fp16"
"""One precision for every preset: the dense FP16 tensor-core peak of
:mod:`labkit.hardware`, as mixed-precision training runs its matmuls."""


@dataclass(frozen=True)
class Hardware:
    """A GPU server (and its network) as the simulator needs it.

    ``link_bandwidth`` is one direction of one GPU's GPU-to-GPU bandwidth (what a ring
    all-reduce can drive per hop); ``network_bandwidth`` the same per GPU between nodes.
    ``link_latency`` / ``network_latency`` (α per message) are assumptions of the right
    order (a few µs per hop: NCCL's small-message all-reduce on 8 GPUs takes tens of µs
    over its 2(p-1) steps); measure your own with :mod:`labkit.parallel.launch`.
    """
    name: str
    gpu: str                    # key of labkit.hardware.GPUS
    link_bandwidth: float       # B/s per direction, within a node
    link_latency: float         # s per message (α) within a node (assumed)
    gpus_per_node: int
    network_bandwidth: float    # B/s per direction per GPU, between nodes
    network_latency: float      # s per message between nodes (assumed)
    precision: str = PRECISION
    sustained_fraction: float = SUSTAINED_FRACTION
    launch_overhead: float = 10e-6   # host seconds per kernel launch (Python + driver; assumed)
    reduce_bytes_per_byte: float = REDUCE_BYTES_PER_BYTE
    optimizer_bytes_per_param: float = OPTIMIZER_BYTES_PER_PARAM
    source: str = ""

    @property
    def gpu_flops(self) -> float:
        """Sustained training FLOP/s per GPU: data-sheet peak × ``sustained_fraction``."""
        return GPUS[self.gpu].peak(self.precision) * self.sustained_fraction

    @property
    def hbm_bandwidth(self) -> float:
        return GPUS[self.gpu].hbm_bandwidth

    @property
    def gamma(self) -> float:
        """Seconds per byte reduced: a memory-bound add (see REDUCE_BYTES_PER_BYTE)."""
        return self.reduce_bytes_per_byte / self.hbm_bandwidth

    def optimizer_time(self, params: float) -> float:
        """Seconds for one optimizer step over ``params`` parameters (memory-bound)."""
        return params * self.optimizer_bytes_per_param / self.hbm_bandwidth

    def alpha_beta(self, world: int) -> tuple[float, float]:
        """α, β of the ring's slowest hop: NVLink/PCIe inside a node, the NIC across nodes."""
        if world <= self.gpus_per_node:
            return self.link_latency, 1.0 / self.link_bandwidth
        bw = min(self.link_bandwidth, self.network_bandwidth)
        return self.network_latency, 1.0 / bw


GB = 1e9
HARDWARE = {
    "8× V100 PCIe 3.0": Hardware(
        "8× V100 PCIe 3.0", "V100", 15.75 * GB / 2, 10e-6, 8, 12.5 * GB / 8, 5e-6,
        source="GPU rates: labkit.hardware V100 (FP16 tensor core); PCIe 3.0 ×16 = 15.75 "
               "GB/s per direction (PCI-SIG), shared by GPU pairs behind a switch; 100 Gb/s "
               "EDR InfiniBand per node"),
    "8× V100 NVLink (DGX-1)": Hardware(
        "8× V100 NVLink (DGX-1)", "V100", GPUS["V100"].nvlink_per_direction, 5e-6,
        8, 50 * GB / 8, 5e-6,
        source="GPU rates: labkit.hardware V100 (FP16 tensor core); NVLink 2.0 300 GB/s "
               "total (150 per direction); DGX-1: 4× 100 Gb/s EDR InfiniBand per node"),
    "8× A100 PCIe 4.0": Hardware(
        "8× A100 PCIe 4.0", "A100", 31.5 * GB / 2, 10e-6, 8, 25 * GB, 5e-6,
        source="GPU rates: labkit.hardware A100 (FP16 tensor core); PCIe 4.0 ×16 64 GB/s "
               "(31.5 per direction), shared by GPU pairs; 200 Gb/s HDR InfiniBand per GPU"),
    "8× A100 NVLink (DGX A100)": Hardware(
        "8× A100 NVLink (DGX A100)", "A100", GPUS["A100"].nvlink_per_direction, 5e-6,
        8, 25 * GB, 5e-6,
        source="GPU rates: labkit.hardware A100 (FP16 tensor core); NVLink 3 600 GB/s total "
               "(300 per direction); DGX A100: 8× 200 Gb/s HDR InfiniBand (25 GB/s per GPU)"),
    "8× H100 NVLink (DGX H100)": Hardware(
        "8× H100 NVLink (DGX H100)", "H100", GPUS["H100"].nvlink_per_direction, 4e-6,
        8, 50 * GB, 4e-6,
        source="GPU rates: labkit.hardware H100 SXM (FP16 tensor core); NVLink 4 900 GB/s "
               "total (450 per direction); DGX H100: 8× 400 Gb/s NDR (50 GB/s per GPU)"),
}


@dataclass(frozen=True)
class ModelProfile:
    """Per-layer parameter counts and forward FLOPs per sample, first layer first."""
    name: str
    layer_params: tuple[float, ...]
    layer_flops: tuple[float, ...]
    input_bytes: float                     # bytes of one input sample
    kernels_per_layer: int = 3             # forward launches per layer (backward: 2×)
    output_bytes: float = 40.0             # bytes of one sample's output (logits)

    @property
    def params(self) -> float:
        return float(sum(self.layer_params))

    @property
    def flops(self) -> float:
        return float(sum(self.layer_flops))


def _profile(name: str, params: float, flops: float, layers: int, input_bytes: float,
             skew: float, output_bytes: float = 40.0) -> ModelProfile:
    """A stylised profile with the right totals: later layers hold more parameters
    (``skew`` > 1: geometric growth), FLOPs spread evenly."""
    w = skew ** np.linspace(0.0, 1.0, layers)
    p = params * w / w.sum()
    f = np.full(layers, flops / layers)
    return ModelProfile(name, tuple(float(x) for x in p), tuple(float(x) for x in f),
                        input_bytes, output_bytes=output_bytes)


MODELS = {
    # He et al. 2016: 25.6 M parameters, 4.1 GMACs (8.2 GFLOPs) per 224×224 image.
    "ResNet-50": _profile("ResNet-50", 25.6e6, 8.2e9, 54, 3 * 224 * 224 * 4, 30.0, 1000 * 4),
    # Devlin et al. 2019: 110 M parameters; forward ≈ 2 × params × 128 tokens.
    "BERT-base (seq 128)": _profile("BERT-base (seq 128)", 110e6, 2 * 110e6 * 128, 14,
                                    128 * 8, 1.0),
    # A small MLP like chapter 09's real run: few FLOPs per parameter, launch-bound.
    "MLP 64-512-512-10": _profile("MLP 64-512-512-10", 64 * 512 + 512 * 512 + 5130,
                                  2 * (64 * 512 + 512 * 512 + 5130), 3, 64 * 4, 1.0),
}


@dataclass(frozen=True)
class Event:
    """One bar of a timeline: ``kind`` is free text (chapters 10 and 11 add their own)."""
    lane: str
    start: float
    end: float
    label: str
    kind: str      # here: "forward", "backward", "comm", "optimizer", "overhead"


@dataclass(frozen=True)
class StepResult:
    mode: str
    world: int
    per_gpu_batch: int
    step_time: float
    compute_time: float        # slowest rank's forward + backward
    comm_time: float           # total all-reduce / reduce / broadcast time
    exposed_comm: float        # step time not hidden behind compute (excl. optimizer)
    buckets: tuple[float, ...]  # bucket sizes in bytes (DDP)
    events: tuple[Event, ...] = field(default=())

    @property
    def throughput(self) -> float:
        """Samples per second across all GPUs."""
        return self.world * self.per_gpu_batch / self.step_time


def make_buckets(grad_bytes_reverse, cap_bytes: float) -> list[list[int]]:
    """DDP's bucketing: walk gradients in the order backward produces them (last layer
    first) and close a bucket as soon as it holds at least ``cap_bytes``.

    Returns lists of indices into ``grad_bytes_reverse``. (PyTorch's Reducer caps the first
    bucket at ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB when the cap is left at its
    default, and rebuilds the buckets after the first iteration in the order gradients
    really arrived; here every bucket uses ``cap_bytes``.)
    """
    cap_bytes = V.positive("cap_bytes", cap_bytes)
    buckets: list[list[int]] = []
    cur: list[int] = []
    size = 0.0
    for i, b in enumerate(grad_bytes_reverse):
        b = V.nonnegative(f"grad_bytes_reverse[{i}]", b)
        cur.append(i)
        size += b
        if size >= cap_bytes:
            buckets.append(cur)
            cur, size = [], 0.0
    if cur:
        buckets.append(cur)
    return buckets


def _rank_slowdowns(world: int, jitter: float, slow_rank: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.exp(rng.normal(0.0, jitter, size=world)) if jitter > 0 else np.ones(world)
    s = np.maximum(s, 1.0) if jitter > 0 else s
    s[-1] *= slow_rank
    return s


@dataclass(frozen=True)
class _Setup:
    """What every mode shares: per-layer compute times and the links."""
    model: "ModelProfile"
    hw: Hardware
    world: int
    per_gpu_batch: int
    bucket_mb: float
    bytes_per_grad: int
    fwd: np.ndarray            # per layer, seconds, slowest rank
    bwd: np.ndarray
    alpha: float
    beta: float
    grad_bytes: np.ndarray     # per layer


def _setup(model, hw, world, per_gpu_batch, bucket_mb, bytes_per_grad, jitter, slow_rank,
           seed, host_threads: int) -> _Setup:
    alpha, beta = hw.alpha_beta(world)
    worst = float(_rank_slowdowns(world, jitter, slow_rank, seed).max())
    host = hw.launch_overhead * model.kernels_per_layer * host_threads
    fwd = np.array([max(f * per_gpu_batch / hw.gpu_flops, host) for f in model.layer_flops])
    bwd = np.array([max(2 * f * per_gpu_batch / hw.gpu_flops, 2 * host)
                    for f in model.layer_flops])
    return _Setup(model, hw, world, per_gpu_batch, bucket_mb, bytes_per_grad, fwd * worst,
                  bwd * worst, alpha, beta, np.array(model.layer_params) * bytes_per_grad)


def _result(mode, s: _Setup, events, f_total, bwd_start, bwd_end, end, comm, buckets,
            opt_lane) -> StepResult:
    opt = s.hw.optimizer_time(s.model.params)
    events.append(Event(opt_lane, end, end + opt, "optimizer", "optimizer"))
    compute = f_total + (bwd_end - bwd_start)
    return StepResult(mode, s.world, s.per_gpu_batch, end + opt, compute, comm,
                      end - compute, tuple(buckets), tuple(events))


def _step_ddp(s: _Setup, overlap: bool) -> StepResult:
    """DDP: forward, backward; bucket k's ring all-reduce starts when its last gradient is
    ready (``overlap``) or when backward ends, and after bucket k-1's."""
    f_total = float(s.fwd.sum())
    events = [Event("compute", 0.0, f_total, "forward", "forward")]
    ready = f_total + np.cumsum(s.bwd[::-1])     # layer L-1 first
    bwd_end = float(ready[-1])
    events.append(Event("compute", f_total, bwd_end, "backward", "backward"))
    buckets, comm, end = [], 0.0, bwd_end
    if s.world > 1:
        rev = s.grad_bytes[::-1]
        free = f_total if overlap else bwd_end
        for g in make_buckets(rev, s.bucket_mb * 1e6):
            size = float(rev[g].sum())
            buckets.append(size)
            start = max(free, float(ready[g[-1]])) if overlap else free
            d = collective_time("all_reduce", "ring", size, s.world, alpha=s.alpha,
                                beta=s.beta, gamma=s.hw.gamma)
            events.append(Event("comm", start, start + d, f"bucket {len(buckets)}", "comm"))
            free, comm = start + d, comm + d
        end = max(free, bwd_end)
    return _result("ddp" if overlap else "ddp_no_overlap", s, events, f_total, f_total,
                   bwd_end, end, comm, buckets, "compute")


def _step_dp(s: _Setup) -> StepResult:
    """nn.DataParallel: replicate + scatter, forward, gather outputs / scatter their
    gradients, backward, reduce gradients to GPU 0 after backward; GPU 0 steps alone."""
    m, w, a, b = s.model, s.world, s.alpha, s.beta
    events: list[Event] = []
    t = comm = 0.0
    if w > 1:
        rep = collective_time("broadcast", "tree", s.grad_bytes.sum(), w, alpha=a, beta=b)
        scat = (w - 1) * s.per_gpu_batch * m.input_bytes * b + a * (w - 1)
        events.append(Event("GPU 0", 0.0, rep, "replicate params", "overhead"))
        events.append(Event("GPU 0", rep, rep + scat, "scatter input", "overhead"))
        t = comm = rep + scat
    f_total = float(s.fwd.sum())
    events.append(Event("compute", t, t + f_total, "forward", "forward"))
    t += f_total
    if w > 1:   # outputs to GPU 0 for the loss, output grads back
        gather = 2 * ((w - 1) * s.per_gpu_batch * m.output_bytes * b + a)
        events.append(Event("GPU 0", t, t + gather, "gather outputs / scatter grads",
                            "overhead"))
        t += gather
        comm += gather
    bwd_start, bwd_end = t, t + float(s.bwd.sum())
    events.append(Event("compute", bwd_start, bwd_end, "backward", "backward"))
    end = bwd_end
    if w > 1:   # a reduce is half a tree all-reduce
        red = collective_time("all_reduce", "tree", s.grad_bytes.sum(), w, alpha=a, beta=b,
                              gamma=s.hw.gamma) / 2
        events.append(Event("GPU 0", bwd_end, bwd_end + red, "reduce grads to GPU 0", "comm"))
        comm += red
        end = bwd_end + red
    return _result("dp", s, events, f_total, bwd_start, bwd_end, end, comm, [],
                   "GPU 0" if w > 1 else "compute")


MODE_STEPS = {
    "ddp": lambda s: _step_ddp(s, overlap=True),
    "ddp_no_overlap": lambda s: _step_ddp(s, overlap=False),
    "dp": _step_dp,
}
HOST_THREADS = {"ddp": lambda world: 1, "ddp_no_overlap": lambda world: 1,
                "dp": lambda world: world}   # DP: one interpreter launches for all GPUs


def simulate_step(model: ModelProfile, hw: Hardware, world: int, mode: str = "ddp", *,
                  per_gpu_batch: int = 32, bucket_mb: float = 25.0, bytes_per_grad: int = 4,
                  jitter: float = 0.0, slow_rank: float = 1.0, seed: int = 0) -> StepResult:
    """Simulate one training step; see the module docstring for the model of each mode."""
    V.one_of("mode", mode, MODES)
    world = V.integer("world", world, low=1)
    per_gpu_batch = V.integer("per_gpu_batch", per_gpu_batch, low=1)
    bucket_mb = V.positive("bucket_mb", bucket_mb)
    bytes_per_grad = V.integer("bytes_per_grad", bytes_per_grad, low=1)
    jitter = V.nonnegative("jitter", jitter)
    slow_rank = V.number("slow_rank", slow_rank, low=1)
    seed = V.integer("seed", seed, low=0)
    s = _setup(model, hw, world, per_gpu_batch, bucket_mb, bytes_per_grad, jitter, slow_rank,
               seed, HOST_THREADS[mode](world))
    return MODE_STEPS[mode](s)


@dataclass(frozen=True)
class Scaling:
    mode: str
    worlds: tuple[int, ...]
    throughput: tuple[float, ...]
    efficiency: tuple[float, ...]   # throughput(n) / (n × throughput(1))
    speedup: tuple[float, ...]


@dataclass(frozen=True)
class BucketSweep:
    title: str
    caps_mb: tuple[float, ...]
    buckets: tuple[int, ...]          # number of buckets at each cap
    step_time: tuple[float, ...]
    exposed_comm: tuple[float, ...]


def bucket_sweep(model: ModelProfile, hw: Hardware, world: int,
                 caps_mb=(0.5, 1, 5, 25, 100, 1000)) -> BucketSweep:
    """DDP step time as the bucket cap grows: small buckets pay α per message, huge ones
    start communicating only when backward is nearly over (PyTorch's default cap: 25 MB)."""
    caps = tuple(float(c) for c in caps_mb)
    if not caps or min(caps) <= 0:
        raise ValueError(f"caps_mb must be positive sizes in MB, got {caps_mb!r}")
    steps = [simulate_step(model, hw, world, "ddp", bucket_mb=c) for c in caps]
    return BucketSweep(f"{model.name}, {hw.name}, DDP on {world} GPUs", caps,
                       tuple(len(s.buckets) for s in steps),
                       tuple(s.step_time for s in steps), tuple(s.exposed_comm for s in steps))


def scaling_efficiency(throughputs, worlds) -> np.ndarray:
    """Linear-scaling efficiency: (throughput(n) / throughput(1)) / n; worlds[0] must be 1."""
    thr = np.asarray(throughputs, dtype=float)
    w = np.asarray(worlds, dtype=float)
    if thr.shape != w.shape or thr.ndim != 1 or thr.size == 0:
        raise ValueError("throughputs and worlds must be 1-D of the same non-zero length")
    if w[0] != 1:
        raise ValueError(f"worlds[0] must be 1 (the single-GPU baseline), got {w[0]}")
    if np.any(thr <= 0):
        raise ValueError("throughputs must be > 0")
    return thr / thr[0] / w


def scaling(model: ModelProfile, hw: Hardware, worlds=(1, 2, 4, 8), mode: str = "ddp",
            **kw) -> Scaling:
    """Throughput and efficiency for each world size (world 1 is the plain single GPU)."""
    worlds = tuple(int(w) for w in worlds)
    if not worlds or worlds[0] != 1:
        raise ValueError(f"worlds must start at 1, got {worlds}")
    thr = tuple(simulate_step(model, hw, w, mode, **kw).throughput for w in worlds)
    eff = scaling_efficiency(thr, worlds)
    return Scaling(mode, worlds, thr, tuple(float(e) for e in eff),
                   tuple(float(t / thr[0]) for t in thr))
