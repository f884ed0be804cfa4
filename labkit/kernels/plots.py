"""Pictures of traces and models. Each function takes a result and returns a Figure."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from labkit.hardware import WARP_SIZE, gpu
from labkit.kernels.analysis import (BANK_BYTES, BANKS, SECTOR_BYTES, element_counts,
                                     element_owner, warp_instructions)
from labkit.kernels.trace import GLOBAL, OP_NAMES, READ, SHARED, WRITE, Trace
from labkit.validate import ceil_div


def _plt():
    import matplotlib.pyplot as plt  # deferred: matplotlib
    return plt


def _finish_log_log(ax, xlabel: str, ylabel: str, title: str | None = None,
                    legend_loc: str | None = None):
    """Label a log-log ``ax`` (``title`` where one is given), add its legend (at
    ``legend_loc``, matplotlib's choice where None) and a light grid on the major and minor
    ticks, lay out its figure; the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc=legend_loc)
    ax.grid(True, which="both", alpha=0.2)
    ax.figure.tight_layout()
    return ax.figure


def _as_2d(a: np.ndarray, width: int = 32) -> np.ndarray:
    if a.ndim == 2:
        return a
    flat = a.reshape(-1)
    rows = ceil_div(flat.size, width)
    padded = np.full(rows * width, -1 if flat.dtype.kind == "i" else np.nan, dtype=float)
    padded[:flat.size] = flat
    padded[flat.size:] = np.nan
    return padded.reshape(rows, width)


