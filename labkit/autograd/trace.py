"""Static graphs: run a Python function once, record every op, replay the record later.

``trace(fn, *example_inputs)`` runs ``fn`` on labkit Tensors and keeps the ops it executed as
a :class:`Graph` (define-then-run, as TensorFlow 1.x graphs or ``torch.fx``/``torch.jit.trace``
graphs). The graph can be printed, drawn, optimized by passes (:mod:`labkit.autograd.passes`)
and run again on new inputs. As with every tracer, Python control flow is frozen at the
branch the example inputs took.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from labkit.autograd.ops import OPS
from labkit.autograd.tensor import Tensor, _as_array, _tracing, no_grad, topological_order


@dataclass(frozen=True, eq=False)
class Node:
    """One value of the graph. ``op`` is "input", "const", an op name from ops.OPS or "fused"."""
    name: str
    op: str
    inputs: tuple[str, ...] = ()
    attrs: dict = field(default_factory=dict)
    value: np.ndarray | None = None       # for "const"
    body: tuple["Node", ...] = ()         # for "fused": the nodes it runs, in order
    shape: tuple[int, ...] = ()
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def label(self) -> str:
        if self.op == "fused":
            return "fused[" + ",".join(n.op for n in self.body) + "]"
        return self.op


@dataclass(frozen=True, eq=False)
class Graph:
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __post_init__(self):
        defined: set[str] = set()
        for n in self.nodes:
            missing = [i for i in n.inputs if i not in defined]
            if missing:
                raise ValueError(f"node {n.name} uses {missing} before they are defined")
            if n.name in defined:
                raise ValueError(f"node name {n.name} is defined twice")
            defined.add(n.name)
        for o in self.outputs:
            if o not in defined:
                raise ValueError(f"output {o} is not a node of the graph")

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def consumers(self) -> dict[str, list[str]]:
        users: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                users[i].append(n.name)
        return users

    def with_nodes(self, nodes) -> "Graph":
        return replace(self, nodes=tuple(nodes))

    def run(self, *arrays):
        """Evaluate the graph on new input arrays; one array, or a tuple for several outputs."""
        if len(arrays) != len(self.inputs):
            raise ValueError(f"graph takes {len(self.inputs)} inputs "
                             f"({', '.join(self.inputs)}), got {len(arrays)}")
        env: dict[str, np.ndarray] = {}
        for name, a in zip(self.inputs, arrays):
            env[name] = np.asarray(getattr(a, "data", a))
        for n in self.nodes:
            if n.op != "input":
                env[n.name] = evaluate(n, env)
        outs = tuple(env[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def stats(self) -> "GraphStats":
        ops = [n for n in self.nodes if n.op not in ("input", "const")]
        outs = set(self.outputs)
        return GraphStats(nodes=len(self.nodes), kernels=len(ops),
                          constants=sum(n.op == "const" for n in self.nodes),
                          intermediate_bytes=sum(n.nbytes for n in ops if n.name not in outs))

    def __str__(self) -> str:
        lines = [f"graph({', '.join(self.inputs)}):"]
        for n in self.nodes:
            ty = f"{n.dtype}{list(n.shape)}"
            if n.op == "input":
                lines.append(f"  %{n.name} : {ty} = input")
            elif n.op == "const":
                lines.append(f"  %{n.name} : {ty} = const")
            else:
                args = ", ".join(f"%{i}" for i in n.inputs)
                extra = "".join(f", {k}={_short(v)}" for k, v in n.attrs.items())
                lines.append(f"  %{n.name} : {ty} = {n.label()}({args}{extra})")
        lines.append("  return " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)


@dataclass(frozen=True)
class GraphStats:
    nodes: int
    kernels: int                 # op nodes: one kernel launch each on a GPU
    constants: int
    intermediate_bytes: int      # bytes written by op nodes that are not outputs


def _short(v):
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple) and any(isinstance(x, np.ndarray) for x in v):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    return repr(v)


def evaluate(node: Node, env: dict) -> np.ndarray:
    """The value of one node given the values of its inputs in ``env``."""
    if node.op == "const":
        return node.value
    if node.op == "fused":
        local = dict(env)
        for sub in node.body:
            local[sub.name] = evaluate(sub, local)
        return local[node.body[-1].name]
    return OPS[node.op].forward(*(env[i] for i in node.inputs), **node.attrs)


def trace(fn, *example_inputs, names: tuple[str, ...] | None = None) -> Graph:
    """Record the ops ``fn`` runs on ``example_inputs`` as a static :class:`Graph`.

    Tensors ``fn`` uses that are not derived from the inputs (weights, literals) become
    ``const`` nodes. ``fn`` returns a Tensor or a tuple of Tensors.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__} {fn!r}")
    if not example_inputs:
        raise ValueError("trace needs at least one example input")
    names = tuple(names) if names else tuple(f"x{i}" if len(example_inputs) > 1 else "x"
                                             for i in range(len(example_inputs)))
    if len(names) != len(example_inputs):
        raise ValueError(f"names has {len(names)} entries for {len(example_inputs)} inputs")
    ins = [Tensor(_as_array(a, name=f"example_inputs[{i}]")) for i, a in enumerate(example_inputs)]
    tape: list = []
    with no_grad(), _tracing(tape):
        result = fn(*ins)
    outs = result if isinstance(result, tuple) else (result,)
    if not all(isinstance(o, Tensor) for o in outs):
        raise ValueError("fn must return a labkit Tensor or a tuple of Tensors")

    name_of: dict[int, str] = {}
    nodes: list[Node] = []
    for t, nm in zip(ins, names):
        name_of[id(t)] = nm
        nodes.append(Node(nm, "input", shape=t.shape, dtype=str(t.dtype)))
    consts = 0

    def ref(t: Tensor) -> str:
        nonlocal consts
        if id(t) not in name_of:
            nm = f"c{consts}"
            consts += 1
            name_of[id(t)] = nm
            nodes.append(Node(nm, "const", value=t.data, shape=t.shape, dtype=str(t.dtype)))
        return name_of[id(t)]

    for k, (op, parents, attrs, out) in enumerate(tape):
        args = tuple(ref(p) for p in parents)
        nm = f"t{k}"
        name_of[id(out)] = nm
        nodes.append(Node(nm, op.name, args, dict(attrs), shape=out.shape, dtype=str(out.dtype)))
    return Graph(tuple(nodes), names, tuple(ref(o) for o in outs))


def graph_of(t: Tensor) -> Graph:
    """The recorded autograd graph behind ``t`` as a :class:`Graph` (leaves become inputs
    when they require grad, constants otherwise) -- for printing and drawing."""
    order = topological_order(t)
    name_of: dict[int, str] = {}
    nodes, inputs = [], []
    for k, n in enumerate(order):
        if n.is_leaf:
            nm = n.name or (f"p{k}" if n.requires_grad else f"c{k}")
            kind = "input" if n.requires_grad else "const"
            if kind == "input":
                inputs.append(nm)
            nodes.append(Node(nm, kind, value=None if kind == "input" else n.data,
                              shape=n.shape, dtype=str(n.dtype)))
        else:
            nm = n.name or f"t{k}"
            nodes.append(Node(nm, n._op.name, tuple(name_of[id(p)] for p in n._parents),
                              dict(n._attrs), shape=n.shape, dtype=str(n.dtype)))
        name_of[id(n)] = nm
    return Graph(tuple(nodes), tuple(inputs), (name_of[id(t)],))
