"""Chapter 02's checkers: a right answer written independently passes (under several grading
seeds), a missing one is missing, and each wrong or shortcut answer fails with its hint;
labkit's own rules are refused, also when an answer only calls them."""
import math

import numpy as np
import pytest

from labkit.autograd import Tensor, accumulate_grad, jvp, local_vjp
from labkit.check import ch02_graphs, evaluate, get
from labkit.check.ch02_rules import cross_entropy_grad
from mutants import mutant

EXERCISES = ["2.1", "2.6", "2.7", "2.2", "2.8", "2.9", "2.10", "2.17", "2.11", "2.12", "2.13",
             "2.14", "2.3", "2.4", "2.15", "2.16", "2.5"]


def status(ex, answer):
    return evaluate(ex, answer, refuse=False)   # hints of the checker itself


# ---- right answers, written as a learner writes them (not the references) -------------------

def topo_order(root):
    order, state, stack = [], {}, [root]
    while stack:
        node = stack[-1]
        if state.get(id(node)) == "done":
            stack.pop()
            continue
        if id(node) in state:                      # children finished: emit
            state[id(node)] = "done"
            order.append(node)
            stack.pop()
            continue
        state[id(node)] = "open"
        stack.extend(p for p in node._parents if id(p) not in state)
    return order


def backward(loss):
    from collections import defaultdict

    pending = defaultdict(float)                  # id -> the gradient gathered so far
    pending[id(loss)] = np.ones_like(loss.data)
    order = topo_order(loss)
    while order:
        node = order.pop()                          # the last one first: reverse order
        if id(node) not in pending:
            continue
        g = pending.pop(id(node))
        if not node.is_leaf:
            for parent, pg in local_vjp(node, g):
                pending[id(parent)] += pg
        elif node.requires_grad:
            accumulate_grad(node, g)


def numeric_vjp(f, xs, g, h=1e-6):
    out = []
    for i, x in enumerate(xs):
        d = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[j] = h
            up = xs[:i] + [x + e] + xs[i + 1:]
            down = xs[:i] + [x - e] + xs[i + 1:]
            d[j] = (np.sum(g * f(*up)) - np.sum(g * f(*down))) / (2 * h)
        out.append(d)
    return out


def sum_to(x, shape):
    x = x.sum(axis=tuple(range(x.ndim - len(shape)))) if x.ndim > len(shape) else x
    keep = tuple(i for i, (s, t) in enumerate(zip(shape, x.shape)) if s == 1 != t)
    return x.sum(axis=keep, keepdims=True)


def matmul_backward(g, a, b):
    return sum_to(g @ np.swapaxes(b, -1, -2), a.shape), sum_to(np.swapaxes(a, -1, -2) @ g, b.shape)


def add_backward(g, a, b):
    return sum_to(g, np.shape(a)), sum_to(g, np.shape(b))


def mul_backward(g, a, b):
    return sum_to(g * b, np.shape(a)), sum_to(g * a, np.shape(b))


def relu_backward(g, x):
    return np.where(x > 0, g, 0.0)


def gelu_backward(g, x):                  # d/dx x Phi(x), Phi by math.erf element by element
    phi = np.vectorize(lambda v: 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))))(x)
    return g * (phi + x * np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi))


def sum_backward(g, shape, axis, keepdims):
    if axis is None:
        axis = tuple(range(len(shape)))
    axes = sorted(a % len(shape) for a in np.atleast_1d(axis))
    if not keepdims:
        for a in axes:
            g = np.expand_dims(g, a)
    return np.broadcast_to(g, shape)


def log_softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def log_softmax_backward(g, y, axis=-1):
    return g - np.exp(y) * np.sum(g, axis=axis, keepdims=True)


def getitem_backward(g, shape, index):
    out = np.zeros(shape)
    np.add.at(out, index, g)
    return out


def softmax_backward(g, s):
    return s * g - s * np.sum(s * g, axis=-1, keepdims=True)


def div_jvp(ta, tb, a, b):
    return (ta * b - a * tb) / b ** 2


def jacobian_forward(f, x):
    return np.stack([jvp(f, (x,), (e,))[1] for e in np.eye(x.size)], axis=1)


def jacobian_reverse(f, x):
    def row(j):
        xt = Tensor(x, requires_grad=True)
        out = f(xt)
        backward((out * np.eye(out.size)[j].reshape(out.shape)).sum())   # seed e_j
        return xt.grad.data
    return np.array([row(j) for j in range(f(Tensor(x)).size)])


