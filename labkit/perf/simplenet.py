"""Seed 000 example 1's SimpleNet (Linear(10, 50) → ReLU → Linear(50, 1)): the model chapter 01
follows down the stack, its training step, and the FLOPs and bytes that step moves."""
from __future__ import annotations

import contextlib

from labkit import validate as v
from labkit.perf.ops import count_ops

def simple_net(seed: int = 0):
    """Seed 000 example 1's ``SimpleNet``: Linear(10, 50) → ReLU → Linear(50, 1)."""
    import torch  # deferred: torch
    from torch import nn

    class SimpleNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(10, 50)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(50, 1)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))

    torch.manual_seed(v.integer("seed", seed, low=0))
    return SimpleNet()


def simplenet_step_flops(batch: int, d_in: int = 10, hidden: int = 50, d_out: int = 1,
                         input_requires_grad: bool = True) -> int:
    """Matmul FLOPs of one training step of a two-layer MLP (PyTorch's flop counter
    convention: 2·m·n·k per matmul, bias adds and ReLU not counted):

    forward 2B(d_in·h + h·d_out); backward: the weight gradients cost as much again, the
    gradient w.r.t. each layer's input as much again, except that nothing needs dx of the
    first layer unless the input requires grad (seed example 1 sets requires_grad=True).
    """
    b = v.integer("batch", batch, low=1)
    d_in, hidden, d_out = (v.integer(n, x, low=1) for n, x in
                           (("d_in", d_in), ("hidden", hidden), ("d_out", d_out)))
    input_requires_grad = v.boolean("input_requires_grad", input_requires_grad)
    l1, l2 = 2 * b * d_in * hidden, 2 * b * hidden * d_out
    return 3 * l1 + 3 * l2 - (0 if input_requires_grad else l1)


def simplenet_step(model, batch: int = 5, lr: float = 0.1, seed: int = 0, device: str = "cpu",
                   annotate: bool = True):
    """A closure running one training step of seed example 1 (loss = output.sum(), SGD),
    with ``record_function`` ranges naming the phases."""
    import torch  # deferred: torch
    from torch.profiler import record_function

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(v.integer("batch", batch, low=1), 10, generator=g).to(device)
    x.requires_grad_(True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    label = record_function if annotate else (lambda _: contextlib.nullcontext())

    def step():
        opt.zero_grad()
        x.grad = None
        with label("## forward ##"):
            loss = model(x).sum()
        with label("## backward ##"):
            loss.backward()
        with label("## optimizer ##"):
            opt.step()
        return loss
    return step


def simplenet_counts(batch: int, input_requires_grad: bool = True):
    """FLOPs and bytes per op of one SimpleNet training step (SGD), counted on the meta
    device (shapes only)."""
    import torch  # deferred: torch

    batch = v.integer("batch", batch, low=1)
    model = simple_net().to("meta")
    x = torch.empty(batch, 10, device="meta", requires_grad=input_requires_grad)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    return count_ops(step)
