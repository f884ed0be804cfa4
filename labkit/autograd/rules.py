"""Gradient rules a learner writes, and the switch through which the engine runs them.

labkit's engine differentiates with each op's ``vjp`` in :mod:`labkit.autograd.ops`. A
:class:`RuleSet` puts functions of a simpler form in their place while it is active, so a
learner's rules (chapter 02's lab) are the ones backward runs::

    mine = RuleSet(matmul=matmul_backward, relu=relu_backward, sum=sum_backward,
                   log_softmax=log_softmax_backward, getitem=getitem_backward,
                   softmax=softmax_backward, forward={"log_softmax": log_softmax})
    with mine:                               # or train_digits(..., rules=mine)
        loss = F.cross_entropy(model(x), y)  # forward: your log_softmax
        backward(loss)                       # local_vjp: your rules
    print(mine.report())

The forms (:data:`FORMS`): each takes the upstream gradient ``g`` and what it needs, and
returns the gradient of each input **with that input's shape** — the engine does not sum a
broadcast gradient back for a rule of yours (it does for its own, :func:`ops.unbroadcast`).

==============  =====================================================  ===================
op              rule                                                   returns
==============  =====================================================  ===================
matmul          ``matmul_backward(g, a, b)``, ``a``, ``b`` ≥ 2-D        ``(grad_a, grad_b)``
add, mul        ``add_backward(g, a, b)``, ``mul_backward(g, a, b)``    ``(grad_a, grad_b)``
relu            ``relu_backward(g, x)``                                 ``grad_x``
sum, mean       ``sum_backward(g, shape, axis, keepdims)``             ``grad_x``
log_softmax     ``log_softmax_backward(g, y, axis)``, ``y`` the output  ``grad_x``
getitem         ``getitem_backward(g, shape, index)``                  ``grad_x``
softmax         ``softmax_backward(g, s)`` (last axis), ``s`` output    ``grad_x``
==============  =====================================================  ===================

``mean`` runs the ``sum`` rule and divides by the number of elements averaged (the mean is
the sum over ``n``); a 1-D matmul operand is promoted to a matrix first, as ``np.matmul``
defines it; a softmax over another axis is moved to the last axis and back. ``forward=``
replaces an op's forward: ``{"log_softmax": log_softmax(x, axis)}``.

**Where a rule fails, labkit's takes over, and says so.** A rule that raises (a stub raises
``NotImplementedError``), returns another shape, or (a forward) returns NaN or infinity for
finite input is not used for that call: the op's own rule computes it, the rule set counts
it and keeps the first reason, and warns once per op (``strict=True``, what the checks use,
raises instead). :meth:`RuleSet.report` says, per op, whose rule ran and how often.

Sources: the forms are PyTorch's (``tools/autograd/derivatives.yaml``: ``mm`` → ``grad @
mat2ᵀ``; ``relu`` → ``threshold_backward(grad, result, 0)``, zero at 0; ``sum.dim_IntList`` →
``sum_backward``, which unsqueezes the reduced dims unless ``keepdim``;
``_log_softmax`` → ``_log_softmax_backward_data(grad, result, dim)``, ``g − exp(y) Σ g``;
``index.Tensor`` → ``index_backward``, an ``index_put`` with ``accumulate=True``, so
repeated indices add up as in ``np.add.at``).
"""
from __future__ import annotations

import threading
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit.autograd.ops import OPS, log_softmax_forward, softmax_vjp_rule, unbroadcast

_state = threading.local()


def _stack() -> list:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


class RuleFailed(ValueError):
    """A learner's rule raised or returned something the engine cannot use."""


# ---- adapters: the engine's (g, out, xs, needs, **attrs) to each rule's own form -------------

