"""Plots of chapter 07: each takes results and returns a matplotlib Figure."""
from __future__ import annotations

import numpy as np


def plot_throughput(workers, simulated, measured=None, bound=None, title: str = "",
                    measured_range=None):
    """Samples/s against the number of DataLoader workers; ``measured_range`` = (lows,
    highs) draws the measured spread over trials as error bars."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(workers, simulated, "o-", label="simulated")
    if bound is not None:
        ax.plot(workers, bound, "k:", label="bound")
    if measured is not None:
        x = np.asarray(workers)[:len(measured)]
        if measured_range is not None:
            lo, hi = (np.asarray(v, float) for v in measured_range)
            m = np.asarray(measured, float)
            ax.errorbar(x, m, yerr=[m - lo, hi - m], fmt="s--", capsize=3,
                        label="measured here (median, min–max)")
        else:
            ax.plot(x, measured, "s--", label="measured here")
    return _finish_rate_axes(fig, ax, workers, title or "Input pipeline throughput")


def _finish_rate_axes(fig, ax, workers, title):
    """Samples/s against num_workers: ticks, labels, title, legend."""
    ax.set_xticks(list(workers))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples / s")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_agreement(rows, title: str = ""):
    """:func:`labkit.dataload.compare.compare_trials` rows: measured (median, min–max),
    predicted (median, min–max over calibrations) and bound against num_workers."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    w = np.array([r.workers for r in rows])
    for attr, fmt, label, dx in (("measured", "s", "measured (median, min–max)", -0.06),
                                 ("predicted", "o", "simulated (median, min–max)", 0.06)):
        med = np.array([getattr(r, attr).median for r in rows])
        lo = np.array([getattr(r, attr).low for r in rows])
        hi = np.array([getattr(r, attr).high for r in rows])
        ax.errorbar(w + dx, med, yerr=[med - lo, hi - med], fmt=fmt + "-", capsize=3, label=label)
    ax.plot(w, [r.bound.median for r in rows], "k:", label="bound")
    return _finish_rate_axes(fig, ax, w, title or "Measured against the calibrated model")


def plot_steps(result, steps: int = 12, title: str = ""):
    """The training loop's first ``steps`` steps: waiting for data (red) vs computing."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    n = min(steps, len(result.step_end))
    fig, ax = plt.subplots(figsize=(6.4, 1.8))
    ax.broken_barh([(s, g - s) for s, g in zip(result.step_start[:n], result.step_got[:n])],
                   (0, 1), color="tab:red", label="waiting for data")
    ax.broken_barh([(g, e - g) for g, e in zip(result.step_got[:n], result.step_end[:n])],
                   (0, 1), color="tab:blue", label="copy + compute")
    ax.set_yticks([])
    ax.set_xlabel("seconds")
    ax.set_title(title or f"num_workers={result.config.num_workers}: "
                          f"waiting {result.wait_fraction:.0%} of the time")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def plot_queue(result, title: str = ""):
    """What the bound cannot show, from one simulation (a
    :class:`labkit.dataload.sim.SimResult`): top, the batches ready and waiting in the
    prefetch queue and the batches being built, over time; bottom, each step's duration
    (end to end) with the steady window shaded and the steady period, so the start-up
    transient and the drain at the end stand out."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    q = result.queue()
    c = result.config
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 4.4))
    if c.num_workers:
        top.step(q.t, q.ready, where="post", label="ready, waiting to be taken")
        top.step(q.t, q.in_flight, where="post", label="being built (in flight)")
        top.axhline(c.prefetch_factor * c.num_workers, color="k", ls=":", lw=0.8,
                    label="prefetch_factor × num_workers")
        top.legend(fontsize=7, loc="upper right")
    else:
        top.text(0.5, 0.5, "num_workers=0: no queue", ha="center", va="center",
                 transform=top.transAxes)
    top.set_ylabel("batches")
    top.set_xlabel("seconds")
    period = np.diff(np.concatenate([[0.0], result.step_end])) * 1e3
    w = result.window
    bottom.plot(np.arange(len(period)), period, ".-", lw=0.8)
    bottom.axvspan(w.start, w.stop - 1, color="tab:green", alpha=0.12, label="steady window")
    bottom.axhline(c.batch_size / result.samples_per_s * 1e3, color="k", ls=":", lw=0.8,
                   label="steady period")
    bottom.set_xlabel("step")
    bottom.set_ylabel("ms per step")
    bottom.set_ylim(bottom=0)
    bottom.legend(fontsize=7, loc="upper right")
    top.set_title(title or f"num_workers={c.num_workers}, prefetch_factor={c.prefetch_factor}: "
                           f"first batch after {result.first_batch_s * 1e3:.1f} ms, start-up "
                           f"costs {result.startup_excess_s * 1e3:.1f} ms")
    fig.tight_layout()
    return fig


def plot_formats(timings, title: str = "Random reads of one sample"):
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(5.0, 2.6))
    names = [t.name for t in timings]
    us = np.array([t.seconds_per_sample for t in timings]) * 1e6
    ax.barh(names, us, color=["tab:red", "tab:orange", "tab:green"][:len(us)])
    ax.set_xlabel("µs per sample (warm page cache)")
    ax.set_title(title)
    fig.tight_layout()
    return fig
