"""Widgets of chapter 07: each wires controls to the simulator and a plot."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from labkit import validate as V
from labkit.controls import checkbox, fixed, float_slider, int_slider, interactive
from labkit.dataload.plots import plot_queue, plot_steps, plot_throughput
from labkit.dataload.sim import PipelineConfig, bound_rate, plateau_workers, simulate, steady_config
from labkit.show import show

MAX_WORKERS = 32
MAX_CORES = 64
MAX_PREFETCH = 8
MIN_MS = 0.5        # the load and step sliders' lower end and step (ms)
MAX_JITTER = 2.0    # the jitter slider's upper end (coefficient of variation)


def show_machine(cores: int, load_ms: float, compute_ms: float, accelerator: bool,
                 prefetch_factor: int, base: PipelineConfig, measured=None, max_workers: int = 8):
    """Simulated samples/s for 0..max_workers workers on a machine with ``cores`` cores,
    ``load_ms`` CPU per batch and ``compute_ms`` per step (on an accelerator or a core)."""
    B = base.batch_size
    share = base.decode_share
    cfg = PipelineConfig(batch_size=B, cores=cores, prefetch_factor=prefetch_factor,
                         decode_s=load_ms * 1e-3 * share / B,
                         augment_s=load_ms * 1e-3 * (1 - share) / B,
                         compute_s=compute_ms * 1e-3, compute_on_cpu=not accelerator,
                         batches=max(base.batches, 60))
    workers = np.arange(max_workers + 1)
    rates = [simulate(steady_config(cfg, int(w))).samples_per_s for w in workers]
    best = plateau_workers(rates, 0.99)    # fewest workers near the top
    print(f"{cores} cores, load {load_ms:.1f} ms/batch, step {compute_ms:.1f} ms on "
          f"{'an accelerator' if accelerator else 'the CPU'}: {max(rates):,.0f} samples/s at best, "
          f"99 % of it from num_workers={best}; the step alone allows {B / (compute_ms * 1e-3):,.0f}")
    show(plot_throughput(workers, rates, measured=measured,
                         title=f"{cores} cores, {'accelerator' if accelerator else 'CPU'} compute"))
    return rates


def _base(base: PipelineConfig | None) -> PipelineConfig:
    if base is None:
        return PipelineConfig()
    if not isinstance(base, PipelineConfig):
        raise TypeError(f"base must be a PipelineConfig, got {type(base).__name__}")
    return base


def _ms_slider(name: str, seconds: float, high: float, description: str):
    """A slider in ms from ``MIN_MS`` to ``max(high, 2 × the value)`` starting at
    ``seconds``; a cost below ``MIN_MS`` starts at ``MIN_MS`` (the slider's lower end)."""
    ms = max(round(seconds * 1e3, 1), MIN_MS)
    return float_slider(name, ms, MIN_MS, max(high, 2 * ms), MIN_MS, description)


def machine_widget(base: PipelineConfig | None = None, measured=None, max_workers: int = 8):
    """Cores (first slider), load and step cost, accelerator on/off, prefetch → the curve."""
    base = _base(base)
    max_workers = V.integer("max_workers", max_workers, low=1, high=MAX_WORKERS)
    return interactive(
        show_machine,
        cores=int_slider("base.cores", base.cores, 1, MAX_CORES, "cores"),
        load_ms=_ms_slider("load_ms", base.load_cpu_s, 100.0, "load ms/batch"),
        compute_ms=_ms_slider("compute_ms", base.compute_s, 50.0, "step ms"),
        accelerator=checkbox("accelerator", not base.compute_on_cpu,
                             "step on an accelerator"),
        prefetch_factor=int_slider("base.prefetch_factor", base.prefetch_factor, 1,
                                   MAX_PREFETCH, "prefetch"),
        base=fixed(base), measured=fixed(measured), max_workers=fixed(max_workers))


def show_steps(num_workers: int, prefetch_factor: int, base: PipelineConfig, steps: int = 12):
    """The first steps of the training loop under the simulator, and the waiting share."""
    r = simulate(steady_config(replace(base, prefetch_factor=prefetch_factor), num_workers))
    print(f"num_workers={num_workers}, prefetch_factor={prefetch_factor}: "
          f"{r.samples_per_s:,.0f} samples/s, waiting for data {r.wait_fraction:.1%} of the time")
    show(plot_steps(r, steps))
    return r


def steps_widget(base: PipelineConfig | None = None):
    """num_workers (first slider) and prefetch_factor → the step timeline."""
    base = _base(base)
    return interactive(show_steps,
                       num_workers=int_slider("base.num_workers", base.num_workers, 0,
                                              MAX_WORKERS, "num_workers"),
                       prefetch_factor=int_slider("base.prefetch_factor", base.prefetch_factor,
                                                  1, MAX_PREFETCH, "prefetch"),
                       base=fixed(base), steps=fixed(12))


def show_queue(prefetch_factor: int, num_workers: int, jitter: float, base: PipelineConfig):
    """The prefetch queue over time and the start-up transient of one simulation
    (:func:`labkit.dataload.plots.plot_queue`), with the steady rate against the bound."""
    cfg = steady_config(replace(base, prefetch_factor=prefetch_factor, jitter=jitter), num_workers)
    r = simulate(cfg)
    print(f"num_workers={num_workers}, prefetch_factor={prefetch_factor}, jitter {jitter:.1f}: "
          f"{r.samples_per_s:,.0f} samples/s in steady state (bound {bound_rate(cfg):,.0f}); "
          f"first batch after {r.first_batch_s * 1e3:.1f} ms; queue holds "
          f"{r.queue().mean_ready(r.step_end[r.window.start], r.step_end[r.window.stop - 1]):.1f} "
          f"ready batches on average")
    show(plot_queue(r))
    return r


def queue_widget(base: PipelineConfig | None = None):
    """prefetch_factor (first slider), num_workers and the jitter of the per-sample cost →
    the queue over time and the step durations."""
    base = _base(base)
    return interactive(show_queue,
                       prefetch_factor=int_slider("base.prefetch_factor", base.prefetch_factor,
                                                  1, MAX_PREFETCH, "prefetch"),
                       num_workers=int_slider("base.num_workers", max(base.num_workers, 1), 1,
                                              MAX_WORKERS, "num_workers"),
                       jitter=float_slider("base.jitter", base.jitter, 0.0, MAX_JITTER, 0.1,
                                           "jitter (CV)"),
                       base=fixed(base))
