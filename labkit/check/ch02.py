"""Checks for chapter 02: computation graphs and automatic differentiation."""
from __future__ import annotations

import contextlib
import sys
import types

import numpy as np

from labkit.autograd import Tensor
from labkit.autograd import passes as _passes
from labkit.autograd.ops import OPS, softmax_forward, softmax_vjp_rule, unbroadcast
from labkit.autograd.passes import eliminate_dead_code as _dce
from labkit.autograd.tensor import accumulate_grad, local_vjp, topological_order

_tensor = sys.modules["labkit.autograd.tensor"]    # the module (the package exports a function
#                                                    named ``tensor`` too)
from labkit.autograd.trace import trace
from labkit.check.core import Wrong, exercise, expect_close


# ---- 2.1 topological order --------------------------------------------------------------

def _graphs():
    x = Tensor(np.array(2.0), requires_grad=True)
    w = Tensor(np.array(-1.5), requires_grad=True)
    a = x * w
    b = a.exp() + a * x          # diamond: a used twice, x used twice
    yield "diamond", b
    c = Tensor(np.ones(3), requires_grad=True)
    h = c
    for k in range(5000):        # deep chain: recursion would overflow
        h = h * 1.0 if k % 2 else h + 0.0
    yield "5000-deep chain", h.sum()
    p = Tensor(np.ones(2), requires_grad=True)
    q = (p * 2).tanh()
    yield "shared subexpression", (q * q + q).sum()


@exercise("2.1", "reverse topological order without recursion", reference=topological_order,
          binds="topo_order")
def _(topo_order):
    for name, root in _graphs():
        got = topo_order(root)
        want = topological_order(root)
        if not isinstance(got, list):
            raise Wrong(f"topo_order must return a list, got {type(got).__name__}.")
        ids = [id(t) for t in got]
        if len(set(ids)) != len(ids):
            raise Wrong(f"on the {name} graph a tensor appears twice: mark nodes as visited.")
        if set(ids) != {id(t) for t in want}:
            raise Wrong(f"on the {name} graph you return {len(ids)} tensors, expected "
                        f"{len(want)} (every tensor reachable through ._parents, leaves too).")
        pos = {i: k for k, i in enumerate(ids)}
        for t in got:
            for p in t._parents:
                if pos[id(p)] > pos[id(t)]:
                    raise Wrong(f"on the {name} graph a parent comes after its child: emit a "
                                f"node only after all its parents (post-order).")
        if got[-1] is not root:
            raise Wrong("the root (the output) must come last.")


# ---- 2.2 matmul backward with broadcasting ------------------------------------------------

def _matmul_ref(g, a, b):
    ga, gb = OPS["matmul"].vjp(g, a @ b, (a, b), (True, True))
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


MATMUL_CASES = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4, 1, 3, 2), (5, 2, 6)),
                ((1, 7), (7, 1)), ((3, 2, 5), (3, 5, 2))]


@exercise("2.2", "matmul backward with broadcast batch dimensions", reference=_matmul_ref,
          binds="matmul_backward")
def _(matmul_backward):
    rng = np.random.default_rng(22)
    for sa, sb in MATMUL_CASES:
        a, b = rng.normal(size=sa), rng.normal(size=sb)
        g = rng.normal(size=(a @ b).shape)
        got = matmul_backward(g, a, b)
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("return a tuple (grad_a, grad_b).")
        ga, gb = _matmul_ref(g, a, b)
        hint_b = ("b was broadcast over the batch dimensions of a: sum grad_b over them"
                  if len(sa) > len(sb) or (len(sa) == len(sb) and sa[:-2] != sb[:-2]) else
                  "grad_b = a^T @ g (transpose the last two axes of a)")
        expect_close(got[0], ga, f"grad_a for a{sa} @ b{sb}",
                     hint="grad_a = g @ b^T, then sum over axes that broadcasting added")
        expect_close(got[1], gb, f"grad_b for a{sa} @ b{sb}", hint=hint_b)


# ---- 2.3 softmax backward -----------------------------------------------------------------

@exercise("2.3", "softmax backward (vector-Jacobian product)", reference=softmax_vjp_rule,
          binds="softmax_backward")
