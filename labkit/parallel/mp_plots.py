"""Plots of chapter 10: a pipeline Gantt chart, ZeRO memory against communication, plans."""
from __future__ import annotations


def _plt():
    import matplotlib  # deferred: matplotlib
    import matplotlib.pyplot as plt
    matplotlib.rcParams.setdefault("figure.dpi", 90)
    return plt


def _rows_top_down(fig, ax, labels, xlabel: str, title: str, **label_kw):
    """Finish a chart of horizontal bars: row i labelled ``labels[i]``, row 0 at the top;
    the x label, the title, the layout. Returns ``fig``."""
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, **label_kw)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_schedule(sched, ax=None):
    """Gantt chart of a :class:`~labkit.parallel.pipeline.Schedule`: one row per stage,
    forwards light and backwards dark, each box labelled with its micro-batch."""
    plt = _plt()
    from matplotlib import cm  # deferred: matplotlib
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.5 * sched.stages + 1.6))
    else:
        fig = ax.figure
    cmap = cm.get_cmap("tab10") if hasattr(cm, "get_cmap") else plt.get_cmap("tab10")
    label = sched.microbatches * sched.chunks <= 48
    for t in sched.tasks:
        base = cmap(t.microbatch % 10)
        color = tuple(0.55 + 0.45 * x for x in base[:3]) if t.kind == "F" else base[:3]
        ax.barh(t.stage, t.end - t.start, left=t.start, height=0.8, color=color,
                edgecolor="black" if t.chunk == 0 else "dimgray", linewidth=0.4,
                hatch="//" if t.chunk % 2 else None)
        if label:
            ax.text((t.start + t.end) / 2, t.stage, str(t.microbatch + 1), ha="center",
                    va="center", fontsize=7)
    ax.set_xlim(0, sched.makespan)
    return _rows_top_down(fig, ax, [f"stage {s}" for s in range(sched.stages)],
                          "time (units of t_f)",
                          f"{sched.kind}: p={sched.stages}, m={sched.microbatches}, "
                          f"v={sched.chunks} — bubble {sched.bubble_fraction:.3f}, peak stash "
                          f"{max(sched.peak_stash)}")


def plot_zero(rows, ax=None):
    """Bars of per-rank model-state memory (GB) and communicated volume (Ψ units) for each
    entry of :func:`labkit.parallel.zero.zero_table`."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.2))
    names = [r.name for r in rows]
    bottom = [0.0] * len(rows)
    for part, color in (("params", "tab:blue"), ("grads", "tab:orange"),
                        ("optimizer", "tab:green")):
        vals = [getattr(r.memory, part) / 1e9 for r in rows]
        a1.bar(names, vals, bottom=bottom, color=color, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    a1.set_ylabel("GB per GPU")
    a1.legend(fontsize=8)
    a1.set_title(f"model states per GPU (dp={rows[0].dp})")
    a2.bar(names, [r.comm_volume_psi for r in rows], color="tab:red")
    a2.set_ylabel("sent per GPU per step (× Ψ elements)")
    a2.set_title("communication (from the collectives' logs)")
    for a in (a1, a2):
        a.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


def plot_plans(plan_set, top: int = 10):
    """Horizontal bars of the best plans' step time, each labelled with its MFU."""
    plt = _plt()
    best = plan_set.ranked[:top]
    fig, ax = plt.subplots(figsize=(9, 0.35 * max(len(best), 1) + 1.5))
    labels = [p.label for p in best]
    ax.barh(range(len(best)), [p.step_time for p in best], color="tab:blue")
    for i, p in enumerate(best):
        ax.text(p.step_time, i, f"  MFU {p.mfu:.0%}", va="center", fontsize=8)
    return _rows_top_down(fig, ax, labels, "estimated step time (s)",
                          f"best of {len(plan_set.ranked)} plans that fit "
                          f"({len(plan_set.rejected)} rejected)", fontsize=8)


def plot_capacity_sweep(sweep, ax=None):
    """:func:`labkit.parallel.moe.capacity_sweep`: dropped assignments and empty buffer
    slots against the capacity factor, with the factor from which nothing is dropped
    (max load / mean load) marked; the loads asked of each expert beside."""
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.2))
    a1.plot(sweep.factors, sweep.dropped, "o-", color="tab:red", label="assignments dropped")
    a1.plot(sweep.factors, sweep.padding, "s--", color="tab:gray", label="buffer slots empty")
    a1.axvline(sweep.imbalance, color="k", lw=0.8, ls=":")
    a1.annotate(f"max/mean load {sweep.imbalance:.2f}", (sweep.imbalance, 0.9),
                xytext=(4, 0), textcoords="offset points", fontsize=8)
    a1.set_xlabel("capacity factor")
    a1.set_ylabel("fraction")
    a1.set_ylim(0, 1)
    a1.legend(fontsize=8, loc="center right")
    a1.set_title(f"top-{sweep.k} routing: drops against padding")
    a2.bar(range(len(sweep.loads)), sweep.loads, color="tab:blue")
    a2.axhline(sum(sweep.loads) / len(sweep.loads), color="k", lw=0.8, ls="--")
    a2.set_xlabel("expert")
    a2.set_ylabel("tokens asked")
    a2.set_title(f"load per expert (Switch aux. loss {sweep.aux_loss:.2f}; 1 = balanced)")
    fig.tight_layout()
    return fig
