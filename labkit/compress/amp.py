"""Mixed-precision training for real (chapter 08): the digits MLP trained under CPU autocast
with a pluggable loss scaler, recorded step by step so that two scalers can be compared on
the same real gradients.

**Autocast** (PyTorch docs, ``torch.amp``, "CPU Op-Specific Behavior"): inside
``torch.autocast("cpu", dtype=...)`` the ops on the list "CPU Ops that can autocast to
bfloat16" (``linear``, ``mm``, ``matmul``, ``conv*``, …) run in the low-precision type, those
on "CPU Ops that can autocast to float32" (losses such as ``cross_entropy_loss``,
``mse_loss``, ``nll_loss``; ``prod``, ``cdist``, linear algebra, …) in float32, the rest in
the type of their inputs; "float16 shares the lists of bfloat16". The parameters stay
float32 and so do their gradients (the cast back to float32 is part of the graph); an fp16
gradient inside the backward that overflows is inf there, and the inf reaches ``.grad``.
CPU autocast accepts float16 in torch 2.13: ``torch/amp/autocast_mode.py`` lists
``[torch.bfloat16, torch.float16]`` as the supported types of every non-custom device.

**Loss scaling** (Micikevicius et al. 2018, *Mixed Precision Training*, §3.2): the loss is
multiplied by S before the backward pass, the gradients divided by S before the update; a
step whose gradients hold an inf or NaN is skipped and S backs off
(:class:`labkit.compress.loss_scaling.LossScaler`, ``torch.amp.GradScaler``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit import validate as V
from labkit.compress.loss_scaling import LossScaler, ScaledSteps
from labkit.compress.train import _t, accuracy, batch_stream
from labkit.timing import threads
from labkit.torch_models import torch_mlp

DTYPES = ("float32", "bfloat16", "float16")
SCALER_METHODS = ("scale", "step", "update", "get_scale")


@dataclass(frozen=True)
class AmpRun(ScaledSteps):
    """One training run, per step: the loss scale after the step's ``update`` (1 without a
    scaler), whether the optimizer step was skipped, the loss (float32, unscaled) and every
    parameter after the step (float32, flattened in ``model.parameters()`` order)."""
    dtype: str
    scales: np.ndarray
    skipped: np.ndarray
    losses: np.ndarray
    params: np.ndarray          # (steps, number of parameters)
    accuracy: float             # test accuracy after the last step


@dataclass(frozen=True)
class Difference:
    """The first step at which two runs differ, and in what."""
    step: int
    what: str                   # "skipped", "scale" or "parameters"
    a: float
    b: float

    def __str__(self) -> str:
        if self.what == "parameters":
            return f"step {self.step}: parameters differ by up to {abs(self.a - self.b):.3g}"
        return f"step {self.step}: {self.what} {self.a!r} vs {self.b!r}"


class _CountingOptimizer:
    """The optimizer as a scaler sees it (``param_groups``, ``step``), counting the steps it
    really takes: a skipped step is one the scaler did not pass on."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.steps = 0

    def step(self, *args, **kwargs):
        self.steps += 1
        return self.optimizer.step(*args, **kwargs)

    def zero_grad(self, set_to_none: bool = True):
        self.optimizer.zero_grad(set_to_none=set_to_none)


def _scaler(scaler, init_scale, growth_interval):
    """``scaler`` as an object with GradScaler's methods (a rule wrapped in a LossScaler)."""
    has = scaler is not None and all(callable(getattr(scaler, m, None)) for m in SCALER_METHODS)
    is_rule = scaler is not None and not has and callable(scaler)
    if not is_rule and (init_scale is not None or growth_interval is not None):
        raise ValueError("init_scale and growth_interval apply when scaler is a function "
                         "(an update rule); give them to the scaler object instead")
    if scaler is None or has:
        return scaler
    if is_rule:                     # (scale, found_inf, good_steps, growth_interval) -> ...
        return LossScaler(2.0 ** 16 if init_scale is None else init_scale,
                          growth_interval=2000 if growth_interval is None else growth_interval,
                          rule=scaler)
    missing = [m for m in SCALER_METHODS if not callable(getattr(scaler, m, None))]
    raise TypeError(f"scaler must be None, an object with GradScaler's methods "
                    f"{', '.join(SCALER_METHODS)} (missing: {', '.join(missing)}), or an update "
                    f"rule (scale, found_inf, good_steps, growth_interval) -> (scale, "
                    f"good_steps, skipped); got {type(scaler).__name__}")


def autocast_step(model, optimizer, scaler, x, y, dtype):
    """The training step :func:`train_amp` takes on a batch ``(x, y)`` (``dtype`` a torch
    dtype; ``torch.float32``: autocast off), the recipe of PyTorch's "Automatic Mixed
    Precision examples" (``torch.amp``): the forward pass and the loss inside
    ``torch.autocast("cpu", dtype=dtype)``, the backward pass outside it — on the scaled
    loss, then ``scaler.step`` (which unscales the gradients and skips the step if any is
    inf/NaN) and ``scaler.update``; without a scaler (None) ``loss.backward()`` and
    ``optimizer.step()``. Returns the loss (unscaled, float32)."""
    import torch  # deferred: torch
    import torch.nn.functional as F  # deferred: torch

    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        loss = F.cross_entropy(model(x), y)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss


def amp_step(model, optimizer, scaler, x, y, dtype):
    """One mixed-precision training step on a batch ``(x, y)`` with the loss scaler
    ``scaler`` (exercise 8.7): :func:`autocast_step` with a scaler and a low-precision
    ``dtype``. Returns the loss (unscaled, float32)."""
    return autocast_step(model, optimizer, scaler, x, y, dtype)


