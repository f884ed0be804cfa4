"""Plots of chapter 07: each takes results and returns a matplotlib Figure."""
from __future__ import annotations

import numpy as np


def plot_throughput(workers, simulated, measured=None, bound=None, title: str = ""):
    """Samples/s against the number of DataLoader workers."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(workers, simulated, "o-", label="simulated")
    if bound is not None:
        ax.plot(workers, bound, "k:", label="bound 1/max(C, L/W, (L+C)/cores)")
    if measured is not None:
        ax.plot(workers[:len(measured)], measured, "s--", label="measured here")
    ax.set_xticks(list(workers))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples / s")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "Input pipeline throughput")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_steps(result, steps: int = 12, title: str = ""):
    """The training loop's first ``steps`` steps: waiting for data (red) vs computing."""
    import matplotlib.pyplot as plt

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


def plot_formats(timings, title: str = "Random reads of one sample"):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 2.6))
    names = [t.name for t in timings]
    us = np.array([t.seconds_per_sample for t in timings]) * 1e6
    ax.barh(names, us, color=["tab:red", "tab:orange", "tab:green"][:len(us)])
    ax.set_xlabel("µs per sample (warm page cache)")
    ax.set_title(title)
    fig.tight_layout()
    return fig
