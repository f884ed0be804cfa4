"""Widgets of chapter 07: each wires controls to the simulator and a plot."""
from __future__ import annotations

import numpy as np

from labkit import validate as V
from labkit.dataload.sim import PipelineConfig, simulate

MAX_WORKERS = 32


def _show(fig):
    import matplotlib.pyplot as plt
    from IPython.display import display
    display(fig)
    plt.close(fig)


def show_machine(cores: int, load_ms: float, compute_ms: float, accelerator: bool,
                 prefetch_factor: int, base: PipelineConfig, measured=None, max_workers: int = 8):
    """Simulated samples/s for 0..max_workers workers on a machine with ``cores`` cores,
    ``load_ms`` CPU per batch and ``compute_ms`` per step (on an accelerator or a core)."""
    from labkit.dataload.plots import plot_throughput

    B = base.batch_size
    share = base.decode_s / (base.decode_s + base.augment_s) if base.load_cpu_s else 0.5
    cfg = PipelineConfig(batch_size=B, cores=cores, prefetch_factor=prefetch_factor,
                         decode_s=load_ms * 1e-3 * share / B,
                         augment_s=load_ms * 1e-3 * (1 - share) / B,
                         compute_s=compute_ms * 1e-3, compute_on_cpu=not accelerator,
                         batches=max(base.batches, 60))
    workers = np.arange(max_workers + 1)
    rates = [simulate(cfg, num_workers=int(w)).samples_per_s for w in workers]
    best = int(np.argmax(np.array(rates) >= 0.99 * max(rates)))    # fewest workers near the top
    print(f"{cores} cores, load {load_ms:.1f} ms/batch, step {compute_ms:.1f} ms on "
          f"{'an accelerator' if accelerator else 'the CPU'}: {max(rates):,.0f} samples/s at best, "
          f"99 % of it from num_workers={best}; the step alone allows {B / (compute_ms * 1e-3):,.0f}")
    _show(plot_throughput(workers, rates, measured=measured,
                          title=f"{cores} cores, {'accelerator' if accelerator else 'CPU'} compute"))
    return rates


def machine_widget(base: PipelineConfig | None = None, measured=None, max_workers: int = 8):
    """Cores (first slider), load and step cost, accelerator on/off, prefetch → the curve."""
    import ipywidgets as W

    base = base or PipelineConfig()
    max_workers = V.integer("max_workers", max_workers, low=1, high=MAX_WORKERS)
    load_ms = round(base.load_cpu_s * 1e3, 1)
    comp_ms = round(base.compute_s * 1e3, 1)
    return W.interactive(
        show_machine,
        cores=W.IntSlider(value=base.cores, min=1, max=64, description="cores"),
        load_ms=W.FloatSlider(value=load_ms, min=0.5, max=max(100.0, 2 * load_ms), step=0.5,
                              description="load ms/batch"),
        compute_ms=W.FloatSlider(value=comp_ms, min=0.5, max=max(50.0, 2 * comp_ms), step=0.5,
                                 description="step ms"),
        accelerator=W.Checkbox(value=not base.compute_on_cpu, description="step on an accelerator"),
        prefetch_factor=W.IntSlider(value=base.prefetch_factor, min=1, max=8,
                                    description="prefetch"),
        base=W.fixed(base), measured=W.fixed(measured), max_workers=W.fixed(max_workers))


def show_steps(num_workers: int, prefetch_factor: int, base: PipelineConfig, steps: int = 12):
    """The first steps of the training loop under the simulator, and the waiting share."""
    from labkit.dataload.plots import plot_steps

    r = simulate(base, num_workers=num_workers, prefetch_factor=prefetch_factor)
    print(f"num_workers={num_workers}, prefetch_factor={prefetch_factor}: "
          f"{r.samples_per_s:,.0f} samples/s, waiting for data {r.wait_fraction:.1%} of the time")
    _show(plot_steps(r, steps))
    return r


def steps_widget(base: PipelineConfig | None = None):
    """num_workers (first slider) and prefetch_factor → the step timeline."""
    import ipywidgets as W

    base = base or PipelineConfig()
    if not isinstance(base, PipelineConfig):
        raise TypeError(f"base must be a PipelineConfig, got {type(base).__name__}")
    return W.interactive(show_steps,
                         num_workers=W.IntSlider(value=base.num_workers, min=0, max=MAX_WORKERS,
                                                 description="num_workers"),
                         prefetch_factor=W.IntSlider(value=base.prefetch_factor, min=1, max=8,
                                                     description="prefetch"),
                         base=W.fixed(base), steps=W.fixed(12))
