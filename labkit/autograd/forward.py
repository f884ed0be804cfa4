"""Forward mode (dual numbers) next to reverse mode, so the two can be compared on one function.

A dual number carries a value and a tangent, x + x' e with e^2 = 0; evaluating f on it gives
f(x) + (J_f x') e, a Jacobian-vector product (JVP) in one forward pass (Baydin et al., JMLR
2018, sec. 3.1). Reverse mode gives a vector-Jacobian product (VJP) per backward pass.
For f: R^n -> R^m the full Jacobian costs n forward passes or m reverse passes -- which is
why a scalar loss over millions of parameters (m = 1) is differentiated in reverse.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from labkit.autograd.ops import OPS
from labkit.autograd.tensor import OpsMixin, Tensor, _as_array, _freeze, run_forward  # noqa: F401
from labkit.validate import integer


def _arrays(name: str, values) -> tuple[np.ndarray, ...]:
    """``values`` as a tuple of numeric arrays: a tuple or list of them, one per argument of
    ``fn`` (a single array is not accepted: it would be unpacked row by row)."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{name} must be a tuple or list with one array per argument of fn, "
                        f"got {type(values).__name__}; for one argument write ({name[:-1]},)")
    if not values:
        raise ValueError(f"{name} must hold at least one array (one per argument of fn)")
    return tuple(_as_array(v, name=f"{name}[{i}]") for i, v in enumerate(values))


def _check_fn(fn) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__} {fn!r}")


class Dual(OpsMixin):
    """A value with a tangent; ops propagate the tangent with each op's ``jvp`` rule."""
    __slots__ = ("primal", "tangent")

    def __init__(self, primal, tangent=None):
        self.primal = np.asarray(primal)
        if tangent is not None:
            tangent = np.asarray(tangent, dtype=self.primal.dtype)
            if tangent.shape != self.primal.shape:
                raise ValueError(f"tangent has shape {tangent.shape}, primal has shape "
                                 f"{self.primal.shape}; they must match")
        self.tangent = tangent

    @property
    def shape(self):
        return self.primal.shape

    @property
    def ndim(self):
        return self.primal.ndim

    @property
    def dtype(self):
        return self.primal.dtype

    def __repr__(self):
        return f"Dual(primal={self.primal!r}, tangent={self.tangent!r})"

    def _apply(self, name, *operands, **attrs):
        return dual_apply(name, *operands, **attrs)


def dual_apply(name: str, *operands, **attrs) -> Dual:
    op = OPS[name]
    like = next((o.primal for o in operands if isinstance(o, Dual)), None)
    duals = []
    for o in operands:
        if isinstance(o, Dual):
            duals.append(o)
        elif isinstance(o, (int, float)) and like is not None and like.dtype.kind == "f":
            duals.append(Dual(np.asarray(o, dtype=like.dtype)))
        else:
            duals.append(Dual(getattr(o, "data", o)))
    xs = tuple(d.primal for d in duals)
    ts = tuple(d.tangent for d in duals)
    out = run_forward(op, xs, attrs)
    if all(t is None for t in ts):
        return Dual(out)
    t = op.jvp(ts, out, xs, **attrs)
    t = np.broadcast_to(t, np.shape(out)).astype(np.asarray(out).dtype, copy=True)
    return Dual(out, t)


def jvp(fn, primals, tangents):
    """(f(primals), J_f(primals) @ tangents) in ONE forward pass with dual numbers.

    ``fn`` takes as many arguments as ``primals`` and returns one Dual-valued result.
    """
    _check_fn(fn)
    primals, tangents = _arrays("primals", primals), _arrays("tangents", tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp needs one tangent per primal: got {len(primals)} primals and "
                         f"{len(tangents)} tangents")
    ins = [Dual(np.asarray(p), np.asarray(t)) for p, t in zip(primals, tangents)]
    out = fn(*ins)
    if not isinstance(out, Dual):
        raise TypeError(f"fn must return the result of ops on its arguments, got "
                        f"{type(out).__name__}")
    tangent = out.tangent if out.tangent is not None else np.zeros_like(out.primal)
    return out.primal, tangent


def vjp(fn, primals, cotangent):
    """(f(primals), cotangent @ J_f(primals)) in one forward and ONE reverse pass.

    Returns the output value and a tuple with one gradient per primal.
    """
    _check_fn(fn)
    primals = _arrays("primals", primals)
    ins = [Tensor(p.astype(np.float64) if p.dtype.kind in "biu" else p, requires_grad=True)
           for p in primals]
    out = fn(*ins)
    if not isinstance(out, Tensor):
        raise TypeError(f"fn must return a labkit Tensor, got {type(out).__name__}")
    cot = _as_array(cotangent, name="cotangent")
    if cot.shape != out.shape:
        raise ValueError(f"cotangent must have the output's shape {out.shape}, got {cot.shape}")
    out.backward(cot.astype(out.dtype))
    return out.data, tuple(np.zeros_like(i.data) if i.grad is None else i.grad.data
                           for i in ins)


