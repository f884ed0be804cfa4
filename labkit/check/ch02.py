"""Checks for chapter 02: computation graphs and automatic differentiation.

Every checker is ``(answer, ref, rng)``: inputs come from ``rng``, the learner's functions
are called on plain data (arrays, shapes, axes, indices) or, where they take labkit Tensors
(``topo_order``, ``backward``, a graph pass), through a ``derive`` function that builds the
graph next to the answer and returns plain data. Expected values are PyTorch's autograd
(computed here, in the grader's process), central differences, and labkit's reference
through ``ref``. Budgets (2.6's count of local-VJP calls) are measured on the reference.

What the checkers run lives in two modules: :mod:`labkit.check.ch02_graphs` (the graph,
backward, Jacobian and dead-code cases, their ``derive`` functions and 2.6's reference) and
:mod:`labkit.check.ch02_rules` (the VJP-rule and central-difference cases and hints).
"""
from __future__ import annotations

import numpy as np

from labkit.autograd import rules as _rules
from labkit.autograd.forward import jacobian_forward, jacobian_reverse
from labkit.autograd.gradcheck import numeric_vjp
from labkit.autograd.ops import (OPS, gelu_vjp_rule, log_softmax_forward, softmax_forward,
                                softmax_vjp_rule)
from labkit.autograd.passes import eliminate_dead_code as _dce
from labkit.autograd.tensor import topological_order
from labkit.check.ch02_graphs import (DEEP_HEADROOM, DIAMONDS, _backward_cases,
                                      _closed_form_jacobian, _compare_grads, _digits_case,
                                      _reference_backward, _seed, _topo_specs, _torch,
                                      _torch_grads, _torch_mlp_grads, backward_deep,
                                      backward_mlp, backward_run, backward_twice, dce_run,
                                      graph_structure, jacobian_of, topo_positions)
from labkit.check.ch02_rules import (_MATMUL_HINT, _array, _broadcast_equal, _broadcast_pairs,
                                     _call, _gelu_shortcuts, _index_cases, _logit_cases,
                                     _matmul_shapes, _sum_cases, _torch_vjp, cross_entropy_grad,
                                     numeric_vjp_on)
from labkit.check.core import Wrong, exercise, expect_close


# ---- 2.1 topological order --------------------------------------------------------------

@exercise("2.1", "reverse topological order without recursion", reference=topological_order,
          binds="topo_order")
def _(answer, ref, rng):
    for spec, name in _topo_specs(rng):
        got = answer.derive(topo_positions, spec)
        if got.get("recursion"):
            raise Wrong(f"on a {name} your topo_order ran past Python's recursion limit "
                        f"(about 1,000 frames): use a loop and an explicit stack of "
                        f"(node, children done) pairs, not recursion.")
        if got["type"] != "list":
            raise Wrong(f"topo_order must return a list, got {got['type']}.")
        parents, root = graph_structure(spec)
        order = got["order"]
        if -1 in order:
            raise Wrong(f"on the {name} graph you return objects that are not its tensors.")
        if len(set(order)) != len(order):
            raise Wrong(f"on the {name} graph a tensor appears twice: mark nodes as visited.")
        if set(order) != set(range(len(parents))):
            raise Wrong(f"on the {name} graph you return {len(order)} tensors, expected "
                        f"{len(parents)} (every tensor reachable through ._parents, leaves "
                        f"and constants too).")
        at = {k: i for i, k in enumerate(order)}
        if any(at[p] > at[k] for k in order for p in parents[k]):
            raise Wrong(f"on the {name} graph a parent comes after its child: emit a node only "
                        f"after all its parents (post-order).")
        if order[-1] != root:
            raise Wrong("the root (the output) must come last.")


# ---- 2.6 backward with your own topological order ------------------------------------------

@exercise("2.6", "backward(): reverse-mode accumulation over your topological order",
          reference=_reference_backward, binds="backward",
          answers=("labkit.autograd.tensor:Tensor.backward", "labkit.autograd.tensor:backprop"))
