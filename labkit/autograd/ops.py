"""The primitive operations, each with its forward, its local derivatives and its costs side by side.

Every op is one :class:`Op`: ``forward(*xs, **attrs)`` computes the output from numpy arrays;
``vjp(g, out, xs, needs, **attrs)`` is the reverse-mode rule (vector-Jacobian product: the
upstream gradient ``g`` times the local Jacobian, one result per input, ``None`` where
``needs`` says the input needs no gradient); ``jvp(ts, out, xs, **attrs)`` is the
forward-mode rule (Jacobian-vector product with tangents ``ts``, ``None`` for zero).
The chain rule does the rest (Griewank & Walther, *Evaluating Derivatives*, 2nd ed., ch. 3-4).

Costs follow the usual convention (Kaplan et al. 2020, sec. 2.1): a multiply-add is 2 FLOPs,
an elementwise op is 1 FLOP per output element, a reduction 1 FLOP per input element.
``saves`` lists the indices of the inputs the reverse rule reads, and ``saves_output`` says
whether it reads the output: those arrays must be kept alive until backward -- what PyTorch
calls *saved tensors*.

Gradients returned by ``vjp`` may carry the broadcast shape of the output; the engine sums
them back to each input's shape (:func:`unbroadcast`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Op:
    name: str
    forward: Callable
    vjp: Callable
    jvp: Callable
    flops: Callable                 # (out, xs, **attrs) -> forward FLOPs
    bwd_flops: Callable             # (out, xs, needs, **attrs) -> backward FLOPs
    saves: tuple[int, ...] = ()     # indices of the inputs the reverse rule reads
    saves_output: bool = False      # whether the reverse rule reads the output
    elementwise: bool = False
    attrs: tuple[str, ...] = field(default=())


OPS: dict[str, Op] = {}


def register(name: str, *, forward: Callable, vjp: Callable, jvp: Callable,
             flops: Callable | None = None, bwd_flops: Callable | None = None,
             saves: tuple[int, ...] = (), saves_output: bool = False,
             elementwise: bool = False, attrs: tuple[str, ...] = ()) -> Op:
    """Add an op to :data:`OPS`, every field by keyword (see :class:`Op`).

    Default costs: ``flops`` one per output element; ``bwd_flops`` one per output element
    for each input that needs a gradient. ``saves`` lists input indices (``(0, 1)`` for a
    product, whose reverse rule reads both inputs).
    """
    if name in OPS:
        raise ValueError(f"op {name!r} is already registered")
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in saves):
        raise TypeError(f"saves must be input indices (non-negative ints), got {saves!r}")
    flops = flops or (lambda out, xs, **a: int(out.size))
    bwd_flops = bwd_flops or (lambda out, xs, needs, **a: int(out.size) * sum(needs))
    OPS[name] = Op(name, forward, vjp, jvp, flops, bwd_flops, tuple(saves),
                   bool(saves_output), bool(elementwise), tuple(attrs))
    return OPS[name]


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched, giving ``shape``.

    The adjoint of broadcasting is summation (NumPy broadcasting rules, right-aligned).
    """
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    if lead > 0:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def _tsum(*terms):
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


# ---- elementwise binary ----------------------------------------------------------------

register("add", forward=lambda a, b: a + b,
         vjp=lambda g, out, xs, needs: (g if needs[0] else None, g if needs[1] else None),
         jvp=lambda ts, out, xs: _tsum(*ts), elementwise=True)

register("sub", forward=lambda a, b: a - b,
         vjp=lambda g, out, xs, needs: (g if needs[0] else None, -g if needs[1] else None),
         jvp=lambda ts, out, xs: _tsum(ts[0], None if ts[1] is None else -ts[1]),
         elementwise=True)

