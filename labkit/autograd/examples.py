"""Small programs the chapters trace, draw and optimize."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.passes import eliminate_dead_code, optimize
from labkit.autograd.tensor import Tensor
from labkit.autograd.trace import Graph, trace
from labkit.validate import integer, number


def layered_program(depth: int = 2, width: int = 4, seed: int = 0):
    """(fn, example_x): ``depth`` layers of tanh(x W * (2 s) + b) with a dead branch each.

    ``2 s`` is a constant subexpression (foldable), the dead branch is removable and the
    elementwise tail of each layer is fusible -- one of each pass's targets per layer.
    """
    if not isinstance(depth, (int, np.integer)) or not 1 <= depth <= 8:
        raise ValueError(f"depth must be an integer in [1, 8], got {depth!r}")
    if not isinstance(width, (int, np.integer)) or not 1 <= width <= 64:
        raise ValueError(f"width must be an integer in [1, 64], got {width!r}")
    rng = np.random.default_rng(integer("seed", seed, low=0))
    ws = [Tensor(rng.normal(size=(width, width)) / np.sqrt(width)) for _ in range(depth)]
    ss = [Tensor(rng.uniform(0.5, 1.0, width)) for _ in range(depth)]
    bs = [Tensor(rng.normal(size=width) * 0.1) for _ in range(depth)]

    def fn(x):
        for w, s, b in zip(ws, ss, bs):
            _debug = (x * x).sum()           # computed, never used: dead code
            x = (x @ w * (s * 2.0) + b).tanh()
        return F.softmax(x, -1)

    return fn, rng.normal(size=(3, width))


@dataclass(frozen=True)
class PassRun:
    traced: Graph             # the graph ``trace`` recorded from the program
    optimized: Graph          # after constant folding, dead-code elimination and fusion
    same_on_new_input: bool   # the optimized graph equals the eager program on a new input


def optimize_program(depth: int = 1, *, dead_code=None, seed: int = 1) -> PassRun:
    """Trace :func:`layered_program` of ``depth`` layers, run fold → ``dead_code`` → fuse (the
    order of :func:`~labkit.autograd.passes.optimize`; ``dead_code`` defaults to labkit's
    :func:`~labkit.autograd.passes.eliminate_dead_code`, or pass your own), and compare the
    optimized graph with the eager program on a new seeded input."""
    fn, x = layered_program(depth=depth)
    graph = trace(fn, x)
    best = optimize(graph, dead_code=eliminate_dead_code if dead_code is None else dead_code)
    x_new = np.random.default_rng(integer("seed", seed, low=0)).normal(size=x.shape)
    return PassRun(graph, best, bool(np.allclose(best.run(x_new), fn(Tensor(x_new)).data)))


def deep_chain(depth: int = 10_000, factor: float = 1.0001):
    """(leaf, root): ``root = leaf · factor^depth`` built by ``depth`` multiplications from a
    float32 leaf 0.5, a graph far deeper than Python's recursion limit;
    ``d root / d leaf = factor^depth`` (within about ``2 · depth`` float32 roundings: one per
    product, plus the factor's own rounding to float32, which the power multiplies by
    ``depth``)."""
    depth = integer("depth", depth, low=1, high=1_000_000)
    factor = number("factor", factor)
    leaf = Tensor(0.5, requires_grad=True)
    root = leaf
    for _ in range(depth):
        root = root * factor
    return leaf, root
