"""Train labkit's MLP on the digits: the end-to-end test that the engine really learns.

``backward`` may be any function ``backward(loss)`` that fills the parameters' ``.grad``
(chapter 02's exercise 2.6 passes the learner's own); by default ``loss.backward()``.
:func:`torch_gradient_error` compares the gradients it gives with PyTorch's on the same
model, weights and batch.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np
from tqdm.auto import tqdm

from labkit.autograd import functional as F
from labkit.autograd.nn import Linear, Module, mlp
from labkit.autograd.optim import SGD, Adam
from labkit.autograd.rules import RuleSet
from labkit.autograd.tensor import Tensor, no_grad
from labkit.data import Split, batches, load_digits
from labkit.perf.metrics import top1_accuracy
from labkit.validate import integer, one_of, positive


@dataclass(frozen=True)
class DigitsTrainResult:
    losses: tuple[float, ...]       # mean training loss per epoch
    train_accuracy: float
    test_accuracy: float
    model: Module


def accuracy(model: Module, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy (:func:`labkit.perf.metrics.top1_accuracy`) of a labkit ``model``."""
    with no_grad():
        return top1_accuracy(model(Tensor(x)).data, y)


def _default_backward(loss: Tensor) -> None:
    loss.backward()


def train_step(model: Module, opt, x: np.ndarray, y: np.ndarray,
               backward: Callable[[Tensor], None] | None = None) -> float:
    """One step: forward, cross-entropy, backward, update. Returns the loss."""
    opt.zero_grad()
    loss = F.cross_entropy(model(Tensor(x)), y)
    (backward or _default_backward)(loss)
    opt.step()
    return loss.item()


def torch_twin(model: Module):
    """A float64 ``torch.nn.Sequential`` with ``model``'s weights (Linear and ReLU layers)."""
    import torch  # deferred: torch

    layers = []
    for layer in model.layers:
        if isinstance(layer, Linear):
            lin = torch.nn.Linear(*layer.weight.shape).double()
            with torch.no_grad():
                lin.weight.copy_(torch.tensor(np.asarray(layer.weight.data, np.float64).T))
                lin.bias.copy_(torch.tensor(np.asarray(layer.bias.data, np.float64)))
            layers.append(lin)
        else:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _rules_context(rules):
    """``rules`` (a :class:`~labkit.autograd.rules.RuleSet`) as a context, or a null one."""
    if rules is not None and not isinstance(rules, RuleSet):
        raise TypeError(f"rules must be a labkit.autograd.rules.RuleSet, got "
                        f"{type(rules).__name__} {rules!r}")
    return nullcontext() if rules is None else rules


def _digits_batch(sizes, batch: int, seed: int):
    data = load_digits(seed=seed, dtype=np.float64)
    return data.x_train[:batch], data.y_train[:batch], mlp(sizes, seed=seed, dtype=np.float64)


def digits_gradients(backward: Callable[[Tensor], None] | None = None, rules=None,
                     sizes=(64, 32, 10), batch: int = 16, seed: int = 0) -> list:
    """The gradients (W₁, b₁, W₂, b₂, ...) of the cross-entropy of a float64 MLP on a batch
    of digits, computed by ``backward(loss)`` (default ``loss.backward()``) with ``rules``
    active when given; None for a parameter that got no gradient."""
    x, y, model = _digits_batch(sizes, batch, seed)
    with _rules_context(rules):
        (backward or _default_backward)(F.cross_entropy(model(Tensor(x)), y))
    return [None if p.grad is None else np.array(p.grad.data)
            for layer in model.layers if isinstance(layer, Linear)
            for p in (layer.weight, layer.bias)]


def torch_digits_gradients(sizes=(64, 32, 10), batch: int = 16, seed: int = 0) -> list:
    """PyTorch's gradients for :func:`digits_gradients`' model and batch, in labkit's layout
    (a weight as (in, out))."""
    import torch  # deferred: torch

    x, y, model = _digits_batch(sizes, batch, seed)
    twin = torch_twin(model)
    torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(y)).backward()
    return [p.grad.numpy().T if p.grad.ndim == 2 else p.grad.numpy()
            for layer in twin if isinstance(layer, torch.nn.Linear)
            for p in (layer.weight, layer.bias)]


def torch_gradient_error(backward: Callable[[Tensor], None] | None = None,
                         sizes=(64, 32, 10), batch: int = 16, seed: int = 0,
                         rules=None) -> float:
    """Max |labkit gradient - torch gradient| over every parameter of a float64 MLP on a
    batch of digits, the labkit gradients computed by ``backward(loss)`` (with ``rules``
    active when given); infinity when a parameter got no gradient."""
    err = 0.0
    for got, want in zip(digits_gradients(backward, rules, sizes, batch, seed),
                         torch_digits_gradients(sizes, batch, seed)):
        if got is None or got.shape != want.shape:
            return float("inf")
        err = max(err, float(np.abs(got - want).max()))
    return err


def train_digits(hidden: int = 128, epochs: int = 20, batch_size: int = 32, lr: float = 3e-3,
                 optimizer: str = "adam", seed: int = 0, data: Split | None = None,
                 progress: bool = False,
                 backward: Callable[[Tensor], None] | None = None,
                 rules=None) -> DigitsTrainResult:
    """Train a 64-hidden-10 MLP (ReLU) on the digits; returns losses and accuracies.

    ``backward(loss)`` fills the gradients (default ``loss.backward()``); ``rules``, a
    :class:`~labkit.autograd.rules.RuleSet`, is active for every step when given."""
    hidden = integer("hidden", hidden, low=1)
    epochs = integer("epochs", epochs, low=1)
    batch_size = integer("batch_size", batch_size, low=1)
    lr = positive("lr", lr)
    one_of("optimizer", optimizer, ("adam", "sgd"))
    if backward is not None and not callable(backward):
        raise TypeError(f"backward must be a function backward(loss), got {backward!r}")
    data = data or load_digits(seed=seed)
    model = mlp((64, hidden, 10), seed=seed)
    opt = (Adam(model.parameters(), lr=lr) if optimizer == "adam"
           else SGD(model.parameters(), lr=lr, momentum=0.9))
    rng = np.random.default_rng(seed)
    losses = []
    epochs_iter = range(epochs)
    if progress:
        epochs_iter = tqdm(epochs_iter, desc="epochs")
    context = _rules_context(rules)
    for _ in epochs_iter:
        total, n = 0.0, 0
        with context:
            for idx in batches(len(data.y_train), batch_size, rng):
                total += train_step(model, opt, data.x_train[idx], data.y_train[idx],
                                    backward) * len(idx)
                n += len(idx)
        losses.append(total / n)
    return DigitsTrainResult(tuple(losses), accuracy(model, data.x_train, data.y_train),
                       accuracy(model, data.x_test, data.y_test), model)
