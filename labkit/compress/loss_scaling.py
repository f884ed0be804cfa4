"""Dynamic loss scaling (chapter 08): over a run of simulated gradients (:func:`simulate`),
and as a scaler object with ``torch.amp.GradScaler``'s interface (:class:`LossScaler`) that
trains a real network (:func:`labkit.compress.amp.train_amp`).

The update rule is :func:`labkit.compress.model.update_loss_scale`, the one
``torch.amp.GradScaler.update`` applies (PyTorch docs, ``torch.amp.GradScaler``; defaults
``init_scale`` = 2^16, ``growth_factor`` = 2, ``backoff_factor`` = 0.5, ``growth_interval``
= 2000): an overflow multiplies the scale S by 0.5, skips the step and resets the count of
good steps; ``growth_interval`` consecutive good steps multiply S by 2.

The gradients are a stated model, not a network: the largest |gradient| of step t is
g_t = ``grad_median`` · exp(σ·z_t), z_t ~ N(0, 1) drawn from ``numpy.random.default_rng(seed)``
(log-normal, median ``grad_median``). Step t overflows when the scaled gradient g_t · S,
rounded to the format (:func:`labkit.numerics.round_to`), is inf (fp16: from 65520 up,
as round-to-nearest sends 65504 < x < 65520 down to 65504, IEEE 754 binary16): the gradients
then hold an inf, which ``GradScaler`` detects, and it skips the step (Micikevicius et al.,
*Mixed Precision Training*, ICLR 2018, §3.2, on loss scaling and skipping updates that
overflow).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit import validate as v
from labkit.compress.model import update_loss_scale
from labkit.numerics import FORMATS, round_to


class ScaledSteps:
    """What a run of loss-scaled steps reports: ``scales`` (after each step's update) and
    ``skipped`` (bool per step), counted."""
    scales: np.ndarray
    skipped: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.scales)

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())


@dataclass(frozen=True)
class LossScaleRun(ScaledSteps):
    """One simulated run: per step, the largest |gradient|, whether the step was skipped
    and the loss scale after the update."""
    grad_max: np.ndarray
    skipped: np.ndarray          # bool per step
    scales: np.ndarray           # scale after each step's update
    init_scale: float

    @property
    def final_scale(self) -> float:
        return float(self.scales[-1])


def gradscaler_step(scale, found_inf, good_steps, growth_interval):
    """One ``torch.amp.GradScaler.update`` → (scale, good_steps, skipped), with chapter 08's
    exercise 8.3 positional signature (its reference): :func:`update_loss_scale` with the
    other factors at GradScaler's defaults."""
    return update_loss_scale(scale, found_inf, good_steps, growth_interval=growth_interval)


def simulate(steps: int = 400, growth_interval: int = 50, init_scale: float = 2.0 ** 16,
             grad_median: float = 4.0, grad_sigma: float = 0.5, fmt: str = "fp16",
             seed: int = 0, update: Callable | None = None) -> LossScaleRun:
    """Run dynamic loss scaling for ``steps`` steps on seeded log-normal gradient maxima.

    ``update(scale, found_inf, good_steps, growth_interval) -> (scale, good_steps,
    skipped)`` is the rule applied after each step (chapter 08's exercise 8.3 signature);
    by default GradScaler's (:func:`gradscaler_step`)."""
    steps = v.integer("steps", steps, low=1)
    growth_interval = v.integer("growth_interval", growth_interval, low=1)
    scale = v.positive("init_scale", init_scale)
    grad_median = v.positive("grad_median", grad_median)
    grad_sigma = v.nonnegative("grad_sigma", grad_sigma)
    fmt = v.one_of("fmt", fmt, tuple(FORMATS))
    seed = v.integer("seed", seed, low=0)
    if update is None:
        update = gradscaler_step
    elif not callable(update):
        raise TypeError(f"update must be a function (scale, found_inf, good_steps, "
                        f"growth_interval) -> (scale, good_steps, skipped), got "
                        f"{type(update).__name__}")
    grad_max = grad_median * np.exp(np.random.default_rng(seed).normal(0.0, grad_sigma, steps))
    skipped = np.zeros(steps, dtype=bool)
    scales = np.empty(steps)
    good = 0
    for t in range(steps):
        found_inf = bool(np.isinf(round_to(grad_max[t] * scale, fmt)))
        scale, good, skip = update(scale, found_inf, good,
                                   growth_interval)
        skipped[t], scales[t] = skip, scale
    return LossScaleRun(grad_max, skipped, scales, float(init_scale))


class LossScaler:
    """Dynamic loss scaling with ``torch.amp.GradScaler``'s interface, in a page: ``scale``,
    ``unscale_``, ``step``, ``update``, ``get_scale``, ``state_dict`` (PyTorch source,
    ``torch/amp/grad_scaler.py``), for one optimizer. Used as GradScaler is::

        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()

    * ``scale(loss)`` = loss · S, S a float32 scalar tensor (GradScaler keeps S in float32);
    * ``unscale_(opt)`` multiplies every gradient by float32(1 / float64(S)) (GradScaler
      takes the reciprocal in float64, ``unscale_``) and records whether any gradient holds
      an inf or NaN (``torch._amp_foreach_non_finite_check_and_unscale_``);
    * ``step(opt)`` unscales if ``unscale_`` was not called, then calls ``opt.step()``
      only if every gradient was finite (GradScaler's ``_maybe_opt_step``);
    * ``state_dict()`` / ``load_state_dict(state)``: GradScaler's checkpoint, the scale, the
      factors, the interval and the count of good steps (``_growth_tracker``);
    * ``update()`` applies ``rule(S, found_inf, good_steps, growth_interval) -> (S,
      good_steps, skipped)``, chapter 08's exercise 8.3 signature; by default GradScaler's
      (``torch._amp_update_scale_``: :func:`labkit.compress.model.update_loss_scale` with
      this scaler's factors). As in ``_amp_update_scale_``, a grown scale that is not
      finite in float32 is not taken.

    With the same seeds, the same model and the same optimizer, a run with this scaler and
    one with ``torch.amp.GradScaler("cpu")`` of the same settings are equal bit for bit
    (``tests/test_compress_amp.py``)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 rule: Callable | None = None):
        self._scale = float(np.float32(v.positive("init_scale", init_scale)))
        self.growth_factor = v.number("growth_factor", growth_factor, low=1, low_open=True)
        self.backoff_factor = v.number("backoff_factor", backoff_factor, low=0, high=1,
                                       low_open=True, high_open=True)
        self.growth_interval = v.integer("growth_interval", growth_interval, low=1)
        if rule is not None and not callable(rule):
            raise TypeError(f"rule must be a function (scale, found_inf, good_steps, "
                            f"growth_interval) -> (scale, good_steps, skipped), got "
                            f"{type(rule).__name__}")
        self.rule = rule
        self.good_steps = 0
        self.found_inf: bool | None = None      # None: this step's gradients not unscaled yet

    def get_scale(self) -> float:
        return self._scale

    def state_dict(self) -> dict:
        """GradScaler's checkpoint of the scaler (``GradScaler.state_dict``): the scale, the
        factors, the interval and ``_growth_tracker``, the count of good steps in a row."""
        return {"scale": self._scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.good_steps}

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (this scaler's or ``torch.amp.GradScaler``'s)."""
        missing = [k for k in self.state_dict() if k not in state]
        if missing:
            raise RuntimeError(f"the state lacks {', '.join(missing)}: it must come from "
                               f"state_dict() of a scaler")
        self._scale = float(np.float32(state["scale"]))
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self.good_steps = int(state["_growth_tracker"])

    def scale(self, loss):
        import torch  # deferred: torch
        return loss * torch.tensor(self._scale, dtype=torch.float32)

    def unscale_(self, optimizer) -> None:
        import torch  # deferred: torch

        if self.found_inf is not None:
            raise RuntimeError("unscale_() has already been called since the last update()")
        inv = torch.tensor(1.0 / self._scale, dtype=torch.float64).float()
        found = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        found = found or not bool(torch.isfinite(p.grad).all())
                        p.grad.mul_(inv)
        self.found_inf = found

    def step(self, optimizer, *args, **kwargs):
        if self.found_inf is None:
            self.unscale_(optimizer)
        return None if self.found_inf else optimizer.step(*args, **kwargs)

    def update(self) -> None:
        if self.found_inf is None:
            raise RuntimeError("update() before step(): no gradients were checked")
        if self.rule is None:
            new, good, _ = update_loss_scale(
                self._scale, self.found_inf, self.good_steps, growth_factor=self.growth_factor,
                backoff_factor=self.backoff_factor, growth_interval=self.growth_interval)
        else:
            new, good, _ = self.rule(self._scale, self.found_inf, self.good_steps,
                                     self.growth_interval)
        with np.errstate(over="ignore"):
            new = np.float32(new)
        if np.isfinite(new):
            self._scale = float(new)
        self.good_steps, self.found_inf = int(good), None
