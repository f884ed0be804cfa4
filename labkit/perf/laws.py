"""Scaling laws used across chapters."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate


def _numbers(name: str, value) -> np.ndarray:
    """A number or a numeric array, as floats (a clear error for anything else)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return validate.array(name, value)
    return np.asarray(validate.number(name, value, finite=False))


def _share(name: str, value) -> np.ndarray:
    """A fraction of the run time (number or array), every entry in [0, 1]."""
    out = _numbers(name, value)
    if np.any(np.isnan(out)) or np.any((out < 0) | (out > 1)):
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return out


def _workers(workers) -> np.ndarray:
    """A worker count (number or array), every entry >= 1."""
    out = _numbers("workers", workers)
    if np.any(np.isnan(out)) or np.any(out < 1):
        raise ValueError(f"workers must be >= 1, got {workers}")
    return out


def amdahl_speedup(parallel_fraction: float | np.ndarray, workers: int | np.ndarray):
    """Amdahl's law: S(n) = 1 / ((1 - p) + p / n)  (Amdahl, AFIPS 1967).

    ``parallel_fraction`` p in [0, 1] is the share of the run time that parallelizes;
    ``workers`` n >= 1.
    """
    p, n = _share("parallel_fraction", parallel_fraction), _workers(workers)
    s = 1.0 / ((1.0 - p) + p / n)
    return float(s) if s.ndim == 0 else s


def gustafson_speedup(serial_fraction: float | np.ndarray, workers: int | np.ndarray):
    """Gustafson's law, the scaled speedup of weak scaling: S(n) = s + (1 - s) n
    (J. L. Gustafson, "Reevaluating Amdahl's law", CACM 31(5), 1988).

    ``serial_fraction`` s in [0, 1] is the serial share of the run time measured on the
    n-worker machine, whose job grew with it; ``workers`` n >= 1.
    """
    s, n = _share("serial_fraction", serial_fraction), _workers(workers)
    out = s + (1.0 - s) * n
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class AmdahlCurve:
    parallel_fraction: float
    workers: np.ndarray
    speedup: np.ndarray

    @property
    def ceiling(self) -> float:
        """lim n→∞ S(n) = 1 / (1 - p)."""
        p = self.parallel_fraction
        return float("inf") if p == 1 else 1.0 / (1.0 - p)


def amdahl_curve(parallel_fraction: float, max_workers: int = 1024) -> AmdahlCurve:
    """Speedup for 1, 2, 4, ... up to ``max_workers`` workers."""
    validate.fraction("parallel_fraction", parallel_fraction)
    max_workers = validate.integer("max_workers", max_workers, low=1, high=1 << 20)
    n = 2 ** np.arange(int(np.log2(max_workers)) + 1)
    return AmdahlCurve(float(parallel_fraction), n, amdahl_speedup(parallel_fraction, n))
