"""Widgets of the engine's chapter (2): each wires controls to a labkit function and a plot.

The training experiments' widgets (leak, precision, batch size, train/eval modes) live in
:mod:`labkit.training.widgets`.
"""
from __future__ import annotations

import numpy as np

from labkit.show import show as _show
from labkit.validate import integer


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