register("mul", forward=lambda a, b: a * b,
         vjp=lambda g, out, xs, needs: (g * xs[1] if needs[0] else None,
                                    g * xs[0] if needs[1] else None),
         jvp=lambda ts, out, xs: _tsum(None if ts[0] is None else ts[0] * xs[1],
                                   None if ts[1] is None else xs[0] * ts[1]),
         saves=(0, 1), elementwise=True)

register("div", forward=lambda a, b: a / b,
         vjp=lambda g, out, xs, needs: (g / xs[1] if needs[0] else None,
                                    -g * xs[0] / (xs[1] * xs[1]) if needs[1] else None),
         jvp=lambda ts, out, xs: _tsum(None if ts[0] is None else ts[0] / xs[1],
                                   None if ts[1] is None else -out * ts[1] / xs[1]),
         bwd_flops=lambda out, xs, needs: int(out.size) * (needs[0] + 3 * needs[1]),
         saves=(0, 1), elementwise=True)

register("pow", forward=lambda a, b: a ** b,
         vjp=lambda g, out, xs, needs: (g * xs[1] * xs[0] ** (xs[1] - 1) if needs[0] else None,
                                    g * out * np.log(xs[0]) if needs[1] else None),
         jvp=lambda ts, out, xs: _tsum(
             None if ts[0] is None else ts[0] * xs[1] * xs[0] ** (xs[1] - 1),
             None if ts[1] is None else ts[1] * out * np.log(xs[0])),
         bwd_flops=lambda out, xs, needs: int(out.size) * 3 * sum(needs),
         saves=(0, 1), saves_output=True, elementwise=True)

# ---- elementwise unary -----------------------------------------------------------------

register("neg", forward=lambda a: -a, vjp=lambda g, out, xs, needs: (-g,),
         jvp=lambda ts, out, xs: -ts[0], elementwise=True)

register("exp", forward=np.exp, vjp=lambda g, out, xs, needs: (g * out,),
         jvp=lambda ts, out, xs: ts[0] * out, saves_output=True, elementwise=True)

register("log", forward=np.log, vjp=lambda g, out, xs, needs: (g / xs[0],),
         jvp=lambda ts, out, xs: ts[0] / xs[0], saves=(0,), elementwise=True)

register("tanh", forward=np.tanh, vjp=lambda g, out, xs, needs: (g * (1 - out * out),),
         jvp=lambda ts, out, xs: ts[0] * (1 - out * out),
         bwd_flops=lambda out, xs, needs: 3 * int(out.size), saves_output=True, elementwise=True)


def _sigmoid(a):
    # exp of a non-positive number only, so large |a| never overflows
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1 / (1 + e), e / (1 + e)).astype(a.dtype, copy=False)


register("sigmoid", forward=_sigmoid, vjp=lambda g, out, xs, needs: (g * out * (1 - out),),
         jvp=lambda ts, out, xs: ts[0] * out * (1 - out),
         bwd_flops=lambda out, xs, needs: 3 * int(out.size), saves_output=True, elementwise=True)

register("relu", forward=lambda a: np.maximum(a, 0), vjp=lambda g, out, xs, needs: (g * (out > 0),),
         jvp=lambda ts, out, xs: ts[0] * (out > 0), saves_output=True, elementwise=True)

_erfc = np.frompyfunc(math.erfc, 1, 1)


def normal_cdf(a):
    """Φ(a) = erfc(−a/√2) / 2, the standard normal distribution function, elementwise
    (``math.erfc``: exact to double precision, and in the left tail too, where
    ``(1 + erf(a/√2)) / 2`` cancels)."""
    a = np.asarray(a)
    return (0.5 * np.asarray(_erfc(-a / math.sqrt(2.0)), dtype=np.float64)).astype(
        a.dtype if a.dtype.kind == "f" else np.float64, copy=False)


def gelu_forward(a):
    """GELU(x) = x Φ(x), the exact (erf) form — Hendrycks & Gimpel, "Gaussian Error Linear
    Units (GELUs)", arXiv:1606.08415 (2016), §2 — not its tanh approximation
    ``0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))``; ``torch.nn.functional.gelu``'s default
    (``approximate='none'``)."""
    return a * normal_cdf(a)


