"""scikit-learn's handwritten digits (1,797 images of 8x8 pixels, shipped with the package)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.validate import integer, number


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray   # (N, 64) float32 in [0, 1]
    y_train: np.ndarray   # (N,) int64 in [0, 10)
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits(test_fraction: float = 0.25, seed: int = 0, dtype=np.float32) -> Split:
    """A seeded, shuffled train/test split of the digits, pixels scaled from [0, 16] to [0, 1]."""
    test_fraction = number("test_fraction", test_fraction, low=0, high=1, low_open=True,
                           high_open=True)
    seed = integer("seed", seed, low=0)
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be a numpy dtype, got {dtype!r}") from None
    from sklearn.datasets import load_digits as _load  # deferred: sklearn

    d = _load()
    x = (d.data / 16.0).astype(dtype)
    y = d.target.astype(np.int64)
    idx = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_fraction))
    te, tr = idx[:n_test], idx[n_test:]
    return Split(x[tr], y[tr], x[te], y[te])


def batches(n: int, batch_size: int, rng: np.random.Generator):
    """Shuffled index batches covering range(n) once (the last one may be short)."""
    n = integer("n", n, low=0, high=10**9)
    batch_size = integer("batch_size", batch_size, low=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    return _batches(rng.permutation(n), batch_size)


def _batches(order: np.ndarray, batch_size: int):
    n = len(order)
    for i in range(0, n, batch_size):
        yield order[i:i + batch_size]