def _as_grad(name: str, value, shape) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fc":
        raise RuleFailed(f"{name} is not an array of floats (got {type(value).__name__} "
                         f"of dtype {arr.dtype})")
    if arr.shape != tuple(shape):
        raise RuleFailed(f"{name} has shape {arr.shape}, expected {tuple(shape)} (the "
                         f"input's shape: sum over the axes that broadcasting added or "
                         f"stretched)")
    return arr


def _matmul(rule, g, out, xs, needs):
    a, b = xs
    a2 = a[None, :] if a.ndim == 1 else a          # np.matmul's promotion of 1-D operands
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = np.expand_dims(g2, -2)
    if b.ndim == 1:
        g2 = np.expand_dims(g2, -1)
    got = rule(g2, a2, b2)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise RuleFailed(f"returned {type(got).__name__}, expected a pair (grad_a, grad_b)")
    ga = _as_grad("grad_a", got[0], a2.shape).reshape(a.shape) if needs[0] else None
    gb = _as_grad("grad_b", got[1], b2.shape).reshape(b.shape) if needs[1] else None
    return ga, gb


def _binary(rule, g, out, xs, needs):
    got = rule(g, *xs)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise RuleFailed(f"returned {type(got).__name__}, expected a pair (grad_a, grad_b)")
    return tuple(_as_grad(name, v, x.shape) if need else None
                 for name, v, x, need in zip(("grad_a", "grad_b"), got, xs, needs))


def _relu(rule, g, out, xs, needs):
    return (_as_grad("grad_x", rule(g, xs[0]), xs[0].shape),)


def _sum(rule, g, out, xs, needs, axis=None, keepdims=False):
    return (_as_grad("grad_x", rule(g, xs[0].shape, axis, keepdims), xs[0].shape),)


def _mean(rule, g, out, xs, needs, axis=None, keepdims=False):
    shape = xs[0].shape
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis)
    n = int(np.prod([shape[int(k)] for k in axes])) if len(shape) else 1
    return (_as_grad("grad_x", rule(g, shape, axis, keepdims), shape) / n,)


def _log_softmax(rule, g, out, xs, needs, axis=-1):
    return (_as_grad("grad_x", rule(g, out, axis), out.shape),)


def _getitem(rule, g, out, xs, needs, index):
    return (_as_grad("grad_x", rule(g, xs[0].shape, index), xs[0].shape),)


def _softmax(rule, g, out, xs, needs, axis=-1):
    last = np.moveaxis(rule(np.moveaxis(g, axis, -1), np.moveaxis(out, axis, -1)), -1, axis)
    return (_as_grad("grad_x", last, out.shape),)


@dataclass(frozen=True)
class Form:
    signature: str
    adapter: Callable
    via: str = ""                 # the rule that serves this op ("sum" for mean)


FORMS: dict[str, Form] = {
    "matmul": Form("matmul_backward(g, a, b) -> (grad_a, grad_b)", _matmul),
    "add": Form("add_backward(g, a, b) -> (grad_a, grad_b)", _binary),
    "mul": Form("mul_backward(g, a, b) -> (grad_a, grad_b)", _binary),
    "relu": Form("relu_backward(g, x) -> grad_x", _relu),
    "sum": Form("sum_backward(g, shape, axis, keepdims) -> grad_x", _sum),
    "mean": Form("your sum rule / n", _mean, via="sum"),
    "log_softmax": Form("log_softmax_backward(g, y, axis) -> grad_x", _log_softmax),
    "getitem": Form("getitem_backward(g, shape, index) -> grad_x", _getitem),
    "softmax": Form("softmax_backward(g, s) -> grad_x", _softmax),
}
FORWARDS = {"log_softmax": "log_softmax(x, axis) -> y"}


# ---- labkit's rules in these forms (the references of chapter 02's exercises) ---------------

def matmul_backward(g, a, b):
    """C = A B, batched: dA = g Bᵀ, dB = Aᵀ g, each summed back over the batch axes that
    broadcasting added or stretched (the adjoint of broadcasting is a sum)."""
    ga, gb = OPS["matmul"].vjp(g, None, (a, b), (True, True))
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


