"""Plots of chapters 01 and 12: each takes a result and draws it (no computation beyond
layout); the widgets in :mod:`labkit.perf.widgets` call them."""
from __future__ import annotations


def plot_cnn_batch(curve, point, cpu_runs=(), gpu: str = "", ax=None):
    """Predicted samples/s against batch (``curve``: :func:`labkit.perf.stack.predict_cnn_curve`
    runs), the chosen batch ``point`` marked, and measured CPU runs when given."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.6))
    ax.loglog([r.batch for r in curve], [r.samples_per_s for r in curve], "--",
              label=f"{gpu}: PREDICTED (roofline + launches)")
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
    """Histogram of :class:`labkit.perf.stats.NoiseEstimates` samples (ms) with the mean,
    the median and the median's confidence interval."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3))
    ax.hist(est.samples * 1e3, bins=40, color="0.6")
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
    import matplotlib.pyplot as plt

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
