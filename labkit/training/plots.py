"""Plots for the training experiments (chapters 2 and 3): each takes a result, returns a Figure."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from labkit.training.inference import kv_cache_bytes


def _fig(ncols=1, size=(6.4, 3.6)):
    import matplotlib.pyplot as plt  # deferred: matplotlib
    fig, axes = plt.subplots(1, ncols, figsize=size, constrained_layout=True)
    return fig, axes


def plot_leak(results):
    """Bytes kept alive by the list of losses after each step, one line per result."""
    fig, ax = _fig()
    for r in results:
        steps = np.arange(1, len(r.kept_bytes) + 1)
        label = f"{r.engine}: append({'loss' if r.strategy == 'tensor' else 'loss.' + r.strategy + '()'})"
        ax.plot(steps, np.asarray(r.kept_bytes) / 1024, "o-", label=label)
    ax.set(xlabel="training step", ylabel="KiB kept alive by the list",
           title="keeping losses in a list")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_phase_costs(costs):
    """Bar chart of forward/backward FLOPs and saved bytes (train vs no_grad inference)."""
    fig, (a1, a2) = _fig(2, (9.5, 3.4))
    a1.bar(["forward", "backward"], [costs.forward_flops / 1e6, costs.backward_flops / 1e6],
           color=["#6baed6", "#fd8d3c"])
    a1.set(ylabel="MFLOP", title=f"one training step (batch {costs.batch})")
    a2.bar(["training", "inference\n(no_grad)"],
           [costs.saved_bytes_train / 1024, costs.saved_bytes_inference / 1024],
           color=["#fd8d3c", "#74c476"])
    a2.set(ylabel="KiB saved for backward", title="activations held for backward")
    return fig


def plot_batch_sweep(sweep):
    """Latency (median) and throughput against batch size."""
    fig, (a1, a2) = _fig(2, (9.5, 3.4))
    bs = [p.batch for p in sweep.points]
    a1.plot(bs, [1e3 * p.latency_s for p in sweep.points], "o-")
    a1.set(xscale="log", xlabel="batch size", ylabel="latency per batch (ms, median)",
           title="latency")
    a2.plot(bs, [p.throughput for p in sweep.points], "o-", color="#31a354")
    a2.set(xscale="log", xlabel="batch size", ylabel="samples / s", title="throughput")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    return fig


def plot_precision(result):
    """Histogram of |output - fp64 output| for each dtype."""
    fig, ax = _fig()
    for name, err in result.errors.items():
        e = np.log10(np.maximum(err.ravel(), 1e-12))
        ax.hist(e, bins=40, alpha=0.6, label=f"{name}: max {err.max():.2g}")
    ax.set(xlabel="log10 |output - float64 output|", ylabel="count",
           title=f"same model, same input (scale {result.scale:g}, width {result.width})")
    ax.legend(fontsize=8)
    return fig


def plot_mode_accuracy(result):
    """Test accuracy vs test batch size with the model in train() vs eval() mode."""
    fig, ax = _fig()
    ax.plot(result.batch_sizes, result.acc_train_mode, "o-", label="forgot eval(): train mode")
    ax.plot(result.batch_sizes, result.acc_eval_mode, "s-", label="model.eval()")
    ax.set(xscale="log", xlabel="test batch size", ylabel="test accuracy", ylim=(0, 1.02),
           title=f"BatchNorm + Dropout(p={result.p:g}) at test time")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_kv_cache(model, seqs, batch: int = 1, dtype_bytes: int = 2, mark: int | None = None):
    """KV-cache GiB against sequence length for ``model`` and for the same model without
    grouped-query attention (every query head with its own key/value head)."""
    seqs = np.asarray(seqs)
    mha = replace(model, n_kv_heads=model.n_heads)
    fig, ax = _fig()
    for m, style, label in [(mha, "--", f"{model.n_heads} KV heads (multi-head)"),
                            (model, "-", f"{model.n_kv_heads} KV heads ({model.name})")]:
        ax.plot(seqs, [kv_cache_bytes(m, int(s), batch, dtype_bytes) / 2**30 for s in seqs],
                style, label=label)
    if mark is not None:
        ax.axvline(mark, color="grey", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="tokens in the sequence",
           ylabel="KV cache (GiB)",
           title=f"{model.name}: KV cache, batch {batch}, {dtype_bytes}-byte values")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_decode_timing(result):
    """Time per new token (left) and its attention FLOPs (right) against the tokens of
    context, with the KV cache and recomputing everything (a
    :class:`~labkit.training.decoder_measure.DecodeTiming`)."""
    fig, (a1, a2) = _fig(2, (9.5, 3.4))
    L = np.asarray(result.lengths)
    a1.plot(L, 1e3 * np.asarray(result.cached_s), "o-", label="KV cache")
    a1.plot(L, 1e3 * np.asarray(result.recompute_s), "s-", label="recompute all")
    a1.set(xscale="log", yscale="log", xlabel="tokens of context",
           ylabel="ms per new token (median)", title="time per token")
    a2.plot(L, result.cached_flops, "o-", label="KV cache: 4·H·d·(L+1) per layer")
    a2.plot(L, result.recompute_flops, "s-", label="recompute: 4·H·d·(L+1)² per layer")
    a2.set(xscale="log", yscale="log", xlabel="tokens of context",
           ylabel="attention FLOPs of the token", title="attention work per token")
    for a in (a1, a2):
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    return fig
