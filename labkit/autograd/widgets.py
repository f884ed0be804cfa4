"""Widgets for chapters 2 and 3: each wires controls to a labkit function and a labkit plot."""
from __future__ import annotations

import numpy as np


def _show(fig) -> None:
    import matplotlib.pyplot as plt
    from IPython.display import display
    display(fig)
    plt.close(fig)


def mode_cost_widget():
    """n inputs, m outputs -> passes and measured time of forward vs reverse mode."""
    import ipywidgets as w

    from labkit.autograd.forward import mode_cost_sweep
    from labkit.autograd.plots import plot_mode_cost

    def show(n_max=32, m=4):
        ns = sorted(set(np.linspace(1, n_max, 6).astype(int)))
        sweep = mode_cost_sweep(ns, m, repeats=3)
        last = sweep[-1]
        print(f"n = {last.n}, m = {last.m}: forward mode {last.forward_passes} passes, "
              f"reverse mode {last.reverse_passes} passes -> {last.cheaper} mode is cheaper")
        _show(plot_mode_cost(sweep))

    return w.interactive(show, n_max=w.IntSlider(32, 4, 64, 4, description="n max"),
                         m=w.IntSlider(4, 1, 32, 1, description="m outputs"))


def graph_pass_widget():
    """Depth of a traced program and a pass -> the drawn graph and its size."""
    import ipywidgets as w

    from labkit.autograd.draw import draw_graph
    from labkit.autograd.examples import layered_program
    from labkit.autograd.passes import PASSES
    from labkit.autograd.trace import trace

    def show(depth=2, graph_pass="none"):
        fn, x = layered_program(depth)
        g = PASSES[graph_pass](trace(fn, x))
        st = g.stats()
        print(f"{st.nodes} nodes, {st.kernels} kernels, {st.constants} constants, "
              f"{st.intermediate_bytes} bytes of intermediates")
        _show(draw_graph(g, title=f"depth {depth}, pass: {graph_pass}"))

    return w.interactive(show, depth=w.IntSlider(2, 1, 4, 1, description="depth"),
                         graph_pass=w.Dropdown(options=list(PASSES), value="none",
                                               description="pass"))


def leak_widget():
    """Steps and whether backward() runs -> bytes a list of losses keeps alive."""
    import ipywidgets as w

    from labkit.autograd.leak import STRATEGIES, labkit_leak, torch_leak
    from labkit.autograd.plots import plot_leak

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

    from labkit.autograd.inference import precision_effect
    from labkit.autograd.plots import plot_precision

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

    from labkit.autograd.inference import batch_sweep
    from labkit.autograd.plots import plot_batch_sweep

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

    from labkit.autograd.modes import forgot_eval_experiment
    from labkit.autograd.plots import plot_mode_accuracy

    def show(p=0.5):
        r = forgot_eval_experiment(p)
        print(f"eval(): {r.acc_eval_mode[0]:.3f} at every batch size; train mode: "
              + ", ".join(f"{b}: {a:.3f}" for b, a in zip(r.batch_sizes, r.acc_train_mode)))
        _show(plot_mode_accuracy(r))

    return w.interactive(show, p=w.SelectionSlider(options=[0.0, 0.2, 0.5], value=0.5,
                                                   description="dropout p"))
