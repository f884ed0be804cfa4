"""Timing done right: the one timing module of labkit, for the CPU clock, torch's CUDA
events and numba's CUDA events (warm-up, repeats, median and an interval, never a single run).

``benchmark(fn, ...)`` is the one timing helper of the project (chapters and ``make bench``),
and the reference of chapter 12's exercise 12.1, where the learner writes it. Its rules:

* warm-up: the first calls pay for lazy initialisation, allocator growth, caches and
  (torch.compile) compilation; they are run and thrown away;
* repeats: ``repeats`` samples, each the mean of ``number`` back-to-back calls (raise
  ``number`` when one call is shorter than the clock's resolution, ~1 µs);
* report the median and a confidence interval of it — the bootstrap percentile interval
  (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13) of the samples
  recorded, drawn from ``numpy.random.default_rng(seed)`` — not the mean of a long-tailed
  sample and never the single best run on its own;
* asynchronous devices: a CUDA kernel launch returns before the kernel ends, so a host
  clock around it times the launch. ``sync`` is called before the clock starts and before it
  stops; with ``device="cuda"`` each sample is timed with CUDA events recorded on the
  stream, after ``torch.cuda.synchronize()`` (PyTorch documentation, "CUDA semantics:
  asynchronous execution").

``clock`` (default :func:`time.perf_counter`) is the clock read around each sample: chapter
12's check hands in :class:`labkit.perf.virtual.VirtualClock`, whose time only moves with
simulated work, so a timer can be checked exactly whatever the machine's load.

Kernels written for numba (chapter 05, ``benchmarks/gpu_check.py``) are timed by
:func:`time_events`: a launch returns before the kernel finishes, the first launch compiles,
and host-device copies can dwarf the kernel, so warm up once, keep the data on the device and
time with CUDA events recorded on the GPU's own stream (NVIDIA, CUDA C++ Best Practices
Guide, "Using CUDA GPU Timers"). Percentiles of the samples (``Timing.p50``, ``p95``,
``p99``: a latency's tail) and intervals come from :mod:`labkit.stats`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from labkit import validate as v
from labkit._device import on_gpu
from labkit.stats import Interval, bootstrap_ci, percentile, t_ci


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the ``samples`` in the order they were measured, their ``median``
    and the bootstrap interval [``low``, ``high``] of the median at ``level``.

    A harness fills every field itself (exercise 12.1); :func:`summarise` computes them for
    labkit's own."""
    samples: tuple[float, ...]
    median: float
    low: float
    high: float
    level: float = 0.95
    clock: str = "perf_counter"

    def __post_init__(self):
        if isinstance(self.samples, (str, bytes)) or not hasattr(self.samples, "__len__"):
            raise TypeError(f"samples must be a tuple of seconds, got "
                            f"{type(self.samples).__name__}")
        samples = tuple(float(s) for s in self.samples)
        if not samples:
            raise ValueError("samples must hold at least one timing")
        object.__setattr__(self, "samples", samples)
        for name in ("median", "low", "high", "level"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                                 np.floating)):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(float(value)):
                raise ValueError(f"{name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        v.number("level", self.level, low=0, high=1, low_open=True, high_open=True)

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
        """The ``q``-th percentile (q in [0, 100]) of the samples (:func:`labkit.stats.percentile`)."""
        return percentile(self.samples, q)

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p95(self) -> float:
        return self.percentile(95)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    def ci(self, level: float | None = None, method: str = "bootstrap"):
        """The interval of the median at ``level`` (None: the harness's own, stored), or the
        Student-t interval of the mean (``method="t"``), as a
        :class:`labkit.stats.Interval`."""
        v.one_of("method", method, ("bootstrap", "t"))
        if method == "t":
            return t_ci(self.samples, level=self.level if level is None else level)
        if level is None or level == self.level:
            return Interval(self.median, self.low, self.high, self.level, "bootstrap")
        return bootstrap_ci(self.samples, level=level)

    def __str__(self) -> str:
        return (f"median {_fmt_s(self.median)} [{_fmt_s(self.low)}, {_fmt_s(self.high)}] "
                f"({self.level:.0%} CI, IQR {_fmt_s(self.iqr)}, {len(self.samples)} samples)")


def summarise(samples, *, level: float = 0.95, resamples: int = 2000, seed: int = 0,
              clock: str = "perf_counter") -> Timing:
    """A :class:`Timing` of ``samples``: their median and its bootstrap percentile interval
    (:func:`labkit.stats.bootstrap_ci`: ``resamples`` resamples with replacement from
    ``default_rng(seed)``, the (1 - level)/2 and (1 + level)/2 percentiles of their medians).
    One sample has no spread: its interval is the sample itself."""
    x = tuple(float(s) for s in v.array("samples", samples, ndim=1, allow_empty=True))
    if not x:
        raise ValueError("samples must hold at least one timing")
    if len(x) == 1:
        return Timing(x, x[0], x[0], x[0], level, clock)
    ci = bootstrap_ci(x, level=level, resamples=resamples, seed=seed)
    return Timing(x, ci.estimate, ci.low, ci.high, level, clock)


def _fmt_s(t: float) -> str:
    for scale, suffix in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if t >= scale:
            return f"{t / scale:.3g} {suffix}"
    return f"{t * 1e9:.3g} ns"


def _check_counts(repeats: int, warmup: int, number: int) -> None:
    v.integer("repeats", repeats, low=1)
    v.integer("number", number, low=1)
    v.integer("warmup", warmup, low=0)


def _host_sample(fn: Callable[[], object], number: int,
                 sync: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of ``number`` back-to-back calls on ``clock`` (``sync()`` before the
    clock starts and before it stops, when given)."""
    if sync is not None:
        sync()
    start = clock()
    for _ in range(number):
        fn()
    if sync is not None:
        sync()
    return (clock() - start) / number


def _cuda_sample(fn: Callable[[], object], number: int) -> float:
    """Seconds per call of ``number`` calls between two torch CUDA events."""
    import torch  # deferred: torch is heavy

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(number):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / number


def benchmark(fn: Callable[[], object], *, repeats: int = 7, warmup: int = 1, number: int = 1,
              device: str = "cpu", sync: Callable[[], object] | None = None,
              clock: Callable[[], float] | None = None, level: float = 0.95,
              resamples: int = 2000, seed: int = 0) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` samples of ``number`` calls,
    summarised by :func:`summarise` (median, bootstrap interval at ``level``).

    ``sync`` (called before the clock starts and before it stops) serves asynchronous back
    ends; ``clock`` replaces :func:`time.perf_counter`; ``device="cuda"`` times with CUDA
    events after synchronising."""
    _check_counts(repeats, warmup, number)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    device = v.one_of("device", device, ("cpu", "cuda"))
    if sync is not None:
        v.function("sync", sync)
    v.integer("resamples", resamples, low=100, high=10**6), v.integer("seed", seed, low=0)
    if clock is None:
        clock, clock_name = time.perf_counter, "perf_counter"
    elif not callable(clock):
        raise TypeError(f"clock must be callable, got {type(clock).__name__}")
    else:
        clock_name = getattr(clock, "__name__", type(clock).__name__)
    for _ in range(warmup):
        fn()
    samples = [_cuda_sample(fn, number) if device == "cuda"
               else _host_sample(fn, number, sync, clock) for _ in range(repeats)]
    return summarise(samples, level=level, resamples=resamples, seed=seed,
                     clock="cuda events" if device == "cuda" else clock_name)


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int = 15, warmup: int = 1,
                number: int = 1, sync: Callable[[], object] | None = None,
                clock: Callable[[], float] | None = None, level: float = 0.95,
                resamples: int = 2000, seed: int = 0) -> dict[str, Timing]:
    """Time several functions in alternation so that slow drifts of a shared machine (a
    neighbour's job, frequency changes) hit all of them alike: each warmed up ``warmup``
    times (in the dict's order), then ``repeats`` rounds of one sample of each (A B C A B C
    …), ``sync`` before the clock starts and stops; each summarised by :func:`summarise`.
    Chapter 12's exercise 12.3 is this function."""
    if not fns:
        raise ValueError("fns must name at least one function")
    _check_counts(repeats, warmup, number)
    clock = time.perf_counter if clock is None else clock
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name].append(_host_sample(fn, number, sync, clock))
    return {k: summarise(s, level=level, resamples=resamples, seed=seed) for k, s in out.items()}


