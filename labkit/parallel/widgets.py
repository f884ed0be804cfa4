"""Widgets of chapter 09: each wires controls to a labkit function and a labkit plot."""
from __future__ import annotations

import numpy as np

from labkit.parallel import dp_sim
from labkit.parallel.collectives import ALLREDUCE_ALGORITHMS, all_reduce
from labkit.parallel.draw import (cost_curves, demo_data, plot_collective_step,
                                  plot_cost_curves, plot_scaling, plot_timeline)

MAX_WORLD = 9


def _show(fig):
    import matplotlib.pyplot as plt
    from IPython.display import display
    display(fig)
    plt.close(fig)


def collective_explorer(world: int = 4, algorithm: str = "ring"):
    """World size, algorithm and a step slider (with a Play button) → the step picture."""
    import ipywidgets as W
    w_world = W.IntSlider(value=world, min=1, max=MAX_WORLD, description="world")
    w_alg = W.Dropdown(options=ALLREDUCE_ALGORITHMS, value=algorithm, description="algorithm")
    w_step = W.IntSlider(value=0, min=0, max=40, description="step")
    play = W.Play(min=0, max=40, interval=900, description="animate")
    W.jslink((play, "value"), (w_step, "value"))

    def draw(world, algorithm, step):
        run = all_reduce(demo_data(world), algorithm)
        _show(plot_collective_step(run, step))

    out = W.interactive_output(draw, {"world": w_world, "algorithm": w_alg, "step": w_step})
    return W.VBox([W.HBox([w_world, w_alg]), W.HBox([w_step, play]), out])


def cost_explorer(op: str = "all_reduce"):
    """log10 size, world, α and bandwidth → modelled time of every algorithm."""
    import ipywidgets as W

    def draw(log10_bytes=6.0, world=8, alpha_us=5.0, bandwidth_gbs=25.0):
        c = cost_curves(op, world, np.geomspace(1e2, 1e10, 60), alpha=alpha_us * 1e-6,
                        beta=1 / (bandwidth_gbs * 1e9))
        _show(plot_cost_curves(c, mark=10 ** log10_bytes))

    return W.interactive(draw, log10_bytes=W.FloatSlider(value=6, min=2, max=10, step=0.5),
                         world=W.IntSlider(value=8, min=2, max=64),
                         alpha_us=W.FloatSlider(value=5, min=0.5, max=50, step=0.5),
                         bandwidth_gbs=W.FloatSlider(value=25, min=1, max=450, step=1))


def scaling_explorer(real=None):
    """Per-GPU batch, bucket size, jitter, hardware, model → efficiency of DP and DDP."""
    import ipywidgets as W

    def draw(per_gpu_batch=32, bucket_mb=25.0, jitter=0.0, hardware="8× V100 NVLink (DGX-1)",
             model="ResNet-50"):
        hw, m = dp_sim.HARDWARE[hardware], dp_sim.MODELS[model]
        kw = dict(per_gpu_batch=per_gpu_batch, bucket_mb=bucket_mb, jitter=jitter)
        res = [dp_sim.scaling(m, hw, (1, 2, 4, 8, 16, 32), mode, **kw)
               for mode in dp_sim.MODES]
        _show(plot_scaling(res, real, f"{model} on {hardware}"))
        _show(plot_timeline(dp_sim.simulate_step(m, hw, 8, "ddp", **kw)))

    return W.interactive(draw, per_gpu_batch=W.IntSlider(value=32, min=1, max=256),
                         bucket_mb=W.FloatSlider(value=25, min=1, max=200, step=1),
                         jitter=W.FloatSlider(value=0.0, min=0.0, max=0.5, step=0.05),
                         hardware=list(dp_sim.HARDWARE), model=list(dp_sim.MODELS))
