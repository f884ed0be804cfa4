"""Small PyTorch reference models that several chapters measure: an MLP of any widths
(:func:`torch_mlp`), chapter 01's CIFAR-shaped CNN (:func:`small_cnn`) and chapter 12's CNN
on the 8×8 digits (:func:`digits_cnn`). Each is built right after ``torch.manual_seed``."""
from __future__ import annotations

from labkit import validate as v


ACTIVATIONS = ("relu", "tanh")


def torch_mlp(sizes, seed: int = 0, dtype=None, *, activation: str = "relu",
              dropout: float | None = None):
    """``Linear → act → … → Linear`` through ``sizes`` (no activation after the last layer),
    initialised from ``torch.manual_seed(seed)``; ``act`` is ``activation`` (ReLU or tanh),
    followed by ``Dropout(dropout)`` where ``dropout`` is given."""
    import torch  # deferred: torch

    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes must list at least two positive widths, got {sizes}")
    v.one_of("activation", activation, ACTIVATIONS)
    if dropout is not None:
        v.fraction("dropout", dropout)
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[activation]
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(act())
            if dropout is not None:
                layers.append(torch.nn.Dropout(dropout))
    model = torch.nn.Sequential(*layers)
    return model.to(dtype) if dtype is not None else model


def small_cnn(seed: int = 0):
    """A small CIFAR-shaped CNN: conv(3→16) ReLU pool, conv(16→32) ReLU pool,
    linear(2048→10)."""
    import torch  # deferred: torch
    from torch import nn

    torch.manual_seed(v.integer("seed", seed, low=0))
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def digits_cnn(seed: int = 0):
    """A small CNN on the 8×8 digits: conv(1→16) ReLU, conv(16→32) ReLU, pool, linear."""
    import torch  # deferred: torch
    from torch import nn

    torch.manual_seed(v.integer("seed", seed, low=0))
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