def _(answer, ref, rng):
    for name, program, arrays in _backward_cases(rng):
        got = answer.derive(backward_run, program, arrays)
        if got.get("recursion"):
            raise Wrong("your backward ran past Python's recursion limit: walk the order "
                        "with a loop.")
        if got["const"]:
            raise Wrong("a tensor with requires_grad=False got a .grad: only leaves that "
                        "require grad accumulate one.")
        _compare_grads(name, got["grads"], _torch_grads(program, arrays))
    x = rng.normal(size=2)
    twice = answer.derive(backward_twice, x)
    if twice is None or not np.allclose(twice, 3.0 + 2 * x):
        raise Wrong("calling backward twice must add into .grad (as torch does), not "
                    f"replace it: got {twice}, expected {3.0 + 2 * x}.")
    chain = [rng.uniform(0.5, 1.0, size=1)]
    want = ref.derive(backward_run, "diamond chain", chain)
    budget = 2 * want["calls"]
    got = answer.derive(backward_run, "diamond chain", chain, budget)
    if got.get("exhausted"):
        raise Wrong(f"on a chain of {DIAMONDS} diamonds your backward called local_vjp more "
                    f"than {budget} times; labkit's calls it {want['calls']} times, once per "
                    f"node. Following every path from the loss costs 2^{DIAMONDS} calls: add "
                    f"up each node's gradient first, then send it on once (reverse "
                    f"topological order).")
    _compare_grads(f"chain of {DIAMONDS} diamonds", got["grads"],
                   _torch_grads("diamond chain", chain))
    depth = 200
    deep = answer.derive(backward_deep, depth, float(rng.uniform(0.5, 1.0)))
    if deep.get("recursion"):
        raise Wrong(f"on a {depth}-deep chain, with {DEEP_HEADROOM} frames of recursion "
                    f"allowed, your backward ran past the recursion limit: is your topo_order "
                    f"recursive? Use a loop and a stack.")
    expect_close(deep["grad"], [1.0001 ** depth], f"the gradient through a {depth}-deep chain")
    x, y, params = _digits_case(_seed(rng) % 1000)
    got = answer.derive(backward_mlp, x, y, params)
    for i, (g, w) in enumerate(zip(got, _torch_mlp_grads(x, y, params))):
        if g is None or g.shape != w.shape or not np.allclose(g, w, rtol=0, atol=1e-9):
            raise Wrong(f"on a digits MLP (64-32-10, relu, cross-entropy) the gradient of "
                        f"parameter {i} differs from torch's"
                        + ("" if g is None or g.shape != w.shape else
                           f" by up to {np.abs(g - w).max():.3g}") + ".")


# ---- 2.2 matmul backward with broadcasting ------------------------------------------------

@exercise("2.2", "matmul backward with broadcast batch dimensions",
          reference=_rules.matmul_backward, binds="matmul_backward",
          answers=(OPS["matmul"].vjp, "labkit.autograd.ops:unbroadcast"))
def _(answer, ref, rng):
    for sa, sb, how in _matmul_shapes(rng):
        a, b = rng.normal(size=sa), rng.normal(size=sb)
        g = rng.normal(size=np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]))
        got = _call(answer, g, a, b, what=f"for a{sa} @ b{sb}")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong("return a pair (grad_a, grad_b).")
        want = _torch_vjp(lambda x, y: x @ y, (a, b), g)
        for name, x, arr, w in (("grad_a", a, got[0], want[0]), ("grad_b", b, got[1], want[1])):
            arr = _array(arr, name)
            if arr.shape != x.shape:
                raise Wrong(f"{name} for a{sa} @ b{sb} ({how}) has shape {arr.shape}, expected "
                            f"{x.shape}: sum it over the batch axes that broadcasting added "
                            f"and, keeping them (keepdims=True), over the axes of size 1 that "
                            f"it stretched.")
            expect_close(arr, w, f"{name} for a{sa} @ b{sb} ({how})", hint=_MATMUL_HINT)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(3, 2))
    g = rng.normal(size=(2, 2))
    numeric = numeric_vjp(np.matmul, [a, b], g)
    got = answer(g, a, b)
    expect_close(got[0], numeric[0], "grad_a against central differences", rtol=1e-5,
                 atol=1e-7)
    expect_close(got[1], numeric[1], "grad_b against central differences", rtol=1e-5,
                 atol=1e-7)


