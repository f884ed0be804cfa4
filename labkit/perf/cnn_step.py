"""Seed experiment 1 (chapter 01): a small CNN's training step on this CPU and on a GPU,
measured where there is one and otherwise PREDICTED from the data sheet's roofline per
operator plus a host time per operator calibrated on an H200's measured step."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from tqdm.auto import tqdm

from labkit import validate as v
from labkit.hardware import DEFAULT_GPU, PCIE5_X16, gpu as sheet, hardware_key, measure_machine
from labkit.perf.layers import profile_step
from labkit.torch_models import small_cnn
from labkit.perf.ops import count_ops
from labkit.timing import benchmark, threads as pinned

# the CNN step on an NVIDIA H200 and on its host's 16-core CPU, samples/s by batch, MEASURED
# in this project (benchmarks/bench_perf.py --gpu, torch 2.11, 2026-11-30; chapter 01 prints
# them beside what this machine measures and predicts)
H200_MEASURED = {8: 4995.0, 32: 20114.0, 128: 74421.0, 512: 238691.0}
H200_HOST_CPU_MEASURED = {8: 3751.0, 32: 12715.0, 128: 16339.0, 512: 11748.0}
CALIBRATION_GPU = "H200"      # the GPU the prediction's host overhead was measured on
# the batches of the predicted throughput curve (chapter 01's widget): 1 … 1024
CURVE_BATCHES = tuple(int(b) for b in np.unique(np.geomspace(1, 1024, 21).astype(int)))
CONV_OPS = {"convolution", "convolution_backward", "_convolution", "cudnn_convolution"}
MATMUL_OPS = {"addmm", "mm", "bmm", "matmul", "baddbmm"}


def cifar_like(n: int, seed: int = 0):
    """``n`` synthetic CIFAR-10-shaped samples (3×32×32 float32 in [0, 1), labels 0–9)."""
    import torch  # deferred: torch

    n = v.integer("n", n, low=1)
    g = torch.Generator().manual_seed(v.integer("seed", seed, low=0))
    return torch.rand(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


@dataclass(frozen=True)
class CnnRun:
    """One CNN training step at a batch, measured on a device or predicted for one."""
    device: str
    batch: int
    step_s: float            # median seconds per training step (copy included)
    copy_s: float            # of which host → device copy
    flops: float             # FLOPs per step (count_ops)
    ideal_s: float           # those FLOPs at peak: Σ op FLOPs / the peak of the op's precision
    busy_s: float            # per step, time some kernel ran (busy_time)
    measured: bool           # False: predicted
    threads: int | None = None      # CPU threads the step (and its peak) ran on
    ci: tuple | None = None         # 95 % interval of the median step (measured)
    note: str = ""

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_s

    @property
    def copy_share(self) -> float:
        return self.copy_s / self.step_s

    @property
    def busy_share(self) -> float:
        """Utilisation as nvidia-smi reports it: the share of the step some kernel ran."""
        return self.busy_s / self.step_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the time the step's FLOPs take at peak over the step's
        time, i.e. achieved FLOP/s over peak, each op against its own precision's peak."""
        return self.ideal_s / self.step_s


@lru_cache(maxsize=64)
def cnn_step_counts(batch: int):
    """FLOPs and bytes per op of one CNN training step, counted on the meta device
    (shapes only: nothing is computed; cached: they depend on the batch only)."""
    import torch  # deferred: torch
    from torch import nn

    batch = v.integer("batch", batch, low=1)
    model = small_cnn().to("meta")
    x = torch.empty(batch, 3, 32, 32, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    return count_ops(lambda: nn.functional.cross_entropy(model(x), y).backward())


def op_precision(name: str, peaks: dict, cudnn_tf32: bool = True,
                 matmul_tf32: bool = False) -> str:
    """The precision an fp32 ATen op runs at on a GPU whose data sheet lists ``peaks``
    (precision -> FLOP/s): convolutions (:data:`CONV_OPS`) at TF32 when ``cudnn_tf32``
    (``torch.backends.cudnn.allow_tf32``, True by default) and the GPU has TF32 (Ampere and
    later: its sheet lists a tf32 peak), matmuls (:data:`MATMUL_OPS`) at TF32 only when
    ``matmul_tf32`` (``torch.backends.cuda.matmul.allow_tf32``, False by default since
    PyTorch 1.12), everything else at FP32 (PyTorch docs, "CUDA semantics: TensorFloat-32
    (TF32) on Ampere (and later) devices")."""
    if "tf32" in peaks and ((name in CONV_OPS and cudnn_tf32) or
                            (name in MATMUL_OPS and matmul_tf32)):
        return "tf32"
    return "fp32"


def _torch_tf32() -> tuple[bool, bool]:
    """torch's settings: (cudnn.allow_tf32, cuda.matmul.allow_tf32)."""
    import torch  # deferred: torch

    return bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)