def grad(fn, argnums: int | tuple[int, ...] = 0):
    """The gradient function of a scalar-valued ``fn`` (reverse mode), as ``jax.grad``."""
    _check_fn(fn)
    for a in ((argnums,) if not isinstance(argnums, tuple) else argnums):
        integer("argnums", a, low=0)

    def grad_fn(*args):
        for a in ((argnums,) if not isinstance(argnums, tuple) else argnums):
            integer("argnums", a, low=0, high=len(args) - 1)
        ins = [Tensor(np.asarray(a), requires_grad=True) for a in args]
        out = fn(*ins)
        if out.data.size != 1:
            raise ValueError(f"grad needs a scalar-valued fn; it returned shape {out.shape}")
        out.backward()
        gs = tuple(np.zeros_like(i.data) if i.grad is None else i.grad.data for i in ins)
        return gs[argnums] if isinstance(argnums, int) else tuple(gs[a] for a in argnums)
    return grad_fn


def jacobian_forward(fn, x: np.ndarray) -> np.ndarray:
    """Full Jacobian (m, n) of fn: R^n -> R^m by n forward passes (one per input direction)."""
    x = np.asarray(x)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = 1
        cols.append(jvp(fn, (x,), (e,))[1].ravel())
    return np.stack(cols, axis=1)


def jacobian_reverse(fn, x: np.ndarray) -> np.ndarray:
    """Full Jacobian (m, n) of fn: R^n -> R^m by m reverse passes (one per output)."""
    x = np.asarray(x)
    out = fn(Tensor(x)).data
    rows = []
    for j in range(out.size):
        e = np.zeros_like(out)
        e.flat[j] = 1
        rows.append(vjp(fn, (x,), e)[1][0].ravel())
    return np.stack(rows, axis=0)


# ---- the cost experiment ---------------------------------------------------------------

@dataclass(frozen=True)
class MLPFunction:
    """f(x) = W2 tanh(W1 x): R^n -> R^m with a hidden width ``hidden`` (seeded weights)."""
    w1: np.ndarray
    w2: np.ndarray

    def __call__(self, x):
        return self.w2 @ (self.w1 @ x).tanh()

    @property
    def n(self):
        return self.w1.shape[1]

    @property
    def m(self):
        return self.w2.shape[0]


def make_function(n: int, m: int, hidden: int = 32, seed: int = 0) -> MLPFunction:
    for name, v in (("n", n), ("m", m), ("hidden", hidden)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    rng = np.random.default_rng(seed)
    return MLPFunction(rng.normal(size=(hidden, n)) / np.sqrt(n),
                       rng.normal(size=(m, hidden)) / np.sqrt(hidden))


@dataclass(frozen=True)
class ModeCost:
    n: int
    m: int
    forward_passes: int
    reverse_passes: int
    forward_seconds: float
    reverse_seconds: float

    @property
    def cheaper(self) -> str:
        return "forward" if self.forward_seconds < self.reverse_seconds else "reverse"


def mode_cost(n: int, m: int, *, hidden: int = 32, repeats: int = 3, seed: int = 0,
              jacobians=None) -> ModeCost:
    """Time the full Jacobian of an R^n -> R^m function in forward vs reverse mode.

    Forward mode needs n passes, reverse mode m passes (median of ``repeats`` timings).
    ``jacobians``: a pair ``(forward, reverse)`` of functions ``jac(fn, x) -> (m, n)`` to time
    instead of labkit's :func:`jacobian_forward` and :func:`jacobian_reverse`.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    jac_fwd, jac_rev = (jacobian_forward, jacobian_reverse) if jacobians is None else jacobians
    if not (callable(jac_fwd) and callable(jac_rev)):
        raise TypeError(f"jacobians must be a pair of functions (forward, reverse), got "
                        f"{jacobians!r}")
    f = make_function(n, m, hidden, seed)
    x = np.random.default_rng(seed + 1).normal(size=n)

    def timed(jac):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jac(f, x)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    return ModeCost(n, m, n, m, timed(jac_fwd), timed(jac_rev))


def mode_cost_sweep(ns, m: int, **kw) -> list[ModeCost]:
    """:func:`mode_cost` for each n in ``ns`` at a fixed m."""
    return [mode_cost(int(n), m, **kw) for n in ns]
