"""Chapter 01: one training step followed down the stack.

The six layers (seed 000, §2): application → framework → compiler/graph → runtime →
kernel libraries → hardware. ``profile_step`` runs a step under ``torch.profiler``
(PyTorch docs, "PyTorch Profiler"), and ``charge_layers`` charges every profiler row's
*self* time to the layer that spends it; ``layer_of`` says which layer a row belongs to.
FLOPs come from :func:`labkit.perf.ops.count_ops`.

The rest of chapter 01 lives beside it: the seed's SimpleNet (:mod:`labkit.perf.simplenet`),
Little's law (:mod:`labkit.perf.inflight`), this process's memory (seed examples 2 and 3,
:mod:`labkit.perf.process_memory`) and the CNN step on a CPU and a GPU (seed experiment 1,
:mod:`labkit.perf.cnn_step`).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np

from labkit import validate as v
from labkit.timing import benchmark

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
    "profiler overhead": "part of the rows above, not added to them: the profiler's own "
                         "recording, profiled step − unprofiled step (measured); most of it "
                         "lies between rows, in the application's time",
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


# ---------------------------------------------------------------------------- profiling
def charge_of(name: str, on_cpu: bool = True) -> str:
    """The layer a profiler row's *self* time is charged to: :func:`layer_of` of its name,
    except that an allocation operator (:data:`ALLOC_OPS`) is the runtime's work and, on a
    CPU, a compute operator (:data:`COMPUTE_OPS`) runs its kernel (oneDNN, MKL, ATen's CPU
    loops) inside its own body, so its self time is the kernel libraries' (on a GPU the
    kernel is a row of its own, on the device)."""
    layer = layer_of(name)
    if layer == "framework" and name in ALLOC_OPS:
        return "runtime"
    if layer == "framework" and name in COMPUTE_OPS and on_cpu:
        return "kernel libraries"
    return layer


def charge_layers(rows, on_cpu: bool = True) -> dict:
    """Seconds per layer of profiler ``rows`` (:func:`event_rows`' plain trees): every row's
    *self* time — its time less its children's — charged to :func:`charge_of` its name,
    walking the whole tree (iteratively: a deep tree does not overflow the stack). A row's
    total time is never added: it holds its children's, which are charged themselves."""
    out = {k: 0.0 for k in LAYERS if k != "hardware"}
    todo = list(rows)
    while todo:
        row = todo.pop()
        out[charge_of(row["name"], on_cpu)] += float(row["self_s"])
        todo.extend(row["children"])
    return out


def busy_time(intervals) -> float:
    """Seconds covered by at least one of the ``(start, end)`` intervals: sort them, merge
    each that overlaps (or touches) the one before, add up the merged lengths. nvidia-smi's
    GPU utilisation is this busy time over the sample period: "percent of time over the past
    sample period during which one or more kernels was executing on the GPU" (nvidia-smi
    --help-query-gpu, utilization.gpu) — not the share of peak FLOP/s (MFU)."""
    total, end = 0.0, -np.inf
    for s, e in sorted((float(a), float(b)) for a, b in intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def event_rows(events) -> list[dict]:
    """``torch.profiler`` events as plain trees: ``{"name", "self_s", "start_s", "end_s",
    "children": [...]}`` (seconds; a row's self time is its CPU time less its children's)."""
    def row(e):
        return {"name": e.name, "self_s": e.self_cpu_time_total / 1e6,
                "start_s": e.time_range.start / 1e6, "end_s": e.time_range.end / 1e6,
                "children": [row(c) for c in e.cpu_children]}
    return [row(e) for e in events]


def kernel_intervals(rows, on_cpu: bool = True) -> list[tuple[float, float]]:
    """The (start, end) of every row in ``rows`` (plain trees) whose self time is the kernel
    libraries' (:func:`charge_of`): on a CPU, when the arithmetic ran."""
    out, todo = [], list(rows)
    while todo:
        r = todo.pop()
        if charge_of(r["name"], on_cpu) == "kernel libraries":
            out.append((r["start_s"], r["end_s"]))
        todo.extend(r["children"])
    return out


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
    wall_s: float                 # median step wall time × steps, under the profiler
    steps: int
    layer_s: dict = field(default_factory=dict)    # seconds per step per layer
    tree: str = ""                # one step's call tree, indented
    plain_s: float | None = None  # median step without the profiler (None: not measured)
    busy_s: float = 0.0           # per step: time some kernel ran (busy_time)
    step_rows: tuple = ()         # the first profiled step's rows (event_rows), CPU traces

    @property
    def overhead_s(self) -> float:
        """What the profiler itself costs per step: profiled step − unprofiled step
        (measured; 0 when the unprofiled step was not measured)."""
        if self.plain_s is None:
            return 0.0
        return max(self.wall_s / self.steps - self.plain_s, 0.0)

    def top(self, k: int = 10, by: str = "self_s") -> list[ProfileRow]:
        v.one_of("by", by, ("self_s", "total_s"))
        return sorted(self.rows, key=lambda r: getattr(r, by), reverse=True)[:k]


def profile_step(step, steps: int = 10, warmup: int = 3, tree_depth: int = 3, charge=None,
                 busy=None, unprofiled: bool = True, intervals=None) -> StepProfile:
    """Profile ``steps`` calls of ``step()`` and charge every row's self time to a layer
    with ``charge(rows, on_cpu)`` (default :func:`charge_layers`; chapter 01 passes the
    learner's), one step at a time; the median step's layers are reported.

    Time outside every row (Python between operators, and the profiler's own bookkeeping)
    is the application's; with ``unprofiled`` the step is also timed without the profiler
    (:func:`labkit.timing.benchmark`), and the difference, the profiler's own cost,
    is reported apart (:attr:`StepProfile.overhead_s`). ``busy(intervals)`` (default
    :func:`busy_time`) of the kernels' intervals gives the busy time per step: on a GPU the
    device's kernels, on a CPU the rows whose self time is the kernel libraries'
    (``intervals(rows, on_cpu)``, default :func:`kernel_intervals`). On a GPU autograd
    runs backward on its own device thread: rows of other threads that start inside a step
    are charged to that step, and the main thread's wait for them is taken off the
    application layer."""
    import torch  # deferred: torch
    from torch.profiler import ProfilerActivity, profile

    steps = v.integer("steps", steps, low=1)
    warmup = v.integer("warmup", warmup, low=0)
    charge = charge_layers if charge is None else charge
    busy = busy_time if busy is None else busy
    intervals = kernel_intervals if intervals is None else intervals
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
    events = list(prof.events())
    on_device = [e for e in events if str(e.device_type).endswith("CUDA")]
    has_device = bool(on_device)
    agg: dict[str, list] = {}
    for e in events:
        dev = str(e.device_type).endswith("CUDA")
        self_s = (e.self_device_time_total if dev else e.self_cpu_time_total) / 1e6
        tot_s = (e.device_time_total if dev else e.cpu_time_total) / 1e6
        row = agg.setdefault(e.name, [0, 0.0, 0.0])
        row[0] += 1
        row[1] += self_s
        row[2] += tot_s
    # per step: charge each ProfilerStep's subtree, take the median over steps (a
    # neighbour's job that stalls one step does not move it)
    step_roots = [e for e in events if e.cpu_parent is None and e.name.startswith("ProfilerStep")]
    # rows of other threads (autograd's device thread runs backward on a GPU) that start
    # inside a step belong to it; the main thread merely waited for them meanwhile
    others = [e for e in events if e.cpu_parent is None
              and not e.name.startswith("ProfilerStep")
              and not str(e.device_type).endswith("CUDA")]
    per_step, busy_per_step, step_rows = [], [], []
    for root, wall_i in zip(step_roots, times[2:]):
        side = [e for e in others if e.thread != root.thread
                and root.time_range.start <= e.time_range.start <= root.time_range.end]
        waited = sum(e.cpu_time_total for e in side) / 1e6
        rows = event_rows(list(root.cpu_children) + side)
        charged = charge(rows, not has_device)
        acc = {k: float(charged.get(k, 0.0)) for k in LAYERS}
        acc["application"] += root.self_cpu_time_total / 1e6
        acc["application"] += max(wall_i - root.cpu_time_total / 1e6, 0.0)
        acc["application"] = max(acc["application"] - waited, 0.0)
        per_step.append(acc)
        if has_device:
            # a ProfilerStep range ends at prof.step(), after the step's synchronize
            lo, hi = root.time_range.start, root.time_range.end
            busy_per_step.append(busy([(e.time_range.start / 1e6, e.time_range.end / 1e6)
                                       for e in on_device
                                       if lo <= e.time_range.start <= hi]))
        else:
            busy_per_step.append(busy(intervals(rows, True)))
        step_rows = step_rows or rows       # the first step's, for counting its calls
    layer_s = {k: float(np.median([a[k] for a in per_step])) if per_step else 0.0
               for k in LAYERS}
    if has_device:
        dev = sum(e.self_device_time_total for e in on_device) / 1e6
        layer_s["kernel libraries"] += dev / steps
    rows = tuple(ProfileRow(n, layer_of(n), c, s, t) for n, (c, s, t) in agg.items())
    step_wall = float(np.median(times[2:]))
    plain = benchmark(step, repeats=max(steps, 5), warmup=1).median if unprofiled else None
    return StepProfile(rows, step_wall * steps, steps, layer_s,
                       _tree(step_roots[:1] or events, tree_depth, not has_device), plain,
                       float(np.median(busy_per_step)) if busy_per_step else 0.0,
                       tuple(step_rows))


def _tree(roots, depth: int, on_cpu: bool = True) -> str:
    """One step's rows as an indented tree (CPU rows), each with its layer: the layer of
    its name (:func:`layer_of`), and where its self time is charged elsewhere
    (:func:`charge_of`), that one after an arrow — ``aten::addmm  [framework → kernel
    libraries]``: an ATen operator whose kernel runs inside it on a CPU."""
    roots = [e for e in roots if not str(e.device_type).endswith("CUDA")]
    if roots and roots[0].name.startswith("ProfilerStep"):
        roots = list(roots[0].cpu_children)
    else:
        roots = [e for e in roots if e.cpu_parent is None]
    lines = []

    def walk(e, d):
        if d >= depth:
            return
        name_layer, charged = layer_of(e.name), charge_of(e.name, on_cpu)
        label = name_layer if charged == name_layer else f"{name_layer} → {charged}"
        lines.append(f"{'  ' * d}{e.name}  [{label}]")
        for c in e.cpu_children:
            walk(c, d + 1)
    for e in roots:
        walk(e, 0)
    return "\n".join(lines)


OVERHEAD_ROW = "profiler overhead"


def layer_table(profile: StepProfile, flops: float, peak: float) -> list[tuple]:
    """Rows (layer, seconds per step, share of the profiled step, FLOPs, what it adds), one
    per layer, then one for the profiler's own cost. All FLOPs run in the kernel libraries;
    the hardware row is the time at peak, FLOPs / peak. The profiler's cost (profiled −
    unprofiled step, :attr:`StepProfile.overhead_s`) is not a layer: it is spread over the
    rows above — mostly the application's, whose time is what lies between rows, partly
    the rows' own self times — so its row is part of them, not added to them."""
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
    o = profile.overhead_s
    out.append((OVERHEAD_ROW, o, o / step_s, 0.0, LAYER_ADDS[OVERHEAD_ROW]))
    return out


def layer_share(rows, layer: str) -> float:
    """The share of the step (third column) of ``layer``'s row in :func:`layer_table`'s
    ``rows``."""
    layer = v.one_of("layer", layer, LAYERS + (OVERHEAD_ROW,))
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
