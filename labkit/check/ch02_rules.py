"""What chapter 02's rule checks (:mod:`labkit.check.ch02`: the VJP rules 2.2, 2.3,
2.8-2.14 and 2.17, central differences 2.7) run: their case generators (shapes, axes,
logits, indices), PyTorch's VJP to compare with (:func:`_torch_vjp`), the calls that turn an
answer's exception or a non-array result into a hint (:func:`_call`, :func:`_array`), the
hints for tempting mistakes (matmul's, GELU's shortcuts), and the ``derive`` functions
:func:`numeric_vjp_on` (2.7) and :func:`cross_entropy_grad` (2.13: the learner's rule inside
labkit's engine).
"""
from __future__ import annotations

import math

import numpy as np

from labkit.autograd import functional as F, rules as _rules
from labkit.autograd.ops import normal_cdf
from labkit.autograd.tensor import Tensor
from labkit.check.ch02_graphs import _grad_of, _reference_backward, _torch
from labkit.check.core import Wrong


# ---- helpers for the rule exercises ----------------------------------------------------------

def _torch_vjp(fn, arrays, g):
    """The gradients of ``<g, fn(*arrays)>`` from PyTorch's autograd (float64)."""
    torch = _torch()
    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward(torch.tensor(np.asarray(g, dtype=np.float64)))
    return [t.grad.numpy() for t in ts]


def _call(answer, *args, what=""):
    """``answer(*args)``; an exception from the answer becomes a hint naming the input."""
    try:
        return answer(*args)
    except (ValueError, IndexError, TypeError) as exc:
        raise Wrong(f"your answer raised {type(exc).__name__} ({exc}) {what}.") from None


def _array(got, what):
    arr = np.asarray(got)
    if arr.dtype == object or arr.dtype.kind not in "fciub":
        raise Wrong(f"{what} must be a numpy array, got {type(got).__name__}.")
    return arr


# ---- 2.2 matmul backward with broadcasting ------------------------------------------------

def _matmul_shapes(rng):
    """(shape of a, shape of b, what broadcasting does) drawn from ``rng``."""
    n, k, m = (int(v) for v in rng.integers(1, 5, size=3))
    s = int(rng.integers(2, 5))
    b1, b2 = (int(v) for v in rng.integers(2, 4, size=2))
    yield (n, k), (k, m), "plain"
    yield (b1, n, k), (k, m), "b broadcast over a's batch"
    yield (n, k), (b1, k, m), "a broadcast over b's batch"
    yield (b1, 1, n, k), (b2, k, m), "both batched, a's size-1 axis stretched"
    yield (1, s, s), (b1, s, s), "square, a's size-1 batch axis stretched"


_MATMUL_HINT = "grad_a = g @ bᵀ and grad_b = aᵀ @ g (swap the last two axes), then sum"


# ---- 2.7 central differences ---------------------------------------------------------------

def _curved(name):
    """Test functions with large second derivatives (forward differences err by h f''/2)."""
    return {"tanh product": lambda a, b: np.tanh(3 * a) * b,
            "softplus of a product": lambda a, b: np.log1p(np.exp(2 * (a @ b))),
            "exp": lambda a: np.exp(2 * a) * a}[name]


def numeric_vjp_on(numeric_vjp, name, xs, g) -> list:
    """The learner's ``numeric_vjp`` on the test function ``name`` (see :func:`_curved`)."""
    return [np.asarray(v, dtype=np.float64) for v in numeric_vjp(_curved(name), xs, g)]


# ---- 2.8, 2.9 elementwise rules with broadcasting ---------------------------------------------

def _broadcast_pairs(rng):
    n, d, m = (int(v) for v in rng.integers(2, 5, size=3))
    yield (n, d), (d,), "a bias over a batch"
    yield (n, 1), (1, m), "an outer product of a column and a row"
    yield (), (n, d), "a scalar times an array"
    yield (2, 1, d), (n, 1), "both stretched"


# ---- 2.17 GELU backward ----------------------------------------------------------------------

_GELU_TANH = "0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))"


