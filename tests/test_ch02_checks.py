"""Chapter 02 checkers accept the reference, reject wrong answers with a specific hint,
and report missing ones."""
import numpy as np
import pytest

from labkit.check import evaluate, get
from mutants import mutant


def status(ex, answer):
    return evaluate(ex, answer)


@pytest.mark.parametrize("ex", ["2.1", "2.2", "2.3", "2.4", "2.5", "2.6"])
def test_reference_passes_and_none_is_missing(ex):
    assert status(ex, get(ex).reference).status == "pass"
    assert status(ex, None).status == "missing"


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
    v = status("2.1", _recursive_topo)
    assert v.status == "error" and "Recursion" in v.message
    v = status("2.1", _preorder)
    assert v.status == "fail" and "parent comes after" in v.message


def test_matmul_backward_wrong_answers():
    def no_batch_sum(g, a, b):
        return g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g
    v = status("2.2", no_batch_sum)
    assert v.status == "fail" and "shape" in v.message and "sum grad_b" in v.message

    def swapped(g, a, b):
        from labkit.check.ch02 import _matmul_ref
        ga, gb = _matmul_ref(g, a, b)
        return ga * 1.01, gb
    assert status("2.2", swapped).status == "fail"


def test_softmax_and_div_wrong_answers():
    v = status("2.3", lambda g, s: s * (g - (g * s).sum()))   # sums over every axis
    assert v.status == "fail" and "keepdims" in v.message
    v = status("2.3", lambda g, s: g * s * (1 - s))           # diagonal only
    assert v.status == "fail"
    v = status("2.4", lambda ta, tb, a, b: ta / b + a * tb / (b * b))
    assert v.status == "fail" and "sign" in v.message
    v = status("2.4", lambda ta, tb, a, b: ta / b)
    assert v.status == "fail"


def test_dce_wrong_answers():
    from labkit.autograd.trace import Graph

    def drop_nothing(g):
        return g
    v = status("2.5", drop_nothing)
    assert v.status == "fail" and "dead nodes remain" in v.message

    def only_ops_used_directly(g):
        used = set(g.outputs)
        for n in g.nodes:
            pass
        return g.with_nodes(n for n in g.nodes if n.name in used or n.op == "input")
    v = status("2.5", only_ops_used_directly)
    assert v.status in ("fail", "error")

    def in_place(g):
        object.__setattr__(g, "nodes", tuple(n for n in g.nodes if n.op != "exp"))
        return g
    v = status("2.5", in_place)
    assert v.status == "fail"
    assert Graph is not None


def test_dce_that_calls_labkits_pass_fails():
    """Issue 10: the reference must not be usable as the answer."""
    from labkit.autograd import passes
    v = status("2.5", lambda g: passes.eliminate_dead_code(g))
    assert v.status == "fail" and "labkit's eliminate_dead_code" in v.message
    v = status("2.5", lambda g: passes.optimize(g))
    assert v.status == "fail" and "labkit's optimize" in v.message
    # a name imported before the check reaches the same function: caught too
    from labkit.autograd.passes import eliminate_dead_code as imported
    v = status("2.5", lambda g: imported(g))
    assert v.status == "fail" and "labkit's eliminate_dead_code" in v.message
    # the tripwire is removed after the check
    assert passes.eliminate_dead_code.__name__ == "eliminate_dead_code"
    assert status("2.5", get("2.5").reference).status == "pass"


# ---- 2.6: backward over the learner's own order -----------------------------------------
# answers written as the reference with one change (tests/mutants.py)

_ACCUMULATE = "accumulate_grad(node, g)"
_ADD = "grads[id(parent)] = grads[id(parent)] + pg if id(parent) in grads else pg"
_ORDER = "reversed(topological_order(loss))"


def test_backward_own_version_passes():
    """.grad accumulated by hand rather than by labkit's accumulate_grad."""
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


def test_backward_recursive_order_crashes_on_the_deep_chain(monkeypatch):
    """The order from a recursive depth-first search (2.1's tempting answer) overflows."""
    from labkit.check import ch02
    monkeypatch.setattr(ch02, "_recursive_topo", _recursive_topo, raising=False)
    v = status("2.6", mutant(get("2.6").reference, _ORDER, "reversed(_recursive_topo(loss))"))
    assert v.status == "error" and "Recursion" in v.message


def test_backward_that_calls_labkits_backward_fails():
    v = status("2.6", lambda loss: loss.backward())
    assert v.status == "fail" and "loss.backward()" in v.message
    from labkit.autograd.tensor import backprop     # imported before the check
    v = status("2.6", lambda loss: backprop(loss, np.ones_like(loss.data)))
    assert v.status == "fail" and "labkit's backprop" in v.message, v.message
    from labkit.autograd import Tensor
    x = Tensor([1.0], requires_grad=True)
    (x * 2).sum().backward()            # restored after the check
    assert x.grad.data.tolist() == [2.0]
