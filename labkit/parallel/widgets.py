"""Widgets of chapter 09: each builder validates its arguments, then wires controls to a
``show_*`` function that prints a one-line result and draws a labkit plot.

    collective_widget(world=4, algorithm="ring")   # an all-reduce, step by step
    cost_widget(op="all_reduce")                   # α-β model of every algorithm
    scaling_widget(real=None)                      # DP vs DDP scaling efficiency
"""
from __future__ import annotations

import numpy as np

from labkit import validate as V
from labkit.parallel import dp_sim
from labkit.parallel.collectives import ALLREDUCE_ALGORITHMS, all_reduce
from labkit.parallel.cost import OPS, collective_time
from labkit.parallel.draw import (cost_curves, demo_data, plot_collective_step,
                                  plot_cost_curves, plot_scaling, plot_timeline)
from labkit.show import show

MAX_WORLD = 9
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
    world = V.integer("world", world, low=1, high=MAX_WORLD)
    V.one_of("algorithm", algorithm, ALLREDUCE_ALGORITHMS)
    import ipywidgets as W
    w_world = W.IntSlider(value=world, min=1, max=MAX_WORLD, description="world")
    w_alg = W.Dropdown(options=ALLREDUCE_ALGORITHMS, value=algorithm, description="algorithm")
    w_step = W.IntSlider(value=0, min=0, max=40, description="step")
    play = W.Play(min=0, max=40, interval=900, description="animate")
    W.jslink((play, "value"), (w_step, "value"))
    out = W.interactive_output(show_collective,
                               {"world": w_world, "algorithm": w_alg, "step": w_step})
    return W.VBox([W.HBox([w_world, w_alg]), W.HBox([w_step, play]), out])


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


def cost_widget(op: str = "all_reduce"):
    """log10 size, world, α and bandwidth → modelled time of every algorithm of ``op``."""
    V.one_of("op", op, OPS)
    import ipywidgets as W

    def draw(log10_bytes=6.0, world=8, alpha_us=5.0, bandwidth_gbs=25.0):
        show_cost(op, log10_bytes, world, alpha_us, bandwidth_gbs)

    return W.interactive(draw, log10_bytes=W.FloatSlider(value=6, min=2, max=10, step=0.5),
                         world=W.IntSlider(value=8, min=2, max=64),
                         alpha_us=W.FloatSlider(value=5, min=0.5, max=50, step=0.5),
                         bandwidth_gbs=W.FloatSlider(value=25, min=1, max=450, step=1))


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


def scaling_widget(real=None):
    """Per-GPU batch, bucket size, jitter, hardware, model → efficiency of DP and DDP;
    ``real`` = (worlds, efficiencies) measured here, drawn as squares."""
    real = _check_real(real)
    import ipywidgets as W

    def draw(per_gpu_batch=32, bucket_mb=25.0, jitter=0.0, hardware="8× V100 NVLink (DGX-1)",
             model="ResNet-50"):
        show_scaling(per_gpu_batch, bucket_mb, jitter, hardware, model, real)

    return W.interactive(draw, per_gpu_batch=W.IntSlider(value=32, min=1, max=256),
                         bucket_mb=W.FloatSlider(value=25, min=1, max=200, step=1),
                         jitter=W.FloatSlider(value=0.0, min=0.0, max=0.5, step=0.05),
                         hardware=list(dp_sim.HARDWARE), model=list(dp_sim.MODELS))