def gelu_vjp_rule(g, x):
    """GELU backward: d/dx x Φ(x) = Φ(x) + x φ(x), φ(x) = exp(−x²/2) / √(2π), times ``g``.
    The Jacobian is diagonal, so the same product with a tangent for ``g`` is the JVP."""
    return g * (normal_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))


register("gelu", forward=gelu_forward, vjp=lambda g, out, xs, needs: (gelu_vjp_rule(g, xs[0]),),
         jvp=lambda ts, out, xs: gelu_vjp_rule(ts[0], xs[0]), saves=(0,), elementwise=True)

# ---- matrix product --------------------------------------------------------------------


def _matmul_vjp(g, out, xs, needs):
    """C = A B  =>  dA = dC B^T,  dB = A^T dC  (1-D operands are promoted, batch dims summed)."""
    a, b = xs
    if a.ndim == 1 and b.ndim == 1:
        return (g * b if needs[0] else None, g * a if needs[1] else None)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a.ndim == 1:
        g = np.expand_dims(g, -2)
    if b.ndim == 1:
        g = np.expand_dims(g, -1)
    ga = gb = None
    if needs[0]:
        ga = g @ np.swapaxes(b2, -1, -2)
        if a.ndim == 1:
            ga = ga[..., 0, :]
    if needs[1]:
        gb = np.swapaxes(a2, -1, -2) @ g
        if b.ndim == 1:
            gb = gb[..., 0]
    return ga, gb


def _matmul_flops(out, xs):
    return 2 * int(max(out.size, 1)) * xs[0].shape[-1]


register("matmul", forward=np.matmul, vjp=_matmul_vjp,
         jvp=lambda ts, out, xs: _tsum(None if ts[0] is None else ts[0] @ xs[1],
                                   None if ts[1] is None else xs[0] @ ts[1]),
         flops=_matmul_flops,
         bwd_flops=lambda out, xs, needs: _matmul_flops(out, xs) * sum(needs),
         saves=(0, 1))

# ---- reductions ------------------------------------------------------------------------


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axis = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted(a % ndim for a in axis))


def _expand(g, shape, axis, keepdims):
    """Re-insert reduced axes so ``g`` broadcasts against the input again."""
    if not keepdims:
        g = np.expand_dims(g, _axes(axis, len(shape))) if len(shape) else g
    return g


def _count(shape, axis):
    return int(np.prod([shape[a] for a in _axes(axis, len(shape))])) if len(shape) else 1


_red_flops = lambda out, xs, **a: int(xs[0].size)  # noqa: E731

register("sum", forward=lambda a, axis=None, keepdims=False: np.sum(a, axis=axis, keepdims=keepdims),
         vjp=lambda g, out, xs, needs, axis=None, keepdims=False:
         (np.broadcast_to(_expand(g, xs[0].shape, axis, keepdims), xs[0].shape),),
         jvp=lambda ts, out, xs, axis=None, keepdims=False:
         np.sum(ts[0], axis=axis, keepdims=keepdims),
         flops=_red_flops, bwd_flops=lambda out, xs, needs, **a: 0, attrs=("axis", "keepdims"))

register("mean", forward=lambda a, axis=None, keepdims=False: np.mean(a, axis=axis, keepdims=keepdims),
         vjp=lambda g, out, xs, needs, axis=None, keepdims=False:
         (np.broadcast_to(_expand(g, xs[0].shape, axis, keepdims)
                          / _count(xs[0].shape, axis), xs[0].shape),),
         jvp=lambda ts, out, xs, axis=None, keepdims=False:
         np.mean(ts[0], axis=axis, keepdims=keepdims),
         flops=_red_flops, bwd_flops=lambda out, xs, needs, **a: int(xs[0].size),
         attrs=("axis", "keepdims"))