def train_amp(split, scaler=None, *, dtype: str = "float16", sizes=(64, 64, 10),
              steps: int = 150, batch: int = 64, lr: float = 3e-3, seed: int = 0,
              init_scale: float | None = None, growth_interval: int | None = None,
              step_fn: Callable | None = None) -> AmpRun:
    """Adam on the digits split, forward pass and loss inside ``torch.autocast("cpu",
    dtype=dtype)`` (``"float32"``: autocast off), one thread, seeded: the MLP from
    ``torch_mlp(sizes, seed)``, batches from :func:`labkit.compress.train.batch_stream` with a
    generator seeded by ``seed``. Each step (:func:`autocast_step`)::

        opt.zero_grad()
        with autocast: loss = cross_entropy(model(x), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()

    ``scaler``: None (plain ``loss.backward(); opt.step()``), an object with
    ``torch.amp.GradScaler``'s ``scale``, ``step``, ``update`` and ``get_scale`` (GradScaler
    itself, :class:`~labkit.compress.loss_scaling.LossScaler`, a learner's class), or an
    update rule with exercise 8.3's signature, run inside a ``LossScaler(init_scale,
    growth_interval=growth_interval, rule=scaler)`` (defaults 2^16 and 2000). Two runs with
    the same arguments see the same batches and start from the same weights, so any
    difference between them comes from the scalers (:func:`first_difference`).

    ``step_fn(model, optimizer, scaler, x, y, dtype) -> loss`` (``dtype`` a torch dtype)
    replaces :func:`autocast_step` (exercise 8.7: the learner's own step, :func:`amp_step`);
    it needs a scaler and a low-precision ``dtype``."""
    import torch  # deferred: torch

    dtype = V.one_of("dtype", dtype, DTYPES)
    steps = V.integer("steps", steps, low=1)
    batch = V.integer("batch", batch, low=1, high=len(split.y_train))
    lr = V.positive("lr", lr)
    seed = V.integer("seed", seed, low=0)
    scaler = _scaler(scaler, init_scale, growth_interval)
    if step_fn is not None:
        if not callable(step_fn):
            raise TypeError(f"step_fn must be a function (model, optimizer, scaler, x, y, "
                            f"dtype) -> loss, got {type(step_fn).__name__}")
        if scaler is None or dtype == "float32":
            raise ValueError(f"step_fn trains under autocast with a scaler: give a scaler "
                             f"and dtype 'bfloat16' or 'float16' (got scaler "
                             f"{type(scaler).__name__}, dtype {dtype!r})")
    model = torch_mlp(sizes, seed=seed)
    opt = _CountingOptimizer(torch.optim.Adam(model.parameters(), lr=lr))
    x, y = _t(split.x_train), _t(split.y_train)
    g = torch.Generator().manual_seed(seed)
    n_params = sum(p.numel() for p in model.parameters())
    scales, skipped = np.ones(steps), np.zeros(steps, dtype=bool)
    losses, params = np.empty(steps), np.empty((steps, n_params), dtype=np.float32)
    with threads(1):
        for t, idx in enumerate(batch_stream(len(x), batch, steps, g)):
            taken = opt.steps
            loss = (step_fn or autocast_step)(model, opt, scaler, x[idx], y[idx],
                                              getattr(torch, dtype))
            if not isinstance(loss, torch.Tensor):
                raise TypeError(f"step_fn must return the loss (a tensor), got "
                                f"{type(loss).__name__}")
            if scaler is not None:
                scales[t] = scaler.get_scale()
            skipped[t] = opt.steps == taken
            losses[t] = float(loss.detach())
            params[t] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    model.eval()
    return AmpRun(dtype, scales, skipped, losses, params,
                  accuracy(model, split.x_test, split.y_test))


def first_difference(a: AmpRun, b: AmpRun, atol: float = 0.0) -> Difference | None:
    """The first step at which runs ``a`` and ``b`` differ — in whether the step was skipped,
    in the loss scale, or in a parameter by more than ``atol`` (NaN equals NaN) — checked in
    that order within a step; None if they agree at every step."""
    for name, run in (("a", a), ("b", b)):
        if not isinstance(run, AmpRun):
            raise TypeError(f"{name} must be an AmpRun, got {type(run).__name__}")
    if a.params.shape != b.params.shape:
        raise ValueError(f"a and b must have the same steps and parameters, got "
                         f"{a.params.shape} and {b.params.shape}")
    atol = V.nonnegative("atol", atol)
    for t in range(a.steps):
        if a.skipped[t] != b.skipped[t]:
            return Difference(t, "skipped", bool(a.skipped[t]), bool(b.skipped[t]))
        if a.scales[t] != b.scales[t]:
            return Difference(t, "scale", float(a.scales[t]), float(b.scales[t]))
        pa, pb = a.params[t].astype(np.float64), b.params[t].astype(np.float64)
        if not np.allclose(pa, pb, rtol=0.0, atol=atol, equal_nan=True):
            i = int(np.nanargmax(np.abs(pa - pb)))
            return Difference(t, "parameters", float(pa[i]), float(pb[i]))
    return None


def compare_scalers(split, make_a: Callable, make_b: Callable, **kwargs) -> Difference | None:
    """:func:`first_difference` of two :func:`train_amp` runs with the same ``kwargs``, one
    with the scaler ``make_a()`` and one with ``make_b()`` (fresh scalers: a scaler holds
    state)."""
    return first_difference(train_amp(split, make_a(), **kwargs),
                            train_amp(split, make_b(), **kwargs))