class threads:
    """``with threads(1): ...`` limits numpy's BLAS (threadpoolctl) and torch's intra-op
    pool to ``n`` threads and restores them after. On a small shared machine a second
    thread that waits for a busy core turns a 20 µs matmul into milliseconds: pin threads
    before timing small operations."""

    def __init__(self, n: int = 1):
        self.n = v.integer("n", n, low=1)

    def __enter__(self):
        try:
            import torch  # deferred: torch is heavy
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
            import torch  # deferred: torch is heavy
            torch.set_num_threads(self._torch)
        return False


def time_events(launch: Callable[[], None], repeats: int = 5) -> float:
    """Seconds per call of a numba kernel ``launch`` by CUDA events, after one warm-up call."""
    repeats = v.integer("repeats", repeats, low=1)
    if not on_gpu():
        raise RuntimeError("time_events needs a CUDA GPU (the simulator has no clock)")
    return event_seconds(launch, repeats)


def event_seconds(launch: Callable[[], None], repeats: int) -> float:
    """The measurement behind :func:`time_events`: warm up once, synchronize, time
    ``repeats`` launches between two numba CUDA events (the simulator's events run but mean
    nothing; gpu_check smoke-tests its sections there)."""
    from numba import cuda  # deferred: numba is heavy

    launch()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(repeats):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats
