"""The leak of keeping losses in a list (seed chapter 1, 3.2 and exercise 7), measured.

A loss that still requires grad holds its whole graph -- and the graph holds every
activation saved for backward. ``losses.append(loss)`` therefore keeps each step's
activations alive; ``loss.detach()`` or ``loss.item()`` keeps only the number.

* labkit keeps a graph until nothing refers to it (it never frees buffers in backward), so
  keeping the loss keeps the activations whether or not you called ``backward()``.
* PyTorch frees the saved tensors during ``backward()`` (unless ``retain_graph=True``), so
  in a training loop the list holds only small graph nodes -- but in a loop with no backward
  (evaluation, logging) under grad mode, each kept loss pins a full set of activations.
"""
from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass

import numpy as np

from labkit.autograd import Tensor, functional as F
from labkit.autograd.nn import mlp
from labkit.autograd.tensor import graph_bytes
from labkit.torch_models import torch_mlp

STRATEGIES = ("tensor", "detach", "item")


@dataclass(frozen=True)
class LeakResult:
    engine: str
    strategy: str
    backward: bool
    kept_bytes: tuple[int, ...]     # bytes of activations the list keeps alive, after each step

    @property
    def per_step(self) -> float:
        kb = self.kept_bytes
        return (kb[-1] - kb[0]) / max(len(kb) - 1, 1)


def _check(steps, strategy):
    if not isinstance(steps, (int, np.integer)) or not 1 <= steps <= 1000:
        raise ValueError(f"steps must be an integer in [1, 1000], got {steps!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def _keep(loss, strategy):
    if strategy == "tensor":
        return loss
    if strategy == "detach":
        return loss.detach()
    return loss.item()


def labkit_leak(steps: int = 10, strategy: str = "tensor", *, backward: bool = True,
                sizes=(64, 256, 10), batch: int = 64, seed: int = 0) -> LeakResult:
    """Run ``steps`` steps of an MLP in labkit, appending each loss by ``strategy``."""
    _check(steps, strategy)

    rng = np.random.default_rng(seed)
    model = mlp(sizes, seed=seed)
    kept, trace = [], []
    for _ in range(steps):
        x = Tensor(rng.normal(size=(batch, sizes[0])).astype(np.float32))
        y = rng.integers(0, sizes[-1], batch)
        loss = F.cross_entropy(model(x), y)
        if backward:
            loss.backward()
        kept.append(_keep(loss, strategy))
        trace.append(graph_bytes(*[k for k in kept if isinstance(k, Tensor)]))
    return LeakResult("labkit", strategy, backward, tuple(trace))


def torch_leak(steps: int = 10, strategy: str = "tensor", *, backward: bool = True,
               sizes=(64, 256, 10), batch: int = 64, seed: int = 0) -> LeakResult:
    """The same loop in PyTorch; kept bytes = saved tensors (not parameters) still alive.

    Saved tensors are seen through ``torch.autograd.graph.saved_tensors_hooks`` and followed
    with weak references, so the count is what is really still allocated.
    """
    _check(steps, strategy)

    import torch  # deferred: torch

    model = torch_mlp(sizes, seed)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    refs: list = []

    def pack(t):
        t = t.detach()  # no grad_fn: a saved output would otherwise form a cycle gc can't see
        if t.untyped_storage().data_ptr() not in params:
            refs.append(weakref.ref(t))
        return t

    kept, trace = [], []
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(batch, sizes[0], generator=gen)
        y = torch.randint(0, sizes[-1], (batch,), generator=gen)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if backward:
            loss.backward()
        kept.append(_keep(loss, strategy))
        del loss, x, y
        gc.collect(1)    # this step's garbage is young: a full collection walks every object
        #                  in the process (seconds in a notebook with torch and JAX loaded)
        alive = {}
        for r in refs:
            t = r()
            if t is not None:
                s = t.untyped_storage()
                alive[s.data_ptr()] = s.nbytes()
        trace.append(int(sum(alive.values())))
    return LeakResult("torch", strategy, backward, tuple(trace))


@dataclass(frozen=True)
class LeakRow:
    backward: bool
    strategy: str
    labkit: LeakResult
    torch: LeakResult


def leak_table(steps: int = 5, backwards=(True, False)) -> tuple[LeakRow, ...]:
    """:func:`labkit_leak` and :func:`torch_leak` for every strategy, with and without
    ``backward()``: one row per (backward, strategy), in that order."""
    if isinstance(backwards, (str, bytes)) or not all(isinstance(b, bool) for b in backwards):
        raise TypeError(f"backwards must be a sequence of True/False, got {backwards!r}")
    return tuple(LeakRow(b, s, labkit_leak(steps, s, backward=b), torch_leak(steps, s, backward=b))
                 for b in backwards for s in STRATEGIES)


def format_leak_table(rows) -> str:
    """One line per row of :func:`leak_table`: KiB per step the list keeps, in each engine."""
    return "\n".join(f"backward={r.backward!s:>5} keep={r.strategy:<6}: labkit "
                     f"{r.labkit.per_step / 1024:7.1f} KiB/step, torch "
                     f"{r.torch.per_step / 1024:6.1f} KiB/step" for r in rows)


def worst_strategy(rows, engine: str = "torch", backward: bool = False) -> str:
    """The strategy whose list keeps the most bytes per step, among ``rows`` of
    :func:`leak_table` with this ``backward``, as measured by ``engine``."""
    if engine not in ("labkit", "torch"):
        raise ValueError(f"engine must be 'labkit' or 'torch', got {engine!r}")
    rows = [r for r in rows if r.backward == backward]
    if not rows:
        raise ValueError(f"no row of the table has backward={backward}")
    return max(rows, key=lambda r: getattr(r, engine).per_step).strategy
