"""Pictures of chapter 09: each takes a result from labkit.parallel and returns a Figure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from labkit import validate as V
from labkit.parallel.collectives import CollectiveRun, coverage
from labkit.parallel.cost import ALGORITHMS, algorithms_for, collective_time


def _plt():
    import matplotlib  # deferred: matplotlib
    import matplotlib.pyplot as plt
    matplotlib.rcParams.setdefault("figure.dpi", 90)
    return plt


def _fmt_bytes(n: float) -> str:
    for unit, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= s:
            return f"{n / s:.3g} {unit}"
    return f"{n:.0f} B"


def plot_collective_step(run: CollectiveRun, step: int):
    """Three panels: the messages of ``step`` between ranks on a circle (arrow colour =
    chunk), how many ranks' inputs each (rank, chunk) buffer holds before that step, and
    the bytes each (sender, receiver) link has carried so far, with this step's links
    outlined. ``step`` is clipped to [0, run.steps]."""
    plt = _plt()
    step = int(min(max(step, 0), run.steps))
    p = run.world
    cov = coverage(run)[step]
    full = p if run.op in ("all_reduce", "reduce_scatter") else 1
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    ax = axes[0]
    ang = np.pi / 2 - 2 * np.pi * np.arange(p) / p
    xy = np.c_[np.cos(ang), np.sin(ang)]
    ax.scatter(xy[:, 0], xy[:, 1], s=500, c="#dddddd", edgecolors="k", zorder=3)
    for r in range(p):
        ax.text(*xy[r], str(r), ha="center", va="center", zorder=4, fontsize=11)
    msgs = run.step_messages(step) if step < run.steps else []
    for m in msgs:
        a, b = xy[m.sender], xy[m.receiver]
        color = cmap(m.chunk[0] % 10) if m.chunk[1] - m.chunk[0] == 1 else "k"
        ax.annotate("", xy=b + 0.17 * (a - b) / max(np.linalg.norm(a - b), 1e-9),
                    xytext=a + 0.17 * (b - a) / max(np.linalg.norm(a - b), 1e-9),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=2,
                                    ls="-" if m.reduce else "--",
                                    connectionstyle="arc3,rad=0.15"), zorder=2)
    ax.set_xlim(-1.4, 1.4)
    ax.set_ylim(-1.4, 1.4)
    ax.set_aspect("equal")
    ax.axis("off")
    phase = msgs[0].phase if msgs else "done"
    sent_now = sum(m.nbytes for m in msgs)
    ax.set_title(f"{run.algorithm}: step {step}/{run.steps} ({phase})\n"
                 f"{len(msgs)} message{'s' * (len(msgs) != 1)}, {_fmt_bytes(sent_now)} this step "
                 f"(solid = add, dashed = copy)", fontsize=9)
    ax = axes[1]
    im = ax.imshow(cov / full, vmin=0, vmax=1, cmap="Greens", aspect="auto")
    for r in range(cov.shape[0]):
        for c in range(cov.shape[1]):
            ax.text(c, r, str(cov[r, c]), ha="center", va="center", fontsize=8,
                    color="w" if cov[r, c] / full > 0.6 else "k")
    ax.set_xticks(range(cov.shape[1]))
    ax.set_yticks(range(p))
    ax.set_xlabel("chunk")
    ax.set_ylabel("rank")
    ax.set_title(f"ranks summed into each buffer chunk (full = {full})", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax = axes[2]
    links = np.zeros((p, p))
    for m in run.log:
        if m.step < step:
            links[m.sender, m.receiver] += m.nbytes
    im = ax.imshow(links, cmap="Blues", vmin=0, vmax=max(1, run.link_bytes().max()))
    for m in msgs:   # this step's links, outlined
        ax.add_patch(plt.Rectangle((m.receiver - 0.5, m.sender - 0.5), 1, 1, fill=False,
                                   ec="tab:red", lw=1.5))
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    ax.set_xticks(range(p))
    ax.set_yticks(range(p))
    ax.set_title(f"bytes per link so far: {_fmt_bytes(links.sum())} of "
                 f"{_fmt_bytes(run.bytes_sent)} (red: this step)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def plot_link_bytes(*runs: CollectiveRun):
    """Heat maps, side by side, of the bytes each (sender, receiver) link carries over a
    whole collective, one panel per run."""
    if not runs:
        raise ValueError("plot_link_bytes needs at least one CollectiveRun")
    plt = _plt()
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.6), squeeze=False)
    for ax, run in zip(axes[0], runs):
        im = ax.imshow(run.link_bytes(), cmap="Blues")
        ax.set_xlabel("receiver")
        ax.set_ylabel("sender")
        ax.set_title(f"{run.algorithm}: bytes per link", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def plot_bucket_sweep(sweep):
    """Step time and exposed communication against the DDP bucket cap (a ``BucketSweep``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    ax.semilogx(sweep.caps_mb, np.asarray(sweep.step_time) * 1e3, "o-", label="step time")
    ax.semilogx(sweep.caps_mb, np.asarray(sweep.exposed_comm) * 1e3, "s--",
                label="exposed communication")
    ax.set_xlabel("bucket cap (MB)")
    ax.set_ylabel("ms")
    ax.set_title(sweep.title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class CostCurves:
    op: str
    world: int
    nbytes: np.ndarray
    seconds: dict            # algorithm -> array of seconds
    alpha: float
    beta: float
    gamma: float


def cost_curves(op: str, world: int, nbytes: Sequence[float], *, alpha: float, beta: float,
                gamma: float = 0.0) -> CostCurves:
    """collective_time for every algorithm of ``op`` (that supports ``world``) at each size."""
    V.one_of("op", op, ALGORITHMS)
    sizes = V.array("nbytes", nbytes, ndim=1)
    out = {alg: np.array([collective_time(op, alg, n, world, alpha=alpha, beta=beta,
                                          gamma=gamma) for n in sizes])
           for alg in algorithms_for(op, world)}
    return CostCurves(op, world, sizes, out, alpha, beta, gamma)


def plot_cost_curves(c: CostCurves, mark: float | None = None):
    """Time vs message size, log-log, one line per algorithm; optional vertical marker."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for alg, t in c.seconds.items():
        ax.loglog(c.nbytes, t, label=alg)
    if mark is not None:
        ax.axvline(mark, color="gray", ls=":")
        for alg, t in c.seconds.items():
            ax.plot([mark], [np.interp(mark, c.nbytes, t)], "o", ms=4, color="gray")
    ax.set_xlabel("bytes per rank (vector size)")
    ax.set_ylabel("modelled time (s)")
    ax.set_title(f"{c.op}, p = {c.world}, α = {c.alpha * 1e6:.3g} µs, "
                 f"1/β = {1 / c.beta / 1e9:.3g} GB/s", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_fit(measured_bytes, measured_seconds, fit, title: str = ""):
    """Measured all-reduce times (dots) and the fitted α-β model (line), log-log."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    n = np.asarray(measured_bytes, dtype=float)
    ax.loglog(n, measured_seconds, "o", label="measured (median)")
    grid = np.geomspace(n.min(), n.max(), 50)
    ax.loglog(grid, fit.predict(grid), "-",
              label=f"fit: α = {fit.alpha * 1e6:.3g} µs, 1/β = {fit.bandwidth / 1e9:.3g} GB/s")
    ax.set_xlabel("bytes")
    ax.set_ylabel("seconds")
    ax.set_title(title or f"all_reduce on {fit.world} processes", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


TIMELINE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "comm": "tab:green",
                   "optimizer": "tab:purple", "overhead": "tab:red"}


def plot_timeline(step, title: str | None = None, colors: dict | None = None):
    """Gantt chart of any result with ``.events`` (objects with lane, start, end, label,
    kind in seconds): a dp_sim.StepResult, or chapters 10/11's schedules.

    Known kinds keep their colours (:data:`TIMELINE_COLORS`, updated by ``colors``); any
    other kind gets the next colour of matplotlib's cycle. Lanes appear in first-use order;
    the legend lists the kinds that occur.
    """
    plt = _plt()
    events = list(getattr(step, "events", ()))
    if not events:
        raise ValueError("plot_timeline needs a result with at least one event in .events")
    from matplotlib.colors import to_hex  # deferred: matplotlib
    palette = dict(TIMELINE_COLORS, **(colors or {}))
    lanes, kinds = [], {}
    for e in events:
        if e.lane not in lanes:
            lanes.append(e.lane)
        if e.kind not in kinds and e.kind in palette:
            kinds[e.kind] = palette[e.kind]
    used = {to_hex(c) for c in kinds.values()}
    spare = iter(c for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]
                 + list(plt.get_cmap("tab20").colors) if to_hex(c) not in used)
    for e in events:
        if e.kind not in kinds:
            kinds[e.kind] = next(spare, "gray")
    order = list(dict.fromkeys(e.kind for e in events))
    kinds = {k: kinds[k] for k in order}
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.5 * len(lanes)))
    for e in events:
        ax.barh(lanes.index(e.lane), (e.end - e.start) * 1e3, left=e.start * 1e3,
                color=kinds[e.kind], edgecolor="k", lw=0.5)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in kinds.values()]
    ax.legend(handles, list(kinds), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    if title is None and hasattr(step, "step_time"):
        title = (f"{step.mode}, {step.world} GPU(s): step {step.step_time * 1e3:.3g} ms, "
                 f"exposed communication {step.exposed_comm * 1e3:.3g} ms")
    ax.set_title(title or "", fontsize=10)
    fig.tight_layout()
    return fig


def plot_scaling(results, real: tuple[Sequence[int], Sequence[float]] | None = None,
                 title: str = ""):
    """Scaling efficiency vs GPUs for each dp_sim.Scaling; ``real`` = (worlds, efficiency)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.2, 3.8))
    for r in results:
        ax.plot(r.worlds, r.efficiency, "o-", label=r.mode)
    if real is not None:
        ax.plot(real[0], real[1], "s", ms=9, color="k", label="measured here (gloo, CPU)")
    ax.set_xscale("log", base=2)
    ticks = sorted({w for r in results for w in r.worlds})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("GPUs (processes)")
    ax.set_ylabel("scaling efficiency")
    ax.set_ylim(0, 1.08)
    ax.axhline(1, color="gray", lw=0.8)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def plot_compression(results):
    """Left: bytes sent per worker vs test accuracy; right: training loss vs bytes sent."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for r in results:
        axes[0].scatter(r.bytes_per_worker, r.test_accuracy, s=40)
        axes[0].annotate(r.name, (r.bytes_per_worker, r.test_accuracy), fontsize=7,
                         xytext=(4, 3), textcoords="offset points")
        axes[1].plot(np.maximum(r.bytes_curve, 1), r.losses, label=r.name)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("bytes sent per worker")
    axes[0].set_ylabel("test accuracy")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("cumulative bytes sent per worker")
    axes[1].set_ylabel("training loss")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def demo_data(world: int, per_rank: int | None = None, seed: int = 0) -> list[np.ndarray]:
    """Small integer-valued float32 vectors, one per rank (for pictures and widgets)."""
    world = V.integer("world", world, low=1)
    n = 2 * world if per_rank is None else V.integer("per_rank", per_rank, low=1)
    rng = np.random.default_rng(V.integer("seed", seed, low=0))
    return [rng.integers(0, 10, size=n).astype(np.float32) for _ in range(world)]