def _(softmax_backward):
    rng = np.random.default_rng(23)
    for shape in [(5,), (3, 7), (2, 4, 6), (1, 1)]:
        s = softmax_forward(rng.normal(size=shape) * 3)
        g = rng.normal(size=shape)
        got = softmax_backward(g, s)
        want = softmax_vjp_rule(g, s)
        full = None
        if shape == (5,):
            full = (np.diag(s) - np.outer(s, s)) @ g
        expect_close(got, want, f"softmax_backward on shape {shape}",
                     hint="J = diag(s) - s s^T, so J^T g = s * (g - sum(g * s)) with the sum "
                          "along the last axis, keepdims=True")
        if full is not None:
            expect_close(got, full, "softmax_backward vs the full Jacobian")


# ---- 2.4 a forward-mode rule ---------------------------------------------------------------

def _div_jvp(ta, tb, a, b):
    return ta / b - a * tb / (b * b)


@exercise("2.4", "forward-mode (JVP) rule of division", reference=_div_jvp, binds="div_jvp")
def _(div_jvp):
    rng = np.random.default_rng(24)
    for shape in [(), (4,), (2, 3)]:
        a, b = rng.normal(size=shape), rng.normal(size=shape) + 3
        ta, tb = rng.normal(size=shape), rng.normal(size=shape)
        eps = 1e-6
        fd = ((a + eps * ta) / (b + eps * tb) - (a - eps * ta) / (b - eps * tb)) / (2 * eps)
        got = div_jvp(ta, tb, a, b)
        if np.allclose(got, ta / b + a * tb / (b * b)):
            raise Wrong("the tb term has the wrong sign: d(a/b)/db = -a/b^2.")
        expect_close(got, fd, f"div_jvp on shape {shape}", rtol=1e-5, atol=1e-7,
                     hint="d(a/b) = da/b - a db/b^2; apply it to the tangents ta, tb")
    zero = div_jvp(np.zeros(3), np.zeros(3), np.ones(3), np.full(3, 2.0))
    expect_close(zero, np.zeros(3), "div_jvp with zero tangents")


# ---- 2.5 a graph pass ----------------------------------------------------------------------

def _dce_graphs():
    rng = np.random.default_rng(25)
    w = Tensor(rng.normal(size=(4, 3)))

    def f1(x):
        _ = (x * 2.0).exp()
        return (x @ w).tanh()

    def f2(x):
        dead = x.sum()
        _ = dead * dead + 1.0
        keep = (x * 3.0).relu()
        return keep.mean(axis=0), keep.max()

    def f3(x):
        return x * 2.0          # nothing dead

    for f in (f1, f2, f3):
        yield f, rng.normal(size=(5, 4))


_FORBIDDEN = "labkit: a forbidden call"


def _tripwire(*args, **kwargs):       # no globals, no closure: its code fits any function
    raise RuntimeError("labkit: a forbidden call")


def _working_copy(fn):
    """A separate function object running ``fn``'s code (unaffected by :func:`_forbid`)."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__, copy.__doc__ = fn.__kwdefaults__, fn.__doc__
    return copy


@contextlib.contextmanager
def _forbid(owner, name, what):
    """While checking, labkit's ``owner.name`` raises, however the answer reaches it: by the
    attribute, or by a name imported before the check (the function's code object itself
    is swapped for a tripwire). Yields a working copy for the checker's own use."""
    original = getattr(owner, name)
    code = original.__code__
    working = _working_copy(original)
    swapped = _tripwire.__code__.replace(co_name=code.co_name)
    original.__code__ = swapped
    try:
        yield working
    except RuntimeError as err:
        tb = err.__traceback__
        while tb is not None and tb.tb_frame.f_code is not swapped:
            tb = tb.tb_next
        if str(err) != _FORBIDDEN or tb is None:
            raise                                  # not this tripwire: an outer one's
        raise Wrong(f"your answer calls labkit's {what}: write it yourself.") from None
    finally:
        original.__code__ = code


@exercise("2.5", "dead-code elimination pass", reference=_working_copy(_dce),
          binds="eliminate_dead_code")
def _(eliminate_dead_code):
    with _forbid(_passes, "eliminate_dead_code", "eliminate_dead_code pass") as dce, \
            _forbid(_passes, "optimize", "optimize pipeline"):
        _check_dce(eliminate_dead_code, dce)


