"""Small PyTorch reference models that several chapters measure."""
from __future__ import annotations


def torch_mlp(sizes, seed: int = 0, dtype=None):
    """``Linear → ReLU → … → Linear`` through ``sizes`` (no ReLU after the last layer),
    initialised from ``torch.manual_seed(seed)``."""
    import torch

    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes must list at least two positive widths, got {sizes}")
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    return model.to(dtype) if dtype is not None else model
