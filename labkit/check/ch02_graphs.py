"""What chapter 02's graph checks (:mod:`labkit.check.ch02`: 2.1 topological order, 2.6
backward, 2.15 and 2.16 full Jacobians, 2.5 dead-code elimination) run: the graphs and
programs they build, their case generators, the ``derive`` functions that build a graph next
to the answer and return plain data (:func:`topo_positions`, :func:`backward_run`,
:func:`backward_twice`, :func:`backward_mlp`, :func:`backward_deep`, :func:`jacobian_of`,
:func:`dce_run`), labkit's reference backward (2.6), the local-VJP counter
:class:`_VjpBudget`, PyTorch's gradients to compare with, and the small helpers the
chapter's other check modules use too (``_seed``, ``_torch``, ``_grad_of``).
"""
from __future__ import annotations

import sys

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.counters import active as _active_counters
from labkit.autograd.forward import make_function
from labkit.autograd.nn import Linear, mlp
from labkit.autograd.ops import OPS
from labkit.autograd.tensor import (Tensor, accumulate_grad, graph_nodes, local_vjp,
                                    topological_order)
from labkit.autograd.trace import trace
from labkit.check.core import Wrong
from labkit.data import load_digits


def _seed(rng) -> int:
    return int(rng.integers(2 ** 31))


def _with_recursion_headroom(frames, fn, *args):
    """``fn(*args)`` with only ``frames`` Python frames of recursion allowed above the caller
    (1,000: Python's default limit), whatever limit the notebook set: a recursive walk of a
    deeper graph fails here as it would in a fresh interpreter."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        return fn(*args)
    finally:
        sys.setrecursionlimit(old)


DEFAULT_RECURSION_LIMIT = 1000


def chain(depth, factor=1.0001, x0=0.5):
    """(leaf, root) of ``root = leaf · factor^depth`` with shape (1,), its ``depth`` mul nodes
    made directly rather than by running the op: a check watches every Python call the
    answer's side makes, and building 10,000 nodes through ``apply`` would cost seconds."""
    leaf = Tensor(np.array([x0]), requires_grad=True)
    const = Tensor(np.array([factor]))
    mul, node, value = OPS["mul"], leaf, leaf.data
    for _ in range(depth):
        value = value * factor
        t = Tensor.__new__(Tensor)
        t.data, t.grad, t.requires_grad, t.name = value, None, True, None
        t._op, t._parents, t._attrs = mul, (node, const), {}
        node = t
    return leaf, node


def _torch():
    import torch  # deferred: torch

    return torch


# ---- 2.1 topological order --------------------------------------------------------------

def build_graph(spec):
    """The root of a graph described by plain data: ``("chain", depth, 0)`` (a chain of
    ``depth`` ops), ``("diamond", 0, 0)`` or ``("dag", seed, n_ops)`` (a random DAG whose
    ops reuse earlier values, leaves with and without requires_grad)."""
    kind, a, b = spec
    if kind == "chain":
        return chain(a)[1]
    if kind == "diamond":
        x = Tensor(np.array(2.0), requires_grad=True)
        w = Tensor(np.array(-1.5), requires_grad=True)
        s = x * w
        return s.exp() + s * x               # s used twice, x used twice
    r = np.random.default_rng(a)
    values = [Tensor(r.normal(size=3), requires_grad=bool(k != 1)) for k in range(3)]
    for _ in range(b):
        u, v = (values[int(i)] for i in r.integers(len(values), size=2))
        op = int(r.integers(3))
        values.append(u + v if op == 0 else u * v if op == 1 else u.tanh())
    picks = r.choice(len(values), size=3, replace=False)
    root = values[int(picks[0])]
    for i in picks[1:]:
        root = root + values[int(i)]
    return root.sum()


def graph_structure(spec) -> tuple[list[list[int]], int]:
    """Each node's parents (as indices into ``graph_nodes(root)``) and the root's index."""
    root = build_graph(spec)
    nodes = graph_nodes(root)
    pos = {id(t): k for k, t in enumerate(nodes)}
    return [[pos[id(p)] for p in t._parents] for t in nodes], pos[id(root)]


def topo_positions(topo_order, spec) -> dict:
    """``topo_order(root)`` on :func:`build_graph`'s graph, under the default recursion
    limit, as positions in ``graph_nodes(root)`` (-1: not a node of the graph)."""
    root = build_graph(spec)
    pos = {id(t): k for k, t in enumerate(graph_nodes(root))}
    try:
        got = _with_recursion_headroom(DEFAULT_RECURSION_LIMIT, topo_order, root)
    except RecursionError:
        return {"recursion": True}
    if not isinstance(got, list):
        return {"type": type(got).__name__}
    return {"type": "list", "order": [pos.get(id(t), -1) for t in got]}


