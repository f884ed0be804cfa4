"""Widgets of the training experiments (chapters 2 and 3): controls -> a function -> a plot."""
from __future__ import annotations

from labkit.show import show as _show


def leak_widget():
    """Steps and whether backward() runs -> bytes a list of losses keeps alive."""
    import ipywidgets as w

    from labkit.training.leak import STRATEGIES, labkit_leak, torch_leak
    from labkit.training.plots import plot_leak

    def show(steps=6, backward=True):
        results = [labkit_leak(steps, s, backward=backward) for s in STRATEGIES]
        results += [torch_leak(steps, s, backward=backward) for s in STRATEGIES]
        for r in results:
            print(f"{r.engine:>6} keep={r.strategy:<6}: {r.per_step / 1024:8.1f} KiB per step")
        _show(plot_leak(results))

    return w.interactive(show, steps=w.IntSlider(6, 2, 12, 1, description="steps"),
                         backward=w.Checkbox(True, description="call backward()"))


def precision_widget():
    """Width and input scale -> output error of float32/bfloat16/float16 vs float64."""
    import ipywidgets as w

    from labkit.training.inference import precision_effect
    from labkit.training.plots import plot_precision

    def show(width=128, scale=1.0):
        r = precision_effect(width=width, scale=scale)
        for name in r.errors:
            print(f"{name:>8}: max error {r.errors[name].max():.3g}, argmax agrees on "
                  f"{100 * r.argmax_agreement[name]:.0f}% of rows, {r.overflow[name]} overflows")
        _show(plot_precision(r))

    return w.interactive(show, width=w.IntSlider(128, 16, 512, 16, description="width"),
                         scale=w.SelectionSlider(options=[0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4,
                                                          1e5], value=1.0,
                                                 description="input scale"))


def batch_sweep_widget():
    """Model width and largest batch -> latency and throughput of inference on this machine."""
    import ipywidgets as w

    from labkit.training.inference import batch_sweep
    from labkit.training.plots import plot_batch_sweep

    def show(width=256, max_batch_log2=8):
        sweep = batch_sweep(tuple(2 ** k for k in range(0, max_batch_log2 + 1, 2)), width=width)
        best = max(sweep.points, key=lambda p: p.throughput)
        print(f"highest throughput at batch {best.batch} "
              f"(the timings vary run to run; medians of 7 repeats)")
        _show(plot_batch_sweep(sweep))

    return w.interactive(show, width=w.IntSlider(256, 32, 1024, 32, description="width"),
                         max_batch_log2=w.IntSlider(8, 2, 10, 2, description="log2 max batch"))


def forgot_eval_widget():
    """Dropout probability -> accuracy vs test batch size in train() vs eval() mode."""
    import ipywidgets as w

    from labkit.training.modes import forgot_eval_experiment
    from labkit.training.plots import plot_mode_accuracy

    def show(p=0.5):
        r = forgot_eval_experiment(p)
        print(f"eval(): {r.acc_eval_mode[0]:.3f} at every batch size; train mode: "
              + ", ".join(f"{b}: {a:.3f}" for b, a in zip(r.batch_sizes, r.acc_train_mode)))
        _show(plot_mode_accuracy(r))

    return w.interactive(show, p=w.SelectionSlider(options=[0.0, 0.2, 0.5], value=0.5,
                                                   description="dropout p"))


def kv_cache_widget(model: str = "Llama-2-70B", max_seq: int = 32768):
    """Sequence length, batch and model -> the KV cache's size, with and without GQA."""
    import ipywidgets as w

    from labkit.training.inference import DECODERS, kv_cache_bytes
    from labkit.training.plots import plot_kv_cache
    from labkit.validate import integer, one_of

    one_of("model", model, tuple(DECODERS))
    max_seq = integer("max_seq", max_seq, low=16, high=2**20)
    seqs = [2 ** k for k in range(4, max_seq.bit_length()) if 2 ** k <= max_seq]

    def show(seq=seqs[len(seqs) // 2], batch=1, model=model):
        m = DECODERS[model]
        total = kv_cache_bytes(m, seq, batch)
        print(f"{m.name}: {total / seq / batch / 1024:.0f} KiB per token, "
              f"{total / 2**30:.2f} GiB for {seq} tokens x batch {batch} (16-bit)")
        _show(plot_kv_cache(m, seqs, batch, mark=seq))

    return w.interactive(show, seq=w.SelectionSlider(options=seqs, value=seqs[len(seqs) // 2],
                                                     description="tokens"),
                         batch=w.IntSlider(1, 1, 64, 1, description="batch"),
                         model=w.Dropdown(options=list(DECODERS), value=model,
                                          description="model"))
