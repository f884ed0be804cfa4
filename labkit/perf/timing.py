"""Timing done right: warm-up, repeats, median and spread (never a single run)."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeats`` timed runs after ``warmup`` untimed ones."""
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def iqr(self) -> float:
        q1, _, q3 = np.percentile(self.samples, [25, 50, 75])
        return float(q3 - q1)


def time_call(fn: Callable[[], object], *, repeats: int = 7, warmup: int = 1,
              number: int = 1) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` samples of ``number`` calls."""
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError(f"repeats and number must be >= 1 and warmup >= 0; got "
                         f"repeats={repeats}, number={number}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return Timing(tuple(samples))