def _check_dce(eliminate_dead_code, _dce=_dce):
    for f, x in _dce_graphs():
        g = trace(f, x)
        before = [n.name for n in g.nodes]
        got = eliminate_dead_code(g)
        if [n.name for n in g.nodes] != before:
            raise Wrong("your pass changed the graph it was given: build a new one "
                        "(graph.with_nodes(...)).")
        want = _dce(g)
        names = [n.name for n in got.nodes]
        want_names = [n.name for n in want.nodes]
        if set(g.inputs) - set(names):
            raise Wrong("keep the input nodes even if no output uses them.")
        if set(want_names) - set(names):
            raise Wrong(f"you removed live nodes {sorted(set(want_names) - set(names))}: walk "
                        f"backwards from graph.outputs through n.inputs.")
        if set(names) - set(want_names):
            raise Wrong(f"dead nodes remain: {sorted(set(names) - set(want_names))}.")
        if names != want_names:
            raise Wrong("keep the nodes in their original order (a topological order).")
        x2 = x + 1
        r1, r2 = got.run(x2), want.run(x2)
        r1, r2 = (r1 if isinstance(r1, tuple) else (r1,)), (r2 if isinstance(r2, tuple) else (r2,))
        for a, b in zip(r1, r2):
            expect_close(a, b, "the optimized graph's result")


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


def _torch_grads(build, leaves):
    """Gradients torch computes for the same program on float64 copies of ``leaves``."""
    import torch

    ts = [torch.tensor(np.asarray(t.data, np.float64), requires_grad=True) for t in leaves]
    build(*ts).backward()
    return [t.grad.numpy() for t in ts]


def _backward_cases():
    rng = np.random.default_rng(26)

    def diamond(x, w):
        a = x * w
        return (a.exp() + a * x).sum()
    yield "diamond (a node used twice)", diamond, [rng.normal(size=3), rng.normal(size=3)]

    def square(x):
        return (x * x).sum()
    yield "x * x (one parent reached twice)", square, [rng.normal(size=4)]

    def mlp(x, w1, w2):
        return ((x @ w1).tanh() @ w2).sum()
    yield "two-layer network", mlp, [rng.normal(size=(5, 4)), rng.normal(size=(4, 6)),
                                     rng.normal(size=(6, 2))]


@exercise("2.6", "backward(): reverse-mode accumulation over your topological order",
          reference=_reference_backward, binds="backward")
def _(backward):
    with _forbid(_tensor.Tensor, "backward", "loss.backward() (walk the graph yourself "
                 "with topo_order and local_vjp)"), _forbid(_tensor, "backprop", "backprop"):
        _check_backward(backward)


def _check_backward(backward):
    for name, build, arrays in _backward_cases():
        leaves = [Tensor(a, requires_grad=True) for a in arrays]
        const = Tensor(np.ones(1))                       # needs no gradient
        backward(build(*leaves) * const.sum())
        want = _torch_grads(build, leaves)
        if const.grad is not None:
            raise Wrong("a tensor with requires_grad=False got a .grad: only leaves that "
                        "require grad accumulate one.")
        for i, (t, w) in enumerate(zip(leaves, want)):
            if t.grad is None:
                raise Wrong(f"on the {name} graph input {i} got no gradient: walk the order "
                            f"in reverse (loss first) and set the leaves' .grad.")
            got = np.asarray(getattr(t.grad, "data", t.grad))
            if got.shape != w.shape:
                raise Wrong(f"on the {name} graph the gradient of input {i} has shape "
                            f"{got.shape}, expected {w.shape}.")
            if not np.allclose(got, w, rtol=1e-6, atol=1e-9):
                half = np.allclose(got * 2, w, rtol=1e-6) or np.allclose(got, w / 2, rtol=1e-6)
                raise Wrong(f"on the {name} graph the gradient of input {i} differs from "
                            f"torch's (max error {np.abs(got - w).max():.3g})"
                            + (": a node that feeds two others must ADD both contributions "
                               "(+=), not keep the last one." if half or "twice" in name
                               else ": a node must be processed only after every node that "
                                    "uses it, i.e. in reverse topological order."))
    # leaves accumulate across calls, as in PyTorch
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    backward((x * 3.0).sum())
    backward((x * x).sum())
    got = np.asarray(getattr(x.grad, "data", x.grad))
    if not np.allclose(got, [3.0 + 2.0, 3.0 + 4.0]):
        raise Wrong("calling backward twice must add into .grad (as torch does), not "
                    f"replace it: got {got}, expected [5. 7.].")
    # deep graphs: the order must come from a loop, not recursion
    d = Tensor(np.array(0.5), requires_grad=True)
    z = d
    for _ in range(3000):
        z = z * 1.0001
    backward(z)
    expect_close(np.asarray(getattr(d.grad, "data", d.grad)), 1.0001 ** 3000,
                 "gradient through a 3000-deep chain")
    from labkit.training.train import torch_gradient_error
    err = torch_gradient_error(backward)
    if not err < 1e-9:
        raise Wrong(f"on the digits MLP your gradients differ from torch's by up to {err:.3g}.")
