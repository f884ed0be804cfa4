"""Draw a computation graph with matplotlib alone (no Graphviz binary needed).

Layout: each node sits in the column of its longest path from a source (a layered drawing
in the manner of Sugiyama et al., IEEE SMC 1981, without crossing minimisation).
"""
from __future__ import annotations

from labkit.autograd.tensor import Tensor
from labkit.autograd.trace import Graph, graph_of

COLORS = {"input": "#9ecae1", "const": "#d9d9d9", "fused": "#a1d99b"}
OP_COLOR = "#fdae6b"


def layout(graph: Graph) -> dict[str, tuple[float, float]]:
    """(column, row) of every node: column = longest path from a source."""
    depth: dict[str, int] = {}
    for n in graph.nodes:
        depth[n.name] = 1 + max((depth[i] for i in n.inputs), default=-1)
    rows: dict[int, int] = {}
    pos = {}
    for n in graph.nodes:
        d = depth[n.name]
        pos[n.name] = (float(d), float(rows.get(d, 0)))
        rows[d] = rows.get(d, 0) + 1
    tallest = max(rows.values(), default=1)
    return {k: (x, y - (rows[int(x)] - 1) / 2 + (tallest - 1) / 2) for k, (x, y) in pos.items()}


def draw_graph(obj, ax=None, title: str | None = None):
    """Draw a :class:`Graph` or the autograd graph behind a Tensor; returns the Figure."""
    import matplotlib.pyplot as plt  # deferred: matplotlib

    graph = graph_of(obj) if isinstance(obj, Tensor) else obj
    if not isinstance(graph, Graph):
        raise ValueError(f"draw_graph takes a Graph or a Tensor, got {type(obj).__name__}")
    pos = layout(graph)
    cols = 1 + max((int(x) for x, _ in pos.values()), default=0)
    rows = 1 + max((y for _, y in pos.values()), default=0)
    if ax is None:
        fig, ax = plt.subplots(figsize=(min(2.0 + 1.7 * cols, 16), min(1.0 + 0.8 * rows, 9)))
    else:
        fig = ax.figure
    outs = set(graph.outputs)
    for n in graph.nodes:
        x1, y1 = pos[n.name]
        for i in n.inputs:
            x0, y0 = pos[i]
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                        arrowprops=dict(arrowstyle="->", color="#555555", lw=1,
                                        shrinkA=14, shrinkB=14))
    for n in graph.nodes:
        x, y = pos[n.name]
        color = COLORS.get(n.op, OP_COLOR)
        text = n.name if n.op in ("input", "const") else f"{n.label()}\n{n.name}"
        ax.text(x, y, text, ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round,pad=0.3", fc=color,
                          ec="black", lw=2.0 if n.name in outs else 0.6))
    ax.set_xlim(-0.7, cols - 0.3)
    ax.set_ylim(rows - 0.4, -0.6)
    ax.axis("off")
    st = graph.stats()
    ax.set_title(title or f"{st.nodes} nodes, {st.kernels} kernels", fontsize=10)
    return fig
