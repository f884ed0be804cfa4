"""The switch through which labkit's engine runs a learner's gradient rules
(labkit.autograd.rules): the adapters against torch, labkit's rule taking over where a
learner's fails (and saying so), strict mode, and training the digits MLP with rules of
the learner's form."""
import warnings

import numpy as np
import pytest
import torch

from labkit.autograd import Tensor, functional as F
from labkit.autograd.rules import (FORMS, REFERENCE_FORWARDS, REFERENCES, RuleFailed, RuleSet,
                                   active_vjp)
from labkit.autograd.ops import OPS
from labkit.training.train import torch_gradient_error, train_digits


def _sum_to(x, shape):
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def learner_rules(**changes):
    """Rules written as chapter 02 asks (not labkit's references)."""
    rules = dict(
        matmul=lambda g, a, b: (_sum_to(g @ np.swapaxes(b, -1, -2), a.shape),
                                _sum_to(np.swapaxes(a, -1, -2) @ g, b.shape)),
        add=lambda g, a, b: (_sum_to(g, np.shape(a)), _sum_to(g, np.shape(b))),
        mul=lambda g, a, b: (_sum_to(g * b, np.shape(a)), _sum_to(g * a, np.shape(b))),
        relu=lambda g, x: g * (x > 0),
        sum=lambda g, shape, axis, keepdims: np.broadcast_to(
            g if keepdims else np.expand_dims(
                g, tuple(range(len(shape))) if axis is None else axis), shape),
        log_softmax=lambda g, y, axis: g - np.exp(y) * g.sum(axis=axis, keepdims=True),
        getitem=lambda g, shape, index: _add_at(g, shape, index),
        softmax=lambda g, s: s * (g - (g * s).sum(axis=-1, keepdims=True)))
    rules.update(changes)
    forward = {"log_softmax": lambda x, axis: (x - x.max(axis, keepdims=True)) - np.log(
        np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True))}
    return RuleSet(**rules, forward=forward)


def _add_at(g, shape, index):
    out = np.zeros(shape, dtype=g.dtype)
    np.add.at(out, index, g)
    return out


def _grads(fn, *arrays, rules=None):
    leaves = [Tensor(a, requires_grad=True) for a in arrays]
    if rules is None:
        out = fn(*leaves)
        out.backward(np.ones(out.shape))
    else:
        with rules:
            out = fn(*leaves)
            out.backward(np.ones(out.shape))
    return out.data, [t.grad.data for t in leaves]


@pytest.mark.parametrize("fn, shapes", [
    (lambda a, b: a @ b, [(3,), (3, 4)]),                 # 1-D operands: promoted
    (lambda a, b: a @ b, [(2, 3, 4), (4,)]),
    (lambda a, b: a @ b, [(4, 1, 2, 3), (5, 3, 2)]),
    (lambda a, b: (a * b + a).sum(axis=-1), [(2, 1, 3), (4, 1)]),
    (lambda x: x.mean(axis=(0, 2), keepdims=False), [(2, 3, 4)]),     # mean: the sum rule / n
    (lambda x: x.mean(), [(3, 5)]),
    (lambda x: F.softmax(x, 0), [(4, 3)]),                # another axis: moved to the last
    (lambda x: F.cross_entropy(x, np.array([1, 1, 0])), [(3, 4)]),
    (lambda x: x[np.array([0, 2, 2, 0])].relu(), [(3, 2)]),
])
def test_learner_rules_in_the_engine_give_labkits_gradients(fn, shapes):
    rng = np.random.default_rng(len(shapes))
    arrays = [rng.normal(size=s) for s in shapes]
    mine = learner_rules()
    out, got = _grads(fn, *arrays, rules=mine)
    want_out, want = _grads(fn, *arrays)
    assert np.allclose(out, want_out)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.allclose(g, w, atol=1e-12)
    assert sum(mine.calls.values()) > 0 and not mine.fallbacks


def test_mean_runs_the_sum_rule_and_the_report_says_whose_rule_ran():
    mine = RuleSet(sum=lambda g, shape, axis, keepdims: np.broadcast_to(
        np.expand_dims(g, axis) if not keepdims else g, shape))
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    with mine:
        x.mean(axis=1).sum(axis=0).backward()
    assert np.allclose(x.grad.data, 1 / 3)
    assert mine.calls == {"mean": 1, "sum": 1}
    report = mine.report()
    assert "mean" in report and "yours" in report and "labkit's" in report
    refs = RuleSet(**REFERENCES, forward=dict(REFERENCE_FORWARDS))
    assert refs.whose("matmul") == "labkit's reference" == refs.whose("log_softmax forward")
    assert "check put labkit's in its place" in refs.report()