def _instruction_rows(trace: Trace, wi, k: int) -> np.ndarray:
    """Rows of the trace that make up warp instruction k."""
    c = trace.columns
    r0 = wi.first_row[k]
    same = np.ones(trace.n_accesses, dtype=bool)
    for col in ("block", "site", "occurrence", "array", "op"):
        same &= c[col] == c[col][r0]
    return np.flatnonzero(same & (c["thread"] // WARP_SIZE == wi.warp[k]))


def plot_access_map(trace: Trace, name: str, op: int = WRITE, by: str = "warp",
                    space: int = GLOBAL):
    """Left: which warp/thread/block touched each element of ``name``; right: how often.

    1-D arrays are drawn in rows of 32 elements.
    """
    plt = _plt()
    owner = _as_2d(element_owner(trace, name, op, by, space).astype(float))
    owner[owner < 0] = np.nan
    counts = _as_2d(element_counts(trace, name, op, space).astype(float))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    im0 = axes[0].imshow(owner, cmap="tab20", interpolation="nearest", aspect="auto")
    axes[0].set_title(f"{name}: {by} that {OP_NAMES[op]}s each element")
    fig.colorbar(im0, ax=axes[0], label=by)
    im1 = axes[1].imshow(counts, cmap="viridis", interpolation="nearest", aspect="auto",
                         vmin=0, vmax=max(1.0, float(np.nanmax(counts))))
    axes[1].set_title(f"{name}: {OP_NAMES[op]}s per element (max {int(np.nanmax(counts))})")
    fig.colorbar(im1, ax=axes[1], label="accesses")
    from matplotlib.ticker import MaxNLocator  # deferred: matplotlib
    two_d = element_owner(trace, name, op, by, space).ndim == 2
    for ax in axes:
        ax.set_xlabel("column" if two_d else "element mod 32")
        ax.set_ylabel("row" if two_d else "element // 32")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    return fig


def plot_warp_request(trace: Trace, name: str, op: int = READ, instruction: int = 0):
    """Lanes of one warp instruction on ``name`` against byte address, with 32-byte sectors.

    Shaded bands are the sectors the instruction touches; the title gives their count.
    """
    plt = _plt()
    wi = warp_instructions(trace, GLOBAL)
    ids = trace.array_id(name)
    pick = np.flatnonzero(np.isin(wi.array, ids) & (wi.op == op))
    if pick.size == 0:
        raise ValueError(f"no global {OP_NAMES[op]} of {name!r} in this trace")
    k = pick[min(instruction, pick.size - 1)]
    c = trace.columns
    rows = _instruction_rows(trace, wi, k)
    itemsize = trace.arrays[ids[0]].itemsize
    lanes = c["thread"][rows] % WARP_SIZE
    addr = c["index"][rows] * itemsize
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for s in np.unique(addr // SECTOR_BYTES):
        ax.axvspan(s * SECTOR_BYTES, (s + 1) * SECTOR_BYTES, color="tab:orange", alpha=0.25)
    ax.scatter(addr, lanes, s=14, color="tab:blue", zorder=3)
    ax.set_xlabel(f"byte address in {name} (orange: 32-byte sectors fetched)")
    ax.set_ylabel("lane")
    ax.set_title(f"one warp {OP_NAMES[op]} of {name}: {wi.active[k]} lanes, "
                 f"{wi.sectors[k]} sectors (ideal {wi.ideal_sectors[k]})")
    fig.tight_layout()
    return fig


def plot_bank_conflicts(trace: Trace, name: str | None = None, op: int | None = None):
    """Lane x bank grid of the worst shared-memory warp instruction (on ``name``)."""
    plt = _plt()
    wi = warp_instructions(trace, SHARED)
    sel = np.ones(len(wi), dtype=bool)
    if name is not None:
        sel &= np.isin(wi.array, trace.array_id(name, SHARED))
    if op is not None:
        sel &= wi.op == op
    if not sel.any():
        raise ValueError("no shared-memory access to draw in this trace")
    k = np.flatnonzero(sel)[np.argmax(wi.ways[sel])]
    c = trace.columns
    r0 = wi.first_row[k]
    rows = _instruction_rows(trace, wi, k)
    itemsize = trace.arrays[c["array"][r0]].itemsize
    words = c["index"][rows] * itemsize // BANK_BYTES
    grid = np.zeros((WARP_SIZE, BANKS))
    grid[c["thread"][rows] % WARP_SIZE, words % BANKS] = 1 + (words // BANKS) % 8
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    ax.imshow(np.where(grid > 0, grid, np.nan), cmap="tab10", interpolation="nearest",
              vmin=1, vmax=10)
    ax.set_xlabel("bank (word mod 32)")
    ax.set_ylabel("lane")
    ax.set_title(f"{trace.arrays[c['array'][r0]].name}: {wi.ways[k]}-way bank conflict")
    fig.tight_layout()
    return fig


def plot_divergence(trace: Trace, block: int = 0, warp: int = 0, max_rows: int = 40):
    """Active lanes of each warp instruction one warp issued (dark = lane idle)."""
    plt = _plt()
    wi = warp_instructions(trace)
    sel = np.flatnonzero((wi.block == block) & (wi.warp == warp))
    if sel.size == 0:
        raise ValueError(f"block {block}, warp {warp} made no memory access")
    order = sel[np.argsort(wi.first_row[sel], kind="stable")][:max_rows]
    bits = ((wi.mask[order, None] >> np.arange(WARP_SIZE)) & 1).astype(float)
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(order) + 1.4))
    ax.imshow(bits, cmap="Greens", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    labels = [f"line {trace.sites[trace.columns['site'][wi.first_row[k]]]} "
              f"{trace.arrays[wi.array[k]].name} {OP_NAMES[int(wi.op[k])]}" for k in order]
    ax.set_yticks(range(len(order)), labels, fontsize=7)
    ax.set_xlabel("lane")
    eff = float(np.mean(wi.active[order] / wi.warp_threads[order]))
    ax.set_title(f"block {block} warp {warp}: active lanes per memory instruction "
                 f"(SIMT efficiency {eff:.0%})")
    fig.tight_layout()
    return fig


def plot_occupancy(occ, sweep: Sequence | None = None):
    """Bars: blocks per SM each resource allows (the lowest binds); optional sweep curve."""
    plt = _plt()
    ncols = 2 if sweep else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 3.6))
    axes = np.atleast_1d(axes)
    names = list(occ.limits)
    vals = [occ.limits[n] for n in names]
    colors = ["tab:red" if n == occ.limiter else "tab:gray" for n in names]
    axes[0].barh(names, vals, color=colors)
    for y, v in enumerate(vals):
        axes[0].text(v, y, f" {v}", va="center")
    axes[0].set_xlabel("blocks per SM allowed")
    axes[0].set_title(f"{occ.gpu}: {occ.blocks_per_sm} blocks, occupancy {occ.occupancy:.0%}")
    if sweep:
        xs = [o.threads_per_block for o in sweep]
        axes[1].plot(xs, [100 * o.occupancy for o in sweep], marker=".")
        axes[1].axvline(occ.threads_per_block, color="tab:red", ls=":")
        axes[1].set_xlabel("threads per block")
        axes[1].set_ylabel("occupancy (%)")
        axes[1].set_ylim(0, 105)
        axes[1].set_title("occupancy vs block size")
    fig.tight_layout()
    return fig


def plot_roofline(rooflines: Sequence, points: Sequence = (), title: str | None = None,
                  intensity_range: tuple[float, float] = (1e-2, 1e4), ax=None):
    """Log-log roofs min(peak, I x bandwidth) of each :class:`~labkit.kernels.roofline.Roofline`
    (measured machines solid, data sheets dashed, each ridge point a dot) with ``points``,
    (name, intensity) pairs, placed on the first roof. Say in ``title`` which precision."""
    rooflines = list(rooflines)
    if not rooflines:
        raise ValueError("rooflines must hold at least one Roofline")
    if ax is None:
        _, ax = _plt().subplots(figsize=(7.5, 4.6))
    xs = np.geomspace(*intensity_range, 200)
    for k, r in enumerate(rooflines):
        ax.loglog(xs, r.attainable(xs) / 1e12, "-" if r.measured else "--", color=f"C{k}",
                  label=f"{r.name} (ridge {r.ridge:.3g} FLOP/B)")
        ax.plot([r.ridge], [r.peak / 1e12], "o", color=f"C{k}", ms=4)
    for name, intensity in points:
        y = rooflines[0].attainable(intensity) / 1e12
        ax.plot([intensity], [y], "*", ms=12, color="k", zorder=4)
        ax.annotate(f"{name}\n{intensity:.3g} FLOP/B", (intensity, y), fontsize=8,
                    textcoords="offset points", xytext=(6, -18))
    return _finish_log_log(ax, "arithmetic intensity (FLOP / byte of main memory)",
                           "attainable TFLOP/s", title, legend_loc="lower right")


def plot_error_vs_k(result):
    """Relative error of each tensor-core emulation config against K (log-log)."""
    plt = _plt()
    _, ax = plt.subplots(figsize=(7, 4))
    for label, errs in result.errors.items():
        ax.loglog(result.ks, errs, marker="o", label=label)
    return _finish_log_log(ax, "K (length of each dot product)", "relative error vs float64",
                           f"matmul error vs K ({result.distribution} inputs)")


def plot_traffic(summaries: dict):
    """Bars of global reads, shared reads and sectors for several kernels' AccessSummary."""
    plt = _plt()
    names = list(summaries)
    fields = [("global reads", lambda s: s.traffic.global_reads),
              ("global sectors", lambda s: s.sectors),
              ("shared reads", lambda s: s.traffic.shared_reads)]
    fig, axes = plt.subplots(1, len(fields), figsize=(4 * len(fields), 3.4))
    for ax, (label, get) in zip(axes, fields):
        vals = [get(summaries[n]) for n in names]
        ax.bar(names, vals, color="tab:blue")
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=30)
        for x, v in enumerate(vals):
            ax.text(x, v, str(v), ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    return fig


def plot_element_reads(traces: dict, name: str):
    """One heat map per kernel: how many times each element of array ``name`` was read
    from global memory (``element_counts``), on a shared colour scale."""
    if not traces:
        raise ValueError("traces must map at least one kernel name to its Trace")
    plt = _plt()
    counts = {k: element_counts(t, name) for k, t in traces.items()}
    top = max(int(c.max()) for c in counts.values())
    fig, axes = plt.subplots(1, len(counts), figsize=(4.5 * len(counts), 3.2), squeeze=False)
    for ax, (kernel, c) in zip(axes[0], counts.items()):
        im = ax.imshow(c, cmap="viridis", vmin=0, vmax=top)
        ax.set_title(f"{kernel}: global reads of each {name}[i, k]", fontsize=10)
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def plot_ladder(predictions: Sequence, measured: dict | None = None):
    """Bars of predicted TFLOP/s per matmul kernel (``LadderPrediction``s of one GPU), each
    labelled with the resource that limits it; ``measured`` (variant -> TFLOP/s) adds
    measured bars beside them."""
    if not predictions:
        raise ValueError("plot_ladder needs at least one prediction")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    x = np.arange(len(predictions))
    width = 0.4 if measured else 0.6
    ys = [p.tflops for p in predictions]
    bars = ax.bar(x - (width / 2 if measured else 0), ys, width, label="model prediction",
                  color="#7aa6c2")
    for bar, p in zip(bars, predictions):
        ax.annotate(p.limiter, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=7)
    if measured:
        ax.bar(x + width / 2, [measured.get(p.variant, 0.0) for p in predictions], width,
               label="measured (CUDA events)", color="#d08c60")
    peak = gpu(predictions[0].gpu).peak("fp32") / 1e12
    ax.axhline(peak, color="k", lw=0.8, ls="--", label=f"FP32 peak {peak:g} TFLOP/s")
    ax.set_xticks(x, [p.variant for p in predictions])
    ax.set_ylabel("TFLOP/s (FP32)")
    ax.set_title(f"matmul ladder on {predictions[0].gpu}: PREDICTED by the model"
                 + (" vs measured" if measured else ""))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_attention_traffic(result):
    """Global-memory bytes of one head's attention against the sequence length N
    (log-log): the traced launches (markers: the standard three launches, the fused
    kernel, and the standard one's traffic on its N x N matrices) and the closed forms
    (lines) of an :class:`~labkit.kernels.ops.AttentionTraffic`."""
    plt = _plt()
    _, ax = plt.subplots(figsize=(7, 4))
    ax.loglog(result.model_sizes, result.model_standard, color="tab:red", lw=1,
              label="standard (3 launches), closed form")
    ax.loglog(result.model_sizes, result.model_flash, color="tab:blue", lw=1,
              label="fused (FlashAttention), closed form")
    ax.loglog(result.sizes, result.standard_bytes, "o", color="tab:red",
              label="standard, traced")
    ax.loglog(result.sizes, result.matrix_bytes, "x", color="tab:red",
              label="standard, traced: of it on the N x N s and p")
    ax.loglog(result.sizes, result.flash_bytes, "s", color="tab:blue",
              label=f"fused, traced ({result.whose})")
    return _finish_log_log(ax, "sequence length N", "global memory traffic (bytes)",
                           f"attention, one head, d = {result.d}, tiles of {result.rows} rows")
