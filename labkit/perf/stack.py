"""Chapter 01: one training step followed down the stack, and seed experiment 1.

The six layers (seed 000, §2): application → framework → compiler/graph → runtime →
kernel libraries → hardware. ``profile_step`` runs a step under ``torch.profiler``
(PyTorch docs, "PyTorch Profiler"), and ``layer_seconds`` charges every profiler row's
*self* time to the layer that spends it; ``layer_of`` says which layer a row belongs to.
FLOPs come from :func:`labkit.perf.ops.count_ops`.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from labkit import validate as v

# the GPU a prediction uses without a GPU, and whose peak an unrecognised GPU is measured
# against (labelled as such)
DEFAULT_GPU = "H100"

LAYERS = ("application", "framework", "compiler/graph", "runtime", "kernel libraries",
          "hardware")

# what each layer adds to a step (the notebook's table)
LAYER_ADDS = {
    "application": "your Python: the loop, the loss, the calls into the model",
    "framework": "nn.Module calls, the ATen dispatcher, autograd's graph and engine, "
                 "the optimizer",
    "compiler/graph": "nothing in eager mode; torch.compile captures and fuses the graph",
    "runtime": "memory allocation; on a GPU also kernel launches, copies, synchronisation",
    "kernel libraries": "the arithmetic: oneDNN/MKL/ATen CPU kernels here, cuBLAS/cuDNN "
                        "on a GPU",
    "hardware": "the lower bound: FLOPs / peak FLOP/s of the roofline",
}

_COMPILER = re.compile(r"Torch-Compiled Region|CompiledFunction|TorchDynamo|Inductor|"
                       r"CompiledFxGraph|torch_compile|dynamo", re.I)
_RUNTIME = re.compile(r"^(cuda|cu|hip|nccl)[A-Z]")
_DEVICE = re.compile(r"^(void |Memcpy|Memset|ampere_|sm\d+_|volta_|turing_|hopper_|cutlass|"
                     r"cublas|cudnn|triton_|gemm|gemv|nvjet|at::native::|kernel)", re.I)
_FRAMEWORK = re.compile(r"^(aten::|autograd::|torch::autograd|Optimizer\.|detach$|"
                        r"\w+Backward\d*$)")
ALLOC_OPS = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resize_",
             "aten::new_empty", "aten::new_empty_strided", "aten::zeros", "aten::zero_"}
COMPUTE_OPS = {"aten::" + n for n in (
    "addmm", "mm", "bmm", "matmul", "mkldnn_convolution", "convolution_backward",
    "_convolution", "conv2d", "clamp_min", "threshold_backward", "sum", "mean", "add", "add_",
    "mul", "mul_", "sub", "div", "fill_", "copy_", "_log_softmax", "_log_softmax_backward_data",
    "nll_loss_forward", "nll_loss_backward", "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward", "_foreach_add_", "_foreach_mul_", "addcmul_",
    "addcdiv_", "sqrt", "lerp_", "relu", "relu_", "where", "clone", "ones_like", "exp",
    "_to_copy", "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_sqrt", "_foreach_lerp_",
    "_foreach_div_", "_foreach_add", "_foreach_mul")}


def layer_of(name: str) -> str:
    """The layer of the stack a ``torch.profiler`` row belongs to, from its name:

    * compiler/graph: regions of torch.compile (``Torch-Compiled Region``,
      ``CompiledFunction``, ``TorchDynamo…``, ``…Inductor…``);
    * runtime: CUDA/HIP runtime and driver API calls (``cudaLaunchKernel``,
      ``cudaMemcpyAsync``, ``cuLaunchKernel``, ``cudaStreamSynchronize``…);
    * kernel libraries: work on the device (kernel names such as ``ampere_sgemm_…``,
      ``void at::native::…``, ``triton_…``, and ``Memcpy HtoD`` copies);
    * framework: ATen operators (``aten::…``), autograd (``autograd::…``,
      ``…Backward0``), optimizers (``Optimizer.step#…``);
    * application: everything else — ranges the user labels with ``record_function``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a profiler row name (str), got {type(name).__name__}")
    n = name.strip()
    if _COMPILER.search(n):
        return "compiler/graph"
    if _RUNTIME.match(n):
        return "runtime"
    if _DEVICE.match(n):
        return "kernel libraries"
    if _FRAMEWORK.match(n):
        return "framework"
    return "application"


# ---------------------------------------------------------------------------- the models
def simple_net(seed: int = 0):
    """Seed 000 example 1's ``SimpleNet``: Linear(10, 50) → ReLU → Linear(50, 1)."""
    import torch
    from torch import nn

    class SimpleNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(10, 50)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(50, 1)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

    torch.manual_seed(v.integer("seed", seed, low=0))
    return SimpleNet()


def simplenet_step_flops(batch: int, d_in: int = 10, hidden: int = 50, d_out: int = 1,
                         input_requires_grad: bool = True) -> int:
    """Matmul FLOPs of one training step of a two-layer MLP (PyTorch's flop counter
    convention: 2·m·n·k per matmul, bias adds and ReLU not counted):

    forward 2B(d_in·h + h·d_out); backward: the weight gradients cost as much again, the
    gradient w.r.t. each layer's input as much again, except that nothing needs dx of the
    first layer unless the input requires grad (seed example 1 sets requires_grad=True).
    """
    b = v.integer("batch", batch, low=1)
    d_in, hidden, d_out = (v.integer(n, x, low=1) for n, x in
                           (("d_in", d_in), ("hidden", hidden), ("d_out", d_out)))
    input_requires_grad = v.boolean("input_requires_grad", input_requires_grad)
    l1, l2 = 2 * b * d_in * hidden, 2 * b * hidden * d_out
    return 3 * l1 + 3 * l2 - (0 if input_requires_grad else l1)


def simplenet_step(model, batch: int = 5, lr: float = 0.1, seed: int = 0, device: str = "cpu",
                   annotate: bool = True):
    """A closure running one training step of seed example 1 (loss = output.sum(), SGD),
    with ``record_function`` ranges naming the phases."""
    import contextlib

    import torch
    from torch.profiler import record_function

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(v.integer("batch", batch, low=1), 10, generator=g).to(device)
    x.requires_grad_(True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    label = record_function if annotate else (lambda _: contextlib.nullcontext())

    def step():
        opt.zero_grad()
        x.grad = None
        with label("## forward ##"):
            loss = model(x).sum()
        with label("## backward ##"):
            loss.backward()
        with label("## optimizer ##"):
            opt.step()
        return loss
    return step


# ---------------------------------------------------------------------------- profiling
@dataclass(frozen=True)
class ProfileRow:
    name: str
    layer: str
    calls: int
    self_s: float      # summed over the profiled steps
    total_s: float


@dataclass(frozen=True)
class StepProfile:
    rows: tuple[ProfileRow, ...]
    wall_s: float                 # median step wall time × steps
    steps: int
    layer_s: dict = field(default_factory=dict)    # seconds per step per layer
    tree: str = ""                # one step's call tree, indented

    def top(self, k: int = 10, by: str = "self_s") -> list[ProfileRow]:
        v.one_of("by", by, ("self_s", "total_s"))
        return sorted(self.rows, key=lambda r: getattr(r, by), reverse=True)[:k]


def _self_layer(name: str, has_device: bool) -> str:
    layer = layer_of(name)
    if layer == "framework" and name in ALLOC_OPS:
        return "runtime"
    if layer == "framework" and name in COMPUTE_OPS and not has_device:
        return "kernel libraries"    # on a CPU the ATen op itself runs the kernel
    return layer


def profile_step(step, steps: int = 10, warmup: int = 3, tree_depth: int = 3) -> StepProfile:
    """Profile ``steps`` calls of ``step()`` and charge every row's self time to a layer.

    On a GPU autograd runs backward on its own device thread: rows of other threads that
    start inside a step are charged to that step, and the main thread's wait for them is
    taken off the application layer."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    steps = v.integer("steps", steps, low=1)
    warmup = v.integer("warmup", warmup, low=0)
    for _ in range(warmup):
        step()
    acts = [ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        acts.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    # the profiler's first recorded step pays its own start-up: record warm-up steps
    # inside it (schedule) and keep only the ``steps`` active ones
    sched = torch.profiler.schedule(wait=0, warmup=2, active=steps, repeat=1)
    times = []
    with profile(activities=acts, schedule=sched) as prof:
        for _ in range(steps + 2):
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            prof.step()
    wall = float(sum(times[2:]))
    events = list(prof.events())
    has_device = any(str(e.device_type).endswith("CUDA") for e in events)
    agg: dict[str, list] = {}
    for e in events:
        on_device = str(e.device_type).endswith("CUDA")
        self_s = (e.self_device_time_total if on_device else e.self_cpu_time_total) / 1e6
        tot_s = (e.device_time_total if on_device else e.cpu_time_total) / 1e6
        row = agg.setdefault(e.name, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += self_s
        row[2] += tot_s
    # per step: walk each ProfilerStep's subtree, charge self times, take the median over
    # steps (a neighbour's job that stalls one step does not move it)
    step_roots = [e for e in events if e.cpu_parent is None and e.name.startswith("ProfilerStep")]
    # rows of other threads (autograd's device thread runs backward on a GPU) that start
    # inside a step belong to it; the main thread merely waited for them meanwhile
    others = [e for e in events if e.cpu_parent is None
              and not e.name.startswith("ProfilerStep")
              and not str(e.device_type).endswith("CUDA")]
    per_step = []
    for root, wall_i in zip(step_roots, times[2:]):
        acc = {k: 0.0 for k in LAYERS}
        stack_ = list(root.cpu_children)
        acc["application"] += root.self_cpu_time_total / 1e6
        side = [e for e in others if e.thread != root.thread
                and root.time_range.start <= e.time_range.start <= root.time_range.end]
        waited = sum(e.cpu_time_total for e in side) / 1e6
        stack_.extend(side)
        while stack_:
            e = stack_.pop()
            acc[_self_layer(e.name, has_device)] += e.self_cpu_time_total / 1e6
            stack_.extend(e.cpu_children)
        acc["application"] += max(wall_i - root.cpu_time_total / 1e6, 0.0)
        acc["application"] = max(acc["application"] - waited, 0.0)
        per_step.append(acc)
    layer_s = {k: float(np.median([a[k] for a in per_step])) if per_step else 0.0
               for k in LAYERS}
    if has_device:
        dev = sum(e.self_device_time_total for e in events
                  if str(e.device_type).endswith("CUDA")) / 1e6
        layer_s["kernel libraries"] += dev / steps
    rows = tuple(ProfileRow(n, layer_of(n), c, s, t) for n, (c, s, t) in agg.items())
    step_wall = float(np.median(times[2:]))
    return StepProfile(rows, step_wall * steps, steps, layer_s,
                       _tree(step_roots[:1] or events, tree_depth))


def _tree(roots, depth: int) -> str:
    """One step's rows as an indented tree (CPU rows), each with its layer."""
    roots = [e for e in roots if not str(e.device_type).endswith("CUDA")]
    if roots and roots[0].name.startswith("ProfilerStep"):
        roots = list(roots[0].cpu_children)
    else:
        roots = [e for e in roots if e.cpu_parent is None]
    lines = []

    def walk(e, d):
        if d >= depth:
            return
        lines.append(f"{'  ' * d}{e.name}  [{layer_of(e.name)}]")
        for c in e.cpu_children:
            walk(c, d + 1)
    for e in roots:
        walk(e, 0)
    return "\n".join(lines)


def layer_table(profile: StepProfile, flops: float, peak: float) -> list[tuple]:
    """Rows (layer, seconds per step, share of the step, FLOPs, what it adds). All FLOPs
    run in the kernel libraries; the hardware row is the time at peak, FLOPs / peak."""
    flops = v.nonnegative("flops", flops)
    peak = v.positive("peak", peak)
    step_s = profile.wall_s / profile.steps
    out = []
    for layer in LAYERS:
        if layer == "hardware":
            s = flops / peak
            out.append((layer, s, s / step_s, flops, LAYER_ADDS[layer]))
            continue
        s = profile.layer_s.get(layer, 0.0)
        f = flops if layer == "kernel libraries" else 0.0
        out.append((layer, s, s / step_s, f, LAYER_ADDS[layer]))
    return out


def layer_share(rows, layer: str) -> float:
    """The share of the step (third column) of ``layer``'s row in :func:`layer_table`'s
    ``rows``."""
    layer = v.one_of("layer", layer, LAYERS)
    for r in rows:
        if r[0] == layer:
            return float(r[2])
    raise ValueError(f"rows has no row for layer {layer!r}: pass layer_table's rows")


def format_layer_table(rows) -> str:
    """Markdown table of :func:`layer_table` rows."""
    lines = ["| layer | µs per step | share of step | FLOPs | what it adds |",
             "|---|---:|---:|---:|---|"]
    for layer, s, share, f, adds in rows:
        lines.append(f"| {layer} | {s * 1e6:.1f} | {share:.1%} | {f:,.0f} | {adds} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ Little's law
def bytes_in_flight(latency_s: float, bandwidth: float) -> float:
    """Little's law (Little, Operations Research 9(3), 1961): L = λ·W. To sustain
    ``bandwidth`` bytes/s when each request takes ``latency_s`` seconds, latency × bandwidth
    bytes must be requested and not yet returned at every moment."""
    return v.positive("latency_s", latency_s) * v.positive("bandwidth", bandwidth)


def loads_in_flight(latency_s: float, bandwidth: float, bytes_per_load: int = 4) -> float:
    """Independent loads in flight needed to saturate memory (one per thread, say)."""
    return bytes_in_flight(latency_s, bandwidth) / v.integer("bytes_per_load", bytes_per_load,
                                                             low=1)


@dataclass(frozen=True)
class InFlight:
    """Little's law on a data-sheet GPU: what must be in flight to stream its HBM bandwidth
    when each load takes ``latency_s``, in total and per SM, against the threads an SM holds."""
    gpu: str
    latency_s: float
    bytes: float                  # latency × bandwidth
    sm_count: int
    max_threads_per_sm: int       # labkit.hardware.sm_limits (CUDA C++ Programming Guide)
    bytes_per_load: int = 4       # the width of one load

    @property
    def loads(self) -> float:
        return self.bytes / self.bytes_per_load

    @property
    def bytes_per_sm(self) -> float:
        return self.bytes / self.sm_count

    @property
    def loads_per_sm(self) -> float:
        return self.loads / self.sm_count


def in_flight(latency_s: float, gpu: str = DEFAULT_GPU, bytes_per_load: int = 4) -> InFlight:
    """:func:`bytes_in_flight` (and so :func:`loads_in_flight`) at ``gpu``'s HBM bandwidth
    (:mod:`labkit.hardware`), with its SM count and resident-thread limit."""
    from labkit.hardware import gpu as sheet, sm_limits

    g = sheet(gpu)
    bytes_per_load = v.integer("bytes_per_load", bytes_per_load, low=1)
    return InFlight(g.key, v.positive("latency_s", latency_s),
                    bytes_in_flight(latency_s, g.hbm_bandwidth), g.sm_count,
                    sm_limits(g.key).max_threads_per_sm, bytes_per_load)


def format_in_flight(r: InFlight) -> str:
    """Chapter 01's two lines: bytes and ``bytes_per_load``-byte loads in flight, in total
    and per SM."""
    return (f"bytes in flight: {r.bytes / 1e6:.2f} MB = {r.bytes_per_sm / 1e3:.1f} kB per SM\n"
            f"{r.bytes_per_load}-byte loads in flight: {r.loads:,.0f} = {r.loads_per_sm:,.0f} "
            f"per SM "
            f"(an SM holds at most {r.max_threads_per_sm:,} resident threads)")


def format_rooflines(roofs) -> str:
    """One line per :class:`labkit.kernels.roofline.Roofline`: peak (TFLOP/s), bandwidth
    (GB/s) and ridge point (FLOP/byte) — chapter 01's comparison of this machine with the
    data sheets."""
    from labkit.kernels.roofline import Roofline

    lines = []
    for r in roofs:
        if not isinstance(r, Roofline):
            raise TypeError(f"roofs must hold Roofline objects, got {type(r).__name__}")
        lines.append(f"{r.name:34s} peak {r.peak / 1e12:8.3f} TFLOP/s   bandwidth "
                     f"{r.bandwidth / 1e9:7.0f} GB/s   ridge {r.ridge:5.1f} FLOP/byte")
    return "\n".join(lines)


# -------------------------------------------------------- seed examples 2 and 3
def memory_report() -> str:
    """Seed example 2 on the devices there are: CUDA allocator counters on a GPU, the
    process's resident memory on a CPU (there is no caching allocator to ask there)."""
    import torch

    if torch.cuda.is_available():
        a = torch.cuda.memory_allocated() / 2 ** 20
        r = torch.cuda.memory_reserved() / 2 ** 20
        return f"allocated {a:.2f} MiB, reserved {r:.2f} MiB, cached-free {r - a:.2f} MiB"
    return "CUDA not available: no caching allocator to report (see chapter 06)"


def seed_example3(epochs: int = 3, seed: int = 0, n: int = 1000, batch_size: int = 32):
    """Seed example 3, run on the devices there are: nn.DataParallel over every visible GPU
    (with none, DataParallel has no device_ids and simply calls the module). Returns the
    mean loss per epoch and the devices used."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    epochs = v.integer("epochs", epochs, low=1)
    torch.manual_seed(v.integer("seed", seed, low=0))
    model = nn.Sequential(nn.Linear(100, 256), nn.ReLU(), nn.Linear(256, 10))
    cuda = torch.cuda.is_available()
    model = nn.DataParallel(model)
    device = "cuda" if cuda else "cpu"
    model = model.to(device)
    x = torch.randn(n, 100)
    y = torch.randint(0, 10, (n,))
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    crit = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for bx, by in loader:
            bx, by = bx.to(device), by.to(device)
            opt.zero_grad()
            loss = crit(model(bx), by)
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total / len(loader))
    return losses, list(model.device_ids)


# ------------------------------------------------------------- seed experiment 1
# the cost of one small kernel launched back to back, MEASURED on an NVIDIA H200 with torch
# 2.11 in this project (benchmarks/bench_perf.py --gpu, 2026-11-30): 6.1-6.3 µs
MEASURED_LAUNCH_S = 6.2e-6
PCIE5_X16 = 32e9 * 16 * 128 / 130 / 8   # B/s per direction: 32 GT/s × 16 lanes, 128b/130b
# (PCI-SIG, PCI Express Base Specification 5.0, 2019); H100/H200 SXM hosts use PCIe Gen5.
# the batches of the predicted throughput curve (chapter 01's widget): 1 … 1024
CURVE_BATCHES = tuple(int(b) for b in np.unique(np.geomspace(1, 1024, 21).astype(int)))


def small_cnn(seed: int = 0):
    """A small CIFAR-shaped CNN: conv(3→16) ReLU pool, conv(16→32) ReLU pool,
    linear(2048→10)."""
    import torch
    from torch import nn

    torch.manual_seed(v.integer("seed", seed, low=0))
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def cifar_like(n: int, seed: int = 0):
    """``n`` synthetic CIFAR-10-shaped samples (3×32×32 float32 in [0, 1), labels 0–9)."""
    import torch

    n = v.integer("n", n, low=1)
    g = torch.Generator().manual_seed(v.integer("seed", seed, low=0))
    return torch.rand(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


@dataclass(frozen=True)
class CnnRun:
    device: str
    batch: int
    step_s: float            # median seconds per training step (copy included)
    copy_s: float            # of which host → device copy
    flops: float             # FLOPs per step (count_ops)
    peak: float              # FLOP/s of the device's roofline
    measured: bool           # False: predicted from a data-sheet roofline
    note: str = ""

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_s

    @property
    def copy_share(self) -> float:
        return self.copy_s / self.step_s

    @property
    def utilisation(self) -> float:
        """Achieved FLOP/s over the roofline peak."""
        return self.flops / self.step_s / self.peak


def cnn_step_counts(batch: int):
    """FLOPs and bytes per op of one CNN training step, counted on the meta device
    (shapes only: nothing is computed)."""
    import torch
    from torch import nn

    from labkit.perf.ops import count_ops

    batch = v.integer("batch", batch, low=1)
    model = small_cnn().to("meta")
    x = torch.empty(batch, 3, 32, 32, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return count_ops(lambda: nn.functional.cross_entropy(model(x), y).backward())


def run_cnn(batch: int = 32, steps: int = 4, device: str = "cpu", seed: int = 0,
            peak: float | None = None) -> CnnRun:
    """Measure CNN training steps on ``device`` (SGD, cross-entropy): host-resident data is
    copied to the device each step, as a DataLoader would deliver it."""
    import torch
    from torch import nn

    batch = v.integer("batch", batch, low=1)
    steps = v.integer("steps", steps, low=1)
    device = v.one_of("device", device, ("cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a GPU; there is none here")
    model = small_cnn(seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xs, ys = cifar_like(batch, seed)
    if device == "cuda":
        xs, ys = xs.pin_memory(), ys.pin_memory()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    step_t, copy_t = [], []
    for i in range(steps + 1):
        sync()
        t0 = time.perf_counter()
        x, y = xs.to(device, non_blocking=True), ys.to(device, non_blocking=True)
        sync()
        t1 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sync()
        t2 = time.perf_counter()
        if i:                                   # the first step is the warm-up
            step_t.append(t2 - t0)
            copy_t.append(t1 - t0 if device == "cuda" else 0.0)
    flops = cnn_step_counts(batch).flops
    if peak is None:
        from labkit.perf.machine import measure_machine
        peak = measure_machine().peak if device == "cpu" else float("nan")
    return CnnRun(device, batch, float(np.median(step_t)), float(np.median(copy_t)), flops,
                  peak, True, "measured")


def predict_cnn(batch: int, gpu: str = DEFAULT_GPU, precision: str = "fp32",
                launch_s: float = 0.0) -> CnnRun:
    """A PREDICTION (not a measurement) of one CNN step on a data-sheet GPU: each operator
    takes its roofline time max(F/peak, Q/bandwidth) and the batch crosses PCIe 5.0 x16.
    With ``launch_s`` = 0 launch overheads are ignored; otherwise every operator call pays
    ``launch_s`` seconds. Imperfect kernels are ignored either way: real steps are slower."""
    from labkit.perf.machine import datasheet

    roof = datasheet(gpu, precision)
    counts = cnn_step_counts(batch)
    launch_s = v.nonnegative("launch_s", launch_s)
    t = sum(roof.min_time(o.flops, o.bytes) + o.calls * launch_s for o in counts.ops)
    copy = batch * (3 * 32 * 32 * 4 + 8) / PCIE5_X16
    return CnnRun(f"{gpu} (predicted)", batch, t + copy, copy, counts.flops, roof.peak, False,
                  f"roofline prediction from the {gpu} data sheet, {precision}")


def _batches(batches) -> tuple[int, ...]:
    """A non-empty tuple or list of batch sizes, each an integer >= 1."""
    if not isinstance(batches, (tuple, list)) or not batches:
        raise ValueError(f"batches must be a non-empty tuple of batch sizes, got {batches!r}")
    return tuple(v.integer("batch", b, low=1) for b in batches)


def predict_cnn_curve(gpu: str = DEFAULT_GPU, launch_s: float = 0.0,
                      batches=CURVE_BATCHES) -> tuple[CnnRun, ...]:
    """:func:`predict_cnn` (fp32) at each of ``batches``: the predicted throughput curve."""
    return tuple(predict_cnn(b, gpu, launch_s=launch_s) for b in _batches(batches))


@dataclass(frozen=True)
class GpuPeak:
    key: str          # labkit.hardware.GPUS key whose data sheet gives the peak
    peak: float       # FLOP/s
    label: str        # says whose peak it is, and why


def gpu_peak(precision: str = "fp32", default: str = DEFAULT_GPU) -> GpuPeak:
    """The data-sheet peak of the GPU torch sees: when ``torch.cuda.is_available()``,
    :func:`labkit.kernels.timing.hardware_key` maps ``torch.cuda.get_device_name()`` to a
    :data:`labkit.hardware.GPUS` key. Without a GPU, or for a model ``labkit.hardware`` does
    not list, ``default``'s peak, labelled as the stated default.

    torch, not numba, is asked because torch runs the GPU rows of :func:`seed_experiment1`:
    numba's simulator (NUMBA_ENABLE_CUDASIM=1) on a GPU machine, or numba imported before
    labkit on a CPU one, would make the two disagree."""
    import torch

    from labkit.hardware import gpu as sheet
    from labkit.kernels.timing import hardware_key

    fallback = sheet(default)
    present = torch.cuda.is_available()
    key = hardware_key(torch.cuda.get_device_name(), None) if present else None
    if key is not None:
        return GpuPeak(key, sheet(key).peak(precision),
                       f"{key} {precision} peak (the GPU present; labkit.hardware)")
    why = "a GPU labkit.hardware does not list" if present else "no GPU"
    return GpuPeak(fallback.key, fallback.peak(precision),
                   f"{fallback.key} {precision} peak (stated default: {why})")


@dataclass(frozen=True)
class CpuGpuRuns:
    """Seed experiment 1: CNN steps on this CPU and on a GPU (measured, or predicted)."""
    cpu: tuple[CnnRun, ...]
    gpu: tuple[CnnRun, ...]
    gpu_peak: GpuPeak          # the peak the GPU rows' utilisation divides by

    @property
    def speedup(self) -> float:
        """GPU over CPU samples per second at the last batch of the run."""
        return self.gpu[-1].samples_per_s / self.cpu[-1].samples_per_s


def seed_experiment1(batches=(8, 32, 128), cpu_peak: float | None = None, cpu_steps: int = 3,
                     gpu_steps: int = 10, precision: str = "fp32",
                     progress: bool = True) -> CpuGpuRuns:
    """Seed experiment 1 on the devices there are: :func:`run_cnn` on the CPU at each batch
    (utilisation against ``cpu_peak``, measured by :func:`labkit.perf.machine.measure_machine`
    when None); on a GPU :func:`run_cnn` against the data-sheet peak of the GPU present
    (:func:`gpu_peak`), else :func:`predict_cnn` for :data:`DEFAULT_GPU` with one measured
    launch (:data:`MEASURED_LAUNCH_S`) per operator: a prediction, and labelled so."""
    import torch

    batches = _batches(batches)
    cpu_steps = v.integer("cpu_steps", cpu_steps, low=1)
    gpu_steps = v.integer("gpu_steps", gpu_steps, low=1)
    if cpu_peak is None:
        from labkit.perf.machine import measure_machine
        cpu_peak = measure_machine().peak
    cpu_peak = v.positive("cpu_peak", cpu_peak)
    peak = gpu_peak(precision)
    todo = batches
    if progress:
        from tqdm.auto import tqdm
        todo = tqdm(batches, desc="CPU batches")
    cpu = tuple(run_cnn(b, steps=cpu_steps, device="cpu", peak=cpu_peak) for b in todo)
    if torch.cuda.is_available():
        gpu = tuple(run_cnn(b, steps=gpu_steps, device="cuda", peak=peak.peak)
                    for b in batches)
    else:
        gpu = tuple(predict_cnn(b, peak.key, precision, launch_s=MEASURED_LAUNCH_S)
                    for b in batches)
    return CpuGpuRuns(cpu, gpu, peak)


def format_cnn_runs(runs, peak_label: str | None = None) -> str:
    """Markdown table of :class:`CnnRun` rows, each marked measured or PREDICTED; with
    ``peak_label``, a line under it saying whose peak the GPU rows divide by."""
    lines = ["| device | batch | samples/s | host→device share | utilisation (FLOP/s ÷ peak) | |",
             "|---|---:|---:|---:|---:|---|"]
    for r in runs:
        if not isinstance(r, CnnRun):
            raise TypeError(f"runs must hold CnnRun rows, got {type(r).__name__}")
        lines.append(f"| {r.device} | {r.batch} | {r.samples_per_s:,.0f} | {r.copy_share:.0%} | "
                     f"{r.utilisation:.1%} | "
                     f"{'measured' if r.measured else 'PREDICTED, not measured'} |")
    if peak_label is not None:
        lines += ["", f"GPU utilisation against the {peak_label}."]
    return "\n".join(lines)


def simplenet_counts(batch: int, input_requires_grad: bool = True):
    """FLOPs and bytes per op of one SimpleNet training step (SGD), counted on the meta
    device (shapes only)."""
    import torch

    from labkit.perf.ops import count_ops

    batch = v.integer("batch", batch, low=1)
    model = simple_net().to("meta")
    x = torch.empty(batch, 10, device="meta", requires_grad=input_requires_grad)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return count_ops(step)


def launch_half_batch(launch_s: float = 5e-6, gpu: str = DEFAULT_GPU,
                      max_batch: int = 8192) -> int:
    """The smallest power-of-two batch at which the predicted CNN throughput with
    ``launch_s`` per kernel launch reaches half of the launch-free prediction."""
    launch_s = v.positive("launch_s", launch_s)
    b = 1
    while b <= max_batch:
        if predict_cnn(b, gpu, launch_s=launch_s).samples_per_s >= \
                predict_cnn(b, gpu).samples_per_s / 2:
            return b
        b *= 2
    raise ValueError(f"no batch up to max_batch={max_batch} reaches half the throughput")
