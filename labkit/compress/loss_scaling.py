"""Dynamic loss scaling over a run of simulated gradients (chapter 08).

The update rule is :func:`labkit.compress.model.update_loss_scale`, the one
``torch.amp.GradScaler.update`` applies (PyTorch docs, ``torch.amp.GradScaler``; defaults
``init_scale`` = 2^16, ``growth_factor`` = 2, ``backoff_factor`` = 0.5, ``growth_interval``
= 2000): an overflow multiplies the scale S by 0.5, skips the step and resets the count of
good steps; ``growth_interval`` consecutive good steps multiply S by 2.

The gradients are a stated model, not a network: the largest |gradient| of step t is
g_t = ``grad_median`` · exp(σ·z_t), z_t ~ N(0, 1) drawn from ``numpy.random.default_rng(seed)``
(log-normal, median ``grad_median``). Step t overflows when the scaled gradient g_t · S,
rounded to the format (:func:`labkit.compress.model.round_to`), is inf (fp16: from 65520 up,
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
from labkit.compress.model import FORMATS, round_to, update_loss_scale


@dataclass(frozen=True)
class LossScaleRun:
    """One simulated run: per step, the largest |gradient|, whether the step was skipped
    and the loss scale after the update."""
    grad_max: np.ndarray
    skipped: np.ndarray          # bool per step
    scales: np.ndarray           # scale after each step's update
    init_scale: float

    @property
    def steps(self) -> int:
        return len(self.scales)

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())

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
