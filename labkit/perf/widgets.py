"""Widgets of chapters 01 and 12: each wires controls to a labkit function and a plot."""
from __future__ import annotations

from labkit.controls import choice_slider, dropdown, fixed, float_slider, int_slider, interactive
from labkit.hardware import PRESETS, Roofline, datasheet
from labkit.kernels.plots import plot_roofline
from labkit.perf.deploy import Budget, Variant, fits
from labkit.perf.laws import amdahl_curve
from labkit.perf.plots import plot_amdahl, plot_cnn_batch, plot_deploy, plot_noise
from labkit.perf.stack import CALIBRATION_GPU, CnnRun, DEFAULT_GPU, predict_cnn, predict_cnn_curve
from labkit.perf.stack import simplenet_counts
from labkit.show import show
from labkit.stats import noise_estimates

GPU_KEYS = tuple(PRESETS)


# ------------------------------------------------------------------ chapter 00
def show_amdahl(parallel_fraction: float, max_workers: int) -> None:
    """Amdahl's curve for parallel share ``parallel_fraction`` up to ``max_workers``."""
    curve = amdahl_curve(parallel_fraction, max_workers)
    print(f"p = {parallel_fraction:.2f}: S({curve.workers[-1]}) = {curve.speedup[-1]:.3g}, "
          f"ceiling 1/(1-p) = {curve.ceiling:.3g}")
    show(plot_amdahl(curve))


def amdahl_widget(parallel_fraction: float = 0.95, max_workers: int = 1024):
    """Parallel-share slider and a max-workers slider → Amdahl's speedup curve."""
    return interactive(
        show_amdahl,
        parallel_fraction=float_slider("parallel_fraction", parallel_fraction, 0.0, 1.0, 0.01,
                                       "p (parallel)"),
        max_workers=choice_slider("max_workers", max_workers, [2 ** k for k in range(1, 17)],
                                  "max workers"))


# ------------------------------------------------------------------ chapter 01
def show_roofline(batch: int, gpu: str, precision: str, machine: Roofline):
    """Where one SimpleNet training step (batch ``batch``) lands on this machine's roofline
    and on a data-sheet GPU's."""
    c = simplenet_counts(batch)
    roof = datasheet(gpu, precision)
    print(f"SimpleNet step, batch {batch}: {c.flops:,.0f} FLOPs, {c.bytes:,.0f} bytes, "
          f"intensity {c.intensity:.2f} FLOP/byte")
    for m in (machine, roof):
        print(f"  {m.name}: ridge {m.ridge:.1f} FLOP/byte → {m.bound(c.intensity)}, "
              f"at least {m.min_time(c.flops, c.bytes) * 1e6:.3g} µs")
    show(plot_roofline([roof, machine], [(f"SimpleNet step (B={batch})", c.intensity)],
                       intensity_range=(1 / 16, 1024)))


def roofline_widget(machine: Roofline, batch: int = 5, gpu: str = DEFAULT_GPU,
                    precision: str = "fp32"):
    """Batch slider, GPU and precision: the SimpleNet step on two rooflines."""
    if not isinstance(machine, Roofline):
        raise TypeError(f"machine must be a labkit.perf.Roofline (measure_machine()), got "
                        f"{type(machine).__name__}")
    return interactive(
        show_roofline,
        batch=int_slider("batch", batch, 1, 4096, "batch"),
        gpu=dropdown("gpu", gpu, GPU_KEYS, "GPU"),
        precision=dropdown("precision", precision, ("fp32", "bf16"), "precision"),
        machine=fixed(machine))


def show_cnn_batch(batch: int, host_us: float, gpu: str, cpu_runs):
    """Predicted GPU throughput of the CNN step, with ``host_us`` of host time per operator,
    against measured CPU runs."""
    p = predict_cnn(batch, gpu, host_us * 1e-6)
    print(f"PREDICTED {gpu} (data-sheet roofline per op, {host_us:g} µs host time per op): "
          f"batch {batch}: {p.samples_per_s:,.0f} samples/s, copy share {p.copy_share:.0%}, "
          f"busy share {p.busy_share:.1%}, MFU {p.mfu:.2%}")
    show(plot_cnn_batch(predict_cnn_curve(gpu, host_us * 1e-6), p, cpu_runs, gpu))


