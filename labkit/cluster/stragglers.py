"""Stragglers in synchronous data parallelism, and backup workers.

In a synchronous step every worker computes a gradient and the all-reduce waits for all of
them, so the step takes the **maximum** of the workers' times, not their mean: one slow
worker (a 掉队者, straggler: a busy host, a throttled GPU, a slow link) slows everyone.
Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed Synchronous SGD" (2016,
arXiv:1604.00981, §3) add *b* **backup workers**: N + b workers compute, the step uses the
first N gradients to arrive and drops the rest, so the step waits for the N-th fastest of
N + b instead of the slowest of N, at the price of b more machines.

Two models of one worker's step time, both with closed forms:

* ``"exponential"``: t = base + Exp(mean = delay). The k-th smallest of m i.i.d.
  exponentials has mean delay · (H_m − H_{m−k}), H_n = 1 + 1/2 + … + 1/n (Rényi's
  representation; e.g. David & Nagaraja, *Order Statistics*, 3rd ed., §6.7), so
  E[step] = base + delay · (H_{N+b} − H_b); with no backups base + delay · H_N, which grows
  like ln N.
* ``"bernoulli"``: each worker independently straggles with probability p and then takes
  ``slowdown`` × base. The step is slow when more than b of the N + b workers straggle:
  E[step] = base · (1 + (slowdown − 1) · P[Binomial(N + b, p) > b]); with b = 0 that is
  base · (1 + (slowdown − 1)(1 − (1 − p)^N)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit import validate as v

MODELS = ("exponential", "bernoulli")


def harmonic(n: int) -> float:
    n = v.integer("n", n, low=0)
    return float(sum(1.0 / k for k in range(1, n + 1)))


def expected_step_exponential(workers: int, base: float, delay: float, backups: int = 0) -> float:
    """E[step] = base + delay · (H_{N+b} − H_b) for the shifted-exponential model."""
    n = v.integer("workers", workers, low=1)
    b = v.integer("backups", backups, low=0)
    base = v.nonnegative("base", base)
    delay = v.nonnegative("delay", delay)
    return base + delay * (harmonic(n + b) - harmonic(b))


def straggle_probability(workers: int, p: float, backups: int = 0) -> float:
    """P[more than ``backups`` of ``workers`` + ``backups`` workers straggle]."""
    n = v.integer("workers", workers, low=1)
    b = v.integer("backups", backups, low=0)
    p = v.fraction("p", p)
    m = n + b
    at_most_b = sum(math.comb(m, k) * p ** k * (1 - p) ** (m - k) for k in range(b + 1))
    return max(0.0, 1.0 - at_most_b)


def expected_step_bernoulli(workers: int, base: float, p: float, slowdown: float,
                            backups: int = 0) -> float:
    """E[step] = base · (1 + (slowdown − 1) · P[Binomial(N + b, p) > b])."""
    base = v.nonnegative("base", base)
    slowdown = v.number("slowdown", slowdown, low=1)
    return base * (1 + (slowdown - 1) * straggle_probability(workers, p, backups))


def backups_needed(workers: int, base: float, p: float, slowdown: float, target: float,
                   max_backups: int = 1000) -> int:
    """Fewest backup workers b with :func:`expected_step_bernoulli` < ``target`` (the step
    uses the first N of N + b workers; Chen et al. 2016 §3). E[step] never rises with b
    (Binomial(N+b+1, p) > b+1 implies Binomial(N+b, p) > b), so the first b found is least.
    Raises ValueError if ``target`` <= ``base`` (never met) or none up to ``max_backups``."""
    base = v.nonnegative("base", base)
    target = v.number("target", target)
    if target <= base:
        raise ValueError(f"target must be > base = {base} (no number of backups reaches it), "
                         f"got {target}")
    for b in range(v.integer("max_backups", max_backups, low=0) + 1):
        if expected_step_bernoulli(workers, base, p, slowdown, b) < target:
            return b
    raise ValueError(f"no number of backups up to max_backups={max_backups} gets the mean step "
                     f"below target={target}")


@dataclass(frozen=True)
class StragglerSim:
    model: str
    workers: int
    backups: int
    step_times: np.ndarray      # per simulated step
    worker_mean: float          # mean time of one worker (what a step would take without sync)

    @property
    def mean_step(self) -> float:
        return float(self.step_times.mean())

    @property
    def slowdown(self) -> float:
        """Mean step / mean worker time: what synchronisation costs."""
        return self.mean_step / self.worker_mean

    @property
    def gpu_seconds_per_step(self) -> float:
        """Every one of the N + b workers is held for the whole step."""
        return (self.workers + self.backups) * self.mean_step


def simulate_steps(workers: int, *, backups: int = 0, steps: int = 2000, model: str = "exponential",
                   base: float = 1.0, delay: float = 0.1, p: float = 0.05, slowdown: float = 3.0,
                   seed: int = 0) -> StragglerSim:
    """Sample ``steps`` synchronous steps: each of N + b workers draws a time; the step is
    the N-th smallest."""
    n = v.integer("workers", workers, low=1)
    b = v.integer("backups", backups, low=0)
    steps = v.integer("steps", steps, low=1)
    model = v.one_of("model", model, MODELS)
    base = v.nonnegative("base", base)
    rng = np.random.default_rng(v.integer("seed", seed, low=0))
    if model == "exponential":
        delay = v.nonnegative("delay", delay)
        t = base + rng.exponential(delay, size=(steps, n + b)) if delay > 0 else \
            np.full((steps, n + b), base)
        mean = base + delay
    else:
        p = v.fraction("p", p)
        slowdown = v.number("slowdown", slowdown, low=1)
        slow = rng.random((steps, n + b)) < p
        t = base * np.where(slow, slowdown, 1.0)
        mean = base * (1 + (slowdown - 1) * p)
    step = np.partition(t, n - 1, axis=1)[:, n - 1]
    return StragglerSim(model, n, b, step, mean)


@dataclass(frozen=True)
class BackupTradeoff:
    backups: np.ndarray
    step_time: np.ndarray        # expected step time
    gpu_seconds: np.ndarray      # (N + b) · step time: the machine time one step costs
    speedup: np.ndarray          # step time without backups / with


def backup_tradeoff(workers: int, max_backups: int = 8, *, model: str = "exponential",
                    base: float = 1.0, delay: float = 0.1, p: float = 0.05,
                    slowdown: float = 3.0) -> BackupTradeoff:
    """Closed-form step time and machine cost for b = 0..max_backups backup workers."""
    n = v.integer("workers", workers, low=1)
    mb = v.integer("max_backups", max_backups, low=0)
    model = v.one_of("model", model, MODELS)
    bs = np.arange(mb + 1)
    if model == "exponential":
        t = np.array([expected_step_exponential(n, base, delay, b) for b in bs])
    else:
        t = np.array([expected_step_bernoulli(n, base, p, slowdown, b) for b in bs])
    return BackupTradeoff(bs, t, (n + bs) * t, t[0] / t)
