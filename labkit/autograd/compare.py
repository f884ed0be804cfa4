"""labkit's gradients against PyTorch's (chapter 2): the engine, and a learner's backward rules.

* :func:`two_layer_vs_torch` differentiates ``cross_entropy(relu(X W₁) W₂, y)`` in labkit and
  in PyTorch on the same float64 data and runs :func:`~labkit.autograd.gradcheck.gradcheck`
  (central differences) on it.
* :func:`rules_vs_torch` compares a matmul and a softmax backward rule with PyTorch's autograd
  on a batched example: ``dA = g Bᵀ`` and ``dB = Σ_batch Aᵀ g`` (the adjoint of broadcasting
  is a sum), and softmax's ``Jᵀ g = s ⊙ (g − ⟨g, s⟩)`` with ``J = diag(s) − s sᵀ``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.gradcheck import GradcheckResult, gradcheck
from labkit.autograd.tensor import Tensor
from labkit.validate import integer


@dataclass(frozen=True)
class TorchAgreement:
    max_abs_diff: float          # max |labkit gradient − torch gradient| over both weights
    gradcheck: GradcheckResult   # labkit's gradients against central differences


def two_layer_vs_torch(batch: int = 8, sizes=(5, 7, 3), seed: int = 0) -> TorchAgreement:
    """Gradients of ``cross_entropy(relu(X W₁) W₂, y)`` with respect to W₁ and W₂, in labkit
    and in PyTorch (float64, the same seeded data), and labkit's against central differences."""
    import torch

    batch = integer("batch", batch, low=1, high=256)
    if isinstance(sizes, (str, bytes)) or len(tuple(sizes)) != 3:
        raise ValueError(f"sizes must be three widths (inputs, hidden, classes), got {sizes!r}")
    n_in, hidden, classes = (integer(f"sizes[{i}]", s, low=1, high=64)
                             for i, s in enumerate(sizes))
    rng = np.random.default_rng(integer("seed", seed, low=0))
    x, y = rng.normal(size=(batch, n_in)), rng.integers(0, classes, batch)
    w1, w2 = rng.normal(size=(n_in, hidden)), rng.normal(size=(hidden, classes))

    def loss_fn(a, b):
        return F.cross_entropy((Tensor(x) @ a).relu() @ b, y)

    p1, p2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
    loss_fn(p1, p2).backward()
    t1, t2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    torch.nn.functional.cross_entropy(torch.relu(torch.tensor(x) @ t1) @ t2,
                                      torch.tensor(y)).backward()
    diff = max(np.abs(p1.grad.data - t1.grad.numpy()).max(),
               np.abs(p2.grad.data - t2.grad.numpy()).max())
    return TorchAgreement(float(diff), gradcheck(loss_fn, w1, w2))


@dataclass(frozen=True)
class RuleErrors:
    matmul_a: float     # max |grad_a − torch's| for C = A @ B, A batched (4, 3, 5), B (5, 2)
    matmul_b: float     # the same for grad_b: summed over the broadcast batch axis
    softmax: float      # max |softmax_backward − torch's| on a (3, 6) input


def _max_error(name: str, got, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        raise ValueError(f"{name} has shape {got.shape}, expected {want.shape}")
    return float(np.abs(got - want).max())


def rules_vs_torch(matmul_backward, softmax_backward, seed: int = 1) -> RuleErrors:
    """Largest difference between the rules ``matmul_backward(g, a, b) -> (grad_a, grad_b)``
    and ``softmax_backward(g, s) -> grad_x`` and PyTorch's autograd on seeded inputs."""
    import torch

    for name, fn in (("matmul_backward", matmul_backward), ("softmax_backward", softmax_backward)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
    rng = np.random.default_rng(integer("seed", seed, low=0))
    a, b, g = rng.normal(size=(4, 3, 5)), rng.normal(size=(5, 2)), rng.normal(size=(4, 3, 2))
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ta @ tb).backward(torch.tensor(g))
    ga, gb = matmul_backward(g, a, b)
    xs = torch.tensor(rng.normal(size=(3, 6)), requires_grad=True)
    s = torch.softmax(xs, -1)
    gs = rng.normal(size=(3, 6))
    s.backward(torch.tensor(gs))
    return RuleErrors(_max_error("grad_a", ga, ta.grad.numpy()),
                      _max_error("grad_b", gb, tb.grad.numpy()),
                      _max_error("softmax_backward's result",
                                 softmax_backward(gs, s.detach().numpy()), xs.grad.numpy()))
