"""Gradients of every op against torch on shapes drawn by Hypothesis (broadcasting, keepdims,
odd sizes), all in float64."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.autograd import Tensor, functional as F

SET = settings(max_examples=25, deadline=None)


def both(fn_lab, fn_torch, *arrays, cotangent_seed=0):
    ts = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_l, out_t = fn_lab(*ts), fn_torch(*tt)
    np.testing.assert_allclose(out_l.data, out_t.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = np.random.default_rng(cotangent_seed).normal(size=out_l.shape)
    out_l.backward(g)
    out_t.backward(torch.tensor(g))
    for a, b in zip(ts, tt):
        np.testing.assert_allclose(a.grad.data, b.grad.numpy(), rtol=1e-9, atol=1e-12)


@st.composite
def broadcast_pair(draw):
    nd = draw(st.integers(0, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(nd)]
    a = [s if draw(st.booleans()) else 1 for s in shape]
    b = [s if draw(st.booleans()) else 1 for s in shape]
    a = a[draw(st.integers(0, nd)):]   # drop leading dims: right-aligned broadcasting
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    return rng.normal(size=a), rng.normal(size=b)


BINARY = [
    (lambda a, b: a + b, lambda a, b: a + b),
    (lambda a, b: a - b, lambda a, b: a - b),
    (lambda a, b: a * b, lambda a, b: a * b),
    (lambda a, b: a / (b * b + 0.5), lambda a, b: a / (b * b + 0.5)),
    (lambda a, b: (a * a + 0.1) ** b, lambda a, b: (a * a + 0.1) ** b),
]


@pytest.mark.parametrize("k", range(len(BINARY)))
@SET
@given(pair=broadcast_pair())
def test_binary_broadcasting_matches_torch(k, pair):
    both(*BINARY[k], *pair)


UNARY = {
    "exp": (lambda a: a.exp(), torch.exp),
    "log": (lambda a: (a * a + 0.1).log(), lambda a: torch.log(a * a + 0.1)),
    "tanh": (lambda a: a.tanh(), torch.tanh),
    "sigmoid": (lambda a: a.sigmoid(), torch.sigmoid),
    "relu": (lambda a: a.relu(), torch.relu),
    "neg": (lambda a: -a, lambda a: -a),
    "scalar pow": (lambda a: a ** 3, lambda a: a ** 3),
    "rsub rdiv": (lambda a: 2.0 - 1.0 / (a * a + 1), lambda a: 2.0 - 1.0 / (a * a + 1)),
}

shapes = st.lists(st.integers(1, 6), min_size=0, max_size=3)


@pytest.mark.parametrize("name", sorted(UNARY))
@SET
@given(shape=shapes, seed=st.integers(0, 10_000))
def test_unary_matches_torch(name, shape, seed):
    both(*UNARY[name], np.random.default_rng(seed).normal(size=shape))


@st.composite
def reduction_case(draw):
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    nd = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1),
                          st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True)
                          .map(tuple)))
    keep = draw(st.booleans())
    x = np.random.default_rng(draw(st.integers(0, 10_000))).normal(size=shape)
    if draw(st.booleans()):
        x = np.round(x)  # ties for max
    return x, axis, keep


def _tdim(axis, nd):
    return tuple(range(nd)) if axis is None else axis


@SET
@given(case=reduction_case())
def test_reductions_match_torch(case):
    x, axis, keep = case
    d = _tdim(axis, x.ndim)
    both(lambda a: a.sum(axis, keep), lambda a: a.sum(d, keepdim=keep), x)
    both(lambda a: a.mean(axis, keep), lambda a: a.mean(d, keepdim=keep), x)
    both(lambda a: a.max(axis, keep), lambda a: torch.amax(a, d, keepdim=keep), x)


@st.composite
def matmul_case(draw):
    n, k, m = (draw(st.integers(1, 6)) for _ in range(3))
    batch_a = draw(st.sampled_from([(), (3,), (2, 1), (1,)]))
    batch_b = draw(st.sampled_from([(), (3,), (1, 3), (2, 3)]))
    a_vec, b_vec = draw(st.booleans()), draw(st.booleans())
    a = (k,) if a_vec else batch_a + (n, k)
    b = (k,) if b_vec else batch_b + (k, m)
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    return rng.normal(size=a), rng.normal(size=b)


@SET
@given(case=matmul_case())
def test_matmul_with_batch_broadcasting_matches_torch(case):
    a, b = case
    both(lambda x, y: x @ y, lambda x, y: x @ y, a, b)


@SET
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=st.integers(0, 9999))
def test_shape_ops_match_torch(shape, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    perm = tuple(np.random.default_rng(seed).permutation(len(shape)))
    both(lambda a: a.transpose(perm) * 2, lambda a: a.permute(perm) * 2, x)
    both(lambda a: a.reshape(-1) * 2, lambda a: a.reshape(-1) * 2, x)
    idx = np.random.default_rng(seed).integers(0, shape[0], size=7)  # repeated indices
    both(lambda a: a[idx] * 2, lambda a: a[torch.tensor(idx)] * 2, x)
    both(lambda a: a[1:] * 2, lambda a: a[1:] * 2, x)


@SET
@given(n=st.integers(1, 7), c=st.integers(1, 9), seed=st.integers(0, 9999))
def test_softmax_family_and_cross_entropy_match_torch(n, c, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, c)) * 5
    y = rng.integers(0, c, n)
    both(lambda a: F.softmax(a, 1), lambda a: torch.softmax(a, 1), x)
    both(lambda a: F.softmax(a, 0), lambda a: torch.softmax(a, 0), x)
    both(lambda a: F.log_softmax(a, -1), lambda a: torch.log_softmax(a, -1), x)
    both(lambda a: F.cross_entropy(a, y),
         lambda a: torch.nn.functional.cross_entropy(a, torch.tensor(y)), x)


def test_cross_entropy_rejects_bad_targets():
    x = Tensor(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="targets"):
        F.cross_entropy(x, np.array([0, 1, 4]))
    with pytest.raises(ValueError, match="targets"):
        F.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(ValueError, match="2-D"):
        F.cross_entropy(Tensor(np.zeros(3)), np.array([0, 1, 2]))


def test_sigmoid_is_stable_for_large_inputs():
    x = Tensor(np.array([-1000.0, 0.0, 1000.0]), requires_grad=True)
    y = x.sigmoid()
    np.testing.assert_allclose(y.data, [0.0, 0.5, 1.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.data, [0.0, 0.25, 0.0])


# ---- issue 9: register() by keyword, saves as input indices -------------------------------

def test_register_takes_keywords_and_index_saves():
    from labkit.autograd import ops
    with pytest.raises(TypeError):
        ops.register("tmp_op", lambda a: a, lambda g, o, xs, n: (g,), lambda ts, o, xs: ts[0])
    with pytest.raises(TypeError, match="saves"):
        ops.register("tmp_op", forward=lambda a: a, vjp=lambda g, o, xs, n: (g,),
                     jvp=lambda ts, o, xs: ts[0], saves=("x0",))
    with pytest.raises(ValueError, match="already registered"):
        ops.register("mul", forward=np.multiply, vjp=None, jvp=None)
    assert "tmp_op" not in ops.OPS
    assert ops.OPS["mul"].saves == (0, 1) and not ops.OPS["mul"].saves_output
    assert ops.OPS["exp"].saves == () and ops.OPS["exp"].saves_output
    assert ops.OPS["max"].saves == (0,) and ops.OPS["max"].saves_output
