"""Plots of chapter 08: each takes results and returns a matplotlib Figure."""
from __future__ import annotations

import numpy as np


def plot_curves(x, curves: dict, xlabel: str, ylabel: str, title: str = "", logy: bool = False):
    """One line per entry of ``curves`` (name → values over ``x``)."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(5.6, 3.3))
    for name, ys in curves.items():
        ax.plot(x, ys, "o-", label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_quant(w, wq, title: str = ""):
    """Histogram of the weights and of their quantized values."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(5.6, 2.8))
    ax.hist(np.ravel(w), bins=120, alpha=0.6, label="fp32 weights")
    ax.hist(np.ravel(wq), bins=240, alpha=0.6, label="quantized")
    ax.set_xlabel("value")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")   # "best" is slow over 360 histogram bars
    fig.tight_layout()
    return fig


def plot_gradients(grads, scale: float, fmt_min_subnormal: float, fmt_max: float, title: str = ""):
    """log2 |gradient × scale| with the format's representable range shaded."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    g = np.abs(np.ravel(grads)) * scale
    g = g[g > 0]
    fig, ax = plt.subplots(figsize=(5.6, 2.8))
    ax.hist(np.log2(g), bins=80, color="tab:blue")
    ax.axvspan(np.log2(fmt_min_subnormal), np.log2(fmt_max), color="tab:green", alpha=0.12,
               label="representable in fp16")
    ax.axvline(np.log2(fmt_min_subnormal), color="tab:red", ls="--", label="smallest subnormal")
    ax.axvline(np.log2(fmt_max), color="tab:purple", ls="--", label="largest finite")
    ax.set_xlabel("log2 |gradient × loss scale|")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the bars
    fig.tight_layout()
    return fig
