"""Plots of the engine's experiments (chapter 2): each takes a result and returns a Figure."""
from __future__ import annotations

import numpy as np


def _fig(ncols=1, size=(6.4, 3.6)):
    import matplotlib.pyplot as plt  # deferred: matplotlib
    fig, axes = plt.subplots(1, ncols, figsize=size, constrained_layout=True)
    return fig, axes


def plot_mode_cost(sweep, title: str | None = None):
    """Passes and seconds for the full Jacobian, forward vs reverse, against n (fixed m)."""
    if not sweep:
        raise ValueError("sweep is empty: run mode_cost_sweep first")
    ns = [c.n for c in sweep]
    fig, (a1, a2) = _fig(2, (9.5, 3.4))
    a1.plot(ns, [c.forward_passes for c in sweep], "o-", label="forward mode: n passes")
    a1.plot(ns, [c.reverse_passes for c in sweep], "s-", label="reverse mode: m passes")
    a1.set(xlabel="n inputs", ylabel="passes", title=f"passes for the Jacobian (m = {sweep[0].m})")
    a2.plot(ns, [1e3 * c.forward_seconds for c in sweep], "o-", label="forward mode")
    a2.plot(ns, [1e3 * c.reverse_seconds for c in sweep], "s-", label="reverse mode")
    a2.set(xlabel="n inputs", ylabel="ms (median)", title=title or "measured time")
    for a in (a1, a2):
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    return fig
