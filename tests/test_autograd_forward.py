"""Forward mode (dual numbers) against reverse mode and central differences."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.autograd import functional as F, grad, jvp, vjp
from labkit.autograd.forward import (Dual, jacobian_forward, jacobian_reverse, make_function,
                                     mode_cost)

FUNCS = {
    "mlp": lambda x: (x.reshape(2, 3) @ np.linspace(-1, 1, 12).reshape(3, 4)).tanh().sum(0),
    "softmax": lambda x: F.softmax(x * 2.0, -1),
    "log_softmax": lambda x: F.log_softmax(x.reshape(3, 2), 0).reshape(-1),
    "arith": lambda x: (x * x + 1.0).log() / (x.sigmoid() + 1.0) - x.exp() * 0.1,
    "pow_div": lambda x: (x * x + 0.5) ** 1.5 - 2.0 / (x * x + 1.0),
    "reduce": lambda x: (x.reshape(2, 3).max(1, keepdims=True) * x.reshape(2, 3)).mean(0),
    "relu_index": lambda x: x.relu()[np.array([0, 2, 2, 5])] * x.sum(),
    "transpose": lambda x: x.reshape(2, 3).T.reshape(-1) * x,
}


def central(fn, x, eps=1e-6):
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        cols.append(((fn(Dual(x + e)).primal - fn(Dual(x - e)).primal) / (2 * eps)).ravel())
    return np.stack(cols, 1)


@pytest.mark.parametrize("name", sorted(FUNCS))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 9999))
def test_forward_equals_reverse_equals_central(name, seed):
    fn = FUNCS[name]
    x = np.random.default_rng(seed).normal(size=6)
    jf, jr = jacobian_forward(fn, x), jacobian_reverse(fn, x)
    np.testing.assert_allclose(jf, jr, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(jf, central(fn, x), rtol=1e-5, atol=1e-6)


def test_jvp_vjp_grad_helpers():
    fn = lambda a, b: (a * b).sum()  # noqa: E731
    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    out, t = jvp(fn, (a, b), (np.ones(2), np.zeros(2)))
    assert out == pytest.approx(1.0) and t == pytest.approx(2.0)
    out, (ga, gb) = vjp(fn, (a, b), 1.0)
    np.testing.assert_allclose(ga, b)
    np.testing.assert_allclose(gb, a)
    np.testing.assert_allclose(grad(fn, argnums=1)(a, b), a)
    with pytest.raises(ValueError, match="one tangent per primal"):
        jvp(fn, (a, b), (a,))
    with pytest.raises(ValueError, match="scalar"):
        grad(lambda x: x * 2)(a)
    with pytest.raises(ValueError, match="tangent has shape"):
        Dual(np.ones(2), np.ones(3))


def test_mode_cost_counts_passes_and_jacobians_agree():
    c = mode_cost(7, 2, repeats=1)
    assert (c.forward_passes, c.reverse_passes) == (7, 2)
    assert c.forward_seconds > 0 and c.reverse_seconds > 0
    f = make_function(5, 3, seed=2)
    x = np.random.default_rng(0).normal(size=5)
    np.testing.assert_allclose(jacobian_forward(f, x), jacobian_reverse(f, x), atol=1e-12)
    with pytest.raises(ValueError, match="n must be"):
        make_function(0, 3)
    with pytest.raises(ValueError, match="repeats"):
        mode_cost(2, 2, repeats=0)


def test_mode_cost_times_the_jacobians_it_is_given():
    calls = []

    def counting(jac):
        def run(fn, x):
            calls.append(jac.__name__)
            return jac(fn, x)
        return run
    c = mode_cost(3, 2, repeats=2, jacobians=(counting(jacobian_forward),
                                               counting(jacobian_reverse)))
    assert calls == ["jacobian_forward"] * 2 + ["jacobian_reverse"] * 2
    assert (c.forward_passes, c.reverse_passes) == (3, 2)
    with pytest.raises(TypeError, match="jacobians must be a pair"):
        mode_cost(2, 2, jacobians=(jacobian_forward, None))


def test_numeric_vjp_is_central_differences():
    from labkit.autograd.gradcheck import numeric_vjp

    rng = np.random.default_rng(0)
    a, b, g = rng.normal(size=(2, 3)), rng.normal(size=(3, 2)), rng.normal(size=(2, 2))
    ga, gb = numeric_vjp(lambda a, b: np.exp(a @ b), [a, b], g)
    e = np.exp(a @ b) * g
    np.testing.assert_allclose(ga, e @ b.T, rtol=1e-8)     # O(eps^2): far below forward's
    np.testing.assert_allclose(gb, a.T @ e, rtol=1e-8)
    with pytest.raises(TypeError, match="f must be a function"):
        numeric_vjp(None, [a], g)
    with pytest.raises(ValueError, match="eps"):
        numeric_vjp(np.exp, [a], g, eps=0)