def eliminate_dead_code(graph):
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.name in live:
            live |= set(node.inputs)
    return graph.with_nodes([n for n in graph.nodes if n.op == "input" or n.name in live])


RIGHT = {"2.1": topo_order, "2.6": backward, "2.7": numeric_vjp, "2.2": matmul_backward,
         "2.8": add_backward, "2.9": mul_backward, "2.10": relu_backward, "2.17": gelu_backward,
         "2.11": sum_backward, "2.12": log_softmax, "2.13": log_softmax_backward,
         "2.14": getitem_backward, "2.3": softmax_backward, "2.4": div_jvp,
         "2.15": jacobian_forward, "2.16": jacobian_reverse, "2.5": eliminate_dead_code}


@pytest.mark.parametrize("ex", EXERCISES)
def test_an_independent_right_answer_passes_and_none_is_missing(ex):
    for seed in (None, 7):
        v = evaluate(ex, RIGHT[ex], seed=seed)          # refused objects watched, too
        assert v.status == "pass", (seed, v.message)
    assert evaluate(ex, None).status == "missing"


@pytest.mark.parametrize("ex", EXERCISES)
def test_the_reference_passes_when_not_refused(ex):
    assert status(ex, get(ex).reference).status == "pass"


# ---- 2.1 ---------------------------------------------------------------------------------

def _recursive_topo(root):
    out, seen = [], set()

    def visit(t):
        if id(t) in seen:
            return
        seen.add(id(t))
        for p in t._parents:
            visit(p)
        out.append(t)
    visit(root)
    return out


def _preorder(root):
    out, seen, stack = [], set(), [root]
    while stack:
        t = stack.pop()
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
            stack.extend(t._parents)
    return out


def test_topo_wrong_answers():
    import sys
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)                # a learner who raised the limit: still fails
    try:
        v = status("2.1", _recursive_topo)
    finally:
        sys.setrecursionlimit(old)
    assert v.status == "fail" and "recursion limit" in v.message and "10,000" in v.message
    v = status("2.1", _preorder)
    assert v.status == "fail" and "parent comes after" in v.message
    v = status("2.1", lambda root: tuple(topo_order(root)))
    assert v.status == "fail" and "must return a list" in v.message
    v = status("2.1", lambda root: topo_order(root) + [root])
    assert v.status == "fail" and "appears twice" in v.message
    v = status("2.1", lambda root: [t for t in topo_order(root) if not t.is_leaf or
                                    t.requires_grad])
    assert v.status == "fail" and "leaves and constants too" in v.message


# ---- 2.6: backward over the learner's own order -----------------------------------------
# answers written as the reference with one change (tests/mutants.py)

_ACCUMULATE = "accumulate_grad(node, g)"
_ADD = "grads[id(parent)] = grads[id(parent)] + pg if id(parent) in grads else pg"
_ORDER = "reversed(topological_order(loss))"


def test_backward_own_leaf_accumulation_passes():
    own = mutant(get("2.6").reference, _ACCUMULATE, """
        if node.grad is None:
            node.grad = Tensor(g.copy())
        else:
            node.grad.data = node.grad.data + g
    """)
    assert status("2.6", own).status == "pass"


@pytest.mark.parametrize("old, new, hint", [
    pytest.param(_ADD, "grads[id(parent)] = pg", "+=", id="overwrite"),
    pytest.param(_ORDER, "topological_order(loss)", "in reverse", id="forward-order"),
    pytest.param(_ACCUMULATE, "node.grad = Tensor(g.copy())", "must add into .grad",
                 id="replace-leaf-grad"),
])
def test_backward_wrong_answers(old, new, hint):
    v = status("2.6", mutant(get("2.6").reference, old, new))
    assert v.status == "fail" and hint in v.message, v.message


def _every_path(loss):
    """Sends each contribution on as soon as it arrives: right values, one call per path."""
    stack = [(loss, np.ones_like(loss.data))]
    while stack:
        node, g = stack.pop()
        if node.is_leaf:
            if node.requires_grad:
                accumulate_grad(node, g)
            continue
        stack.extend(local_vjp(node, g))


