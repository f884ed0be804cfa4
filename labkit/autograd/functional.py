"""Functions over Tensors (and forward mode's Duals): activations, softmax family, losses.

Each function calls methods (``x.exp()``, ``x._apply("softmax", ...)``), so the same code
runs in reverse mode on :class:`~labkit.autograd.tensor.Tensor` and in forward mode on
:class:`~labkit.autograd.forward.Dual`.
"""
from __future__ import annotations

import numpy as np


def exp(x): return x.exp()
def log(x): return x.log()
def tanh(x): return x.tanh()
def sigmoid(x): return x.sigmoid()
def relu(x): return x.relu()
def matmul(a, b): return a @ b


def softmax(x, axis: int = -1):
    """softmax(x)_i = exp(x_i) / sum_j exp(x_j) along ``axis`` (a fused op; see ops.py)."""
    return x._apply("softmax", x, axis=int(axis))


def log_softmax(x, axis: int = -1):
    """log softmax along ``axis``: x - logsumexp(x), computed stably (a fused op)."""
    return x._apply("log_softmax", x, axis=int(axis))


def cross_entropy(logits, targets):
    """Mean negative log-likelihood of integer ``targets`` under softmax(``logits``).

    logits: (N, C); targets: N integers in [0, C). Same value as
    ``torch.nn.functional.cross_entropy``.
    """
    t = np.asarray(getattr(targets, "data", targets))
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
    """mean((pred - target)^2)."""
    d = pred - target
    return (d * d).mean()