# ---- 2.7 central differences ---------------------------------------------------------------

@exercise("2.7", "central differences: a numerical vector-Jacobian product",
          reference=numeric_vjp, binds="numeric_vjp",
          answers=("labkit.autograd.gradcheck:gradcheck",))
def _(answer, ref, rng):
    torch = _torch()
    n, k = int(rng.integers(2, 5)), int(rng.integers(2, 4))
    cases = [("tanh product", [rng.normal(size=n), rng.normal(size=n)], (n,)),
             ("softplus of a product", [rng.normal(size=(2, k)), rng.normal(size=(k, 2))], (2, 2)),
             ("exp", [rng.normal(size=(2, n))], (2, n))]
    torch_fns = {"tanh product": lambda a, b: torch.tanh(3 * a) * b,
                 "softplus of a product": lambda a, b: torch.log1p(torch.exp(2 * (a @ b))),
                 "exp": lambda a: torch.exp(2 * a) * a}
    for name, xs, out_shape in cases:
        g = rng.normal(size=out_shape)
        got = answer.derive(numeric_vjp_on, name, xs, g)
        want = _torch_vjp(torch_fns[name], xs, g)
        if not isinstance(got, list) or len(got) != len(xs):
            raise Wrong(f"return a list with one gradient per array of xs ({len(xs)} here).")
        for i, (a, w) in enumerate(zip(got, want)):
            if a.shape != w.shape:
                raise Wrong(f"the gradient of xs[{i}] has shape {a.shape}, expected {w.shape}.")
            err = float(np.abs(a - w).max())
            if err > 1e-7 * max(1.0, float(np.abs(w).max())):
                raise Wrong(f"on the {name} test function your estimate of the gradient of "
                            f"xs[{i}] is off by {err:.2g}: "
                            + ("a forward difference (f(x+h) - f(x)) / h errs by about h f''/2; "
                               "use central differences (f(x+h) - f(x-h)) / (2h), error "
                               "O(h^2), with h near 1e-6." if err < 1e-2 else
                               "perturb one element at a time by +h and -h and divide the "
                               "change in <g, f> by 2h."))


# ---- 2.8, 2.9 elementwise rules with broadcasting ---------------------------------------------

def _elementwise_check(answer, rng, torch_fn, name):
    for sa, sb, how in _broadcast_pairs(rng):
        a, b = rng.normal(size=sa), rng.normal(size=sb)
        g = rng.normal(size=np.broadcast_shapes(sa, sb))
        got = _call(answer, g, a, b, what=f"for a{sa} {name} b{sb}")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong("return a pair (grad_a, grad_b).")
        want = _torch_vjp(torch_fn, (a, b), g)
        for label, x, arr, w in (("grad_a", a, got[0], want[0]), ("grad_b", b, got[1], want[1])):
            arr = _array(arr, label)
            if arr.shape != x.shape:
                raise Wrong(f"{label} for a{sa} {name} b{sb} ({how}) has shape {arr.shape}, "
                            f"expected {x.shape}: sum g back to the input's shape "
                            f"(_sum_to), over the axes broadcasting added or stretched.")
            expect_close(arr, w, f"{label} for a{sa} {name} b{sb} ({how})",
                         hint=("d(a*b)/da = b: grad_a = sum_to(g * b, a.shape)" if name == "*"
                               else "d(a+b)/da = 1: grad_a = sum_to(g, a.shape)"))


@exercise("2.8", "add backward with broadcasting", reference=_rules.add_backward,
          binds="add_backward", answers=(OPS["add"].vjp, "labkit.autograd.ops:unbroadcast"))