def test_backward_that_follows_every_path_fails_on_the_diamond_chain():
    small = Tensor(np.array([0.3]), requires_grad=True)
    _every_path(((small * small).tanh() + small).sum())   # right on a small graph
    want = Tensor(np.array([0.3]), requires_grad=True)
    ((want * want).tanh() + want).sum().backward()
    assert np.allclose(small.grad.data, want.grad.data)
    v = status("2.6", _every_path)
    assert v.status == "fail" and "called local_vjp more than" in v.message \
        and "2^14" in v.message, v.message


def test_backward_over_a_recursive_order_fails_on_the_deep_chain(monkeypatch):
    """The order from a recursive depth-first search (2.1's tempting answer) overflows."""
    monkeypatch.setattr(ch02_graphs, "_recursive_topo", _recursive_topo, raising=False)
    v = status("2.6", mutant(get("2.6").reference, _ORDER, "reversed(_recursive_topo(loss))"))
    assert v.status == "fail" and "recursion limit" in v.message and "200-deep" in v.message


def test_backward_that_calls_labkits_backward_is_refused():
    v = evaluate("2.6", lambda loss: loss.backward())
    assert v.status == "fail" and "labkit.autograd.tensor.Tensor.backward" in v.message
    from labkit.autograd.tensor import backprop     # imported before the check
    v = evaluate("2.6", lambda loss: backprop(loss, np.ones_like(loss.data)))
    assert v.status == "fail" and "labkit.autograd.tensor.backprop" in v.message, v.message


# ---- 2.7 ---------------------------------------------------------------------------------

def _one_sided(f, xs, g, h=1e-6):
    out = []
    for i, x in enumerate(xs):
        d = np.zeros_like(x)
        base = np.sum(g * f(*xs))
        for j in np.ndindex(x.shape):
            up = [a.copy() for a in xs]
            up[i][j] += h
            d[j] = (np.sum(g * f(*up)) - base) / h
        out.append(d)
    return out


def test_numeric_vjp_with_forward_differences_fails():
    v = status("2.7", _one_sided)
    assert v.status == "fail" and "central differences" in v.message, v.message
    v = status("2.7", lambda f, xs, g: [np.zeros_like(x) for x in xs])
    assert v.status == "fail" and "perturb one element" in v.message
    v = status("2.7", lambda f, xs, g: numeric_vjp(f, xs, g)[:1])
    assert v.status == "fail" and "one gradient per array" in v.message


# ---- 2.2, 2.8, 2.9 -----------------------------------------------------------------------

def test_matmul_backward_wrong_answers():
    v = status("2.2", lambda g, a, b: (g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g))
    assert v.status == "fail" and "has shape" in v.message and "batch axes" in v.message

    def leading_only(g, a, b):            # sums the added axes, forgets the stretched ones
        ga, gb = g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g
        while ga.ndim > a.ndim:
            ga = ga.sum(0)
        while gb.ndim > b.ndim:
            gb = gb.sum(0)
        return ga, gb
    v = status("2.2", leading_only)
    assert v.status == "fail" and "keepdims=True" in v.message and "size 1" in v.message

    def transposed(g, a, b):              # no swap of b's axes
        ga, gb = matmul_backward(g, a, b)
        return np.swapaxes(ga, -1, -2) if ga.shape[-1] == ga.shape[-2] else ga * 1.5, gb
    v = status("2.2", transposed)
    assert v.status == "fail" and "swap the last two axes" in v.message
    assert status("2.2", lambda g, a, b: g).status == "fail"


def test_elementwise_rules_wrong_answers():
    v = status("2.8", lambda g, a, b: (g, g))
    assert v.status == "fail" and "sum g back to the input's shape" in v.message
    v = status("2.9", lambda g, a, b: (sum_to(g * a, np.shape(a)), sum_to(g * b, np.shape(b))))
    assert v.status == "fail" and "grad_a = sum_to(g * b, a.shape)" in v.message
    v = status("2.9", add_backward)
    assert v.status == "fail"


# ---- 2.10, 2.11 --------------------------------------------------------------------------

def test_relu_and_sum_wrong_answers():
    v = status("2.10", lambda g, x: g * (x >= 0))
    assert v.status == "fail" and "at x = 0" in v.message
    v = status("2.10", lambda g, x: g * x)
    assert v.status == "fail" and "pass g where x > 0" in v.message
    v = status("2.11", lambda g, shape, axis, keepdims: np.broadcast_to(g, shape))
    assert v.status == "fail" and "without putting the summed axes back" in v.message
    v = status("2.11", lambda g, shape, axis, keepdims: np.broadcast_to(
        np.expand_dims(g, axis) if axis is not None else g, shape))   # keepdims ignored
    assert v.status == "fail" and ("np.expand_dims" in v.message or "raised" in v.message)