def _max_weights(out, a, axis, keepdims):
    """Where the maximum sits; ties share the gradient equally (as torch.amax does)."""
    m = _expand(out, a.shape, axis, keepdims)
    mask = (a == m).astype(a.dtype)
    return mask / mask.sum(axis=_axes(axis, a.ndim), keepdims=True)


register("max", forward=lambda a, axis=None, keepdims=False: np.max(a, axis=axis, keepdims=keepdims),
         vjp=lambda g, out, xs, needs, axis=None, keepdims=False:
         (_expand(g, xs[0].shape, axis, keepdims) * _max_weights(out, xs[0], axis, keepdims),),
         jvp=lambda ts, out, xs, axis=None, keepdims=False:
         np.sum(ts[0] * _max_weights(out, xs[0], axis, keepdims), axis=_axes(axis, xs[0].ndim),
                keepdims=keepdims),
         flops=_red_flops, bwd_flops=lambda out, xs, needs, **a: 2 * int(xs[0].size),
         saves=(0,), saves_output=True, attrs=("axis", "keepdims"))

# ---- softmax family (fused, so the rule is the textbook one) ------------------------------


def softmax_forward(a, axis=-1):
    """softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x)  (shift for stability)."""
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_vjp_rule(g, s, axis=-1):
    """Softmax backward: J = diag(s) - s s^T, so J^T g = s * (g - sum(g * s))."""
    return s * (g - (g * s).sum(axis=axis, keepdims=True))


def log_softmax_forward(a, axis=-1):
    """log_softmax(x) = x - max x - log sum exp(x - max x)."""
    z = a - a.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


register("softmax", forward=softmax_forward,
         vjp=lambda g, out, xs, needs, axis=-1: (softmax_vjp_rule(g, out, axis),),
         jvp=lambda ts, out, xs, axis=-1: softmax_vjp_rule(ts[0], out, axis),
         flops=lambda out, xs, **a: 4 * int(out.size),
         bwd_flops=lambda out, xs, needs, **a: 4 * int(out.size), saves_output=True, attrs=("axis",))

register("log_softmax", forward=log_softmax_forward,
         vjp=lambda g, out, xs, needs, axis=-1:
         (g - np.exp(out) * g.sum(axis=axis, keepdims=True),),
         jvp=lambda ts, out, xs, axis=-1:
         ts[0] - (np.exp(out) * ts[0]).sum(axis=axis, keepdims=True),
         flops=lambda out, xs, **a: 5 * int(out.size),
         bwd_flops=lambda out, xs, needs, **a: 4 * int(out.size), saves_output=True, attrs=("axis",))

# ---- shape ops (no arithmetic) -----------------------------------------------------------

_free = dict(flops=lambda out, xs, **a: 0, bwd_flops=lambda out, xs, needs, **a: 0)

register("reshape", forward=lambda a, shape: np.reshape(a, shape),
         vjp=lambda g, out, xs, needs, shape: (np.reshape(g, xs[0].shape),),
         jvp=lambda ts, out, xs, shape: np.reshape(ts[0], shape), attrs=("shape",), **_free)

register("transpose", forward=lambda a, axes=None: np.transpose(a, axes),
         vjp=lambda g, out, xs, needs, axes=None:
         (np.transpose(g, None if axes is None else np.argsort(axes)),),
         jvp=lambda ts, out, xs, axes=None: np.transpose(ts[0], axes), attrs=("axes",), **_free)


def _getitem_vjp(g, out, xs, needs, index):
    full = np.zeros(xs[0].shape, dtype=g.dtype)
    np.add.at(full, index, g)  # repeated indices accumulate
    return (full,)


register("getitem", forward=lambda a, index: a[index], vjp=_getitem_vjp,
         jvp=lambda ts, out, xs, index: ts[0][index], attrs=("index",),
         flops=lambda out, xs, **a: 0, bwd_flops=lambda out, xs, needs, **a: int(out.size))
