"""A virtual clock and a virtual accelerator: workloads whose every cost is known.

Chapter 12's exercise 12.1 checks a learner's ``benchmark`` with them — exactly, and
whatever the load on the machine — and the chapter uses them to show what a timer without
warm-up or without synchronisation measures, on a machine without a GPU.

The model of an asynchronous device (PyTorch documentation, "CUDA semantics: asynchronous
execution": a kernel launch returns before the kernel runs; ``torch.cuda.synchronize()``
waits for all of them):

* a call of a :class:`Workload` costs the host ``launch_s`` seconds — its first call also
  ``first_call_s``, a compilation done on the host as ``torch.compile``'s first call does —
  and queues a kernel of ``costs[i]`` seconds;
* the device runs the queued kernels in order, each from the moment it was launched or the
  previous one finished, whichever is later;
* ``sync()`` moves the host to the moment the device is idle;
* a synchronous workload (a CPU) runs the kernel inside the call.

Only those actions move a :class:`VirtualClock`; reading it costs nothing. So a harness that
synchronises before it starts and before it stops the clock, after its warm-up calls,
records exactly ``launch_s + costs[i]`` for call i.

Everything a check sends is a *spec*, a dict of plain data (:func:`draw_spec`), from which
:func:`run` rebuilds the same workload in whichever process it runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit import validate as v
from labkit.stats import noisy_samples
from labkit.timing import Timing, _fmt_s


class VirtualClock:
    """A clock that reads the simulated time in seconds; calling it is free."""

    def __init__(self):
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def device_costs(n: int, *, base_s: float = 1e-3, jitter: float = 0.05,
                 interference: float = 0.0, slowdown: float = 3.0, seed: int = 0) -> np.ndarray:
    """``n`` kernel costs: ``base_s`` times a log-normal jitter (σ = ``jitter``), and
    ``slowdown`` times longer with probability ``interference`` (a neighbour on the device),
    as :func:`labkit.stats.noisy_samples` models a shared machine."""
    return noisy_samples(n, base=base_s, jitter=jitter, interference=interference,
                         slowdown=slowdown, seed=seed)


class VirtualDevice:
    """The device several workloads share: its clock, when it is next free, and a
    neighbour that makes every kernel starting in [``slow_from``, ``slow_until``) take
    ``slowdown`` times longer (the drift interleaving protects against)."""

    def __init__(self, clock: VirtualClock | None = None, *, slow_from: float = np.inf,
                 slow_until: float = np.inf, slowdown: float = 1.0):
        self.clock = clock if clock is not None else VirtualClock()
        self.busy_until = 0.0
        self.slow_from, self.slow_until = float(slow_from), float(slow_until)
        self.slowdown = v.number("slowdown", slowdown, low=1)
        self.log: list[str] = []          # the names of the workloads called, in order

    def run(self, cost: float) -> None:
        """Queue a kernel of ``cost`` seconds (after the host's launch)."""
        start = max(self.clock.now, self.busy_until)
        slow = self.slow_from <= start < self.slow_until
        self.busy_until = start + cost * (self.slowdown if slow else 1.0)


class Workload:
    """``fn()`` of a virtual device (see the module docstring); ``sync`` is its hook."""

    def __init__(self, costs, *, clock: VirtualClock | None = None, launch_s: float = 5e-6,
                 first_call_s: float = 0.0, asynchronous: bool = True,
                 device: VirtualDevice | None = None, name: str = ""):
        self.costs = np.asarray(v.array("costs", costs, ndim=1), dtype=float)
        if self.costs.size == 0 or np.any(self.costs <= 0):
            raise ValueError("costs must be a non-empty array of seconds > 0")
        if device is None:
            device = VirtualDevice(clock)
        elif clock is not None and clock is not device.clock:
            raise ValueError("clock must be the device's clock")
        self.device, self.clock, self.name = device, device.clock, name
        self.launch_s = v.nonnegative("launch_s", launch_s)
        self.first_call_s = v.nonnegative("first_call_s", first_call_s)
        self.asynchronous = v.boolean("asynchronous", asynchronous)
        self.calls = 0
        self.syncs = 0

    @property
    def busy_until(self) -> float:
        return self.device.busy_until

    def __call__(self) -> None:
        i = self.calls
        self.calls += 1
        self.device.log.append(self.name)
        self.clock.now += self.launch_s + (self.first_call_s if i == 0 else 0.0)
        self.device.run(float(self.costs[i % self.costs.size]))
        if not self.asynchronous:
            self.clock.now = self.device.busy_until

    def sync(self) -> None:
        self.syncs += 1
        self.clock.now = max(self.clock.now, self.device.busy_until)

    def cost(self, i: int) -> float:
        """What a right harness records for call ``i``: its launch and its kernel."""
        return self.launch_s + float(self.costs[i % self.costs.size])


SPEC_KEYS = ("seed", "calls", "base_s", "jitter", "interference", "launch_s", "first_call_s",
             "asynchronous", "repeats", "warmup", "number", "sync", "level", "resamples",
             "bench_seed")


def draw_spec(rng, *, repeats: int, warmup: int, asynchronous: bool = True,
              sync: bool = True, level: float = 0.95, resamples: int = 2000,
              number: int = 1) -> dict:
    """A workload and a call of a harness on it, as plain data, drawn from ``rng``: kernels
    of 0.5–2 ms with 5–15 % jitter and 10–25 % of them 3× slower, a 2–8 µs launch, a
    0.2–1 s first call."""
    return {"seed": int(rng.integers(1 << 30)), "calls": int(repeats * number + warmup + 64),
            "base_s": float(rng.uniform(0.5e-3, 2e-3)), "jitter": float(rng.uniform(0.05, 0.15)),
            "interference": float(rng.uniform(0.1, 0.25)),
            "launch_s": float(rng.uniform(2e-6, 8e-6)),
            "first_call_s": float(rng.uniform(0.2, 1.0)), "asynchronous": bool(asynchronous),
            "repeats": int(repeats), "warmup": int(warmup), "number": int(number),
            "sync": bool(sync),
            "level": float(level), "resamples": int(resamples),
            "bench_seed": int(rng.integers(1 << 30))}


def workload(spec: dict) -> Workload:
    """The :class:`Workload` (on a fresh clock) a spec describes."""
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"spec lacks {missing}: make it with draw_spec")
    costs = device_costs(spec["calls"], base_s=spec["base_s"], jitter=spec["jitter"],
                         interference=spec["interference"], seed=spec["seed"])
    return Workload(costs, launch_s=spec["launch_s"], first_call_s=spec["first_call_s"],
                    asynchronous=spec["asynchronous"])