# ---- 2.17 ----------------------------------------------------------------------------------

def _gelu_tanh_backward(g, x):           # the derivative of the tanh approximation, by torch
    import torch

    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(t, approximate="tanh").backward(torch.tensor(g))
    return t.grad.numpy()


def _cdf(x):
    return np.vectorize(lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0)))(x)


@pytest.mark.parametrize("wrong, hint", [
    (_gelu_tanh_backward, "tanh approximation"),
    (lambda g, x: g * _cdf(x), "product rule"),
    (lambda g, x: g * (_cdf(x) + x * np.exp(-x * x / 2)), "divide by √(2π)"),
    (lambda g, x: gelu_backward(np.ones_like(g), x), "multiply it by the upstream gradient"),
    (lambda g, x: g * x * _cdf(x), "Φ(x) + x φ(x)"),               # the forward, times g
    (lambda g, x: gelu_backward(g, x).sum(), "shape"),
])
def test_gelu_backward_wrong_answers(wrong, hint):
    v = status("2.17", wrong)
    assert v.status == "fail" and hint in v.message, v.message


def test_gelu_backward_through_labkits_op_is_refused():
    from labkit.autograd.ops import OPS

    v = evaluate("2.17", lambda g, x: OPS["gelu"].vjp(g, None, (x,), (True,))[0])
    assert v.status == "fail" and "labkit's implementation" in v.message, v.message
    v = evaluate("2.17", lambda g, x: OPS["gelu"].jvp((g,), None, (x,)))
    assert v.status == "fail" and "labkit's implementation" in v.message, v.message


# ---- 2.12, 2.13 --------------------------------------------------------------------------

def test_log_softmax_without_the_max_shift_overflows():
    v = status("2.12", lambda x, axis=-1: x - np.log(np.exp(x).sum(axis=axis, keepdims=True)))
    assert v.status == "fail" and "subtract the maximum" in v.message.lower()

    def log_of_softmax(x, axis=-1):       # shifted, but the log of a probability underflows
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return np.log(e / e.sum(axis=axis, keepdims=True))
    v = status("2.12", log_of_softmax)
    assert v.status == "fail" and "never log(softmax(x))" in v.message
    v = status("2.12", lambda x, axis=-1: log_softmax(x, -1))       # axis ignored
    assert v.status == "fail"


def test_log_softmax_backward_wrong_answers():
    v = status("2.13", lambda g, y, axis=-1: g - np.exp(y) * g)            # no sum
    assert v.status == "fail" and "keepdims=True" in v.message
    v = status("2.13", lambda g, y, axis=-1: g - np.exp(y) * g.sum(axis=-1, keepdims=True))
    assert v.status == "fail"                                              # axis ignored


def test_log_softmax_backward_reaches_the_engines_cross_entropy():
    rng = np.random.default_rng(0)
    logits, targets = rng.normal(size=(4, 3)), np.array([0, 2, 2, 1])
    got = cross_entropy_grad(log_softmax_backward, logits, targets)
    p = np.exp(log_softmax(logits, 1))
    p[np.arange(4), targets] -= 1
    assert np.allclose(got, p / 4)
    with pytest.raises(ValueError, match="shape"):           # strict: a bad rule raises
        cross_entropy_grad(lambda g, y, axis: g[:1], logits, targets)


# ---- 2.14 --------------------------------------------------------------------------------

def test_indexing_backward_by_assignment_fails():
    def assign(g, shape, index):
        out = np.zeros(shape)
        out[index] = g
        return out

    def buffered(g, shape, index):
        out = np.zeros(shape)
        out[index] += g
        return out
    for wrong in (assign, buffered):
        v = status("2.14", wrong)
        assert v.status == "fail" and "np.add.at" in v.message and "ADD" in v.message


# ---- 2.3, 2.4 ----------------------------------------------------------------------------

def test_softmax_and_div_wrong_answers():
    v = status("2.3", lambda g, s: s * (g - (g * s).sum()))   # sums over every axis
    assert v.status == "fail" and "keepdims" in v.message
    v = status("2.3", lambda g, s: g * s * (1 - s))           # diagonal only
    assert v.status == "fail"
    v = status("2.4", lambda ta, tb, a, b: ta / b + a * tb / (b * b))
    assert v.status == "fail" and "sign" in v.message
    v = status("2.4", lambda ta, tb, a, b: ta / b)
    assert v.status == "fail"


