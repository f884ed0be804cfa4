"""Plots of chapters 00, 01 and 12: each takes a result and draws it (no computation beyond
layout); the widgets in :mod:`labkit.perf.widgets` call them."""
from __future__ import annotations

import numpy as np


def plot_cnn_batch(curve, point, cpu_runs=(), gpu: str = "", ax=None):
    """Predicted samples/s against batch (``curve``: :func:`labkit.perf.stack.predict_cnn_curve`
    runs), the chosen batch ``point`` marked, and measured CPU runs when given."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    ax.loglog([r.batch for r in curve], [r.samples_per_s for r in curve], "--",
              label=f"{gpu}: PREDICTED (roofline + host time per op)")
    ax.plot([point.batch], [point.samples_per_s], "o", color="C0")
    if cpu_runs:
        ax.loglog([r.batch for r in cpu_runs], [r.samples_per_s for r in cpu_runs], "s-",
                  color="C1", label="this CPU: measured")
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples / s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax.figure


def plot_noise(est, ax=None):
    """Histogram of :class:`labkit.stats.NoiseEstimates` values (ms) with the mean,
    the median and the median's confidence interval."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3))
    ax.hist(est.values * 1e3, bins=40, color="0.6")
    for val, lab, col in ((est.mean, "mean", "C3"), (est.median, "median", "C0")):
        ax.axvline(val * 1e3, color=col, label=lab)
    ax.axvspan(est.ci.low * 1e3, est.ci.high * 1e3, color="C0", alpha=0.2,
               label=f"{est.ci.level:.0%} CI of median")
    ax.set_xlabel("ms per call")
    ax.set_ylabel("samples")
    ax.legend(fontsize=8)
    return ax.figure


def plot_deploy(results, budget, ax=None):
    """Size against latency on the target (``budget.slowdown`` × this machine's) of the
    :func:`labkit.perf.deploy.fits` results: ``o`` fits, ``x`` does not; the budget's
    limits dashed."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    for var, ok, _ in results:
        ax.plot(var.bytes / 1e3, var.latency_s * budget.slowdown * 1e3, "o" if ok else "x",
                ms=9, label=var.name)
    ax.axvline(budget.max_bytes / 1e3, color="0.5", ls="--")
    ax.axhline(budget.max_latency_s * 1e3, color="0.5", ls="--")
    ax.set_xlabel("size (kB)")
    ax.set_ylabel("latency on target (ms)")
    ax.set_yscale("log")
    ax.margins(x=0.08, y=0.2)               # room for the markers at the extremes
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return ax.figure


def plot_amdahl(curve, ax=None):
    """Speedup against workers on log-log axes, with the ideal line and the ceiling
    (``curve``: :func:`labkit.perf.laws.amdahl_curve`)."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    ax.loglog(curve.workers, curve.workers, "--", color="0.6", label="ideal: S = n")
    ax.loglog(curve.workers, curve.speedup, "o-", label=f"p = {curve.parallel_fraction:.2f}")
    if np.isfinite(curve.ceiling):
        ax.axhline(curve.ceiling, color="C3", lw=1, label=f"ceiling 1/(1-p) = {curve.ceiling:.3g}")
    ax.set_xlabel("workers n")
    ax.set_ylabel("speedup S(n)")
    ax.set_title(f"Amdahl's law: S({curve.workers[-1]}) = {curve.speedup[-1]:.3g}")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax.figure


def plot_rows(rows, ax=None):
    """Horizontal bars: training step and inference time per implementation (log scale);
    ``rows``: :class:`labkit.perf.frameworks.FrameworkRow`."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    names = [r.name for r in rows]
    ys = np.arange(len(rows))
    tr = [r.train_s * 1e6 if r.train_s else 0 for r in rows]
    inf = [r.infer_s * 1e6 if r.infer_s else 0 for r in rows]
    ax.barh(ys - 0.2, tr, 0.4, label="training step")
    ax.barh(ys + 0.2, inf, 0.4, label="inference (batch 64)")
    ax.set_yticks(ys, names)
    ax.set_xscale("log")
    ax.set_xlabel("µs (median, log scale)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return ax.figure
