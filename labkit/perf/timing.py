"""Timing done right: warm-up, repeats, median and spread (never a single run).

``benchmark(fn, ...)`` is the one timing helper of the project (chapters and ``make bench``).
Its rules:

* warm-up: the first calls pay for lazy initialisation, allocator growth, caches and
  (torch.compile) compilation; they are run and thrown away;
* repeats: ``repeats`` samples, each the mean of ``number`` back-to-back calls (raise
  ``number`` when one call is shorter than the clock's resolution, ~1 µs);
* report the median and a spread (IQR) and a confidence interval, not the mean of a
  long-tailed sample and never the single best run on its own;
* asynchronous devices: a CUDA kernel launch returns before the kernel ends, so a host
  clock around it times the launch. With ``device="cuda"`` each sample is timed with CUDA
  events recorded on the stream, after ``torch.cuda.synchronize()`` (PyTorch
  documentation, "CUDA semantics: asynchronous execution").
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit import validate as v


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeats`` timed runs after ``warmup`` untimed ones."""
    samples: tuple[float, ...]
    clock: str = "perf_counter"

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def stdev(self) -> float:
        return float(np.std(self.samples, ddof=1)) if len(self.samples) > 1 else 0.0

    @property
    def iqr(self) -> float:
        q1, _, q3 = np.percentile(self.samples, [25, 50, 75])
        return float(q3 - q1)

    def percentile(self, q: float) -> float:
        from labkit.perf.stats import percentile
        return percentile(self.samples, q)

    def ci(self, level: float = 0.95, method: str = "bootstrap"):
        """Confidence interval of the median (bootstrap) or of the mean (``method="t"``)."""
        from labkit.perf.stats import bootstrap_ci, t_ci
        v.one_of("method", method, ("bootstrap", "t"))
        return bootstrap_ci(self.samples, level=level) if method == "bootstrap" else \
            t_ci(self.samples, level=level)

    def __str__(self) -> str:
        return (f"median {_fmt_s(self.median)} (IQR {_fmt_s(self.iqr)}, "
                f"{len(self.samples)} samples)")


def _fmt_s(t: float) -> str:
    for scale, suffix in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if t >= scale:
            return f"{t / scale:.3g} {suffix}"
    return f"{t * 1e9:.3g} ns"


def _check_counts(repeats: int, warmup: int, number: int) -> None:
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError(f"repeats and number must be >= 1 and warmup >= 0; got "
                         f"repeats={repeats}, number={number}, warmup={warmup}")


def _host_sample(fn: Callable[[], object], number: int,
                 sync: Callable[[], object] | None = None) -> float:
    """Seconds per call of ``number`` back-to-back calls on the host clock (``sync()``
    before the clock starts and before it stops, when given)."""
    if sync is not None:
        sync()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    if sync is not None:
        sync()
    return (time.perf_counter() - start) / number


def _cuda_sample(fn: Callable[[], object], number: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(number):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / number


def benchmark(fn: Callable[[], object], *, repeats: int = 7, warmup: int = 1, number: int = 1,
              device: str = "cpu", sync: Callable[[], object] | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` samples of ``number`` calls.

    ``device="cuda"`` times with CUDA events after synchronising; ``sync`` (called before
    and after each sample) serves other asynchronous back ends."""
    _check_counts(repeats, warmup, number)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = v.one_of("device", device, ("cpu", "cuda"))
    for _ in range(warmup):
        fn()
    samples = [_cuda_sample(fn, number) if device == "cuda" else _host_sample(fn, number, sync)
               for _ in range(repeats)]
    return Timing(tuple(samples), "cuda events" if device == "cuda" else "perf_counter")


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int = 15, warmup: int = 1,
                number: int = 1) -> dict[str, Timing]:
    """Time several functions in alternation (A B C A B C …) so that slow drifts of a shared
    machine (a neighbour's job, frequency changes) hit all of them alike."""
    if not fns:
        raise ValueError("fns must name at least one function")
    _check_counts(repeats, warmup, number)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name].append(_host_sample(fn, number))
    return {k: Timing(tuple(s)) for k, s in out.items()}


class threads:
    """``with threads(1): ...`` limits numpy's BLAS (threadpoolctl) and torch's intra-op
    pool to ``n`` threads and restores them after. On a small shared machine a second
    thread that waits for a busy core turns a 20 µs matmul into milliseconds: pin threads
    before timing small operations."""

    def __init__(self, n: int = 1):
        self.n = v.integer("n", n, low=1)

    def __enter__(self):
        from threadpoolctl import threadpool_limits

        try:
            import torch
            self._torch = torch.get_num_threads()     # read before threadpoolctl moves it
        except ImportError:
            self._torch = None
        self._limits = threadpool_limits(self.n)
        if self._torch is not None:
            torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        self._limits.restore_original_limits()
        if self._torch is not None:
            import torch
            torch.set_num_threads(self._torch)
        return False
