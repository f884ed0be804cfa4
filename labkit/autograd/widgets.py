"""Widgets of the engine's chapter (2): each wires controls to a labkit function and a plot.

``show_*`` functions do the work (print the numbers, draw the figure); ``*_widget``
builders validate their arguments, then wire sliders to them (:mod:`labkit.controls`).
The training experiments' widgets (leak, precision, batch size, train/eval modes) live in
:mod:`labkit.training.widgets`.
"""
from __future__ import annotations

import numpy as np

from labkit.autograd.draw import draw_graph
from labkit.autograd.examples import layered_program
from labkit.autograd.forward import mode_cost_sweep
from labkit.autograd.passes import PASSES
from labkit.autograd.plots import plot_mode_cost
from labkit.autograd.trace import trace
from labkit.controls import dropdown, int_slider, interactive
from labkit.show import show as _show


def show_mode_cost(n_max: int, m: int) -> None:
    """Forward vs reverse mode on f: R^n -> R^m for six n from 1 to ``n_max``: passes and
    measured time; prints which mode is cheaper at n = ``n_max``."""
    ns = sorted(set(np.linspace(1, n_max, 6).astype(int)))
    sweep = mode_cost_sweep(ns, m, repeats=3)
    last = sweep[-1]
    print(f"n = {last.n}, m = {last.m}: forward mode {last.forward_passes} passes, "
          f"reverse mode {last.reverse_passes} passes -> {last.cheaper} mode is cheaper")
    _show(plot_mode_cost(sweep))


def mode_cost_widget(n_max: int = 32, m: int = 4):
    """n inputs, m outputs -> passes and measured time of forward vs reverse mode."""
    return interactive(show_mode_cost,
                       n_max=int_slider("n_max", n_max, 4, 64, "n max", step=4),
                       m=int_slider("m", m, 1, 32, "m outputs"))


def show_graph_pass(depth: int, graph_pass: str) -> None:
    """Trace a ``depth``-layer program, run ``graph_pass`` on it, draw the graph and print
    its size."""
    fn, x = layered_program(depth)
    g = PASSES[graph_pass](trace(fn, x))
    st = g.stats()
    print(f"{st.nodes} nodes, {st.kernels} kernels, {st.constants} constants, "
          f"{st.intermediate_bytes} bytes of intermediates")
    _show(draw_graph(g, title=f"depth {depth}, pass: {graph_pass}"))


def graph_pass_widget(depth: int = 2, graph_pass: str = "none"):
    """Depth of a traced program and a pass -> the drawn graph and its size."""
    return interactive(show_graph_pass, depth=int_slider("depth", depth, 1, 4, "depth"),
                       graph_pass=dropdown("graph_pass", graph_pass, PASSES, "pass"))
