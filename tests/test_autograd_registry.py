"""Every op in ``labkit.autograd.ops.OPS``, found by iterating the registry, against torch:
forward, reverse mode (VJP through the engine) and forward mode (JVP through dual numbers) in
float64 on shapes drawn by Hypothesis (broadcast pairs for elementwise ops), and both rules
against central differences. Nothing here lists the ops: what an op is follows from its
registration — how many arrays ``forward`` takes, ``elementwise``, ``attrs`` — and its torch
counterpart is ``torch.<name>`` or ``torch.nn.functional.<name>`` called with the same
attributes (``axis`` → ``dim``, ``keepdims`` → ``keepdim``). The tables below hold only what
cannot be derived; an op that neither derives nor has an entry fails
``test_every_op_is_derived_or_listed``, naming what is missing."""
import inspect

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from labkit.autograd import ops
from labkit.autograd.forward import Dual, dual_apply
from labkit.autograd.tensor import Tensor, apply

EPS = 1e-6


# ---- what cannot be derived --------------------------------------------------------------

def positive(x):
    return np.abs(x) + 0.1


def away_from_zero(x):
    return np.where(x < 0, x - 0.5, x + 0.5)


DOMAINS = {           # inputs off the real line (an input not named: any real number)
    "log": (positive,),
    "pow": (lambda x: np.abs(x) + 0.5, None),    # a positive base: d/db a^b = a^b log a
    "div": (None, away_from_zero),
}


def _permute(x, axes=None):
    return x.permute(tuple(range(x.ndim))[::-1] if axes is None else axes)


def _index(x, index):
    one = lambda i: torch.as_tensor(i) if isinstance(i, np.ndarray) else i  # noqa: E731
    return x[tuple(one(i) for i in index) if isinstance(index, tuple) else one(index)]


TORCH = {             # where torch's function of the op's name takes other arguments
    "max": lambda x, axis=None, keepdims=False: torch.amax(    # ties share, as amax's do
        x, dim=() if axis is None else axis, keepdim=keepdims),
    "transpose": _permute,                        # torch.transpose swaps two dims
    "getitem": _index,                            # no torch.getitem: indexing
}


@st.composite
def _matmul_operands(draw):
    n, k, m = (draw(st.integers(1, 4)) for _ in range(3))
    a = (k,) if draw(st.booleans()) else draw(st.sampled_from([(), (3,), (2, 1)])) + (n, k)
    b = (k,) if draw(st.booleans()) else draw(st.sampled_from([(), (3,), (1, 3)])) + (k, m)
    return [a, b]


SHAPES = {            # operand shapes of ops that are neither elementwise nor one array
    "matmul": _matmul_operands(),
}


@st.composite
def _reduction_attrs(draw, shape):
    nd = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1),
                          st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd,
                                   unique=True).map(tuple)))
    return {"axis": axis, "keepdims": draw(st.booleans())}


@st.composite
def _reshape_attrs(draw, shape):
    size = int(np.prod(shape))
    return {"shape": draw(st.sampled_from([(-1,), tuple(shape[::-1]), (1, size), (size, -1)]))}


@st.composite
def _index_attrs(draw, shape):
    rows = st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=6).map(np.array)
    picks = [rows, st.integers(-shape[0], shape[0] - 1), st.just(slice(1, None)),
             st.just(slice(None, None, 2))]
    if len(shape) > 1:                            # rows repeated, and a column
        picks.append(st.tuples(rows, st.integers(0, shape[1] - 1)))
    return {"index": draw(st.one_of(picks))}


ATTRS = {             # attributes, by the names an op declares: values for an input's shape
    ("axis", "keepdims"): _reduction_attrs,
    ("axis",): lambda shape: st.integers(-len(shape), len(shape) - 1).map(lambda a: {"axis": a}),
    ("shape",): _reshape_attrs,
    ("axes",): lambda shape: st.one_of(st.none(), st.permutations(range(len(shape))).map(
        tuple)).map(lambda a: {"axes": a}),
    ("index",): _index_attrs,
}


# ---- what follows from the registration ----------------------------------------------------

def arity(op) -> int:
    """How many arrays ``op.forward`` takes: a ufunc's ``nin``, else its positional
    parameters without a default that are not attributes."""
    if isinstance(op.forward, np.ufunc):
        return op.forward.nin
    params = inspect.signature(op.forward).parameters.values()
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               and p.name not in op.attrs for p in params)


@st.composite
def _broadcast_operands(draw, n):
    nd = draw(st.integers(0, 3))
    full = [draw(st.integers(1, 4)) for _ in range(nd)]
    shapes = [[s if draw(st.booleans()) else 1 for s in full] for _ in range(n)]
    return [s[draw(st.integers(0, nd)):] for s in shapes]   # right-aligned broadcasting


