"""Functions over Tensors (and forward mode's Duals): activations, softmax family, losses.

Each function calls methods (``x.exp()``, ``x._apply("softmax", ...)``), so the same code
runs in reverse mode on :class:`~labkit.autograd.tensor.Tensor` and in forward mode on
:class:`~labkit.autograd.forward.Dual`.
"""
from __future__ import annotations

import numpy as np

from labkit.validate import array


def _t(name: str, x):
    """``x`` if it is a labkit Tensor or a forward-mode Dual; a TypeError naming ``name``
    otherwise (a numpy array has none of the methods these functions call)."""
    if not hasattr(x, "_apply") or not hasattr(x, "shape"):
        raise TypeError(f"{name} must be a labkit Tensor (or a forward-mode Dual), got "
                        f"{type(x).__name__}; wrap an array as Tensor(x)")
    return x


def _axis(axis) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    return int(axis)


def exp(x): return _t("x", x).exp()
def log(x): return _t("x", x).log()
def tanh(x): return _t("x", x).tanh()
def sigmoid(x): return _t("x", x).sigmoid()
def relu(x): return _t("x", x).relu()
def matmul(a, b): return _t("a", a) @ b


def softmax(x, axis: int = -1):
    """softmax(x)_i = exp(x_i) / sum_j exp(x_j) along ``axis`` (a fused op; see ops.py)."""
    return _t("x", x)._apply("softmax", x, axis=_axis(axis))


def log_softmax(x, axis: int = -1):
    """log softmax along ``axis``: x - logsumexp(x), computed stably (a fused op)."""
    return _t("x", x)._apply("log_softmax", x, axis=_axis(axis))


def cross_entropy(logits, targets):
    """Mean negative log-likelihood of integer ``targets`` under softmax(``logits``).

    logits: (N, C); targets: N integers in [0, C). Same value as
    ``torch.nn.functional.cross_entropy``.
    """
    _t("logits", logits)
    if targets is None or isinstance(targets, (str, bytes)):
        raise TypeError(f"targets must be an array of class indices, got {targets!r}")
    t = array("targets", getattr(targets, "data", targets), dtype=None, allow_empty=True)
    if logits.ndim != 2:
        raise ValueError(f"logits must be 2-D (N, C), got shape {logits.shape}")
    if t.shape != (logits.shape[0],) or not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"targets must be {logits.shape[0]} integers, got shape {t.shape} "
                         f"dtype {t.dtype}")
    if t.size and (t.min() < 0 or t.max() >= logits.shape[1]):
        raise ValueError(f"targets must lie in [0, {logits.shape[1]}), got "
                         f"[{t.min()}, {t.max()}]")
    logp = log_softmax(logits, axis=1)
    return -(logp[np.arange(t.shape[0]), t].mean())


def mse_loss(pred, target):
    """mean((pred - target)^2). The shapes must match: PyTorch broadcasts a target of another
    shape with a warning that the result is likely wrong ((3,) against (3, 1) gives a (3, 3)
    difference); labkit refuses it."""
    _t("pred", pred)
    tshape = target.shape if hasattr(target, "_apply") else \
        array("target", target, dtype=None, allow_empty=True).shape
    if tuple(tshape) != tuple(pred.shape):
        raise ValueError(f"target must have pred's shape {tuple(pred.shape)}, got "
                         f"{tuple(tshape)}: broadcasting them would compare every pred with "
                         f"every target (torch warns about this)")
    d = pred - target
    return (d * d).mean()
