"""Train labkit's MLP on the digits: the end-to-end test that the engine really learns."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd import functional as F
from labkit.data import Split, batches, load_digits
from labkit.autograd.nn import Module, mlp
from labkit.autograd.optim import SGD, Adam
from labkit.autograd.tensor import Tensor, no_grad


@dataclass(frozen=True)
class TrainResult:
    losses: tuple[float, ...]       # mean training loss per epoch
    train_accuracy: float
    test_accuracy: float
    model: Module


def accuracy(model: Module, x: np.ndarray, y: np.ndarray) -> float:
    with no_grad():
        pred = model(Tensor(x)).data.argmax(axis=1)
    return float((pred == y).mean())


def train_step(model: Module, opt, x: np.ndarray, y: np.ndarray) -> float:
    """One step: forward, cross-entropy, backward, update. Returns the loss."""
    opt.zero_grad()
    loss = F.cross_entropy(model(Tensor(x)), y)
    loss.backward()
    opt.step()
    return loss.item()


def train_digits(hidden: int = 128, epochs: int = 20, batch_size: int = 32, lr: float = 3e-3,
                 optimizer: str = "adam", seed: int = 0, data: Split | None = None,
                 progress: bool = False) -> TrainResult:
    """Train a 64-hidden-10 MLP (ReLU) on the digits; returns losses and accuracies."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
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
            total += train_step(model, opt, data.x_train[idx], data.y_train[idx]) * len(idx)
            n += len(idx)
        losses.append(total / n)
    return TrainResult(tuple(losses), accuracy(model, data.x_train, data.y_train),
                       accuracy(model, data.x_test, data.y_test), model)