def op_peaks(counts, gpu: str, precision=None) -> list[float]:
    """The peak each call of ``counts.sequence`` is held to on ``gpu``'s data sheet: that of
    ``precision(name, peaks, cudnn_tf32, matmul_tf32)`` (default :func:`op_precision`; the
    learner's in chapter 01) under torch's current TF32 settings."""
    precision = op_precision if precision is None else precision
    flops = dict(sheet(gpu).flops)
    conv, mm = _torch_tf32()
    return [flops[precision(o.name, flops, conv, mm)] for o in counts.sequence]


def ideal_seconds(counts, gpu: str | None = None, cpu_peak: float | None = None,
                  precision=None) -> float:
    """Σ over the step's calls of FLOPs / the peak it is held to (:func:`op_peaks`): the
    step's time at peak on ``gpu``'s data sheet, or, with ``gpu`` None, at ``cpu_peak``."""
    if gpu is None:
        return counts.flops / v.positive("cpu_peak", cpu_peak)
    return float(sum(o.flops / p for o, p in zip(counts.sequence,
                                                 op_peaks(counts, gpu, precision))))


def run_cnn(batch: int = 32, steps: int = 4, device: str = "cpu", seed: int = 0,
            peak: float | None = None, threads: int | None = None, busy=None,
            gpu: str | None = None, charge_rows=None, precision=None) -> CnnRun:
    """Measure CNN training steps on ``device`` (SGD, cross-entropy) with labkit's
    :func:`labkit.timing.benchmark` (a median and its interval): host-resident data is
    copied to the device each step, as a DataLoader would deliver it. The busy time comes
    from a profile of two training steps (:func:`profile_step` with ``busy``, default
    :func:`busy_time`): its share of the profiled step, applied to the measured step less
    the copy. MFU is against ``peak`` on a CPU (measured with the same
    ``threads``), against ``gpu``'s data sheet per op precision on a GPU."""
    import torch  # deferred: torch
    from torch import nn

    batch = v.integer("batch", batch, low=1)
    steps = v.integer("steps", steps, low=1)
    device = v.one_of("device", device, ("cpu", "cuda"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a GPU; there is none here")
    n = torch.get_num_threads() if threads is None else v.integer("threads", threads, low=1)
    model = small_cnn(seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xs, ys = cifar_like(batch, seed)
    cuda = device == "cuda"
    if cuda:
        xs, ys = xs.pin_memory(), ys.pin_memory()
    sync = torch.cuda.synchronize if cuda else None
    box = {}

    def copy():
        box["x"], box["y"] = xs.to(device, non_blocking=True), ys.to(device, non_blocking=True)

    def train():
        opt.zero_grad()
        nn.functional.cross_entropy(model(box["x"]), box["y"]).backward()
        opt.step()

    def step():
        copy()
        train()
    with pinned(n):
        t = benchmark(step, repeats=steps, warmup=1, sync=sync)
        copy_s = benchmark(copy, repeats=steps, warmup=1, sync=sync).median if cuda else 0.0
        prof = profile_step(train, steps=2, warmup=0, busy=busy, unprofiled=False,
                            intervals=charge_rows)
    counts = cnn_step_counts(batch)
    if cuda:
        gpu = gpu or hardware_key(torch.cuda.get_device_name(), None) or DEFAULT_GPU
        ideal = ideal_seconds(counts, gpu, precision=precision)
    else:
        if peak is None:
            peak = measure_machine(threads=n).peak
        ideal = ideal_seconds(counts, None, peak)
    # the busy share of the profiled training step (the profiler slows the step it
    # watches, so its busy time is a share of its own step), applied to the measured one
    share = min(prof.busy_s / (prof.wall_s / prof.steps), 1.0)
    return CnnRun(device, batch, t.median, copy_s, counts.flops, ideal,
                  share * (t.median - copy_s), True, None if cuda else n, (t.low, t.high),
                  "measured")


def pipeline_step(host_s, device_s) -> float:
    """Seconds of a step whose operators the host issues one after another, each taking
    ``host_s[i]`` of host time, while the device runs them in order, each taking
    ``device_s[i]``: operator i starts on the device when the host has issued it and the
    device has finished operator i − 1. The step ends when both are done (PyTorch docs,
    "CUDA semantics: asynchronous execution": the host queues kernels and runs ahead)."""
    host_done = device_done = 0.0
    for h, d in zip(host_s, device_s, strict=True):
        host_done += float(h)
        device_done = max(device_done, host_done) + float(d)
    return max(host_done, device_done)


def _device_times(counts, gpu: str, precision=None) -> list[float]:
    """Each call's roofline time on ``gpu``: max(F / its peak (:func:`op_peaks`),
    Q / bandwidth)."""
    bw = sheet(gpu).hbm_bandwidth
    return [max(o.flops / p, o.bytes / bw)
            for o, p in zip(counts.sequence, op_peaks(counts, gpu, precision))]


def _copy_s(batch: int) -> float:
    """The batch's host→device copy over PCIe 5.0 x16 (images and int64 labels)."""
    return batch * (3 * 32 * 32 * 4 + 8) / PCIE5_X16


def predict_cnn(batch: int, gpu: str = CALIBRATION_GPU, host_s: float | None = None,
                pipeline=None, precision=None, calibrate=None) -> CnnRun:
    """A PREDICTION (not a measurement) of one CNN step on a data-sheet GPU: the step's
    operators in dispatch order, each ``host_s`` of host time and its roofline time on the
    device (:func:`_device_times`, each op at the peak ``precision`` gives it), combined by
    ``pipeline`` (default :func:`pipeline_step`), plus the batch's copy over PCIe 5.0 x16.
    ``host_s`` None: calibrated on the H200's measured step (:func:`calibrated_host_s`, with
    ``calibrate``). With ``host_s`` = 0 it is the roofline alone: an upper bound on the
    GPU's speed, never a result."""
    g = sheet(gpu)
    pipeline = pipeline_step if pipeline is None else pipeline
    if host_s is None:
        host_s = calibrated_host_s(pipeline, calibrate=calibrate, precision=precision)
    host_s = v.nonnegative("host_s", host_s)
    counts = cnn_step_counts(batch)
    device = _device_times(counts, g.key, precision)
    t = float(pipeline([host_s] * len(device), device))
    copy = _copy_s(batch)
    return CnnRun(f"{g.key} (predicted)", batch, t + copy, copy, counts.flops,
                  ideal_seconds(counts, g.key, precision=precision), float(sum(device)), False,
                  note=f"{g.key} data-sheet roofline per op + {host_s * 1e6:.1f} µs host time "
                       f"per op")


def calibrate_host(device_s, target_s: float, pipeline=None) -> float:
    """The host time h per operator for which ``pipeline([h] * n, device_s)`` (default
    :func:`pipeline_step`) equals ``target_s``: found by bisection on [0, target_s], since
    the predicted step grows with h (60 halvings: to float precision)."""
    pipeline = pipeline_step if pipeline is None else pipeline
    device_s = [float(d) for d in device_s]
    target_s = v.positive("target_s", target_s)
    lo, hi = 0.0, target_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(pipeline([mid] * len(device_s), device_s)) < target_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def calibrated_host_s(pipeline=None, batch: int = 8, calibrate=None, precision=None) -> float:
    """The host time per operator that makes :func:`predict_cnn` give the step the H200 was
    MEASURED to take at ``batch`` (:data:`H200_MEASURED`), where its device is nearly idle
    and the step is host overhead — framework, launches, Python — spread over the step's
    operators: ``calibrate(device_s, target_s)`` (default :func:`calibrate_host` with
    ``pipeline``; chapter 01 passes the learner's)."""
    batch = v.one_of("batch", batch, tuple(H200_MEASURED))
    target = batch / H200_MEASURED[batch] - _copy_s(batch)
    device = _device_times(cnn_step_counts(batch), CALIBRATION_GPU, precision)
    if calibrate is None:
        return calibrate_host(device, target, pipeline)
    return float(calibrate(device, target))


def _batches(batches) -> tuple[int, ...]:
    """A non-empty tuple or list of batch sizes, each an integer >= 1."""
    if not isinstance(batches, (tuple, list)) or not batches:
        raise ValueError(f"batches must be a non-empty tuple of batch sizes, got {batches!r}")
    return tuple(v.integer("batch", b, low=1) for b in batches)


def predict_cnn_curve(gpu: str = CALIBRATION_GPU, host_s: float = 0.0,
                      batches=CURVE_BATCHES) -> tuple[CnnRun, ...]:
    """:func:`predict_cnn` at each of ``batches``: the predicted throughput curve."""
    return tuple(predict_cnn(b, gpu, host_s) for b in _batches(batches))


@dataclass(frozen=True)
class GpuPeak:
    key: str          # labkit.hardware.GPUS key whose data sheet gives the peak
    peak: float       # FLOP/s
    label: str        # says whose peak it is, and why


def gpu_peak(precision: str = "fp32", default: str = DEFAULT_GPU) -> GpuPeak:
    """The data-sheet peak of the GPU torch sees: when ``torch.cuda.is_available()``,
    :func:`labkit.hardware.hardware_key` maps ``torch.cuda.get_device_name()`` to a
    :data:`labkit.hardware.GPUS` key. Without a GPU, or for a model ``labkit.hardware`` does
    not list, ``default``'s peak, labelled as the stated default.

    torch, not numba, is asked because torch runs the GPU rows of :func:`seed_experiment1`:
    numba's simulator (NUMBA_ENABLE_CUDASIM=1) on a GPU machine, or numba imported before
    labkit on a CPU one, would make the two disagree."""
    import torch  # deferred: torch

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
    gpu_key: str               # the data sheet the GPU rows' MFU divides by
    cpu_peak: float            # FLOP/s, measured with the CPU rows' threads

    @property
    def speedup(self) -> float:
        """GPU over CPU samples per second at the last batch of the run."""
        return self.gpu[-1].samples_per_s / self.cpu[-1].samples_per_s

    @property
    def gpu_label(self) -> str:
        flops = dict(sheet(self.gpu_key).flops)
        conv_flag, mm_flag = _torch_tf32()
        conv = op_precision("convolution", flops, conv_flag, mm_flag).upper()
        mm = op_precision("mm", flops, conv_flag, mm_flag).upper()
        how = "measured" if self.gpu and self.gpu[0].measured else "PREDICTED"
        return (f"GPU rows {how} on the {self.gpu_key}; MFU against its data-sheet peaks at "
                f"the precision torch runs each op at: convolutions {conv} "
                f"(torch.backends.cudnn.allow_tf32 = {conv_flag}), matmuls {mm} "
                f"(torch.backends.cuda.matmul.allow_tf32 = {mm_flag}), the rest FP32. CPU "
                f"rows: MFU against this machine's matmul peak on the same threads, "
                f"{self.cpu_peak / 1e9:.1f} GFLOP/s.")


def seed_experiment1(batches=(8, 32, 128), cpu_steps: int = 3, gpu_steps: int = 10,
                     threads: int = 1, cpu_peak: float | None = None, busy=None,
                     intervals=None, precision=None, pipeline=None, calibrate=None,
                     progress: bool = True) -> CpuGpuRuns:
    """Seed experiment 1 on the devices there are: :func:`run_cnn` on the CPU at each batch
    on ``threads`` threads (MFU against ``cpu_peak``, measured on as many threads by
    :func:`labkit.hardware.machine.measure_machine` when None); on a GPU :func:`run_cnn`
    against the data sheet of the GPU present, else :func:`predict_cnn` for
    :data:`CALIBRATION_GPU` with the host time per operator calibrated on its measured
    step (:func:`calibrated_host_s`): a prediction, and labelled so. ``busy``,
    ``intervals``, ``precision``, ``pipeline`` and ``calibrate`` stand in for
    :func:`busy_time`, :func:`kernel_intervals`, :func:`op_precision`,
    :func:`pipeline_step` and :func:`calibrate_host` (chapter 01 passes the learner's)."""
    import torch  # deferred: torch

    batches = _batches(batches)
    cpu_steps = v.integer("cpu_steps", cpu_steps, low=1)
    gpu_steps = v.integer("gpu_steps", gpu_steps, low=1)
    threads = v.integer("threads", threads, low=1)
    cpu_peak = measure_machine(threads=threads).peak if cpu_peak is None else \
        v.positive("cpu_peak", cpu_peak)
    todo = batches
    if progress:
        todo = tqdm(batches, desc="CPU batches")
    cpu = tuple(run_cnn(b, steps=cpu_steps, device="cpu", peak=cpu_peak, threads=threads,
                        busy=busy, charge_rows=intervals) for b in todo)
    if torch.cuda.is_available():
        key = gpu_peak().key
        gpu = tuple(run_cnn(b, steps=gpu_steps, device="cuda", busy=busy, gpu=key,
                            precision=precision) for b in batches)
    else:
        key = CALIBRATION_GPU
        host = calibrated_host_s(pipeline, calibrate=calibrate, precision=precision)
        gpu = tuple(predict_cnn(b, key, host, pipeline, precision) for b in batches)
    return CpuGpuRuns(cpu, gpu, key, cpu_peak)


def format_cnn_runs(runs, label: str | None = None) -> str:
    """Markdown table of :class:`CnnRun` rows, each marked measured or PREDICTED, with the
    busy share (utilisation as nvidia-smi reports it) beside the MFU; ``label`` (a
    :attr:`CpuGpuRuns.gpu_label`) under it."""
    lines = ["| device | threads | batch | samples/s [95 % CI] | host→device share | "
             "busy share (utilisation) | MFU | |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in v.instances("runs", runs, CnnRun):
        rate = f"{r.samples_per_s:,.0f}"
        if r.ci is not None:
            rate += f" [{r.batch / r.ci[1]:,.0f}, {r.batch / r.ci[0]:,.0f}]"
        lines.append(f"| {r.device} | {r.threads or '-'} | {r.batch} | {rate} | "
                     f"{r.copy_share:.0%} | {r.busy_share:.1%} | {r.mfu:.2%} | "
                     f"{'measured' if r.measured else 'PREDICTED, not measured'} |")
    if label is not None:
        lines += ["", label]
    return "\n".join(lines)


def format_h200(batches=tuple(H200_MEASURED)) -> str:
    """The H200 run recorded in this project (:data:`H200_MEASURED`) beside :func:`predict_cnn`
    for the H200 at each batch: how far the calibrated prediction is from a measurement,
    and the roofline alone (no host time) for contrast."""
    lines = ["| batch | H200 measured samples/s | predicted (calibrated host) | "
             "roofline alone | its host's 16-core CPU, measured |",
             "|---:|---:|---:|---:|---:|"]
    for b in batches:
        p, r = predict_cnn(b), predict_cnn(b, host_s=0.0)
        lines.append(f"| {b} | {H200_MEASURED[b]:,.0f} | {p.samples_per_s:,.0f} | "
                     f"{r.samples_per_s:,.0f} | {H200_HOST_CPU_MEASURED[b]:,.0f} |")
    return "\n".join(lines)


def host_half_batch(host_s: float = 5e-6, gpu: str = CALIBRATION_GPU,
                    max_batch: int = 8192) -> int:
    """The smallest power-of-two batch at which the predicted CNN throughput with ``host_s``
    of host time per operator reaches half of the roofline's (no host time)."""
    host_s = v.positive("host_s", host_s)
    b = 1
    while b <= max_batch:
        if predict_cnn(b, gpu, host_s).samples_per_s >= predict_cnn(b, gpu, 0.0).samples_per_s / 2:
            return b
        b *= 2
    raise ValueError(f"no batch up to max_batch={max_batch} reaches half the throughput")
