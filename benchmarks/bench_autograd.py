"""One MLP training step (64-256-256-10, batch 64, Adam): labkit's engine vs torch eager on CPU.

Both run on one CPU thread (numpy's BLAS via threadpoolctl, torch via set_num_threads), so
the ratio compares the engines, not how two thread pools fight over shared cores.
Goal: labkit at least half of torch's speed (ratio >= 0.5).
"""
from __future__ import annotations

import numpy as np

from labkit.perf import Row, benchmark

SIZES = (64, 256, 256, 10)
BATCH = 64


def labkit_step():
    from labkit.autograd import Tensor, functional as F
    from labkit.autograd.nn import mlp
    from labkit.autograd.optim import Adam

    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    model = mlp(SIZES, seed=0)
    opt = Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(x)), y)
        loss.backward()
        opt.step()
    return step


def torch_step():
    import torch

    from labkit.torch_models import torch_mlp

    model = torch_mlp(SIZES, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, SIZES[0])
    y = torch.randint(0, SIZES[-1], (BATCH,))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


def rows() -> list[Row]:
    import torch
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            ours = benchmark(labkit_step(), repeats=30, warmup=5, number=5)
            theirs = benchmark(torch_step(), repeats=30, warmup=5, number=5)
    finally:
        torch.set_num_threads(threads)
    return [Row("autograd: MLP train step 64-256-256-10, batch 64, 1 thread", ours.median,
                theirs.median, "torch eager CPU", goal=">= 0.5x")]
