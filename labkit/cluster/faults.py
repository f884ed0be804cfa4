"""Failures, checkpoints and the optimal checkpoint interval.

A job needs ``work`` seconds of computation. Failures arrive as a Poisson process with mean
time between failures M (MTBF; exponential gaps). Every τ seconds of work it writes a
checkpoint, which takes C seconds; after a failure it spends R seconds restarting (reading
the checkpoint) and redoes the work since the last checkpoint. Failures can strike during
work, checkpoints and restarts alike.

* Young (1974), "A first order approximation to the optimum checkpoint interval", CACM
  17(9): τ_opt ≈ √(2 C M).
* Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
  dumps", FGCS 22(3): the expected wall time of this model is

      T(τ) = M · e^{R/M} · (e^{(τ + C)/M} − 1) · work / τ          (Daly eq. 13)

  and its minimiser is, to high order,

      τ_opt = √(2 C M) · [1 + ⅓ √(C / 2M) + ⅑ (C / 2M)] − C    for C < 2M,  else M.

  (Daly's figures: M = 24 h, C = 5 min gives 117 min; M = 6 h gives 57 min; M = 15 min
  gives 9.1 min — reproduced by :func:`daly_interval`.)

:func:`sample_wall_times` draws whole runs from the exact distribution of this process
(memorylessness makes every segment independent); :func:`simulate_timeline` plays one run
event by event, for pictures; :func:`interval_sweep` finds the simulated optimum.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from labkit import validate as v
from labkit.memory.estimator import bytes_per_param
from labkit.torch_models import torch_mlp


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's τ = √(2 C M)."""
    c = v.positive("checkpoint_s", checkpoint_s)
    m = v.positive("mtbf_s", mtbf_s)
    return math.sqrt(2 * c * m)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's τ = √(2CM)[1 + ⅓√(C/2M) + ⅑(C/2M)] − C for C < 2M, else M."""
    c = v.positive("checkpoint_s", checkpoint_s)
    m = v.positive("mtbf_s", mtbf_s)
    if c >= 2 * m:
        return m
    x = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c


def expected_wall_time(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                       mtbf_s: float) -> float:
    """Daly's T = M e^{R/M} (e^{(τ+C)/M} − 1) · work/τ (every segment ends in a checkpoint)."""
    w = v.positive("work_s", work_s)
    tau = v.positive("interval_s", interval_s)
    c = v.nonnegative("checkpoint_s", checkpoint_s)
    r = v.nonnegative("restart_s", restart_s)
    m = v.positive("mtbf_s", mtbf_s)
    return m * math.exp(r / m) * math.expm1((tau + c) / m) * w / tau


def expected_overhead(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                      mtbf_s: float) -> float:
    """Share of extra wall time, T(τ)/work − 1, with T from :func:`expected_wall_time`."""
    return expected_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s) / work_s - 1


def system_mtbf(component_mtbf_s: float, components: int) -> float:
    """MTBF of a job that stops when any of ``components`` independent parts fails, each
    with exponential lifetimes of mean M: the first failure is Exp with rate N/M, so M/N."""
    m = v.positive("component_mtbf_s", component_mtbf_s)
    return m / v.integer("components", components, low=1)


def expected_lost_work(segment_s: float, mtbf_s: float) -> float:
    """Mean time lost to one failure that strikes a segment of length L = τ + C:
    E[X | X < L] for X ~ Exp(M), which is M − L / (e^{L/M} − 1) (less than L/2: with
    exponential gaps a failure is likelier early in the segment)."""
    L = v.positive("segment_s", segment_s)
    m = v.positive("mtbf_s", mtbf_s)
    return m - L / math.expm1(L / m)


def _truncated_exp(rng, mean: float, upper: float, size) -> np.ndarray:
    """Exp(mean) conditioned on < upper, by inverse CDF."""
    u = rng.random(size)
    return -mean * np.log1p(-u * -np.expm1(-upper / mean))


