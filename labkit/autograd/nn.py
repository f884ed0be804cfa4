"""Modules in the style of ``torch.nn``: Module, Linear, ReLU, Tanh, Sequential, MLP.

A Module holds parameters (leaf Tensors with ``requires_grad=True``) and sub-modules;
``parameters()`` walks them in definition order. ``train()``/``eval()`` set ``training``.
"""
from __future__ import annotations

import numpy as np

from labkit.validate import boolean, integer
from labkit.autograd.tensor import Tensor


class Module:
    training: bool = True

    def __call__(self, *args):
        return self.forward(*args)

    def forward(self, *args):  # pragma: no cover - abstract
        raise NotImplementedError

    def children(self):
        for v in vars(self).values():
            if isinstance(v, Module):
                yield v
            elif isinstance(v, (list, tuple)):
                yield from (m for m in v if isinstance(m, Module))

    def parameters(self) -> list[Tensor]:
        params: list[Tensor] = []
        seen: set[int] = set()
        for v in vars(self).values():
            if isinstance(v, Tensor) and v.requires_grad and id(v) not in seen:
                seen.add(id(v))
                params.append(v)
        for child in self.children():
            for p in child.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        return params

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def train(self, mode: bool = True) -> "Module":
        self.training = mode
        for c in self.children():
            c.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)


class Linear(Module):
    """y = x W + b with W of shape (in, out), initialised U(-1/sqrt(in), 1/sqrt(in)) as torch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 rng: np.random.Generator | None = None, dtype=np.float32):
        in_features = integer("in_features", in_features, low=1)
        out_features = integer("out_features", out_features, low=1)
        boolean("bias", bias)
        rng = rng if rng is not None else np.random.default_rng(0)
        bound = 1 / np.sqrt(in_features)
        self.weight = Tensor(rng.uniform(-bound, bound, (in_features, out_features)).astype(dtype),
                             requires_grad=True)
        self.bias = (Tensor(rng.uniform(-bound, bound, out_features).astype(dtype),
                            requires_grad=True) if bias else None)

    def forward(self, x):
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sequential(Module):
    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self):
        return len(self.layers)


def mlp(sizes, *, seed: int = 0, dtype=np.float32) -> Sequential:
    """Linear-ReLU-...-Linear with layer widths ``sizes`` (e.g. (64, 128, 10))."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise TypeError(f"sizes must be a sequence of layer widths, got {sizes!r}")
    sizes = [integer(f"sizes[{i}]", s, low=1) for i, s in enumerate(sizes)]
    if len(sizes) < 2:
        raise ValueError(f"sizes needs at least two positive widths, got {sizes}")
    integer("seed", seed, low=0)
    rng = np.random.default_rng(seed)
    layers: list[Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(Linear(a, b, rng=rng, dtype=dtype))
        if i < len(sizes) - 2:
            layers.append(ReLU())
    return Sequential(*layers)
