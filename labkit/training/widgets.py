"""Widgets of the training experiments (chapters 2 and 3): controls -> a function -> a plot.

``show_*`` functions do the work (print the numbers, draw the figure); ``*_widget``
builders validate their arguments, then wire controls to them (:mod:`labkit.controls`).
"""
from __future__ import annotations

from labkit.controls import checkbox, choice_slider, dropdown, fixed, int_slider, interactive
from labkit.show import show as _show
from labkit.training.inference import DECODERS, batch_sweep, kv_cache_bytes, precision_effect
from labkit.training.leak import STRATEGIES, labkit_leak, torch_leak
from labkit.training.modes import forgot_eval_experiment
from labkit.training.plots import plot_batch_sweep, plot_kv_cache, plot_leak, plot_mode_accuracy
from labkit.training.plots import plot_precision
from labkit.validate import integer

SCALES = (0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5)     # input scales of precision_widget
DROPOUTS = (0.0, 0.2, 0.5)                                # dropout p of forgot_eval_widget


def show_leak(steps: int, backward: bool) -> None:
    """Bytes a list of losses keeps alive per step, labkit and PyTorch, each strategy."""
    results = [labkit_leak(steps, s, backward=backward) for s in STRATEGIES]
    results += [torch_leak(steps, s, backward=backward) for s in STRATEGIES]
    for r in results:
        print(f"{r.engine:>6} keep={r.strategy:<6}: {r.per_step / 1024:8.1f} KiB per step")
    _show(plot_leak(results))


def leak_widget(steps: int = 6, backward: bool = True):
    """Steps and whether backward() runs -> bytes a list of losses keeps alive."""
    return interactive(show_leak, steps=int_slider("steps", steps, 2, 12, "steps"),
                       backward=checkbox("backward", backward, "call backward()"))


def show_precision(width: int, scale: float) -> None:
    """Output error of float32/bfloat16/float16 against float64, argmax agreement, overflows."""
    r = precision_effect(width=width, scale=scale)
    for name in r.errors:
        print(f"{name:>8}: max error {r.errors[name].max():.3g}, argmax agrees on "
              f"{100 * r.argmax_agreement[name]:.0f}% of rows, {r.overflow[name]} overflows")
    _show(plot_precision(r))


def precision_widget(width: int = 128, scale: float = 1.0):
    """Width and input scale -> output error of float32/bfloat16/float16 vs float64."""
    return interactive(show_precision,
                       width=int_slider("width", width, 16, 512, "width", step=16),
                       scale=choice_slider("scale", scale, SCALES, "input scale"))


def show_batch_sweep(width: int, max_batch_log2: int) -> None:
    """Latency and throughput of inference at batch 1, 4, …, 2^max_batch_log2."""
    sweep = batch_sweep(tuple(2 ** k for k in range(0, max_batch_log2 + 1, 2)), width=width)
    best = max(sweep.points, key=lambda p: p.throughput)
    print(f"highest throughput at batch {best.batch} "
          f"(the timings vary run to run; medians of 7 repeats)")
    _show(plot_batch_sweep(sweep))


def batch_sweep_widget(width: int = 256, max_batch_log2: int = 8):
    """Model width and largest batch -> latency and throughput of inference on this machine."""
    return interactive(show_batch_sweep,
                       width=int_slider("width", width, 32, 1024, "width", step=32),
                       max_batch_log2=int_slider("max_batch_log2", max_batch_log2, 2, 10,
                                                 "log2 max batch", step=2))


def show_forgot_eval(p: float) -> None:
    """Accuracy against test batch size of a dropout-``p`` model in train() and eval() mode."""
    r = forgot_eval_experiment(p)
    print(f"eval(): {r.acc_eval_mode[0]:.3f} at every batch size; train mode: "
          + ", ".join(f"{b}: {a:.3f}" for b, a in zip(r.batch_sizes, r.acc_train_mode)))
    _show(plot_mode_accuracy(r))


def forgot_eval_widget(p: float = 0.5):
    """Dropout probability -> accuracy vs test batch size in train() vs eval() mode."""
    return interactive(show_forgot_eval, p=choice_slider("p", p, DROPOUTS, "dropout p"))


def _kv_seqs(max_seq: int) -> list[int]:
    """The sequence lengths kv_cache_widget offers: powers of two from 16 to ``max_seq``."""
    return [2 ** k for k in range(4, max_seq.bit_length()) if 2 ** k <= max_seq]


def show_kv_cache(seq: int, batch: int, model: str, max_seq: int) -> None:
    """The KV cache of ``model`` at ``seq`` tokens × ``batch``, plotted over all lengths."""
    m = DECODERS[model]
    total = kv_cache_bytes(m, seq, batch)
    print(f"{m.name}: {total / seq / batch / 1024:.0f} KiB per token, "
          f"{total / 2**30:.2f} GiB for {seq} tokens x batch {batch} (16-bit)")
    _show(plot_kv_cache(m, _kv_seqs(max_seq), batch, mark=seq))


def kv_cache_widget(model: str = "Llama-2-70B", max_seq: int = 32768):
    """Sequence length, batch and model -> the KV cache's size, with and without GQA."""
    max_seq = integer("max_seq", max_seq, low=16, high=2**20)
    seqs = _kv_seqs(max_seq)
    return interactive(show_kv_cache,
                       seq=choice_slider("seq", seqs[len(seqs) // 2], seqs, "tokens"),
                       batch=int_slider("batch", 1, 1, 64, "batch"),
                       model=dropdown("model", model, DECODERS, "model"),
                       max_seq=fixed(max_seq))