def cnn_batch_widget(cpu_runs=(), batch: int = 32, host_us: float = 0.0,
                     gpu: str = CALIBRATION_GPU):
    """Batch and host-time sliders over the predicted GPU curve and measured CPU points."""
    cpu_runs = tuple(cpu_runs)
    if not all(isinstance(r, CnnRun) for r in cpu_runs):
        raise TypeError("cpu_runs must hold CnnRun results of run_cnn()")
    return interactive(
        show_cnn_batch,
        batch=int_slider("batch", batch, 1, 1024, "batch"),
        host_us=float_slider("host_us", host_us, 0.0, 100.0, 1.0, "host µs / op"),
        gpu=dropdown("gpu", gpu, GPU_KEYS, "GPU"),
        cpu_runs=fixed(cpu_runs))


# ------------------------------------------------------------------ chapter 12
def show_noise(interference: float, n: int, jitter: float, seed: int = 0):
    """Simulated timings on a shared machine: what the mean, median and its bootstrap
    interval do as a neighbour steals the core more often."""
    e = noise_estimates(n, jitter=jitter, interference=interference, seed=seed)
    print(f"true time {e.base * 1e3:.3f} ms | mean {e.mean * 1e3:.3f} ms | median "
          f"{e.median * 1e3:.3f} ms, 95 % CI [{e.ci.low * 1e3:.3f}, {e.ci.high * 1e3:.3f}] | "
          f"min {e.low * 1e3:.3f} ms")
    show(plot_noise(e))


def noise_widget(interference: float = 0.1, n: int = 50, jitter: float = 0.05):
    """Interference (first slider), sample count and jitter → the timing histogram."""
    return interactive(
        show_noise,
        interference=float_slider("interference", interference, 0.0, 0.6, 0.05,
                                  "interference"),
        n=int_slider("n", n, 5, 500, "samples", step=5),
        jitter=float_slider("jitter", jitter, 0.0, 0.5, 0.01, "jitter σ"),
        seed=fixed(0))


def show_deploy(max_kb: float, max_latency_ms: float, slowdown: float, variants):
    """Which deployment variants fit a size and latency budget on a target ``slowdown``
    times slower than this machine."""
    budget = Budget("target", max_kb * 1e3, max_latency_ms * 1e-3, slowdown)
    res = fits(list(variants), budget)
    print(f"budget: ≤ {max_kb:g} kB, ≤ {max_latency_ms:g} ms on a target {slowdown:g}× slower "
          f"than this machine")
    for var, ok, why in res:
        print(f"{'✔' if ok else '✘'} {var.name:18s} {var.bytes / 1e3:7.1f} kB  "
              f"acc {var.accuracy:.3f}  {why}")
    show(plot_deploy(res, budget))


def deploy_widget(variants, max_kb: float = 100.0, max_latency_ms: float = 1.0,
                  slowdown: float = 10.0):
    """Size budget (first slider), latency budget, and target slowdown over measured
    deployment variants (``labkit.perf.deploy.variants``)."""
    variants = tuple(variants)
    if not variants or not all(isinstance(x, Variant) for x in variants):
        raise TypeError("variants must be a non-empty list of labkit.perf.deploy.Variant")
    return interactive(
        show_deploy,
        max_kb=float_slider("max_kb", max_kb, 5.0, 200.0, 5.0, "max kB"),
        max_latency_ms=float_slider("max_latency_ms", max_latency_ms, 0.05, 10.0, 0.05,
                                    "max ms"),
        slowdown=float_slider("slowdown", slowdown, 1.0, 50.0, 1.0, "slowdown"),
        variants=fixed(variants))