def _gelu_shortcuts(g, x, ref_slope):
    """(wrong result, hint) of the mistakes a learner makes in GELU's VJP, most specific
    first; ``ref_slope`` is the reference's result for g = 1."""
    c = math.sqrt(2 / math.pi)
    th = np.tanh(c * (x + 0.044715 * x ** 3))
    tanh_slope = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * 0.044715 * x * x)
    cdf, bump = normal_cdf(x), np.exp(-0.5 * x * x)
    return [(g * tanh_slope, f"that is the derivative of GELU's tanh approximation "
                             f"{_GELU_TANH}; this op is the exact x Φ(x) (torch's default, "
                             f"approximate='none'): Φ(x) = (1 + erf(x/√2)) / 2"),
            (g * cdf, "GELU is x times Φ(x): the product rule gives Φ(x) + x φ(x), not Φ(x) "
                      "alone"),
            (g * (cdf + x * bump), "φ is the normal density exp(−x²/2) / √(2π): divide by "
                                   "√(2π)"),
            (ref_slope, "that is the derivative itself: multiply it by the upstream gradient g")]


# ---- 2.11 sum backward -----------------------------------------------------------------------

def _sum_cases(rng):
    s = int(rng.integers(2, 5))
    yield (s, s), 1, False                          # square: broadcasting g as is goes wrong
    yield (s, s, s), (0, -1), False
    for _ in range(4):
        ndim = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 5, size=ndim))
        pick = int(rng.integers(3))
        if pick == 0:
            axis = None
        elif pick == 1:
            axis = int(rng.integers(-ndim, ndim))
        else:
            k = int(rng.integers(1, ndim + 1))
            axis = tuple(int(a) - (ndim if rng.random() < 0.5 else 0)
                         for a in sorted(rng.choice(ndim, size=k, replace=False)))
        yield shape, axis, bool(rng.integers(2))


def _broadcast_equal(got, g, shape) -> bool:
    try:
        return bool(np.allclose(got, np.broadcast_to(g, shape)))
    except ValueError:
        return False


# ---- 2.12 log-softmax forward ---------------------------------------------------------------

def _logit_cases(rng):
    """(logits, axis): moderate, huge (overflow without the shift), and widely spread (log of
    a softmax underflows to -inf)."""
    for k, (scale, offset) in enumerate(((3.0, 0.0), (50.0, 1000.0), (1000.0, 0.0))):
        ndim = int(rng.integers(1 if k == 0 else 2, 4))
        shape = tuple(int(v) for v in rng.integers(2, 6, size=ndim))
        axis = int(rng.integers(-ndim, -1)) if k == 1 else int(rng.integers(-ndim, ndim))
        yield rng.normal(size=shape) * scale + offset, axis          # case 1: not the last axis


# ---- 2.13 log-softmax backward, and cross-entropy through the engine -----------------------

def cross_entropy_grad(rule, logits, targets) -> np.ndarray:
    """d mean(-log_softmax(logits)[i, targets[i]]) / d logits, computed by labkit's engine
    with ``rule`` as log-softmax's backward (strict: a failing rule raises)."""
    z = Tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    with _rules.RuleSet(log_softmax=rule, strict=True):
        loss = F.cross_entropy(z, np.asarray(targets))
        _reference_backward(loss)
    return _grad_of(z)


# ---- 2.14 indexing backward ----------------------------------------------------------------

def _index_cases(rng):
    v, d = int(rng.integers(3, 6)), int(rng.integers(1, 4))
    rows = rng.integers(-v, v, size=int(rng.integers(v + 2, 2 * v + 3)))   # repeats certain
    yield (v, d), rows, "an embedding lookup x[ids] with repeated ids"
    n, c = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    yield (n, c), (np.arange(n), rng.integers(0, c, size=n)), "x[arange(N), targets]"
    pairs = rng.integers(0, 3, size=(2, 8))
    yield (3, 3), (pairs[0], pairs[1]), "x[rows, cols] with repeated pairs"
    yield (v, d), int(rng.integers(-v, v)), "x[i], one row"