def test_labkits_rule_takes_over_where_the_learners_fails_and_says_so():
    def stub(*args):
        raise NotImplementedError

    def unsummed(g, a, b):
        return g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g
    mine = RuleSet(relu=stub, matmul=unsummed,
                   forward={"log_softmax": lambda x, axis: x - np.log(np.exp(x).sum(
                       axis, keepdims=True))})
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 3, 5)), rng.normal(size=(5, 2))
    fn = lambda a, b: F.log_softmax((a @ b).relu() * 1000, axis=-1).sum()  # noqa: E731
    with pytest.warns(RuntimeWarning) as warned, np.errstate(all="ignore"):
        out, got = _grads(fn, a, b, rules=mine)
    assert sorted(str(w.message).split(" took over")[0] for w in warned) == [
        "labkit's log_softmax forward rule", "labkit's matmul rule", "labkit's relu rule"]
    want_out, want = _grads(fn, a, b)
    assert np.allclose(out, want_out) and all(np.allclose(g, w) for g, w in zip(got, want))
    assert mine.fallbacks == {"relu": 1, "matmul": 1, "log_softmax forward": 1}
    assert "not written yet" in mine.reasons["relu"]
    assert "grad_b has shape (4, 5, 2), expected (5, 2)" in mine.reasons["matmul"]
    assert "NaN or infinity" in mine.reasons["log_softmax forward"]
    assert "took over because yours" in mine.report()
    with warnings.catch_warnings():                      # warned once per op, not per call
        warnings.simplefilter("error")
        with np.errstate(all="ignore"):
            _grads(fn, a, b, rules=mine)
    assert mine.fallbacks["relu"] == 2


def test_strict_rule_sets_raise_and_nothing_leaks_out_of_the_with_block():
    strict = RuleSet(matmul=lambda g, a, b: (g, g), strict=True)
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(RuleFailed, match="grad_a has shape"):
        with strict:
            (x @ np.ones((3, 2))).sum().backward()
    assert active_vjp(OPS["matmul"]) is None
    (x @ np.ones((3, 2))).sum().backward()               # labkit's rule again
    assert np.allclose(x.grad.data, 2.0)


def test_rule_set_arguments_are_checked():
    with pytest.raises(ValueError, match="no rule form for \\['conv'\\]"):
        RuleSet(conv=lambda g: g)
    with pytest.raises(ValueError, match="mean uses the sum rule"):
        RuleSet(mean=lambda g: g)
    with pytest.raises(TypeError, match="relu must be a function"):
        RuleSet(relu=3)
    with pytest.raises(ValueError, match="forward= replaces"):
        RuleSet(forward={"tanh": np.tanh})
    with pytest.raises(TypeError, match="rules must be a labkit.autograd.rules.RuleSet"):
        train_digits(epochs=1, rules={"relu": None})
    assert set(FORMS) == {"matmul", "add", "mul", "relu", "sum", "mean", "log_softmax",
                          "getitem", "softmax"}


def test_references_agree_with_torch():
    rng = np.random.default_rng(3)
    a, b, g = rng.normal(size=(2, 1, 3, 4)), rng.normal(size=(5, 4, 2)), rng.normal(size=(2, 5, 3, 2))
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ta @ tb).backward(torch.tensor(g))
    ga, gb = REFERENCES["matmul"](g, a, b)
    assert np.allclose(ga, ta.grad.numpy()) and np.allclose(gb, tb.grad.numpy())
    x = rng.normal(size=(3, 4)) * 1000
    assert np.allclose(REFERENCE_FORWARDS["log_softmax"](x, 0),
                       torch.log_softmax(torch.tensor(x), 0).numpy())
    full = REFERENCES["getitem"](np.ones(4), (3,), np.array([0, 0, 2, 0]))
    assert full.tolist() == [3.0, 0.0, 1.0]


def test_digits_train_with_the_learners_rules_and_match_torch():
    mine = learner_rules()
    assert torch_gradient_error(rules=mine) < 1e-12
    res = train_digits(hidden=32, epochs=10, rules=mine)
    assert res.test_accuracy >= 0.9
    for op in ("matmul", "add", "relu", "mean", "log_softmax", "getitem", "log_softmax forward"):
        assert mine.calls[op] > 0, op
    assert not mine.fallbacks
    plain = train_digits(hidden=32, epochs=10)
    assert res.test_accuracy == pytest.approx(plain.test_accuracy, abs=0.01)