def add_backward(g, a, b):
    """c = a + b, broadcast: dc/da = 1, so grad_a is g summed back to a's shape (and b's)."""
    return unbroadcast(g, np.shape(a)), unbroadcast(g, np.shape(b))


def mul_backward(g, a, b):
    """c = a * b, broadcast: grad_a = g * b and grad_b = g * a, each summed back to its shape."""
    ga, gb = OPS["mul"].vjp(g, None, (a, b), (True, True))
    return unbroadcast(ga, np.shape(a)), unbroadcast(gb, np.shape(b))


def relu_backward(g, x):
    """d relu(x)/dx = 1 where x > 0, else 0 (0 at x = 0, as PyTorch's threshold_backward)."""
    return OPS["relu"].vjp(g, np.maximum(x, 0), (x,), (True,))[0]


def sum_backward(g, shape, axis=None, keepdims=False):
    """Every input element reached the sum once: g, with the reduced axes put back, broadcast
    to the input's shape."""
    stand_in = np.broadcast_to(np.zeros((), dtype=np.asarray(g).dtype), tuple(shape))
    return np.array(OPS["sum"].vjp(g, None, (stand_in,), (True,), axis=axis,
                                   keepdims=keepdims)[0])


def log_softmax(x, axis=-1):
    """log_softmax(x) = x − max x − log Σ exp(x − max x): the shift keeps exp from overflowing."""
    return log_softmax_forward(x, axis=axis)


def log_softmax_backward(g, y, axis=-1):
    """y = log_softmax(x): dx = g − softmax(x) Σ g = g − exp(y) Σ_axis g."""
    return OPS["log_softmax"].vjp(g, y, (y,), (True,), axis=axis)[0]


def getitem_backward(g, shape, index):
    """Zeros of the input's shape with g added at ``index``; a repeated index adds (np.add.at)."""
    stand_in = np.broadcast_to(np.zeros((), dtype=np.asarray(g).dtype), tuple(shape))
    return OPS["getitem"].vjp(g, None, (stand_in,), (True,), index=index)[0]


softmax_backward = softmax_vjp_rule

REFERENCES = {"matmul": matmul_backward, "add": add_backward, "mul": mul_backward,
              "relu": relu_backward, "sum": sum_backward,
              "log_softmax": log_softmax_backward, "getitem": getitem_backward,
              "softmax": softmax_backward}
REFERENCE_FORWARDS = {"log_softmax": log_softmax}


# ---- the switch -----------------------------------------------------------------------------

def _finite_output(op, rule, xs, attrs):
    out = np.asarray(rule(*xs, **attrs))
    if out.shape != xs[0].shape:
        raise RuleFailed(f"returned shape {out.shape} for an input of shape {xs[0].shape}")
    if not np.isfinite(out).all() and np.isfinite(xs[0]).all():
        raise RuleFailed("returned NaN or infinity for finite input (exp overflows past "
                         "about 709 in float64: subtract the maximum first)")
    return out


