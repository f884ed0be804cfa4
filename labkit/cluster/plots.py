"""Pictures of chapter 11: each takes a result and returns a matplotlib Figure."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from labkit.cluster.metrics import utilisation, utilisation_curve
from labkit.cluster.scheduler import ScheduleResult

KIND_COLOURS = {"work": "tab:green", "checkpoint": "tab:blue", "lost": "tab:red",
                "restart": "tab:orange"}


def _plt():
    import matplotlib.pyplot as plt  # deferred: matplotlib
    return plt


def plot_gantt(result: ScheduleResult, *, max_jobs: int = 40, title: str | None = None):
    """One row per job: a thin grey line while it waits, a bar (coloured by its GPU count,
    labelled with it) while it runs; preempted jobs show several bars."""
    plt = _plt()
    n = min(len(result.jobs), max_jobs)
    fig, ax = plt.subplots(figsize=(9, 0.22 * n + 1.2))
    sizes = sorted({j.gpus for j in result.jobs})
    cmap = plt.get_cmap("viridis", max(len(sizes), 2))
    colour = {g: cmap(i) for i, g in enumerate(sizes)}
    for k in range(n):
        j = result.jobs[k]
        ax.plot([j.arrival, result.end[k]], [k, k], color="0.8", lw=1, zorder=1)
    for s in result.segments:
        if s.job >= n:
            continue
        g = result.jobs[s.job].gpus
        ax.barh(s.job, s.end - s.start, left=s.start, height=0.7, color=colour[g], zorder=2)
        ax.text(s.start, s.job, f" {g}", va="center", ha="left", fontsize=6, color="w", zorder=3)
    if result.reservations:
        for k, t in result.reservations.items():
            if k < n:
                ax.plot(t, k, "k|", ms=8, zorder=4)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("job")
    ax.set_title(title or f"{result.policy}: {result.cluster.nodes}×{result.cluster.gpus_per_node}"
                 f" GPUs (bar label = GPUs; | = EASY reservation)")
    fig.tight_layout()
    return fig


def plot_utilisation(results: Sequence[ScheduleResult], *, title: str = "GPUs busy"):
    """The fraction of GPUs busy over time, one step curve per schedule."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3))
    for r in results:
        t, u = utilisation_curve(r)
        ax.step(t, u, where="post", lw=1, label=f"{r.policy} (mean {utilisation(r):.0%})")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("fraction of GPUs busy")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_policy_comparison(metrics: Sequence, energies: Sequence | None = None):
    """Bars of mean JCT, mean queueing delay, utilisation, Jain's index (and energy)."""
    plt = _plt()
    panels = [("mean JCT (h)", [m.mean_jct / 3600 for m in metrics]),
              ("mean wait (h)", [m.mean_queueing / 3600 for m in metrics]),
              ("utilisation", [m.utilisation for m in metrics]),
              ("Jain's index (slowdown)", [m.fairness for m in metrics])]
    if energies is not None:
        panels.append(("energy (MWh)", [e.total_kwh / 1000 for e in energies]))
    names = [m.policy for m in metrics]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels), 2.8))
    for ax, (label, vals) in zip(axes, panels):
        ax.bar(names, vals, color=[f"C{i}" for i in range(len(names))])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.tight_layout()
    return fig


def plot_checkpoint_sweep(sweep, *, title: str | None = None):
    """Simulated mean wall time (± 2 standard errors) and Daly's model against τ, with
    Young's and Daly's intervals marked."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = sweep.intervals / 60
    over = lambda t: (t / sweep.work - 1) * 100           # noqa: E731
    ax.fill_between(x, over(sweep.simulated - 2 * sweep.stderr),
                    over(sweep.simulated + 2 * sweep.stderr), alpha=0.3, color="C0")
    ax.plot(x, over(sweep.simulated), "o", ms=3, color="C0", label="simulated (mean)")
    ax.plot(x, over(sweep.model), "-", color="C1", label="Daly's model")
    ax.axvline(sweep.young / 60, color="k", ls="--", lw=1,
               label=f"Young {sweep.young / 60:.1f} min")
    ax.axvline(sweep.daly / 60, color="C3", ls=":", lw=1.5, label=f"Daly {sweep.daly / 60:.1f} min")
    ax.axvline(sweep.best_simulated / 60, color="C0", lw=1,
               label=f"simulated best {sweep.best_simulated / 60:.1f} min")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval τ (min)")
    ax.set_ylabel("overhead over the work (%)")
    ax.set_title(title or "Checkpoint interval vs wall time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_timeline(timeline, *, title: str = "One run: work, checkpoints, failures"):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 1.6))
    for t0, t1, kind in timeline.events:
        ax.barh(0, (t1 - t0) / 3600, left=t0 / 3600, color=KIND_COLOURS[kind], height=0.6)
    for f in timeline.failures:
        ax.axvline(f / 3600, color="k", lw=0.8)
    for kind, c in KIND_COLOURS.items():
        ax.barh(0, 0, color=c, label=kind)
    ax.set_yticks([])
    ax.set_xlabel("wall time (h); black lines = failures")
    ax.set_title(title)
    ax.legend(ncol=4, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.6))
    fig.tight_layout()
    return fig


def plot_stragglers(sims: Sequence, *, bins: int = 60):
    """Histogram of step times for each simulation (e.g. b = 0 and b > 0 backups)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))
    hi = max(float(np.percentile(s.step_times, 99.5)) for s in sims)
    lo = min(float(s.step_times.min()) for s in sims)
    edges = np.linspace(lo, hi, bins)
    for s in sims:
        ax.hist(s.step_times, bins=edges, alpha=0.5,
                label=f"N={s.workers}, b={s.backups}: mean {s.mean_step:.3f}")
        ax.axvline(s.mean_step, color="k", lw=0.8)
    ax.axvline(sims[0].worker_mean, color="C3", ls="--", label="one worker's mean")
    ax.set_xlabel("step time (s)")
    ax.set_ylabel("steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_backup_tradeoff(trade):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(trade.backups, trade.step_time, "o-", label="expected step time")
    ax.set_xlabel("backup workers b")
    ax.set_ylabel("step time (s)")
    ax2 = ax.twinx()
    ax2.plot(trade.backups, trade.gpu_seconds, "s--", color="C1", label="GPU-seconds per step")
    ax2.set_ylabel("GPU-seconds per step", color="C1")
    ax.set_title("Backup workers: faster steps, more machines")
    fig.tight_layout()
    return fig