def _topo_specs(rng):
    yield ("diamond", 0, 0), "diamond"
    for _ in range(2):
        yield ("dag", _seed(rng), int(rng.integers(10, 40))), "random DAG"
    yield ("chain", 10_000, 0), "10,000-deep chain"


# ---- 2.6 backward with your own topological order ------------------------------------------

def _reference_backward(loss):
    """Reference 2.6: reverse-mode accumulation over the topological order.

    Gradients of every node start at zero except the loss (1); walking the order backwards,
    a node's gradient is complete when it is reached (all its consumers came later in the
    order), so it is sent to its parents through the local vector-Jacobian product and
    *added* (+=) to theirs; a leaf that requires grad accumulates into ``.grad``."""
    grads = {id(loss): np.ones_like(loss.data)}
    for node in reversed(topological_order(loss)):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        if node.is_leaf:
            if node.requires_grad:
                accumulate_grad(node, g)
            continue
        for parent, pg in local_vjp(node, g):
            grads[id(parent)] = grads[id(parent)] + pg if id(parent) in grads else pg


DIAMONDS = 14            # a chain of diamonds: 2^14 paths from the loss to the input


def _diamond(x, w):
    a = x * w
    return (a.exp() + a * x).sum()


def _square(x):
    return (x * x).sum()


def _mlp(x, w1, w2):
    return ((x @ w1).tanh() @ w2).sum()


def _diamond_chain(x):
    for _ in range(DIAMONDS):
        x = x.tanh() + x * 0.5           # x feeds two branches that meet again
    return x.sum()


PROGRAMS = {"diamond": _diamond, "square": _square, "mlp": _mlp,
            "diamond chain": _diamond_chain}


class _Exhausted(Exception):
    """More local-VJP calls than the budget."""


class _VjpBudget:
    """A counter (:mod:`labkit.autograd.counters` protocol) of local-VJP calls that stops
    the backward once it exceeds ``limit``."""

    def __init__(self, limit):
        self.limit, self.calls = limit, 0

    def on_forward(self, *args):
        pass

    def on_backward(self, name, flops):
        self.calls += 1
        if self.limit is not None and self.calls > self.limit:
            raise _Exhausted


def _grad_of(t):
    return None if t.grad is None else np.array(getattr(t.grad, "data", t.grad),
                                                dtype=np.float64)


