"""Graph passes over a traced :class:`~labkit.autograd.trace.Graph`: each takes a graph and
returns a new one that computes the same outputs.

* constant folding 常量折叠: an op whose inputs are all constants is computed once, now;
* dead-code elimination 死代码消除: nodes no output depends on are dropped;
* elementwise fusion 算子融合: a chain of elementwise ops whose intermediates have one user
  becomes one ``fused`` node -- one kernel instead of several, and the intermediates never
  travel to memory (the idea behind XLA and TorchInductor fusion; Chen et al., "TVM", OSDI
  2018, sec. 3).
"""
from __future__ import annotations

from dataclasses import replace

from labkit.autograd.ops import OPS
from labkit.autograd.trace import Graph, Node, evaluate


def fold_constants(graph: Graph) -> Graph:
    """Replace every op whose inputs are all constants by a ``const`` node holding its value."""
    kinds: dict[str, Node] = {}
    env: dict = {}
    nodes = []
    for n in graph.nodes:
        if n.op not in ("input", "const") and all(kinds[i].op == "const" for i in n.inputs):
            value = evaluate(n, env)
            n = Node(n.name, "const", value=value, shape=value.shape, dtype=str(value.dtype))
        if n.op == "const":
            env[n.name] = n.value
        kinds[n.name] = n
        nodes.append(n)
    return graph.with_nodes(nodes)


def eliminate_dead_code(graph: Graph) -> Graph:
    """Keep inputs and the nodes some output depends on, in their original order."""
    live = set(graph.outputs)
    for n in reversed(graph.nodes):
        if n.name in live:
            live.update(n.inputs)
    return graph.with_nodes(n for n in graph.nodes if n.name in live or n.op == "input")


def fuse_elementwise(graph: Graph) -> Graph:
    """Merge chains of elementwise ops into ``fused`` nodes (intermediates with one user only)."""
    users = graph.consumers()
    outs = set(graph.outputs)
    by_name = {n.name: n for n in graph.nodes}
    group_of: dict[str, list[str]] = {}          # node name -> its group (shared list)
    for n in graph.nodes:
        if not _elementwise(n):
            continue
        group = [n.name]
        for i in dict.fromkeys(n.inputs):
            src = by_name[i]
            if (_elementwise(src) and i in group_of and users[i] == [n.name]
                    and i not in outs):
                other = group_of[i]
                if other is not group:
                    group = [m for m in other if m not in group] + group
        for m in group:
            group_of[m] = group
    done: set[int] = set()
    nodes = []
    for n in graph.nodes:
        group = group_of.get(n.name)
        if group is None or len(group) == 1:
            nodes.append(n)
            continue
        if n.name != group[-1] or id(group) in done:
            continue
        done.add(id(group))
        members = [by_name[m] for m in sorted(group, key=_order(graph))]
        inside = set(group)
        ext = tuple(dict.fromkeys(i for m in members for i in m.inputs if i not in inside))
        root = members[-1]
        nodes.append(Node(root.name, "fused", ext, body=tuple(members), shape=root.shape,
                          dtype=root.dtype))
    return graph.with_nodes(nodes)


def _elementwise(n: Node) -> bool:
    return n.op in OPS and OPS[n.op].elementwise


def _order(graph: Graph):
    pos = {n.name: k for k, n in enumerate(graph.nodes)}
    return pos.__getitem__


def optimize(graph: Graph, *, dead_code=eliminate_dead_code) -> Graph:
    """Constant folding, then dead-code elimination (``dead_code``: labkit's
    :func:`eliminate_dead_code`, or your own pass), then elementwise fusion."""
    if not callable(dead_code):
        raise TypeError(f"dead_code must be a graph pass (a function), got "
                        f"{type(dead_code).__name__}")
    return fuse_elementwise(dead_code(fold_constants(graph)))


PASSES = {"none": lambda g: g, "fold constants": fold_constants,
          "dead code": eliminate_dead_code, "fuse elementwise": fuse_elementwise,
          "all three": optimize}


def apply_passes(graph: Graph, names) -> Graph:
    for name in names:
        if name not in PASSES:
            raise ValueError(f"unknown pass {name!r}; choose from {sorted(PASSES)}")
        graph = PASSES[name](graph)
    return graph


__all__ = ["fold_constants", "eliminate_dead_code", "fuse_elementwise", "optimize",
           "apply_passes", "PASSES", "replace"]