class RuleSet:
    """The rules of :data:`FORMS` by op name (each optional) and ``forward`` replacements;
    a context manager: inside ``with`` the engine runs them. See the module docstring."""

    def __init__(self, *, forward: dict | None = None, strict: bool = False, **rules):
        unknown = sorted(set(rules) - set(FORMS) | set(rules) & {"mean"})
        if unknown:
            raise ValueError(f"no rule form for {unknown}; the forms: "
                             f"{sorted(set(FORMS) - {'mean'})} (mean uses the sum rule)")
        forward = dict(forward or {})
        if set(forward) - set(FORWARDS):
            raise ValueError(f"forward= replaces {sorted(FORWARDS)}, got {sorted(forward)}")
        for name, fn in {**rules, **{f"forward[{k!r}]": v for k, v in forward.items()}}.items():
            if not callable(fn):
                raise TypeError(f"{name} must be a function, got {type(fn).__name__} {fn!r}")
        self.rules = dict(rules)
        self.forwards = forward
        self.strict = bool(strict)
        self.calls: dict[str, int] = defaultdict(int)        # op -> times a rule of yours ran
        self.fallbacks: dict[str, int] = defaultdict(int)    # op -> times labkit's took over
        self.reasons: dict[str, str] = {}                    # op -> the first reason

    # which rule serves an op
    def rule_for(self, op_name: str) -> Callable | None:
        form = FORMS.get(op_name)
        if form is None:
            return None
        return self.rules.get(form.via or op_name)

    def __enter__(self) -> "RuleSet":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().remove(self)

    def _failed(self, key: str, what: str, exc: Exception) -> None:
        if self.strict:
            raise exc
        self.fallbacks[key] += 1
        if key not in self.reasons:
            reason = ("is not written yet (it raises NotImplementedError)"
                      if isinstance(exc, NotImplementedError) else
                      f"raised {type(exc).__name__}: {exc}" if not isinstance(exc, RuleFailed)
                      else str(exc))
            self.reasons[key] = reason
            warnings.warn(f"labkit's {key} rule took over: your {what} {reason}",
                          RuntimeWarning, stacklevel=4)

    def run_vjp(self, op, g, out, xs, needs, attrs):
        rule = self.rule_for(op.name)
        try:
            got = FORMS[op.name].adapter(rule, g, out, xs, needs, **attrs)
        except Exception as exc:          # noqa: BLE001 - a rule of the learner's failed
            self._failed(op.name, getattr(rule, "__name__", "rule"), exc)
            return op.vjp(g, out, xs, needs, **attrs)
        self.calls[op.name] += 1
        return got

    def run_forward(self, op, xs, attrs):
        rule = self.forwards[op.name]
        key = f"{op.name} forward"
        try:
            out = _finite_output(op, rule, xs, attrs)
        except Exception as exc:          # noqa: BLE001
            self._failed(key, getattr(rule, "__name__", "forward"), exc)
            return op.forward(*xs, **attrs)
        self.calls[key] += 1
        return out

    def whose(self, key: str) -> str:
        """"yours", "labkit's reference" (a failed check put it in place of yours) or
        "labkit's" (no rule given)."""
        fn = self.forwards.get(key[:-len(" forward")]) if key.endswith(" forward") \
            else self.rule_for(key)
        if fn is None:
            return "labkit's"
        if fn in REFERENCES.values() or fn in REFERENCE_FORWARDS.values():
            return "labkit's reference"
        return "yours"

    def report(self) -> str:
        """One line per op: whose rule, how often it ran, and how often labkit's took over."""
        keys = [k for k in FORMS if k != "mean" or "sum" in self.rules] + \
            [f"{k} forward" for k in FORWARDS]
        lines = [f"{'op':<20} {'rule':<20} {'ran':>7} {'labkit took over':>17}"]
        for key in keys:
            who = self.whose(key)
            lines.append(f"{key:<20} {who:<20} {self.calls.get(key, 0):>7} "
                         f"{self.fallbacks.get(key, 0):>17}")
        for key, reason in self.reasons.items():
            lines.append(f"  {key}: labkit's rule took over because yours {reason}")
        if any(self.whose(k) == "labkit's reference" for k in keys):
            lines.append("  labkit's reference: your answer's check did not pass, so the "
                         "check put labkit's in its place")
        return "\n".join(lines)


def active_vjp(op) -> RuleSet | None:
    """The innermost active rule set with a rule for ``op`` (None: use ``op.vjp``)."""
    stack = getattr(_state, "stack", None)
    if stack:
        for rs in reversed(stack):
            if rs.rule_for(op.name) is not None:
                return rs
    return None


def active_forward(op) -> RuleSet | None:
    stack = getattr(_state, "stack", None)
    if stack:
        for rs in reversed(stack):
            if op.name in rs.forwards:
                return rs
    return None