def backward_run(backward, program, arrays, budget=None) -> dict:
    """``backward(loss)`` on ``PROGRAMS[program](*leaves) * const.sum()`` (``const`` needs no
    gradient), under the default recursion limit, counting local-VJP calls (stopped past
    ``budget``): the leaves' gradients, whether ``const`` got one, the call count."""
    leaves = [Tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    const = Tensor(np.ones(1))
    loss = PROGRAMS[program](*leaves) * const.sum()
    counter = _VjpBudget(budget)
    stack = _active_counters()
    stack.append(counter)
    try:
        _with_recursion_headroom(DEFAULT_RECURSION_LIMIT, backward, loss)
    except _Exhausted:
        return {"exhausted": True, "calls": counter.calls}
    except RecursionError:
        return {"recursion": True, "calls": counter.calls}
    finally:
        stack.remove(counter)
    return {"grads": [_grad_of(t) for t in leaves], "const": const.grad is not None,
            "calls": counter.calls}


def backward_twice(backward, x) -> np.ndarray | None:
    """The leaf's ``.grad`` after ``backward`` of ``sum(3 x)`` and then of ``sum(x * x)``."""
    leaf = Tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    backward((leaf * 3.0).sum())
    backward((leaf * leaf).sum())
    return _grad_of(leaf)


def backward_mlp(backward, x, y, params) -> list:
    """``backward`` of cross_entropy(relu(x W₁ + b₁) W₂ + b₂, y) (float64): the gradients of
    ``params`` = [W₁, b₁, W₂, b₂]."""
    w1, b1, w2, b2 = (Tensor(np.asarray(p, dtype=np.float64), requires_grad=True)
                      for p in params)
    backward(F.cross_entropy(((Tensor(x) @ w1 + b1).relu()) @ w2 + b2, np.asarray(y)))
    return [_grad_of(t) for t in (w1, b1, w2, b2)]


def _digits_case(seed):
    data = load_digits(seed=seed, dtype=np.float64)
    model = mlp((64, 32, 10), seed=seed, dtype=np.float64)
    params = [np.array(p.data) for layer in model.layers if isinstance(layer, Linear)
              for p in (layer.weight, layer.bias)]
    return data.x_train[:16], data.y_train[:16], params


def _torch_mlp_grads(x, y, params):
    torch = _torch()
    ts = [torch.tensor(p, requires_grad=True) for p in params]
    w1, b1, w2, b2 = ts
    logits = torch.relu(torch.tensor(x) @ w1 + b1) @ w2 + b2
    torch.nn.functional.cross_entropy(logits, torch.tensor(y)).backward()
    return [t.grad.numpy() for t in ts]


def _torch_grads(program, arrays):
    torch = _torch()
    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    PROGRAMS[program](*ts).backward()
    return [t.grad.numpy() for t in ts]


def _backward_cases(rng):
    yield "diamond (a node used twice)", "diamond", [rng.normal(size=3), rng.normal(size=3)]
    yield "x * x (one parent reached twice)", "square", [rng.normal(size=4)]
    n, k, m = (int(v) for v in rng.integers(2, 6, size=3))
    yield "two-layer network", "mlp", [rng.normal(size=(n, k)), rng.normal(size=(k, m)),
                                       rng.normal(size=(m, 2))]


def _compare_grads(name, got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g is None:
            raise Wrong(f"on the {name} graph input {i} got no gradient: walk the order in "
                        f"reverse (loss first) and set the leaves' .grad.")
        if g.shape != w.shape:
            raise Wrong(f"on the {name} graph the gradient of input {i} has shape {g.shape}, "
                        f"expected {w.shape}.")
        if not np.allclose(g, w, rtol=1e-6, atol=1e-9):
            half = np.allclose(g * 2, w, rtol=1e-6) or np.allclose(g, w / 2, rtol=1e-6)
            raise Wrong(f"on the {name} graph the gradient of input {i} differs from "
                        f"torch's (max error {np.abs(g - w).max():.3g})"
                        + (": a node that feeds two others must ADD both contributions "
                           "(+=), not keep the last one." if half or "twice" in name
                           else ": a node must be processed only after every node that "
                                "uses it, i.e. in reverse topological order."))


DEEP_HEADROOM = 100      # frames of recursion 2.6 allows: far fewer than its chain is deep


def backward_deep(backward, depth, x0) -> dict:
    """``backward`` through :func:`chain` (``x0 · 1.0001^depth``) with :data:`DEEP_HEADROOM`
    frames of recursion allowed: the leaf's gradient, or whether the limit was hit."""
    leaf, root = chain(depth, 1.0001, x0)
    try:
        _with_recursion_headroom(DEEP_HEADROOM, backward, root)
    except RecursionError:
        return {"recursion": True}
    return {"grad": _grad_of(leaf)}


# ---- 2.15, 2.16 full Jacobians: n forward passes or m reverse passes ----------------------

class _Counted:
    """``f`` that counts its calls: one call is one pass through the function."""

    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, x):
        self.calls += 1
        return self.f(x)


def jacobian_of(jac, n, m, seed) -> dict:
    """``jac(f, x)`` for f(x) = W₂ tanh(W₁ x): R^n → R^m (:func:`make_function`, hidden 8):
    the Jacobian, how often ``f`` ran, and how many local-VJP calls were made."""
    f = _Counted(make_function(n, m, hidden=8, seed=seed))
    x = np.random.default_rng(seed + 1).normal(size=n)
    counter = _VjpBudget(None)
    stack = _active_counters()
    stack.append(counter)
    try:
        got = jac(f, x)
    finally:
        stack.remove(counter)
    return {"jacobian": np.asarray(getattr(got, "data", got), dtype=np.float64),
            "passes": f.calls, "vjps": counter.calls}


def _closed_form_jacobian(n, m, seed):
    f = make_function(n, m, hidden=8, seed=seed)
    x = np.random.default_rng(seed + 1).normal(size=n)
    h = np.tanh(f.w1 @ x)
    return f.w2 @ ((1 - h * h)[:, None] * f.w1)


# ---- 2.5 a graph pass ----------------------------------------------------------------------

def _dce_program(k, seed):
    """(fn, x): program ``k`` (0: a dead exp; 1: a dead chain and two outputs; 2: nothing
    dead) with weights and input drawn from ``seed``."""
    r = np.random.default_rng(seed)
    w = Tensor(r.normal(size=(4, 3)))
    x = r.normal(size=(5, 4))

    def f0(x):
        _ = (x * 2.0).exp()
        return (x @ w).tanh()

    def f1(x):
        dead = x.sum()
        _ = dead * dead + 1.0
        keep = (x * 3.0).relu()
        return keep.mean(axis=0), keep.max()

    def f2(x):
        return x * 2.0

    return (f0, f1, f2)[k], x


def dce_run(pass_fn, k, seed) -> dict:
    """``pass_fn`` on the traced program ``k``: the node names it keeps, whether it changed
    the graph it was given, and the optimized graph's outputs on a new input."""
    fn, x = _dce_program(k, seed)
    g = trace(fn, x)
    before = [n.name for n in g.nodes]
    try:
        got = pass_fn(g)
    except ValueError as exc:
        if "before they are defined" not in str(exc):
            raise
        return {"invalid": str(exc)}
    run = got.run(x + 1)
    return {"names": [n.name for n in got.nodes], "inputs": list(g.inputs),
            "changed": [n.name for n in g.nodes] != before,
            "run": list(run) if isinstance(run, tuple) else [run]}
