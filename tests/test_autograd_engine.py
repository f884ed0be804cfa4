"""Engine semantics: deep graphs, accumulation, errors, no_grad/detach, dtypes."""
import numpy as np
import pytest
import torch

from labkit.autograd import Tensor, graph_bytes, no_grad, topological_order
from labkit.autograd.gradcheck import gradcheck
from labkit.autograd.ops import Op, register, OPS
from labkit.autograd.tensor import apply


def test_ten_thousand_deep_chain():
    x = Tensor(np.array(0.5), requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001 + 0.0
    y.backward()
    assert x.grad.item() == pytest.approx(1.0001 ** 10_000, rel=1e-9)


def test_gradients_accumulate_like_torch():
    a = np.array([1.0, -2.0, 3.0])
    x, xt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    for _ in range(3):
        (x * x).sum().backward()
        (xt * xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy())
    np.testing.assert_allclose(x.grad.data, 6 * a)


def test_diamond_graph_sums_both_paths():
    x = Tensor(np.array(3.0), requires_grad=True)
    a = x * 2
    y = a * a + a.exp()   # dy/dx = 2 * (2a + e^a)
    y.backward()
    assert x.grad.item() == pytest.approx(2 * (2 * 6 + np.exp(6)))


def test_only_leaves_get_grad_and_order_is_topological():
    x = Tensor(np.ones(2), requires_grad=True)
    h = x * 3
    y = (h * x).sum()
    y.backward()
    assert h.grad is None and x.grad is not None
    order = topological_order(y)
    pos = {id(t): i for i, t in enumerate(order)}
    for t in order:
        for p in t._parents:
            assert pos[id(p)] < pos[id(t)]


def test_non_scalar_backward_needs_gradient():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match=r"shape \(2, 3\).*gradient="):
        y.backward()
    with pytest.raises(ValueError, match="gradient has shape"):
        y.backward(np.ones(3))
    y.backward(np.ones((2, 3)))
    np.testing.assert_allclose(x.grad.data, 2 * np.ones((2, 3)))


def test_backward_without_grad_raises():
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor(np.ones(1)).sum().backward()


def test_no_grad_and_detach_cut_the_graph():
    x = Tensor(np.ones(3), requires_grad=True)
    with no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    z = (x * 2).detach()
    assert not z.requires_grad and z.grad_fn is None
    w = x * 3
    assert w.detach().data is w.data  # shares memory, as in torch
    loss = (x * 2).sum()
    assert graph_bytes(loss) > 0 and graph_bytes(loss.detach()) == 0


def test_no_grad_as_decorator_restores_state():
    @no_grad()
    def f(t):
        return t * 2
    x = Tensor(np.ones(2), requires_grad=True)
    assert not f(x).requires_grad
    assert (x * 2).requires_grad


def test_surface_item_shape_dtype():
    t = Tensor([[1.0, 2.0]])
    assert t.shape == (1, 2) and t.dtype == np.float32
    assert Tensor(np.zeros(2)).dtype == np.float64
    assert Tensor(np.array([7.5])).item() == 7.5
    with pytest.raises(ValueError, match="one element"):
        t.item()
    with pytest.raises(ValueError, match="floating"):
        Tensor(np.arange(3), requires_grad=True)


def test_float32_stays_float32_with_python_scalars():
    x = Tensor(np.ones(2, np.float32), requires_grad=True)
    y = (x * 2.5 + 1).sum()
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32


def test_numpy_on_the_left_defers_to_tensor():
    w = np.arange(6.0).reshape(2, 3)
    x = Tensor(np.ones(3), requires_grad=True)
    y = w @ x
    assert isinstance(y, Tensor)
    (y.sum() + (w * x).sum()).backward()
    np.testing.assert_allclose(x.grad.data, 2 * w.sum(0))


def test_gradcheck_passes_right_and_catches_wrong_rule():
    rng = np.random.default_rng(1)
    assert gradcheck(lambda a, b: ((a @ b).tanh() * a.sum()).mean(), rng.normal(size=(2, 3)),
                     rng.normal(size=(3, 4))).ok
    bad = Op("bad_square", lambda a: a * a, lambda g, out, xs, needs: (g * xs[0],),
             lambda ts, out, xs: ts[0], lambda out, xs: 0, lambda out, xs, needs: 0)
    res = gradcheck(lambda a: apply(bad, a), rng.normal(size=4) + 3)
    assert not res.ok and res.max_abs_error > 1
    with pytest.raises(AssertionError):
        gradcheck(lambda a: apply(bad, a), np.ones(2), raise_on_failure=True)
    assert "bad_square" not in OPS and register is not None


def test_bad_shapes_name_the_op_and_the_shapes():
    from labkit.autograd.forward import Dual

    a = Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match=r"matmul .* shapes \(2, 3\) and \(4, 5\)"):
        a @ Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"add .* shapes \(2, 3\) and \(4,\)"):
        a + Tensor(np.ones(4))
    with pytest.raises(ValueError, match=r"reshape .* \(2, 3\), shape=\(4,\)"):
        a.reshape(4)
    with pytest.raises(ValueError, match=r"sum .* axis=5"):
        a.sum(axis=5)
    with pytest.raises(ValueError, match=r"mul .* shapes \(3,\) and \(2,\)"):
        Dual(np.ones(3), np.ones(3)) * Dual(np.ones(2))


def test_mse_loss_value_and_gradient_match_torch():
    from labkit.autograd import functional as F

    rng = np.random.default_rng(7)
    p, t = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    pred = Tensor(p, requires_grad=True)
    loss = F.mse_loss(pred, Tensor(t))
    loss.backward()
    tp = torch.tensor(p, requires_grad=True)
    ref = torch.nn.functional.mse_loss(tp, torch.tensor(t))
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(pred.grad.data, tp.grad.numpy(), rtol=1e-12)


# ---- issue 9: tracing and counters are thread-local, like grad mode -----------------------

def test_counters_and_traces_do_not_see_other_threads():
    import threading

    from labkit.autograd import count
    from labkit.autograd.trace import trace

    done = threading.Event()
    go = threading.Event()

    def other():
        go.wait(5)
        x = Tensor(np.ones(3), requires_grad=True)
        for _ in range(50):
            (x * 2.0).exp().sum()
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with count() as c:
        go.set()
        done.wait(5)
        y = Tensor(np.ones(2)) + 1.0
    th.join()
    assert dict(c.calls) == {"add": 1}          # the other thread's 150 ops were not counted

    done.clear(); go.clear()
    th = threading.Thread(target=other)
    th.start()

    def fn(x):
        go.set()
        done.wait(5)
        return x * 3.0
    g = trace(fn, np.ones(2))
    th.join()
    assert [n.op for n in g.nodes if n.op not in ("input", "const")] == ["mul"]
    assert y.data.tolist() == [2.0, 2.0]


def test_local_vjp_and_accumulate_grad():
    from labkit.autograd import accumulate_grad, local_vjp
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * x
    pairs = local_vjp(y, np.ones(2))
    assert [p is x for p, _ in pairs] == [True, True]          # x reached twice
    assert sum(g for _, g in pairs).tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="leaf"):
        local_vjp(x, np.ones(2))
    accumulate_grad(x, np.ones(2))
    accumulate_grad(x, np.ones(2))
    assert x.grad.data.tolist() == [2.0, 2.0]
