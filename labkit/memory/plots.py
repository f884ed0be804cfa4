"""Pictures in the spirit of PyTorch's memory_viz: a memory timeline and a segment map.
Each function takes a result and returns a matplotlib Figure."""
from __future__ import annotations

import numpy as np

from labkit.memory.constants import MiB

PHASE_COLORS = {"setup": "#bbbbbb", "forward": "#8fd3ff", "backward": "#ffc58f",
                "optimizer": "#b9f0a8", "zero_grad": "#e0b8f0"}
STATE_COLORS = {"active_allocated": "#d62728", "inactive": "#c7e9c0"}


def plot_timeline(timeline, title: str = "Memory timeline (replayed)"):
    """Allocated, requested and reserved bytes after each event, phases shaded."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(9, 3.6))
    x = np.arange(timeline.n_events)
    ax.fill_between(x, timeline.reserved / MiB, step="post", color="#dddddd",
                    label="reserved (segments)")
    ax.step(x, timeline.allocated / MiB, where="post", color="#d62728", label="allocated")
    ax.step(x, timeline.requested / MiB, where="post", color="#1f77b4", lw=0.8,
            label="requested")
    phases = timeline.phases
    if phases:
        start = 0
        for i in range(1, len(phases) + 1):
            if i == len(phases) or phases[i] != phases[start]:
                color = PHASE_COLORS.get(phases[start])
                if color:
                    ax.axvspan(start, i, color=color, alpha=0.35, lw=0)
                    ax.text((start + i) / 2, ax.get_ylim()[1] * 0.02, phases[start][:4],
                            ha="center", fontsize=7)
                start = i
    if timeline.oom_at is not None:
        ax.axvline(timeline.oom_at, color="k", ls="--", label="out of memory")
    ax.set_xlabel("event")
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def plot_segment_map(segments, title: str = "Segment map", ax=None):
    """One bar per segment; blocks drawn to scale: red = allocated, green = cached free,
    the hatched part of a red block = rounding waste (size - requested)."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * max(1, len(segments))))
    else:
        fig = ax.figure
    for row, seg in enumerate(segments):
        for b in seg.blocks:
            x0 = (b.address - seg.address) / MiB
            ax.barh(row, b.size / MiB, left=x0, color=STATE_COLORS.get(b.state, "#eeeeee"),
                    edgecolor="k", lw=0.4, height=0.7)
            waste = b.size - b.requested_size
            if b.state == "active_allocated" and waste > 0:
                ax.barh(row, waste / MiB, left=x0 + b.requested_size / MiB, color="none",
                        hatch="///", edgecolor="#7f0000", lw=0, height=0.7)
    ax.set_yticks(range(len(segments)))
    ax.set_yticklabels([f"{s.segment_type}{' (exp)' if s.is_expandable else ''} "
                        f"{s.total_size / MiB:.0f}M" for s in segments], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("offset in segment (MiB)")
    ax.set_title(title, fontsize=10)
    if not segments:
        ax.text(0.5, 0.5, "no segments reserved", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plot_walkthrough(steps):
    """One segment map per step of :func:`labkit.memory.scenarios.request_walkthrough`,
    stacked top to bottom, each titled with its action."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    if not steps:
        raise ValueError("steps must hold at least one step of request_walkthrough()")
    fig, axes = plt.subplots(len(steps), 1, figsize=(9, 1.3 * len(steps)), squeeze=False)
    for ax, s in zip(axes[:, 0], steps):
        plot_segment_map(s.segments, s.action, ax=ax)
    return fig


def plot_model_state(breakdown: dict, title: str = "Memory per GPU"):
    """Stacked bar of a {name: bytes} budget in GiB."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(6, 3.2))
    left = 0.0
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    for (name, value), c in zip(breakdown.items(), colors):
        ax.barh(0, value / 2**30, left=left, color=c, label=f"{name}: {value / 2**30:.2f} GiB")
        left += value / 2**30
    ax.set_yticks([])
    ax.set_xlabel("GiB")
    ax.set_title(f"{title}: {left:.2f} GiB")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    fig.tight_layout()
    return fig


def plot_checkpointing(results, title: str = "Activation checkpointing, measured"):
    """Peak memory and time against the number of checkpoint segments."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ks = [r.segments for r in results]
    labels = ["none" if k == 0 else str(k) for k in ks]
    ax.bar(labels, [r.peak_bytes / MiB for r in results], color="#1f77b4")
    ax.set_xlabel("checkpoint segments")
    ax.set_ylabel("peak MiB (bars)")
    ax2 = ax.twinx()
    ax2.plot(labels, [r.seconds * 1e3 for r in results], "o-", color="#d62728")
    ax2.set_ylabel("ms per step (line)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_recompute_activations(values: dict, title: str = "Activations per layer"):
    """Bars of activation bytes per layer, one per recompute strategy ({name: bytes})."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(6, 3))
    colors = ["#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"]
    ax.bar(list(values), [v / MiB for v in values.values()], color=colors[:len(values)])
    ax.set_ylabel("MiB per layer")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_kv_cache(result, title: str = "KV cache: tokens stored and slots reserved"):
    """Token slots over the stream (:class:`labkit.memory.paged.KVResult`): stored, reserved
    by paging, reserved contiguously; the gaps between the lines are the waste."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    fig, ax = plt.subplots(figsize=(9, 3.4))
    x = np.arange(len(result.tokens))
    ax.fill_between(x, result.contiguous, step="post", color="#dddddd",
                    label=f"contiguous, max_len {result.max_len} "
                          f"({result.contiguous_waste:.0%} empty)")
    ax.step(x, result.paged, where="post", color="#1f77b4",
            label=f"paged, {result.block_tokens} tokens/block ({result.paged_waste:.1%} empty)")
    ax.step(x, result.tokens, where="post", color="#d62728", lw=0.8, label="tokens stored")
    ax.set_xlabel("event")
    ax.set_ylabel("token slots")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig
