"""Chapter 02 checkers accept the reference, reject wrong answers with a specific hint,
and report missing ones."""
import numpy as np
import pytest

from labkit.check import evaluate, get


def status(ex, answer):
    return evaluate(ex, answer)


@pytest.mark.parametrize("ex", ["2.1", "2.2", "2.3", "2.4", "2.5"])
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