def sample_wall_times(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                      mtbf_s: float, *, trials: int = 1000, seed: int = 0) -> np.ndarray:
    """Wall time of ``trials`` independent runs, drawn from the model's exact distribution.

    The work is cut into ⌈work/τ⌉ segments (the last may be shorter), each of length
    τ + C (work then checkpoint). A segment of length L is attempted until it survives:
    the number of failed attempts is geometric with success probability e^{−L/M}, each
    failure costs the time it struck (Exp(M) conditioned on < L) and then a restart, which
    is itself retried until R seconds pass without a failure. All segments are independent
    (memorylessness), so a whole run's failures are sums of independent draws.
    """
    w = v.positive("work_s", work_s)
    tau = v.positive("interval_s", interval_s)
    c = v.nonnegative("checkpoint_s", checkpoint_s)
    r = v.nonnegative("restart_s", restart_s)
    m = v.positive("mtbf_s", mtbf_s)
    trials = v.integer("trials", trials, low=1)
    rng = np.random.default_rng(v.integer("seed", seed, low=0))
    full = int(math.floor(w / tau + 1e-12))
    rest = w - full * tau
    lengths = [(tau + c, full)] + ([(rest + c, 1)] if rest > 1e-9 * tau else [])
    total = np.zeros(trials)
    failures = np.zeros(trials, dtype=np.int64)
    for L, count in lengths:
        if count == 0:
            continue
        p_ok = math.exp(-L / m)
        k = rng.negative_binomial(count, p_ok, size=trials)     # failed attempts
        total += count * L
        failures += k
        kt = int(k.sum())
        if kt:
            lost = _truncated_exp(rng, m, L, kt)
            total += np.bincount(np.repeat(np.arange(trials), k), weights=lost,
                                 minlength=trials)
    if r > 0 and failures.sum():
        q_ok = math.exp(-r / m)
        j = np.where(failures > 0, rng.negative_binomial(np.maximum(failures, 1), q_ok), 0)
        total += failures * r
        jt = int(j.sum())
        if jt:
            lost = _truncated_exp(rng, m, r, jt)
            total += np.bincount(np.repeat(np.arange(trials), j), weights=lost,
                                 minlength=trials)
    return total


@dataclass(frozen=True)
class Sweep:
    intervals: np.ndarray
    simulated: np.ndarray          # mean wall time per interval
    stderr: np.ndarray
    model: np.ndarray              # Daly's expected wall time
    young: float
    daly: float
    work: float

    @property
    def best_simulated(self) -> float:
        return float(self.intervals[int(np.argmin(self.simulated))])

    def simulated_at(self, tau: float) -> float:
        return float(np.interp(tau, self.intervals, self.simulated))

    @property
    def overhead(self) -> np.ndarray:
        """Simulated wall time over the work, minus 1, per interval of the grid."""
        return self.simulated / self.work - 1

    def overhead_at(self, tau: float) -> float:
        """Simulated wall time over the work, minus 1, at ``tau`` (interpolated on the grid)."""
        return self.simulated_at(tau) / self.work - 1

    def excess_over_best(self, tau: float) -> float:
        """How much longer the run is at ``tau`` than at the grid's simulated best (a share)."""
        return self.simulated_at(tau) / float(self.simulated.min()) - 1


def interval_sweep(work_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float, *,
                   lo: float = 0.25, hi: float = 4.0, points: int = 41, trials: int = 2000,
                   seed: int = 0) -> Sweep:
    """Mean simulated wall time for τ on a log grid from lo·τ_Young to hi·τ_Young."""
    ty = young_interval(checkpoint_s, mtbf_s)
    td = daly_interval(checkpoint_s, mtbf_s)
    lo = v.positive("lo", lo)
    hi = v.number("hi", hi, low=lo, low_open=True)
    points = v.integer("points", points, low=2)
    taus = ty * np.geomspace(lo, hi, points)
    sims, errs = [], []
    for k, tau in enumerate(taus):
        x = sample_wall_times(work_s, tau, checkpoint_s, restart_s, mtbf_s, trials=trials,
                              seed=seed + k)
        sims.append(x.mean())
        errs.append(x.std(ddof=1) / math.sqrt(trials) if trials > 1 else 0.0)
    model = np.array([expected_wall_time(work_s, t, checkpoint_s, restart_s, mtbf_s)
                      for t in taus])
    return Sweep(taus, np.array(sims), np.array(errs), model, ty, td, float(work_s))


