"""Optimizers over a list of parameters: SGD with momentum and Adam (as ``torch.optim``).

SGD with momentum (PyTorch's form): v <- mu v + g;  p <- p - lr v.
Adam (Kingma & Ba, ICLR 2015, Algorithm 1): m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
p <- p - lr * m_hat / (sqrt(v_hat) + eps) with m_hat = m/(1-b1^t), v_hat = v/(1-b2^t).
"""
from __future__ import annotations

import numpy as np

from labkit.validate import nonnegative, number, positive


class Optimizer:
    def __init__(self, params, lr: float):
        self.params = list(params)
        if not self.params:
            raise ValueError("params is empty: pass model.parameters()")
        self.lr = positive("lr", lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class SGD(Optimizer):
    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        super().__init__(params, lr)
        momentum = number("momentum", momentum, low=0, high=1, high_open=True)
        weight_decay = nonnegative("weight_decay", weight_decay)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.velocity = [None] * len(self.params)

    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data
            if self.weight_decay:
                g = g + self.weight_decay * p.data
            if self.momentum:
                v = self.velocity[i]
                if v is None:
                    v = self.velocity[i] = g.copy()
                else:
                    v *= self.momentum
                    v += g
                g = v
            p.data -= self.lr * g


class Adam(Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (b1, b2), got {betas!r}")
        b1 = number("betas[0]", betas[0], low=0, high=1, high_open=True)
        b2 = number("betas[1]", betas[1], low=0, high=1, high_open=True)
        self.b1, self.b2, self.eps = b1, b2, nonnegative("eps", eps)
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]
        self.t = 0

    def step(self) -> None:
        self.t += 1
        c1 = 1 - self.b1 ** self.t
        c2 = 1 - self.b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad.data
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * (g * g)
            p.data -= (self.lr / c1) * m / (np.sqrt(v / c2) + self.eps)