def summary(result: Any) -> dict:
    """What a harness returned, as plain data: a :class:`labkit.timing.Timing`'s
    fields, or the name of the type it is not."""
    if not isinstance(result, Timing):
        return {"type": type(result).__name__}
    return {"type": "Timing", "samples": list(result.samples), "median": result.median,
            "low": result.low, "high": result.high, "level": result.level}


def run(bench: Callable, spec: dict) -> dict:
    """Call ``bench(work, repeats=, warmup=, number=, sync=, clock=, level=, resamples=,
    seed=)`` on the workload of ``spec`` (``sync=work.sync`` when ``spec["sync"]``, else
    None) and return :func:`summary` of its result, with the calls and syncs it made and
    how often it read the clock."""
    work = workload(spec)
    result = bench(work, repeats=spec["repeats"], warmup=spec["warmup"], number=spec["number"],
                   sync=work.sync if spec["sync"] else None, clock=work.clock,
                   level=spec["level"], resamples=spec["resamples"], seed=spec["bench_seed"])
    return {**summary(result), "calls": work.calls, "syncs": work.syncs,
            "clock_reads": work.clock.reads}


def protocol_samples(spec: dict, *, warmup: int | None = None, sync_start: bool = True,
                     sync_stop: bool = True, one_window: bool = False,
                     number: int | None = None) -> list[float]:
    """The samples a timer following a stated protocol records on ``spec``'s workload:
    ``warmup`` calls first (None: the spec's), ``sync()`` before it starts and/or stops the
    clock (only when the spec passes a sync), ``number`` calls per sample, each sample their
    time divided by ``number`` (None: the spec's) — or, with ``one_window``, every call in
    one window divided evenly. The right protocol is the defaults; the others are the
    mistakes chapter 12's check names."""
    work = workload(spec)
    clock = work.clock
    can_sync = spec["sync"]
    for _ in range(spec["warmup"] if warmup is None else warmup):
        work()
    n, k = spec["repeats"], spec["number"] if number is None else number
    windows, calls = (1, n * k) if one_window else (n, k)
    out = []
    for _ in range(windows):
        if can_sync and sync_start:
            work.sync()
        t0 = clock()
        for _ in range(calls):
            work()
        if can_sync and sync_stop:
            work.sync()
        out.append((clock() - t0) / calls)
    return out * n if one_window else out


def summarised(fn: Callable, samples, level: float = 0.95, resamples: int = 2000,
               seed: int = 0) -> dict:
    """:func:`summary` of ``fn(samples, level=, resamples=, seed=)``: exercise 12.1's derive
    function (the samples as a tuple, as a harness hands them over)."""
    return summary(fn(tuple(float(x) for x in samples), level=level, resamples=resamples,
                      seed=seed))


def draw_interleaved_spec(rng, *, names=("A", "B", "C"), repeats: int = 12,
                          warmup: int = 1) -> dict:
    """Several synchronous workloads on one device and clock, and a neighbour that slows the
    device 2× for a stretch starting after the warm-up: as plain data."""
    workloads = {n: {"seed": int(rng.integers(1 << 30)),
                     "base_s": float(rng.uniform(0.5e-3, 2e-3)),
                     "first_call_s": float(rng.uniform(0.01, 0.1))} for n in names}
    return {"workloads": workloads, "repeats": int(repeats), "warmup": int(warmup),
            "launch_s": float(rng.uniform(2e-6, 8e-6)), "jitter": 0.05,
            "slow_after": float(rng.uniform(0.25, 0.35)),   # of the timed part, from its start
            "slow_for": float(rng.uniform(0.5, 0.6)), "slowdown": 2.0,
            "level": 0.95, "resamples": 2000, "bench_seed": int(rng.integers(1 << 30))}


