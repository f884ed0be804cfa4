"""Train labkit's MLP on the digits: the end-to-end test that the engine really learns.

``backward`` may be any function ``backward(loss)`` that fills the parameters' ``.grad``
(chapter 02's exercise 2.6 passes the learner's own); by default ``loss.backward()``.
:func:`torch_gradient_error` compares the gradients it gives with PyTorch's on the same
model, weights and batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit.autograd import functional as F
from labkit.data import Split, batches, load_digits
from labkit.autograd.nn import Linear, Module, mlp
from labkit.autograd.optim import SGD, Adam
from labkit.autograd.tensor import Tensor, no_grad
from labkit.perf.metrics import top1_accuracy
from labkit.validate import integer, one_of, positive


@dataclass(frozen=True)
class TrainResult:
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
    import torch

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


def torch_gradient_error(backward: Callable[[Tensor], None] | None = None,
                         sizes=(64, 32, 10), batch: int = 16, seed: int = 0) -> float:
    """Max |labkit gradient - torch gradient| over every parameter of a float64 MLP on a
    batch of digits, the labkit gradients computed by ``backward(loss)``."""
    import torch

    data = load_digits(seed=seed, dtype=np.float64)
    x, y = data.x_train[:batch], data.y_train[:batch]
    model = mlp(sizes, seed=seed, dtype=np.float64)
    (backward or _default_backward)(F.cross_entropy(model(Tensor(x)), y))
    twin = torch_twin(model)
    torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(y)).backward()
    err = 0.0
    lab_params = [p for layer in model.layers if isinstance(layer, Linear)
                  for p in (layer.weight, layer.bias)]
    tor_params = [p for layer in twin if isinstance(layer, torch.nn.Linear)
                  for p in (layer.weight, layer.bias)]
    for lp, tp in zip(lab_params, tor_params):
        if lp.grad is None:
            return float("inf")
        want = tp.grad.numpy().T if tp.grad.ndim == 2 else tp.grad.numpy()
        err = max(err, float(np.abs(lp.grad.data - want).max()))
    return err


def train_digits(hidden: int = 128, epochs: int = 20, batch_size: int = 32, lr: float = 3e-3,
                 optimizer: str = "adam", seed: int = 0, data: Split | None = None,
                 progress: bool = False,
                 backward: Callable[[Tensor], None] | None = None) -> TrainResult:
    """Train a 64-hidden-10 MLP (ReLU) on the digits; returns losses and accuracies."""
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
        from tqdm.auto import tqdm
        epochs_iter = tqdm(epochs_iter, desc="epochs")
    for _ in epochs_iter:
        total, n = 0.0, 0
        for idx in batches(len(data.y_train), batch_size, rng):
            total += train_step(model, opt, data.x_train[idx], data.y_train[idx],
                                backward) * len(idx)
            n += len(idx)
        losses.append(total / n)
    return TrainResult(tuple(losses), accuracy(model, data.x_train, data.y_train),
                       accuracy(model, data.x_test, data.y_test), model)
