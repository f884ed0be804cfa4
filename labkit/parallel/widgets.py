"""Widgets of chapter 09: each builder validates its arguments, then wires controls to a
``show_*`` function that prints a one-line result and draws a labkit plot.

    collective_widget(world=4, algorithm="ring")   # an all-reduce, step by step
    cost_widget(op="all_reduce")                   # α-β model of every algorithm
    scaling_widget(real=None)                      # DP vs DDP scaling efficiency
"""
from __future__ import annotations

import numpy as np

from labkit import validate as V
from labkit.controls import dropdown, fixed, float_slider, int_slider, interactive
from labkit.parallel import dp_sim
from labkit.parallel.collectives import ALLREDUCE_ALGORITHMS, all_reduce
from labkit.parallel.cost import OPS, collective_time
from labkit.parallel.draw import (cost_curves, demo_data, plot_collective_step,
                                  plot_cost_curves, plot_scaling, plot_timeline)
from labkit.show import show

MAX_WORLD = 9
MAX_STEP = 40         # the step slider's and the Play button's end (show_collective clips)
SCALING_WORLDS = (1, 2, 4, 8, 16, 32)


def show_collective(world: int, algorithm: str, step: int) -> None:
    """Print what step ``step`` of ``algorithm`` on ``world`` ranks sends; draw it."""
    run = all_reduce(demo_data(world), algorithm)
    step = int(min(max(step, 0), run.steps))
    msgs = run.step_messages(step) if step < run.steps else []
    print(f"{algorithm}, p = {world}: step {step}/{run.steps}, {len(msgs)} message(s), "
          f"{sum(m.nbytes for m in msgs)} bytes this step; {run.messages} messages and "
          f"{run.bytes_sent} bytes in all")
    show(plot_collective_step(run, step))


def collective_widget(world: int = 4, algorithm: str = "ring"):
    """World size, algorithm and a step slider (with a Play button) → the step picture."""
    controls = dict(world=int_slider("world", world, 1, MAX_WORLD, "world"),
                    algorithm=dropdown("algorithm", algorithm, ALLREDUCE_ALGORITHMS,
                                       "algorithm"),
                    step=int_slider("step", 0, 0, MAX_STEP, "step"))
    import ipywidgets as W  # deferred: ipywidgets
    w = {name: c.build() for name, c in controls.items()}
    play = W.Play(min=0, max=MAX_STEP, interval=900, description="animate")
    W.jslink((play, "value"), (w["step"], "value"))
    out = W.interactive_output(show_collective, w)
    return W.VBox([W.HBox([w["world"], w["algorithm"]]), W.HBox([w["step"], play]), out])


def show_cost(op: str, log10_bytes: float, world: int, alpha_us: float,
              bandwidth_gbs: float) -> None:
    """Print each algorithm's modelled time at 10**log10_bytes bytes; draw the curves."""
    alpha, beta = alpha_us * 1e-6, 1 / (bandwidth_gbs * 1e9)
    n = 10 ** log10_bytes
    c = cost_curves(op, world, np.geomspace(1e2, 1e10, 60), alpha=alpha, beta=beta)
    times = {alg: collective_time(op, alg, n, world, alpha=alpha, beta=beta)
             for alg in c.seconds}
    best = min(times, key=times.get)
    print(f"{op}, p = {world}, {n:.3g} B: " +
          ", ".join(f"{alg} {t * 1e6:.4g} µs" for alg, t in times.items()) +
          f" → fastest: {best}")
    show(plot_cost_curves(c, mark=n))


def cost_widget(op: str = "all_reduce", log10_bytes: float = 6.0, world: int = 8,
                alpha_us: float = 5.0, bandwidth_gbs: float = 25.0):
    """log10 size, world, α and bandwidth → modelled time of every algorithm of ``op``."""
    return interactive(
        show_cost,
        log10_bytes=float_slider("log10_bytes", log10_bytes, 2, 10, 0.5, "log10_bytes"),
        world=int_slider("world", world, 2, 64, "world"),
        alpha_us=float_slider("alpha_us", alpha_us, 0.5, 50, 0.5, "alpha_us"),
        bandwidth_gbs=float_slider("bandwidth_gbs", bandwidth_gbs, 1, 450, 1, "bandwidth_gbs"),
        op=fixed(V.one_of("op", op, OPS)))


def _check_real(real):
    if real is None:
        return None
    if not isinstance(real, (tuple, list)) or len(real) != 2:
        raise TypeError(f"real must be None or a pair (worlds, efficiencies), got {real!r}")
    worlds = V.array("real[0] (worlds)", real[0], ndim=1)
    eff = V.array("real[1] (efficiencies)", real[1], ndim=1, finite=True)
    if worlds.shape != eff.shape:
        raise ValueError(f"real's worlds and efficiencies must have the same length, got "
                         f"{worlds.size} and {eff.size}")
    return worlds, eff


def show_scaling(per_gpu_batch: int, bucket_mb: float, jitter: float, hardware: str,
                 model: str, real=None) -> None:
    """Print DP's and DDP's efficiency on 8 GPUs; draw the scaling curves and one step."""
    hw, m = dp_sim.HARDWARE[hardware], dp_sim.MODELS[model]
    kw = dict(per_gpu_batch=per_gpu_batch, bucket_mb=bucket_mb, jitter=jitter)
    res = [dp_sim.scaling(m, hw, SCALING_WORLDS, mode, **kw) for mode in dp_sim.MODES]
    at8 = {r.mode: r.efficiency[SCALING_WORLDS.index(8)] for r in res}
    print(f"{model} on {hardware}, batch {per_gpu_batch}/GPU: efficiency at 8 GPUs — " +
          ", ".join(f"{k} {v:.3f}" for k, v in at8.items()))
    show(plot_scaling(res, real, f"{model} on {hardware} ({hw.precision} peak × "
                                 f"{hw.sustained_fraction:g})"))
    show(plot_timeline(dp_sim.simulate_step(m, hw, 8, "ddp", **kw)))


def scaling_widget(real=None, per_gpu_batch: int = 32, bucket_mb: float = 25.0,
                   jitter: float = 0.0, hardware: str = "8× V100 NVLink (DGX-1)",
                   model: str = "ResNet-50"):
    """Per-GPU batch, bucket size, jitter, hardware, model → efficiency of DP and DDP;
    ``real`` = (worlds, efficiencies) measured here, drawn as squares."""
    return interactive(
        show_scaling,
        per_gpu_batch=int_slider("per_gpu_batch", per_gpu_batch, 1, 256, "per_gpu_batch"),
        bucket_mb=float_slider("bucket_mb", bucket_mb, 1, 200, 1, "bucket_mb"),
        jitter=float_slider("jitter", jitter, 0.0, 0.5, 0.05, "jitter"),
        hardware=dropdown("hardware", hardware, dp_sim.HARDWARE, "hardware"),
        model=dropdown("model", model, dp_sim.MODELS, "model"),
        real=fixed(_check_real(real)))