@dataclass(frozen=True)
class Timeline:
    """One run: what happened when. ``events`` are (start, end, kind) with kind one of
    "work", "checkpoint", "lost", "restart"; ``failures`` the failure times."""
    events: list
    failures: np.ndarray
    wall_time: float
    lost_work: float


def simulate_timeline(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                      mtbf_s: float, *, seed: int = 0, max_events: int = 100_000) -> Timeline:
    """Play one run event by event against failure times drawn from Exp(M) gaps."""
    w = v.positive("work_s", work_s)
    tau = v.positive("interval_s", interval_s)
    c = v.nonnegative("checkpoint_s", checkpoint_s)
    r = v.nonnegative("restart_s", restart_s)
    m = v.positive("mtbf_s", mtbf_s)
    rng = np.random.default_rng(v.integer("seed", seed, low=0))
    t, done, lost = 0.0, 0.0, 0.0
    next_fail = rng.exponential(m)
    fails, events = [], []
    while done < w - 1e-9:
        if len(events) > max_events:
            raise RuntimeError(f"more than {max_events} events: is the MTBF far shorter than "
                               f"a segment?")
        seg = min(tau, w - done)
        if t + seg + c <= next_fail:
            events.append((t, t + seg, "work"))
            if c > 0:
                events.append((t + seg, t + seg + c, "checkpoint"))
            t += seg + c
            done += seg
            continue
        events.append((t, next_fail, "lost"))
        lost += next_fail - t
        t = next_fail
        fails.append(t)
        next_fail = t + rng.exponential(m)
        while t + r > next_fail:          # a failure during the restart: restart again
            events.append((t, next_fail, "restart"))
            t = next_fail
            fails.append(t)
            next_fail = t + rng.exponential(m)
        if r > 0:
            events.append((t, t + r, "restart"))
        t += r
    return Timeline(events, np.array(fails), t, lost)


@dataclass(frozen=True)
class CheckpointCost:
    parameters: int
    bytes: int
    seconds: float                 # median torch.save time (file written and fsynced)
    load_seconds: float            # median torch.load time

    @property
    def bandwidth(self) -> float:
        return self.bytes / self.seconds

    def time_to_write(self, nbytes: float) -> float:
        """Seconds to save ``nbytes`` at this measured bandwidth."""
        return v.nonnegative("nbytes", nbytes) / self.bandwidth


@dataclass(frozen=True)
class CheckpointSize:
    parameters: float
    bytes_per_param: int
    bytes: float


def checkpoint_size(parameters: float, precision: str = "mixed",
                    optimizer: str = "adam") -> CheckpointSize:
    """What a training checkpoint holds: the weights and the optimizer's states, not the
    gradients (recomputed after a restart); bytes per parameter from
    :func:`labkit.memory.estimator.bytes_per_param` (mixed Adam: 2 + 12 = 14 B)."""
    n = v.nonnegative("parameters", parameters)
    weights, _grads, states = bytes_per_param(precision, optimizer)
    return CheckpointSize(n, weights + states, n * (weights + states))


def measure_checkpoint(parameters: int = 4_000_000, repeats: int = 3,
                       directory=None) -> CheckpointCost:
    """Time ``torch.save`` of an MLP's state (parameters + Adam's two moments) to a file,
    with ``os.fsync``, and ``torch.load`` back; medians of ``repeats``."""
    import torch  # deferred: torch

    parameters = v.integer("parameters", parameters, low=1000)
    repeats = v.integer("repeats", repeats, low=1)
    width = max(8, int(math.sqrt(parameters / 2)))
    model = torch_mlp((width, width, width), seed=0)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    nparams = sum(p.numel() for p in model.parameters())
    saves, loads = [], []
    with tempfile.TemporaryDirectory(dir=directory) as d:
        path = os.path.join(d, "ckpt.pt")
        for _ in range(repeats):
            t0 = time.perf_counter()
            with open(path, "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            saves.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            torch.load(path, weights_only=True)
            loads.append(time.perf_counter() - t0)
        size = os.path.getsize(path)
    return CheckpointCost(nparams, size, float(np.median(saves)), float(np.median(loads)))