# ---- 2.15, 2.16 --------------------------------------------------------------------------

def test_jacobians_in_the_wrong_mode_or_entry_by_entry_fail():
    v = status("2.15", jacobian_reverse)                    # right values, reverse mode
    assert v.status == "fail" and "runs reverse mode" in v.message

    def entry_by_entry(f, x):             # one reverse pass per entry: m * n passes
        m = f(Tensor(x)).reshape(-1).shape[0]
        out = np.zeros((m, x.size))
        for j in range(m):
            for i in range(x.size):
                xt = Tensor(x, requires_grad=True)
                backward(f(xt).reshape(-1)[j])
                out[j, i] = xt.grad.data[i]
        return out
    v = status("2.16", entry_by_entry)
    assert v.status == "fail" and "one pass per output" in v.message, v.message
    v = status("2.16", lambda f, x: jacobian_reverse(f, x).T)
    assert v.status == "fail" and "shape (m, n)" in v.message


def test_a_reverse_jacobian_through_labkits_vjp_or_jvp_is_refused():
    from labkit.autograd import vjp

    def through_vjp(f, x):
        m = f(Tensor(x)).reshape(-1).shape[0]
        return np.stack([vjp(f, (x,), e)[1][0] for e in np.eye(m)])
    v = evaluate("2.16", through_vjp)
    assert v.status == "fail" and "labkit.autograd.forward.vjp" in v.message
    v = evaluate("2.16", jacobian_forward)
    assert v.status == "fail" and "labkit.autograd.forward.jvp" in v.message


# ---- 2.5 ---------------------------------------------------------------------------------

def test_dce_wrong_answers():
    v = status("2.5", lambda g: g)
    assert v.status == "fail" and "dead nodes remain" in v.message

    def outputs_only(g):
        return g.with_nodes(n for n in g.nodes if n.name in g.outputs or n.op == "input")
    v = status("2.5", outputs_only)
    assert v.status == "fail" and "removed live nodes" in v.message

    def in_place(g):
        object.__setattr__(g, "nodes", tuple(n for n in g.nodes if n.op != "exp"))
        return g
    v = status("2.5", in_place)
    assert v.status == "fail" and "changed the graph it was given" in v.message


def test_dce_that_calls_labkits_pass_is_refused():
    from labkit.autograd import passes
    v = evaluate("2.5", lambda g: passes.eliminate_dead_code(g))
    assert v.status == "fail" and "eliminate_dead_code" in v.message
    v = evaluate("2.5", lambda g: passes.optimize(g))
    assert v.status == "fail" and "labkit.autograd.passes.optimize" in v.message


# ---- labkit's rules are refused, however they are reached ----------------------------------

@pytest.mark.parametrize("ex, answer, name", [
    ("2.2", lambda g, a, b: __import__("labkit.autograd.rules", fromlist=["x"])
     .matmul_backward(g, a, b), "labkit.autograd.rules.matmul_backward"),
    ("2.2", lambda g, a, b: tuple(__import__("labkit.autograd.ops", fromlist=["x"]).unbroadcast(
        x, s.shape) for x, s in zip(matmul_backward(g, a, b), (a, b))),
     "labkit.autograd.ops.unbroadcast"),
    ("2.11", lambda g, shape, axis, keepdims: __import__("labkit.autograd.ops", fromlist=["x"])
     .OPS["sum"].vjp(g, None, (np.zeros(shape),), (True,), axis=axis, keepdims=keepdims)[0],
     "labkit.autograd.ops"),
    ("2.12", lambda x, axis=-1: __import__("labkit.autograd.ops", fromlist=["x"])
     .log_softmax_forward(x, axis), "log_softmax_forward"),
    ("2.14", lambda g, shape, index: __import__("labkit.autograd.ops", fromlist=["x"])
     ._getitem_vjp(g, None, (np.zeros(shape),), (True,), index)[0], "_getitem_vjp"),
])
def test_an_answer_that_calls_labkits_rule_is_refused(ex, answer, name):
    v = evaluate(ex, answer)
    assert v.status == "fail" and "labkit's implementation" in v.message \
        and name in v.message, v.message
