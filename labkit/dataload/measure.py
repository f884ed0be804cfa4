"""Real training loops behind a real ``torch.utils.data.DataLoader``, timed step by step.

:func:`timed_loop` is the timed loop (the one a learner writes in chapter 07's lab): it
takes ``warmup`` steps untimed — the workers starting and the prefetch queue filling —
then times ``window`` steps, each split into the wait in ``next()`` and the step up to
``sync()``, in wall-clock time and in the training thread's CPU time
(``time.thread_time``: what this thread ran, not what it waited), and the steady rate
``batch_size × window / (end of the last step − end of the warm-up)``. Every measurement
here runs a loop of that signature (``loop=``, labkit's by default, the learner's in the
chapter), so what the chapter prints is what that loop measured.

Three experiments — seed 000's exercise 8 as measurements — differ only in what they feed
the loop (:func:`experiment`: ``(batches, step)`` → ``(batches, step)``):

* ``"pipeline"`` — the DataLoader and the training step;
* ``"loader alone"`` — the DataLoader and a step that does nothing: what loading delivers;
* ``"compute alone"`` — one batch taken once, then repeated, and the step: what the step
  allows with no loading at all.

:func:`run_experiment` (and :func:`measure_loader`, :func:`loader_alone`,
:func:`compute_alone`) returns a :class:`LoaderRun`: the loop's result and the CPU used
by the training process (``resource.getrusage(RUSAGE_SELF)``), by its workers
(``RUSAGE_CHILDREN``: the workers are reaped when the loader shuts down, so their CPU time
is counted then) and by the machine's other processes (``/proc/stat``'s busy time minus
ours, Linux only).

Runs are long enough to be steady: the warm-up is ``max(1, prefetch_factor × W)`` steps
and the window ``window`` steps (64 by default, :func:`labkit.dataload.model.steady_window`'s
rule); the sampler hands out ``prefetch_factor × W`` batches more than the loop takes, so
the workers are still busy when the window ends (no drain inside it), and those batches
are taken after the loop, untimed, so that every batch a worker built is counted.
:func:`interleaved_trials` repeats settings in alternation (A B C A B C …, so a
neighbour's job slows them alike; ``interleave=`` the function that orders them) and
returns each with its spread.

The training step is one SGD step of an MLP on the flattened images, with one intra-op
thread (``torch.set_num_threads(1)``, restored afterwards) so that "a step holds one core",
as the simulator assumes; DataLoader workers run with one thread too (``_worker_loop``,
``torch/utils/data/_utils/worker.py``).

Beside these runs: each stage's cost measured apart (:mod:`labkit.dataload.costs`), the
simulator calibrated on the runs (:mod:`labkit.dataload.calibrate`), and randomness in
workers (:mod:`labkit.dataload.randomness`).
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import resource
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from labkit import validate as V
from labkit.dataload.model import (EncodedImages, EpochSampler, steady_rate, steady_window,
                                   waiting_share)
from labkit.stats import Spread

KINDS = ("pipeline", "loader alone", "compute alone")
RESULT_KEYS = ("wait_s", "compute_s", "wait_cpu_s", "step_cpu_s", "samples_per_s")


# ------------------------------------------------------------------------ the timed loop
def no_sync() -> None:
    """What ``sync`` is for a step on the CPU: nothing to wait for (on a GPU,
    ``torch.cuda.synchronize``: CUDA calls return before the work ends)."""


def timed_loop(batches, step, *, batch_size: int, warmup: int, window: int,
               clock=time.perf_counter, cpu_clock=time.thread_time, sync=no_sync) -> dict:
    """Take ``warmup`` batches from the iterable ``batches`` and call ``step(x, y)`` on
    each, untimed; then ``window`` more, timed one by one.

    Per timed step k: ``wait_s[k]`` is the ``clock`` time spent in ``next()``,
    ``compute_s[k]`` the time from having the batch to the end of ``step`` and ``sync()``;
    ``wait_cpu_s[k]`` and ``step_cpu_s[k]`` the same in ``cpu_clock`` time (a thread
    blocked on a queue uses none). ``samples_per_s`` is ``batch_size × window / (t_end −
    t_begin)``: ``t_begin`` read after the warm-up's last step has ended (synced),
    ``t_end`` after the last timed step has — :func:`labkit.dataload.model.steady_rate`
    over the window. Returns a dict with those five keys (arrays of length ``window``)."""
    B = V.integer("batch_size", batch_size, low=1)
    warmup = V.integer("warmup", warmup, low=0)
    window = V.integer("window", window, low=1)
    if not callable(step):
        raise TypeError(f"step must be callable, got {type(step).__name__}")
    it = iter(batches)
    for _ in range(warmup):
        x, y = next(it)
        step(x, y)
        sync()
    rec = np.zeros((4, window))
    t_begin = t2 = clock()
    for k in range(window):
        t0, c0 = clock(), cpu_clock()
        x, y = next(it)
        t1, c1 = clock(), cpu_clock()
        step(x, y)
        sync()
        t2, c2 = clock(), cpu_clock()
        rec[:, k] = t1 - t0, t2 - t1, c1 - c0, c2 - c1
    return dict(zip(RESULT_KEYS, (*rec, B * window / (t2 - t_begin))))


def _no_step(x, y) -> None:
    """The step of the loader-alone experiment: take the batch, do nothing with it."""


def experiment(kind: str, batches, step):
    """What the timed loop is fed in each of exercise 8's experiments: ``(batches, step)``
    for ``"pipeline"``; the batches and a step that does nothing for ``"loader alone"``;
    one batch taken from ``batches`` once, repeated for ever (``itertools.repeat``), and
    the step for ``"compute alone"``."""
    kind = V.one_of("kind", kind, KINDS)
    if kind == "pipeline":
        return batches, step
    if kind == "loader alone":
        return batches, _no_step
    first = next(iter(batches))
    return itertools.repeat(first), step


def interleave(experiments: dict, trials: int) -> dict:
    """Run each of ``experiments`` ({name: a function of no arguments}) ``trials`` times,
    in alternation — all once, then all again, … (A B C A B C, not A A B B C C) — and
    return {name: [its results, in order]}."""
    trials = V.integer("trials", trials, low=1, high=100)
    out: dict = {name: [] for name in experiments}
    for _ in range(trials):
        for name, run in experiments.items():
            out[name].append(run())
    return out


def owner(fn) -> str:
    """``"labkit's name"`` for a labkit function, else ``"your name"`` (the notebook's)."""
    name = getattr(fn, "__name__", type(fn).__name__)
    module = getattr(fn, "__module__", "") or ""
    return f"labkit's {name}" if module.startswith("labkit") else f"your {name}"


def loop_result(result, window: int, who: str = "the loop") -> dict:
    """A timed loop's result checked: a dict of :data:`RESULT_KEYS`, four arrays of
    ``window`` non-negative finite seconds and a positive finite rate."""
    if not isinstance(result, dict) or not all(k in result for k in RESULT_KEYS):
        raise ValueError(f"{who} must return a dict with keys {RESULT_KEYS}, got "
                         f"{sorted(result) if isinstance(result, dict) else type(result).__name__}")
    out = {}
    for k in RESULT_KEYS[:4]:
        a = np.asarray(result[k], dtype=float)
        if a.shape != (window,) or not np.all(np.isfinite(a)) or (a < 0).any():
            raise ValueError(f"{who}'s {k} must hold {window} non-negative seconds (one per "
                             f"timed step), got shape {a.shape}")
        out[k] = a
    rate = result["samples_per_s"]
    if not isinstance(rate, (int, float, np.integer, np.floating)) or not math.isfinite(rate) \
            or not rate > 0:
        raise ValueError(f"{who}'s samples_per_s must be a positive number, got {rate!r}")
    out["samples_per_s"] = float(rate)
    return out


@dataclass(frozen=True)
class LoaderRun:
    """One timed run: its settings, the timed loop's result over the steady window
    (:func:`timed_loop`) and the CPU time the run used."""
    kind: str                     # one of KINDS
    num_workers: int
    batch_size: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    wait_s: np.ndarray            # per timed step, wall seconds in next()
    compute_s: np.ndarray         # per timed step, wall seconds in the step (synced)
    wait_cpu_s: np.ndarray        # training thread's CPU seconds in next()
    step_cpu_s: np.ndarray        # training thread's CPU seconds in the step
    samples_per_s: float          # the loop's steady rate over the window
    warmup: int                   # untimed steps before the window, per epoch
    steps: int                    # training steps run, all epochs
    batches: int                  # batches the loader built, all epochs
    epoch_first_batch_s: tuple[float, ...]   # iter() to the first batch, per epoch
    cpu_s: float = 0.0            # CPU time of the training process (all its threads)
    workers_cpu_s: float = 0.0    # CPU time of its worker processes
    wall_s: float = 0.0           # wall time of the run
    others_cores: float | None = None   # cores the machine's other processes used
    timed_by: str = "labkit's timed_loop"

    @classmethod
    def from_result(cls, result: dict, *, kind: str = "pipeline", batch_size: int,
                    num_workers: int = 0, prefetch_factor: int | None = None,
                    pin_memory: bool = False, persistent_workers: bool = False,
                    warmup: int = 1, epochs: int = 1, tail: int = 0,
                    epoch_first_batch_s=(), cpu_s: float = 0.0, workers_cpu_s: float = 0.0,
                    wall_s: float = 0.0, others_cores: float | None = None,
                    timed_by: str = "labkit's timed_loop") -> "LoaderRun":
        """A run from a timed loop's result (checked by :func:`loop_result`, its window the
        length of its ``wait_s``)."""
        has_waits = isinstance(result, dict) and "wait_s" in result
        r = loop_result(result, np.size(result["wait_s"]) if has_waits else 1, timed_by)
        steps = epochs * (warmup + len(r["wait_s"]))
        return cls(V.one_of("kind", kind, KINDS), V.integer("num_workers", num_workers, low=0),
                   V.integer("batch_size", batch_size, low=1), prefetch_factor,
                   bool(pin_memory), bool(persistent_workers), r["wait_s"], r["compute_s"],
                   r["wait_cpu_s"], r["step_cpu_s"], r["samples_per_s"], int(warmup), steps,
                   steps + epochs * int(tail), tuple(float(t) for t in epoch_first_batch_s),
                   float(cpu_s), float(workers_cpu_s), float(wall_s), others_cores, timed_by)

    @classmethod
    def from_steps(cls, wait_s, compute_s, *, batch_size: int, num_workers: int = 0,
                   prefetch_factor: int | None = None, wait_cpu_s=None, step_cpu_s=None,
                   kind: str = "pipeline", workers_cpu_s: float = 0.0,
                   others_cores: float | None = None) -> "LoaderRun":
        """A run made of given per-step waits and computes, back to back from t = 0 (one
        epoch), seen through its steady window (:func:`labkit.dataload.model.steady_window`:
        the first ``max(1, prefetch_factor × W)`` steps and the last ``prefetch_factor × W``
        left out); CPU times default to the wall times (a process that always ran)."""
        wait = V.array("wait_s", wait_s, ndim=1)
        comp = V.array("compute_s", compute_s, ndim=1, shape=(len(wait),))
        if (wait < 0).any() or (comp < 0).any():
            raise ValueError("wait_s and compute_s must be >= 0")
        wcpu = wait if wait_cpu_s is None else V.array("wait_cpu_s", wait_cpu_s, ndim=1,
                                                       shape=(len(wait),))
        scpu = comp if step_cpu_s is None else V.array("step_cpu_s", step_cpu_s, ndim=1,
                                                       shape=(len(wait),))
        W = V.integer("num_workers", num_workers, low=0)
        B = V.integer("batch_size", batch_size, low=1)
        pf = prefetch_factor or (2 if W else 1)
        w = steady_window(len(wait), pf, W)
        end = np.cumsum(wait + comp)
        result = dict(zip(RESULT_KEYS, (wait[w], comp[w], wcpu[w], scpu[w],
                                        steady_rate(end, B, w))))
        run = cls.from_result(result, kind=kind, batch_size=B, num_workers=W,
                              prefetch_factor=prefetch_factor, warmup=w.start,
                              epoch_first_batch_s=(float(wait[0]),),
                              cpu_s=float(wcpu.sum() + scpu.sum()),
                              workers_cpu_s=workers_cpu_s, wall_s=float(end[-1]),
                              others_cores=others_cores, timed_by="from_steps")
        return replace(run, steps=len(wait), batches=len(wait))   # every step was trained on

    @property
    def window(self) -> int:
        """Steps in the timed window."""
        return len(self.wait_s)

    @property
    def result(self) -> dict:
        """The timed loop's result, as :func:`timed_loop` returns it."""
        return {"wait_s": self.wait_s, "compute_s": self.compute_s,
                "wait_cpu_s": self.wait_cpu_s, "step_cpu_s": self.step_cpu_s,
                "samples_per_s": self.samples_per_s}

    @property
    def wait_fraction(self) -> float:
        """Share of the window's step time spent waiting for data
        (:func:`labkit.dataload.model.wait_fraction`)."""
        return waiting_share(self.wait_s, self.compute_s)

    @property
    def window_wall_s(self) -> float:
        """Wall seconds of the window: ``batch_size × window / samples_per_s``."""
        return self.batch_size * self.window / self.samples_per_s

    @property
    def cpu_share(self) -> float:
        """The training thread's CPU time / wall time over the window: about 1 when it
        ran whenever it was runnable (no workers: it always is), less when other
        processes took turns on its core."""
        return float((self.wait_cpu_s.sum() + self.step_cpu_s.sum()) / self.window_wall_s)

    @property
    def load_cpu_s(self) -> float:
        """Mean CPU seconds of the training thread in ``next()`` over the window: with
        ``num_workers=0`` the whole loading of a batch (sampler, fetch — decode and
        augment — and collate); with workers what taking a batch from them costs."""
        return float(np.mean(self.wait_cpu_s))

    @property
    def step_cpu_mean_s(self) -> float:
        """Mean CPU seconds of a training step over the window."""
        return float(np.mean(self.step_cpu_s))

    @property
    def worker_batch_cpu_s(self) -> float:
        """CPU seconds the workers spent per batch they built (start-up included), 0
        without workers."""
        return self.workers_cpu_s / self.batches if self.num_workers else 0.0

    @property
    def our_cores(self) -> float:
        """Cores our processes used on average: (training + workers CPU) / wall."""
        return (self.cpu_s + self.workers_cpu_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_per_batch_s(self) -> float:
        """CPU seconds of our processes per training step over the whole run (start-up
        included). ``batch_size × our_cores / cpu_per_batch_s`` is the run's average
        rate, an identity: a rate is the cores we got divided by the CPU a batch costs."""
        return (self.cpu_s + self.workers_cpu_s) / self.steps


def mlp_step_fn(in_features: int, hidden: int = 256, seed: int = 0):
    """A closure doing one SGD step of a 2-layer MLP on (x, y); returns the loss."""
    import torch  # deferred: torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_features, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


# ------------------------------------------------------------------ CPU time bookkeeping
def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine_busy_s() -> float | None:
    """CPU seconds all processes of this machine have run since boot (``/proc/stat``'s
    first line: user + nice + system + irq + softirq, in ``SC_CLK_TCK`` ticks; idle,
    iowait and steal are not busy), or None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (fields + [0] * 7)[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class _Meter:
    """CPU time of ours (self, children) and of the machine over a stretch of wall time."""

    def __enter__(self):
        self.c_self, self.c_kids, self.busy = _self_cpu(), _children_cpu(), machine_busy_s()
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.self_s = _self_cpu() - self.c_self
        self.kids_s = _children_cpu() - self.c_kids
        busy = machine_busy_s()
        self.others = None
        if self.busy is not None and busy is not None and self.wall > 0:
            self.others = max(0.0, (busy - self.busy - self.self_s - self.kids_s) / self.wall)
        return False


def one_thread(fn):
    """Run ``fn()`` with torch's intra-op threads set to 1, then restore them."""
    import torch  # deferred: torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------- the experiments
class _Batches:
    """A loader's iterator that notes when its first batch arrived (``perf_counter``)."""

    def __init__(self, it):
        self.it, self.first = it, None

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.it)
        if self.first is None:
            self.first = time.perf_counter()
        return batch


def _run(dataset, kind, *, batch_size, num_workers, prefetch_factor, pin_memory,
         persistent_workers, epochs, hidden, warmup, window, step, loop, experiment,
         sampler):
    from torch.utils.data import DataLoader  # deferred: torch

    if not isinstance(dataset, EncodedImages):
        raise TypeError(f"dataset must be an EncodedImages, got {type(dataset).__name__}")
    B = V.integer("batch_size", batch_size, low=1)
    W = V.integer("num_workers", num_workers, low=0, high=64)
    epochs = V.integer("epochs", epochs, low=1)
    if W == 0 and (prefetch_factor is not None or persistent_workers):
        raise ValueError("prefetch_factor and persistent_workers need num_workers > 0")
    pf = None if prefetch_factor is None else V.integer("prefetch_factor", prefetch_factor, low=1)
    window = V.integer("window", window, low=1)
    tail = (pf or 2) * W
    head = max(1, tail) if warmup is None else V.integer("warmup", warmup, low=0)
    if experiment is None and kind != "pipeline":
        experiment = globals()["experiment"]
    for name, fn in (("loop", loop), ("experiment", experiment), ("sampler", sampler)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    if step is None:
        x0, _ = dataset[0]
        step = mlp_step_fn(int(np.prod(x0.shape)), hidden)
    order = sampler(len(dataset), num_samples=(head + window + tail) * B)
    kw = dict(batch_size=B, sampler=order, num_workers=W, pin_memory=pin_memory,
              persistent_workers=persistent_workers, drop_last=True)
    if pf is not None:
        kw["prefetch_factor"] = pf
    results, firsts = [], []

    def run_epochs():
        loader = DataLoader(dataset, **kw)
        for epoch in range(epochs):
            order.set_epoch(epoch)
            t0 = time.perf_counter()
            it = _Batches(iter(loader))
            # the pipeline feeds the loop as it is (no exercise's reference needed for it)
            batches, fn = (it, step) if experiment is None else experiment(kind, it, step)
            results.append(loop(batches, fn, batch_size=B, warmup=head, window=window,
                                clock=time.perf_counter, cpu_clock=time.thread_time,
                                sync=no_sync))
            firsts.append(it.first - t0 if it.first is not None else float("nan"))
            if W:
                for _ in it:      # untimed: every batch the workers built is taken
                    pass
            del it
        del loader            # shuts persistent workers down: their CPU time is counted

    with warnings.catch_warnings(), _Meter() as meter:
        # torch warns when num_workers exceeds the cores (measuring that is the point here)
        # and when pin_memory has no accelerator to pin for
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        one_thread(run_epochs)
    return LoaderRun.from_result(
        loop_result(results[-1], window, owner(loop)), kind=kind, batch_size=B,
        num_workers=W, prefetch_factor=pf, pin_memory=pin_memory,
        persistent_workers=persistent_workers, warmup=head, epochs=epochs,
        tail=tail if W else 0, epoch_first_batch_s=firsts, cpu_s=meter.self_s,
        workers_cpu_s=meter.kids_s, wall_s=meter.wall, others_cores=meter.others,
        timed_by=owner(loop))


_DEFAULT_WORKERS = {"pipeline": 0, "loader alone": 1, "compute alone": 0}


def run_experiment(dataset: EncodedImages, kind: str = "pipeline", *, batch_size: int = 32,
                   num_workers: int | None = None, prefetch_factor: int | None = None,
                   pin_memory: bool = False, persistent_workers: bool = False,
                   epochs: int = 1, hidden: int = 256, warmup: int | None = None,
                   window: int = 64, step=None, loop=None, experiment=None,
                   sampler=None) -> LoaderRun:
    """One of exercise 8's experiments (``kind``, :data:`KINDS`) behind a real DataLoader
    with these settings, for ``epochs`` epochs (each with a fresh ``iter()``).

    Each epoch: the sampler (``sampler(n, num_samples=…)``, labkit's
    :class:`~labkit.dataload.model.EpochSampler` by default) hands out ``warmup + window +
    prefetch_factor × W`` batches; ``experiment(kind, batches, step)`` (labkit's
    :func:`experiment` by default) says what to feed the loop; ``loop`` (labkit's
    :func:`timed_loop` by default) takes ``warmup`` steps untimed (default ``max(1,
    prefetch_factor × W)``) and times ``window``. ``step(x, y)`` defaults to an MLP's
    SGD step (``hidden`` units); ``num_workers`` to 1 for the loader alone, else 0 (the
    compute-alone experiment takes its one batch from the loader it is given)."""
    kind = V.one_of("kind", kind, KINDS)
    W = _DEFAULT_WORKERS[kind] if num_workers is None else num_workers
    return _run(dataset, kind, batch_size=batch_size, num_workers=W,
                prefetch_factor=prefetch_factor, pin_memory=pin_memory,
                persistent_workers=persistent_workers, epochs=epochs, hidden=hidden,
                warmup=warmup, window=window, step=step, loop=loop or timed_loop,
                experiment=experiment, sampler=sampler or EpochSampler)


def measure_loader(dataset: EncodedImages, **kw) -> LoaderRun:
    """The full pipeline (:func:`run_experiment` with ``kind="pipeline"``)."""
    return run_experiment(dataset, "pipeline", **kw)


def loader_alone(dataset: EncodedImages, **kw) -> LoaderRun:
    """The DataLoader iterated without training (``kind="loader alone"``, one worker by
    default): the rate loading delivers, the workers' CPU per batch and what taking a
    batch costs the training process."""
    return run_experiment(dataset, "loader alone", **kw)


def compute_alone(dataset: EncodedImages, **kw) -> LoaderRun:
    """Training on one cached batch, again and again (``kind="compute alone"``): the rate
    the step allows with no loading at all (the batch is taken before the clock starts)."""
    return run_experiment(dataset, "compute alone", **kw)


# ------------------------------------------------------------------------------ trials
@dataclass(frozen=True)
class Trials:
    """The same experiment run several times."""
    runs: tuple[LoaderRun, ...]

    @property
    def rate(self) -> Spread:
        """Steady samples per second, one value per trial."""
        return Spread(tuple(r.samples_per_s for r in self.runs))

    @property
    def wait_fraction(self) -> Spread:
        return Spread(tuple(r.wait_fraction for r in self.runs))

    @property
    def others_cores(self) -> Spread | None:
        vals = tuple(r.others_cores for r in self.runs if r.others_cores is not None)
        return Spread(vals) if vals else None

    @property
    def first_batch_s(self) -> Spread:
        """Seconds from ``iter()`` to the first batch of the last epoch, per trial."""
        return Spread(tuple(r.epoch_first_batch_s[-1] for r in self.runs))

    def __getitem__(self, k: int) -> LoaderRun:
        return self.runs[k]

    def __len__(self) -> int:
        return len(self.runs)


def interleaved_trials(dataset: EncodedImages, settings: dict, trials: int = 3, *,
                       interleave=None, **common) -> dict:
    """Each of ``settings`` ({name: keyword arguments of :func:`run_experiment`, which may
    name the ``kind``}) ``trials`` times, in the order ``interleave(experiments, trials)``
    runs them (labkit's :func:`interleave` by default: all settings once, then all again,
    …); ``common`` keyword arguments go to every run."""
    trials = V.integer("trials", trials, low=1, high=100)
    if not settings:
        raise ValueError("settings must name at least one experiment")
    order = interleave or globals()["interleave"]
    runs = {name: functools.partial(run_experiment, dataset, **{**common, **kw})
            for name, kw in settings.items()}
    out = order(runs, trials)
    if not isinstance(out, dict) or set(out) != set(settings) or not all(
            len(out[k]) == trials and all(isinstance(r, LoaderRun) for r in out[k])
            for k in settings):
        raise ValueError(f"{owner(order)} must return {{name: a list of {trials} runs}} for "
                         f"each of {list(settings)}")
    return {k: Trials(tuple(out[k])) for k in settings}


def sweep_trials(dataset: EncodedImages, workers=(0, 1, 2, 3), trials: int = 3,
                 **common) -> dict[int, Trials]:
    """The full pipeline at each worker count, ``trials`` times in alternation."""
    return interleaved_trials(dataset, {int(w): {"num_workers": int(w)} for w in workers},
                              trials, **common)