def _(answer, ref, rng):
    _elementwise_check(answer, rng, lambda a, b: a + b, "+")


@exercise("2.9", "mul backward with broadcasting", reference=_rules.mul_backward,
          binds="mul_backward", answers=(OPS["mul"].vjp, "labkit.autograd.ops:unbroadcast"))
def _(answer, ref, rng):
    _elementwise_check(answer, rng, lambda a, b: a * b, "*")


# ---- 2.3 softmax backward -----------------------------------------------------------------

@exercise("2.3", "softmax backward (vector-Jacobian product)", reference=softmax_vjp_rule,
          binds="softmax_backward", answers=(OPS["softmax"].vjp,))
def _(answer, ref, rng):
    torch = _torch()
    shapes = [(int(rng.integers(2, 8)),), tuple(int(v) for v in rng.integers(1, 7, size=2)),
              tuple(int(v) for v in rng.integers(2, 5, size=3)), (1, 1)]
    for shape in shapes:
        x = rng.normal(size=shape) * 3
        s, g = softmax_forward(x), rng.normal(size=shape)
        got = _array(_call(answer, g, s, what=f"on shape {shape}"), "softmax_backward's result")
        want = _torch_vjp(lambda t: torch.softmax(t, -1), (x,), g)[0]
        expect_close(got, want, f"softmax_backward on shape {shape}",
                     hint="J = diag(s) - s s^T, so J^T g = s * (g - sum(g * s)) with the sum "
                          "along the last axis, keepdims=True")
    s = softmax_forward(rng.normal(size=5))
    g = rng.normal(size=5)
    expect_close(answer(g, s), (np.diag(s) - np.outer(s, s)) @ g,
                 "softmax_backward vs the full Jacobian")


# ---- 2.10 relu backward ---------------------------------------------------------------------

@exercise("2.10", "relu backward", reference=_rules.relu_backward, binds="relu_backward",
          answers=(OPS["relu"].vjp,))
def _(answer, ref, rng):
    torch = _torch()
    for _ in range(3):
        shape = tuple(int(v) for v in rng.integers(1, 6, size=int(rng.integers(1, 4))))
        x = rng.normal(size=shape)
        x[rng.random(shape) < 0.25] = 0.0               # relu's kink: torch's gradient is 0
        g = rng.normal(size=shape)
        got = _array(_call(answer, g, x, what=f"on shape {shape}"), "relu_backward's result")
        want = _torch_vjp(torch.relu, (x,), g)[0]
        if got.shape == want.shape and not np.allclose(got, want) and \
                np.allclose(got[x != 0], want[x != 0]):
            raise Wrong("at x = 0 relu's gradient is 0 (PyTorch's threshold_backward passes g "
                        "only where x > 0).")
        expect_close(got, want, f"relu_backward on shape {shape}",
                     hint="pass g where x > 0 and 0 elsewhere")


# ---- 2.17 GELU backward ----------------------------------------------------------------------

@exercise("2.17", "GELU backward (the exact erf form)", reference=gelu_vjp_rule,
          binds="gelu_backward", answers=(OPS["gelu"].vjp, OPS["gelu"].jvp))
def _(answer, ref, rng):
    shapes = [(int(rng.integers(2, 9)),), tuple(int(v) for v in rng.integers(1, 6, size=2)), ()]
    cases = [rng.normal(size=s) * 2 for s in shapes] + [
        np.array([-8.0, -3.0, -1.0, 0.0, 0.5, 3.0, 8.0])]     # the tails, and 0
    for x in cases:
        g = rng.normal(size=x.shape)
        want, slope = np.asarray(ref(g, x)), np.asarray(ref(np.ones_like(x), x))
        got = _array(_call(answer, g, x, what=f"on shape {x.shape}"), "gelu_backward's result")
        if got.shape == want.shape and not np.allclose(got, want):
            for wrong, hint in _gelu_shortcuts(g, x, slope):
                if np.allclose(got, wrong, rtol=1e-6, atol=1e-9):
                    raise Wrong(hint + ".")
        expect_close(got, want, f"gelu_backward on shape {x.shape}",
                     hint="d/dx x Φ(x) = Φ(x) + x φ(x), times g")


# ---- 2.11 sum backward -----------------------------------------------------------------------

@exercise("2.11", "sum backward over axes (keepdims, negative axes)",
          reference=_rules.sum_backward, binds="sum_backward",
          answers=(OPS["sum"].vjp, OPS["mean"].vjp, "labkit.autograd.ops:_expand"))
def _(answer, ref, rng):
    for shape, axis, keepdims in _sum_cases(rng):
        x = rng.normal(size=shape)
        out = x.sum(axis=axis, keepdims=keepdims)
        g = rng.normal(size=np.shape(out))
        what = f"for shape {shape}, axis={axis}, keepdims={keepdims}"
        hint = ("put the summed axes back as size 1 (np.expand_dims(g, axes) when keepdims is "
                "False; negative axes count from the end of the input's shape), then broadcast "
                "to the input's shape")
        try:
            got = answer(g, shape, axis, keepdims)
        except (ValueError, IndexError) as exc:
            raise Wrong(f"your sum_backward raised {type(exc).__name__} ({exc}) {what}: {hint}."
                        ) from None
        got = _array(got, "sum_backward's result")
        dims = tuple(range(len(shape))) if axis is None else axis
        want = _torch_vjp(lambda t: t.sum(dim=dims, keepdim=keepdims), (x,), g)[0]
        if got.shape == want.shape and not np.allclose(got, want) and np.ndim(g) and \
                _broadcast_equal(got, g, shape):
            raise Wrong(f"sum_backward {what} broadcast g without putting the summed axes "
                        f"back: g lined up with the wrong axes. Hint: {hint}.")
        expect_close(got, want, f"sum_backward {what}", hint=hint)


# ---- 2.12 log-softmax forward ---------------------------------------------------------------

@exercise("2.12", "log-softmax forward, stable for large logits", reference=_rules.log_softmax,
          binds="log_softmax",
          answers=("labkit.autograd.ops:log_softmax_forward",
                   "labkit.autograd.ops:softmax_forward"))
def _(answer, ref, rng):
    torch = _torch()
    for x, axis in _logit_cases(rng):
        what = f"on logits of shape {x.shape} up to {np.abs(x).max():.3g}, axis={axis}"
        with np.errstate(all="ignore"):
            got = _array(_call(answer, x, axis, what=what), "log_softmax's result")
        want = torch.log_softmax(torch.tensor(x), axis).numpy()
        if got.shape == want.shape and not np.isfinite(got).all():
            at_max = x == x.max(axis=axis, keepdims=True)
            if not np.isfinite(got[at_max]).all() or np.isposinf(got).any():
                raise Wrong(f"log_softmax {what} gives NaN or infinity: exp overflows past "
                            f"about 709 (float64). Subtract the maximum along the axis first: "
                            f"z = x - max x, then z - log(sum(exp(z))).")
            raise Wrong(f"log_softmax {what} gives -inf where the answer is finite: the log of "
                        f"a softmax loses probabilities below 1e-308. Compute z - log(sum(exp("
                        f"z))) with z = x - max x, never log(softmax(x)).")
        expect_close(got, want, f"log_softmax {what}", rtol=1e-10, atol=1e-9,
                     hint="log_softmax(x) = x - max x - log(sum(exp(x - max x))), the max and "
                          "the sum along the axis with keepdims=True")


# ---- 2.13 log-softmax backward, and cross-entropy through the engine -----------------------

@exercise("2.13", "log-softmax backward, and cross-entropy's gradient through it",
          reference=_rules.log_softmax_backward, binds="log_softmax_backward",
          answers=(OPS["log_softmax"].vjp, OPS["softmax"].vjp))