def interleaved_workloads(spec: dict) -> tuple[dict, VirtualDevice]:
    """The workloads (name -> :class:`Workload`) and the shared device of ``spec``. The
    neighbour's stretch is placed after the warm-up (whose length does not depend on the
    order of the warm-up calls, the workloads being synchronous)."""
    n_calls = spec["repeats"] + spec["warmup"] + 64
    costs = {k: device_costs(n_calls, base_s=w["base_s"], jitter=spec["jitter"], seed=w["seed"])
             for k, w in spec["workloads"].items()}
    warm = sum(spec["warmup"] * spec["launch_s"] + w["first_call_s"] * (spec["warmup"] > 0)
               + float(costs[k][:spec["warmup"]].sum()) for k, w in spec["workloads"].items())
    timed = sum(spec["repeats"] * spec["launch_s"] + float(
        costs[k][spec["warmup"]:spec["warmup"] + spec["repeats"]].sum()) for k in costs)
    start = warm + spec["slow_after"] * timed
    device = VirtualDevice(slow_from=start, slow_until=start + spec["slow_for"] * timed,
                           slowdown=spec["slowdown"])
    works = {k: Workload(costs[k], launch_s=spec["launch_s"], first_call_s=w["first_call_s"],
                         asynchronous=False, device=device, name=k)
             for k, w in spec["workloads"].items()}
    return works, device


def run_interleaved(fn: Callable, spec: dict) -> dict:
    """Call ``fn(workloads, repeats=, warmup=, sync=, clock=, level=, resamples=, seed=)`` on
    the workloads of ``spec`` and return plain data: each result's :func:`summary` and the
    order in which the workloads were called. Exercise 12.3's derive function."""
    works, device = interleaved_workloads(spec)
    first = next(iter(works.values()))
    out = fn(works, repeats=spec["repeats"], warmup=spec["warmup"], sync=first.sync,
             clock=device.clock, level=spec["level"], resamples=spec["resamples"],
             seed=spec["bench_seed"])
    if not isinstance(out, dict):
        return {"type": type(out).__name__}
    return {"type": "dict", "timings": {str(k): summary(t) for k, t in out.items()},
            "order": "".join(device.log)}


def sequential_samples(spec: dict) -> dict:
    """The samples of timing each workload of ``spec`` in turn, all its repeats at once (A A
    A … B B B …) after the same warm-up: what interleaving is there to avoid."""
    works, device = interleaved_workloads(spec)
    for w in works.values():
        for _ in range(spec["warmup"]):
            w()
    out = {}
    for k, w in works.items():
        out[k] = []
        for _ in range(spec["repeats"]):
            t0 = device.clock()
            w()
            out[k].append(device.clock() - t0)
    return out


@dataclass(frozen=True)
class Pitfall:
    """One way of timing a virtual kernel and what it reports."""
    how: str
    median_s: float
    mean_s: float
    first_s: float          # the first sample
    true_s: float           # the median cost of a warm call: launch + kernel


def pitfalls(bench: Callable, *, repeats: int = 20, base_s: float = 1e-3,
             first_call_s: float = 0.5, launch_s: float = 5e-6, seed: int = 0
             ) -> tuple[Pitfall, ...]:
    """Time one virtual asynchronous kernel (``base_s`` per call, a first call that compiles
    for ``first_call_s``) with ``bench`` three ways: right (warm-up, sync), without warm-up,
    without sync — chapter 12's demonstration of what each rule prevents."""
    repeats = v.integer("repeats", repeats, low=2)
    costs = device_costs(repeats + 8, base_s=v.positive("base_s", base_s), jitter=0.05,
                         seed=v.integer("seed", seed, low=0))
    true = float(np.median(launch_s + costs[2:2 + repeats]))
    rows = []
    for how, warmup, synced in (("warm-up and sync", 2, True), ("no warm-up", 0, True),
                                ("no sync", 2, False)):
        work = Workload(costs, launch_s=launch_s, first_call_s=first_call_s)
        t = bench(work, repeats=repeats, warmup=warmup, sync=work.sync if synced else None,
                  clock=work.clock)
        rows.append(Pitfall(how, t.median, float(np.mean(t.samples)), t.samples[0], true))
    return tuple(rows)


def format_pitfalls(rows) -> str:
    """Markdown table of :func:`pitfalls`' rows, times in µs or ms."""
    lines = ["| timed with | median | mean | first sample | true warm call |",
             "|---|---:|---:|---:|---:|"]
    for r in v.instances("rows", rows, Pitfall):
        lines.append(f"| {r.how} | {_fmt_s(r.median_s)} | {_fmt_s(r.mean_s)} | "
                     f"{_fmt_s(r.first_s)} | {_fmt_s(r.true_s)} |")
    return "\n".join(lines)