def spec(name: str):
    """(torch function, operand shapes, attributes for a shape, domains) of OPS[name];
    LookupError naming what is missing when the registration does not give one and no
    table above does."""
    op = ops.OPS[name]
    n = arity(op)
    missing = []
    fn = TORCH.get(name)
    found = getattr(torch, name, None) or getattr(torch.nn.functional, name, None)
    if fn is None and found is not None:
        rename = {"axis": "dim", "keepdims": "keepdim"}
        fn = lambda *xs, **kw: found(*xs, **{rename.get(k, k): v for k, v in kw.items()})  # noqa: E731
    if fn is None:
        missing.append(f"no torch.{name} or torch.nn.functional.{name}: add it to TORCH")
    if name in SHAPES:
        shapes = SHAPES[name]
    elif op.elementwise:
        shapes = _broadcast_operands(n)
    elif n == 1:
        shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(lambda s: [s])
    else:
        shapes = None
        missing.append(f"{n} operands and not elementwise: add their shapes to SHAPES")
    attrs = None
    if op.attrs and tuple(op.attrs) not in ATTRS:
        missing.append(f"attributes {op.attrs}: add how to draw them to ATTRS")
    elif op.attrs:
        attrs = ATTRS[tuple(op.attrs)]
    if missing:
        raise LookupError(f"op {name!r}: " + "; ".join(missing))
    domains = DOMAINS.get(name, (None,) * n)
    return fn, shapes, attrs, domains


def draw_case(data, name):
    fn, shapes, attrs, domains = spec(name)
    shape_list = data.draw(shapes, label="shapes")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    xs = [rng.normal(size=s) for s in shape_list]
    xs = [x if d is None else d(x) for x, d in zip(xs, domains)]
    kw = data.draw(attrs(shape_list[0]), label="attrs") if attrs else {}
    return ops.OPS[name], fn, xs, kw, rng


OPS = sorted(ops.OPS)


def each_op(test):
    """``test(name, data)`` for every op of the registry, on cases Hypothesis draws."""
    return pytest.mark.parametrize("name", OPS)(
        settings(max_examples=15, deadline=None)(given(data=st.data())(test)))


def central(op, xs, t, kw):
    """(f(x + εt) − f(x − εt)) / 2ε: the derivative of ``op`` along the direction ``t``."""
    f = lambda s: op.forward(*(x + s * d for x, d in zip(xs, t)), **kw)  # noqa: E731
    return (f(EPS) - f(-EPS)) / (2 * EPS)


def test_every_op_is_derived_or_listed():
    problems = []
    for name in OPS:
        try:
            spec(name)
        except LookupError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_an_op_with_neither_fails_the_registry_test():
    ops.register("tmp_unknown_op", forward=lambda a, b, mode: a, vjp=None, jvp=None,
                 attrs=("mode",))
    try:
        with pytest.raises(LookupError) as info:
            spec("tmp_unknown_op")
    finally:
        del ops.OPS["tmp_unknown_op"]
    message = str(info.value)
    assert "TORCH" in message and "SHAPES" in message and "ATTRS" in message
    assert arity(ops.OPS["mul"]) == 2 and arity(ops.OPS["exp"]) == 1
    assert arity(ops.OPS["reshape"]) == 1 and arity(ops.OPS["matmul"]) == 2


@each_op
def test_forward_and_vjp_match_torch_and_central_differences(name, data):
    op, fn, xs, kw, rng = draw_case(data, name)
    ts = [Tensor(x.copy(), requires_grad=True) for x in xs]
    out = apply(op, *ts, **kw)
    tt = [torch.tensor(x, requires_grad=True) for x in xs]
    want = fn(*tt, **kw)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.data, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.normal(size=out.shape)
    out.backward(g)
    want.backward(torch.tensor(g))
    for i, (a, b) in enumerate(zip(ts, tt)):
        assert a.grad.shape == a.shape, f"input {i}: the gradient is summed back to its shape"
        np.testing.assert_allclose(a.grad.data, b.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"gradient of input {i}")
    # <g, J t> by central differences equals <J^T g, t>, for a random direction t
    t = [rng.normal(size=x.shape) for x in xs]
    directional = np.sum(g * central(op, xs, t, kw))
    assert sum(np.sum(a.grad.data * d) for a, d in zip(ts, t)) == pytest.approx(
        directional, rel=1e-5, abs=1e-7)
    if len(xs) > 1:             # one input needs a gradient, the other not
        for k in range(len(xs)):
            only = [Tensor(x.copy(), requires_grad=(i == k)) for i, x in enumerate(xs)]
            apply(op, *only, **kw).backward(g)
            np.testing.assert_allclose(only[k].grad.data, tt[k].grad.numpy(), rtol=1e-9,
                                       atol=1e-12, err_msg=f"input {k} alone")


@each_op
def test_jvp_matches_torch_and_central_differences(name, data):
    op, fn, xs, kw, rng = draw_case(data, name)
    t = [rng.normal(size=x.shape) for x in xs]
    got = dual_apply(name, *(Dual(x, d) for x, d in zip(xs, t)), **kw)
    _, want = torch.func.jvp(lambda *a: fn(*a, **kw),
                             tuple(torch.tensor(x) for x in xs), tuple(torch.tensor(d) for d in t))
    np.testing.assert_allclose(got.tangent, want.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.tangent, central(op, xs, t, kw), rtol=1e-5, atol=1e-7)
    if len(xs) > 1:             # a tangent on one input only (None for the others)
        parts = [dual_apply(name, *(Dual(x, d if i == k else None) for i, (x, d) in
                                    enumerate(zip(xs, t))), **kw).tangent
                 for k in range(len(xs))]
        np.testing.assert_allclose(sum(parts), got.tangent, rtol=1e-10, atol=1e-12)