def _(answer, ref, rng):
    torch = _torch()
    for x, axis in _logit_cases(rng):
        y = log_softmax_forward(x, axis=axis)
        g = rng.normal(size=x.shape)
        what = f"on shape {x.shape}, axis={axis}"
        got = _array(_call(answer, g, y, axis, what=what), "log_softmax_backward's result")
        want = _torch_vjp(lambda t: torch.log_softmax(t, axis), (x,), g)[0]
        expect_close(got, want, f"log_softmax_backward {what}",
                     hint="y = log softmax(x), so dx = g - softmax(x) * sum(g) = g - exp(y) * "
                          "sum(g), the sum along the axis with keepdims=True")
    x = rng.normal(size=(2, 3))
    g = rng.normal(size=(2, 3))
    numeric = numeric_vjp(lambda t: log_softmax_forward(t, axis=1), [x], g)[0]
    expect_close(answer(g, log_softmax_forward(x, axis=1), 1), numeric,
                 "log_softmax_backward against central differences", rtol=1e-5, atol=1e-7)
    n, c = int(rng.integers(2, 9)), int(rng.integers(2, 7))
    logits, targets = rng.normal(size=(n, c)) * 4, rng.integers(0, c, size=n)
    got = answer.derive(cross_entropy_grad, logits, targets)
    tl = torch.tensor(logits, requires_grad=True)
    torch.nn.functional.cross_entropy(tl, torch.tensor(targets)).backward()
    expect_close(got, tl.grad.numpy(), "the gradient of cross_entropy(logits, targets) "
                 "through labkit's engine with your rule",
                 hint="cross-entropy's gradient is (softmax(logits) - onehot(targets)) / N; "
                      "your rule gives its softmax part")


# ---- 2.14 indexing backward ----------------------------------------------------------------

@exercise("2.14", "indexing backward (repeated indices add up)",
          reference=_rules.getitem_backward, binds="getitem_backward",
          answers=(OPS["getitem"].vjp,))
def _(answer, ref, rng):
    torch = _torch()
    for shape, index, what in _index_cases(rng):
        x = rng.normal(size=shape)
        g = rng.normal(size=np.shape(x[index]))
        got = _array(_call(answer, g, shape, index, what=f"for {what}"),
                     "getitem_backward's result")
        tindex = (tuple(torch.from_numpy(np.asarray(i)) for i in index)
                  if isinstance(index, tuple) else
                  torch.from_numpy(index) if isinstance(index, np.ndarray) else index)
        want = _torch_vjp(lambda t: t[tindex], (x,), g)[0]
        assigned = np.zeros(shape)
        assigned[index] = g
        if got.shape == want.shape and not np.allclose(got, want) and \
                np.allclose(got, assigned):
            raise Wrong(f"for {what} a repeated index must ADD its gradients: assignment "
                        f"(full[index] = g, or full[index] += g, which numpy buffers) keeps "
                        f"only the last. Use np.add.at(full, index, g).")
        expect_close(got, want, f"getitem_backward for {what}",
                     hint="zeros of the input's shape, with g added at index (np.add.at)")


# ---- 2.4 a forward-mode rule ---------------------------------------------------------------

def _div_jvp(ta, tb, a, b):
    return ta / b - a * tb / (b * b)


@exercise("2.4", "forward-mode (JVP) rule of division", reference=_div_jvp, binds="div_jvp",
          answers=(OPS["div"].jvp,))
def _(answer, ref, rng):
    for shape in [(), (int(rng.integers(2, 6)),), tuple(int(v) for v in rng.integers(1, 4, size=2))]:
        a, b = rng.normal(size=shape), rng.normal(size=shape) + 3
        ta, tb = rng.normal(size=shape), rng.normal(size=shape)
        eps = 1e-6
        fd = ((a + eps * ta) / (b + eps * tb) - (a - eps * ta) / (b - eps * tb)) / (2 * eps)
        got = _array(_call(answer, ta, tb, a, b, what=f"on shape {shape}"), "div_jvp's result")
        if got.shape == np.shape(fd) and np.allclose(got, ta / b + a * tb / (b * b)):
            raise Wrong("the tb term has the wrong sign: d(a/b)/db = -a/b^2.")
        expect_close(got, fd, f"div_jvp on shape {shape}", rtol=1e-5, atol=1e-7,
                     hint="d(a/b) = da/b - a db/b^2; apply it to the tangents ta, tb")
    zero = answer(np.zeros(3), np.zeros(3), np.ones(3), np.full(3, 2.0))
    expect_close(zero, np.zeros(3), "div_jvp with zero tangents")


