"""Statistics of timing samples: percentiles, confidence intervals, speedups.

* Percentile: the "linear" definition (Hyndman & Fan 1996, definition 7; numpy's default):
  sort the n samples x_(0) ≤ … ≤ x_(n-1), take the position h = (n - 1)·q and interpolate
  x_(⌊h⌋) + (h - ⌊h⌋)(x_(⌊h⌋+1) - x_(⌊h⌋)).
* Bootstrap percentile interval (Efron & Tibshirani, *An Introduction to the Bootstrap*,
  1993, ch. 13): resample the n samples with replacement B times, compute the statistic of
  each resample, take the (1-c)/2 and (1+c)/2 percentiles of those B values.
* Student-t interval of the mean: mean ± t_{(1+c)/2, n-1} · s / √n (s the sample standard
  deviation); it assumes roughly normal samples, which timings rarely are (a long right
  tail), so labkit reports the bootstrap interval of the median by default.
* Spread of repeated measurements of one quantity: their mean, median and range
  [min, max] (:class:`Spread`), the one summary a table of trials shows.
* Speedup of B over A: median(A) / median(B), with a bootstrap interval that resamples both
  sets independently (Georges, Buytaert & Eeckhout, "Statistically Rigorous Java Performance
  Evaluation", OOPSLA 2007, argue for intervals over single numbers).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from labkit import validate as v


def percentile(samples, q: float) -> float:
    """The ``q``-th percentile (q in [0, 100]) of ``samples`` by linear interpolation."""
    x = np.sort(v.array("samples", samples, ndim=1).astype(float))
    if x.size == 0:
        raise ValueError("samples must hold at least one value")
    q = v.number("q", q, low=0, high=100)
    h = (x.size - 1) * q / 100.0
    lo = int(np.floor(h))
    hi = min(lo + 1, x.size - 1)
    return float(x[lo] + (h - lo) * (x[hi] - x[lo]))


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval [low, high] at ``level``."""
    estimate: float
    low: float
    high: float
    level: float
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return (f"{self.estimate:.4g} [{self.low:.4g}, {self.high:.4g}] "
                f"({self.level:.0%} {self.method})")


@dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: their mean, median and range [low, high],
    computed once from ``values`` (a sequence, kept as given)."""
    values: Sequence[float]
    mean: float = field(init=False)
    median: float = field(init=False)
    low: float = field(init=False)
    high: float = field(init=False)

    def __post_init__(self):
        if len(self.values) == 0:
            raise ValueError("a spread needs at least one value")
        for name, statistic in (("mean", np.mean), ("median", np.median), ("low", np.min),
                                ("high", np.max)):
            object.__setattr__(self, name, float(statistic(self.values)))

    @property
    def relative_range(self) -> float:
        """(high − low) / median."""
        return (self.high - self.low) / self.median if self.median else 0.0

    def overlaps(self, other: "Spread") -> bool:
        return self.low <= other.high and other.low <= self.high

    def format(self, fmt: str = ",.0f") -> str:
        if len(self.values) == 1:
            return format(self.median, fmt)
        return f"{self.median:{fmt}} ({self.low:{fmt}}–{self.high:{fmt}})"


def bootstrap_ci(samples, statistic: Callable = np.median, *, level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> Interval:
    """Bootstrap percentile interval of ``statistic`` (default: the median)."""
    x = v.array("samples", samples, ndim=1).astype(float)
    if x.size < 2:
        raise ValueError(f"samples must hold at least 2 values, got {x.size}")
    level = v.number("level", level, low=0, high=1, low_open=True, high_open=True)
    resamples = v.integer("resamples", resamples, low=100, high=10**6)
    rng = np.random.default_rng(v.integer("seed", seed, low=0))
    v.function("statistic", statistic)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    if statistic is np.median or statistic is np.mean:      # the same values, vectorised
        stats = statistic(x[idx], axis=1)
    else:
        stats = np.apply_along_axis(statistic, 1, x[idx])
    lo, hi = np.percentile(stats, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(statistic(x)), float(lo), float(hi), level, "bootstrap")


def t_ci(samples, *, level: float = 0.95) -> Interval:
    """Student-t interval of the mean: mean ± t·s/√n."""
    from scipy import stats  # deferred: scipy

    x = v.array("samples", samples, ndim=1).astype(float)
    if x.size < 2:
        raise ValueError(f"samples must hold at least 2 values, got {x.size}")
    level = v.number("level", level, low=0, high=1, low_open=True, high_open=True)
    m, s = float(x.mean()), float(x.std(ddof=1))
    t = float(stats.t.ppf((1 + level) / 2, x.size - 1))
    half = t * s / np.sqrt(x.size)
    return Interval(m, m - half, m + half, level, "t")


def speedup_ci(baseline, candidate, *, level: float = 0.95, resamples: int = 2000,
               seed: int = 0) -> Interval:
    """Speedup median(baseline)/median(candidate) with a bootstrap interval (both sets
    resampled independently). Above 1: the candidate is faster."""
    a = v.array("baseline", baseline, ndim=1).astype(float)
    b = v.array("candidate", candidate, ndim=1).astype(float)
    if a.size < 2 or b.size < 2:
        raise ValueError("baseline and candidate must hold at least 2 samples each")
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("timings must be > 0 seconds")
    level = v.number("level", level, low=0, high=1, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, size=(resamples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(resamples, b.size))], axis=1)
    lo, hi = np.percentile(ma / mb, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(np.median(a) / np.median(b)), float(lo), float(hi), level,
                    "bootstrap")


def noisy_samples(n: int, *, base: float = 1e-3, jitter: float = 0.02,
                  interference: float = 0.0, slowdown: float = 3.0, seed: int = 0) -> np.ndarray:
    """A model of timings on a shared machine: each run takes ``base`` seconds times a
    log-normal jitter (σ = ``jitter``); with probability ``interference`` a neighbour's job
    steals the core and the run takes ``slowdown`` times longer. Used to show why the
    median and its interval survive noise that moves the mean."""
    n, seed = v.integer("n", n, low=1, high=10**7), v.integer("seed", seed, low=0)
    base = v.positive("base", base)
    jitter = v.nonnegative("jitter", jitter)
    interference = v.fraction("interference", interference)
    slowdown = v.number("slowdown", slowdown, low=1)
    rng = np.random.default_rng(seed)
    x = base * np.exp(jitter * rng.standard_normal(n))
    hit = rng.random(n) < interference
    return np.where(hit, x * slowdown, x)


@dataclass(frozen=True)
class NoiseEstimates(Spread):
    """Timings of :func:`noisy_samples` (``values``) and what each estimate makes of them:
    the mean, the median with its bootstrap interval (:func:`bootstrap_ci`), the minimum
    (``low``)."""
    base: float                  # the true time of one call, seconds
    ci: Interval                 # of the median

    def survivors(self, tol: float = 0.05) -> str:
        """Which of "mean" and "median" lie within ``tol`` (relative) of the true time:
        "mean", "median", "both" or "neither"."""
        tol = v.positive("tol", tol)
        ok = [name for name, val in (("mean", self.mean), ("median", self.median))
              if abs(val / self.base - 1) < tol]
        return "both" if len(ok) == 2 else (ok[0] if ok else "neither")


def noise_estimates(n: int, *, base: float = 1e-3, jitter: float = 0.02,
                    interference: float = 0.0, slowdown: float = 3.0,
                    seed: int = 0) -> NoiseEstimates:
    """:func:`noisy_samples` with these arguments, and the 95 % bootstrap interval of their
    median (chapter 12's noise widget and its reveal)."""
    x = noisy_samples(n, base=base, jitter=jitter, interference=interference,
                      slowdown=slowdown, seed=seed)
    return NoiseEstimates(x, float(base), bootstrap_ci(x))


def format_noise_rows(interferences=(0.0, 0.15, 0.3, 0.45), n: int = 50, jitter: float = 0.05,
                      seed: int = 0) -> str:
    """One line per interference of :func:`noise_estimates`: how far the mean and the median
    are from the true time, and whether the median's 95 % interval contains it. The
    interval is around the median of the samples, so it says how well the samples fix
    *their* median — not where the true time is once interference moves that median."""
    lines = ["| interference | mean off by | median off by | 95 % CI of the median | "
             "contains the true time |", "|---:|---:|---:|---:|---|"]
    for i in interferences:
        e = noise_estimates(n, jitter=jitter, interference=i, seed=seed)
        lines.append(f"| {i:.2f} | {e.mean / e.base - 1:+.1%} | {e.median / e.base - 1:+.1%} | "
                     f"[{e.ci.low / e.base:.3f}, {e.ci.high / e.base:.3f}] × true | "
                     f"{'yes' if e.base in e.ci else 'no'} |")
    return "\n".join(lines)