# ---- 2.15, 2.16 full Jacobians: n forward passes or m reverse passes ----------------------

def _jacobian_check(answer, ref, rng, mode):
    for n, m in ((int(rng.integers(4, 9)), int(rng.integers(1, 4))),
                 (int(rng.integers(1, 4)), int(rng.integers(4, 9)))):
        seed = _seed(rng) % 10_000
        got = answer.derive(jacobian_of, n, m, seed)
        want = ref.derive(jacobian_of, n, m, seed)
        expect_close(got["jacobian"], _closed_form_jacobian(n, m, seed),
                     f"the Jacobian of f: R^{n} -> R^{m}",
                     hint="a row per output, a column per input: shape (m, n)")
        if mode == "forward" and got["vjps"]:
            raise Wrong(f"your jacobian_forward runs reverse mode (local_vjp was called "
                        f"{got['vjps']} times): push one basis tangent per input through "
                        f"jvp.")
        need, per = (n, "input") if mode == "forward" else (m, "output")
        if got["passes"] > want["passes"] + 1:
            raise Wrong(f"your jacobian_{mode} ran f {got['passes']} times for n = {n} inputs "
                        f"and m = {m} outputs; {mode} mode needs one pass per {per} ({need}): "
                        f"each pass gives a whole {'column' if mode == 'forward' else 'row'}.")


@exercise("2.15", "the full Jacobian by forward mode (n passes)", reference=jacobian_forward,
          binds="jacobian_forward",
          answers=(jacobian_reverse, "labkit.autograd.forward:vjp", "labkit.autograd.forward:grad"))
def _(answer, ref, rng):
    _jacobian_check(answer, ref, rng, "forward")


@exercise("2.16", "the full Jacobian by reverse mode with your backward (m passes)",
          reference=jacobian_reverse, binds="jacobian_reverse",
          answers=(jacobian_forward, "labkit.autograd.forward:vjp", "labkit.autograd.forward:jvp",
                   "labkit.autograd.forward:grad", "labkit.autograd.tensor:Tensor.backward",
                   "labkit.autograd.tensor:backprop"))
def _(answer, ref, rng):
    _jacobian_check(answer, ref, rng, "reverse")


# ---- 2.5 a graph pass ----------------------------------------------------------------------

@exercise("2.5", "dead-code elimination pass", reference=_dce, binds="eliminate_dead_code",
          answers=("labkit.autograd.passes:optimize",))
def _(answer, ref, rng):
    for k in range(3):
        seed = _seed(rng)
        got = answer.derive(dce_run, k, seed)
        want = ref.derive(dce_run, k, seed)
        if "invalid" in got:
            raise Wrong(f"you removed live nodes: the graph you built is invalid ({got['invalid']})"
                        f". Walk backwards from graph.outputs through n.inputs: a node is live "
                        f"if a live node uses it.")
        if got["changed"]:
            raise Wrong("your pass changed the graph it was given: build a new one "
                        "(graph.with_nodes(...)).")
        names, want_names = got["names"], want["names"]
        if set(got["inputs"]) - set(names):
            raise Wrong("keep the input nodes even if no output uses them.")
        if set(want_names) - set(names):
            raise Wrong(f"you removed live nodes {sorted(set(want_names) - set(names))}: walk "
                        f"backwards from graph.outputs through n.inputs.")
        if set(names) - set(want_names):
            raise Wrong(f"dead nodes remain: {sorted(set(names) - set(want_names))}.")
        if names != want_names:
            raise Wrong("keep the nodes in their original order (a topological order).")
        for a, b in zip(got["run"], want["run"]):
            expect_close(a, b, "the optimized graph's result")
