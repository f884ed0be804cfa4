"""A discrete-event simulator of a training input pipeline (read → decode → augment →
copy → compute), with DataLoader-style workers, prefetch and a pool of CPU cores.

What it models, following ``torch.utils.data.DataLoader`` (``_MultiProcessingDataLoaderIter``):

* ``num_workers = 0``: the training process itself reads, decodes and augments every
  sample of a batch, then copies and computes — nothing overlaps.
* ``num_workers = W > 0``: batch indices go to the workers round-robin; at most
  ``prefetch_factor × W`` batches are outstanding; when the training loop takes batch ``i``
  (in order) it hands one more index out. A worker builds a whole batch, sample by sample.
* Per sample: ``read_s`` of I/O (no core held), then ``decode_s + augment_s`` of CPU work,
  which needs a core. The training process then spends ``copy_s`` (host → device; a core)
  and ``compute_s`` per batch (a core too when ``compute_on_cpu``, else an accelerator).
* ``cores`` CPU cores. With ``quantum_s = 0`` requests (one sample's CPU work, a copy, a
  step) are served first-come first-served and hold their core to the end. With
  ``quantum_s > 0`` the cores are time-sliced in quanta of that length and the next slice
  goes to the waiting process that has used the least CPU time so far — the rule of
  Linux's Completely Fair Scheduler (a woken process starts from the smallest CPU time of
  those running, so sleeping earns no credit). With more runnable processes than cores
  everybody slows down.
* ``background`` other CPU-bound processes (other users of a shared machine) compete for
  the same cores (needs ``quantum_s > 0``).
* Epochs: the pipeline drains at an epoch's end; without ``persistent_workers`` new workers
  start, costing ``worker_startup_s`` before the first batch of each epoch.

The event loop is a heap of (time, seq, event); every completed read, CPU chunk, copy and
step is one event (``SimResult.events``).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from labkit import validate as V

_READ, _CPU, _STEP, _START = 0, 1, 2, 3


@dataclass(frozen=True)
class PipelineConfig:
    batch_size: int = 32
    num_workers: int = 0
    prefetch_factor: int = 2
    cores: int = 2
    read_s: float = 0.0            # per sample, I/O
    decode_s: float = 2e-4         # per sample, CPU
    augment_s: float = 3e-4        # per sample, CPU
    copy_s: float = 0.0            # per batch, host → device
    compute_s: float = 5e-3        # per batch (training step)
    compute_on_cpu: bool = True
    batches: int = 100             # per epoch
    epochs: int = 1
    worker_startup_s: float = 0.0
    persistent_workers: bool = False
    background: int = 0            # other CPU-bound processes on the machine
    quantum_s: float = 0.0         # time slice; 0 = run each request to completion

    def __post_init__(self):
        V.integer("batch_size", self.batch_size, low=1)
        V.integer("num_workers", self.num_workers, low=0, high=1024)
        V.integer("prefetch_factor", self.prefetch_factor, low=1)
        V.integer("cores", self.cores, low=1, high=4096)
        for name in ("read_s", "decode_s", "augment_s", "copy_s", "compute_s",
                     "worker_startup_s", "quantum_s"):
            V.nonnegative(name, getattr(self, name))
        V.integer("background", self.background, low=0, high=4096)
        if self.background and not self.quantum_s > 0:
            raise ValueError("background processes need a time slice: set quantum_s > 0")
        V.integer("batches", self.batches, low=1)
        V.integer("epochs", self.epochs, low=1)

    @property
    def load_cpu_s(self) -> float:
        """CPU seconds to build one batch."""
        return self.batch_size * (self.decode_s + self.augment_s)

    @property
    def decode_share(self) -> float:
        """decode / (decode + augment): see :func:`decode_share`."""
        return decode_share(self.decode_s, self.augment_s)


def decode_share(decode_s: float, augment_s: float) -> float:
    """decode / (decode + augment): the share of a sample's CPU work that is decoding (what
    a cache of decoded pixels removes); 0.5 when both are 0."""
    decode_s = V.nonnegative("decode_s", decode_s)
    augment_s = V.nonnegative("augment_s", augment_s)
    total = decode_s + augment_s
    return decode_s / total if total > 0 else 0.5


@dataclass(frozen=True)
class SimResult:
    config: PipelineConfig
    step_start: np.ndarray     # when the training loop asks for batch i
    step_got: np.ndarray       # when it has batch i
    step_end: np.ndarray       # when step i's compute ends
    core_busy_s: float
    events: int

    @property
    def wait_s(self) -> np.ndarray:
        return self.step_got - self.step_start

    @property
    def total_s(self) -> float:
        return float(self.step_end[-1])

    @property
    def wait_fraction(self) -> float:
        return float(self.wait_s.sum() / self.total_s) if self.total_s > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        """Steady-state throughput of the last epoch: from its first quarter to the point
        where the workers run out of indices and the prefetched batches drain."""
        c = self.config
        n = c.batches
        end = self.step_end[-n:]
        a, b = n // 4, n - 1 - c.prefetch_factor * c.num_workers
        if b - a < 2:
            return c.batch_size * len(self.step_end) / self.total_s
        return c.batch_size * (b - a) / (end[b] - end[a])

    @property
    def core_utilisation(self) -> float:
        return self.core_busy_s / (self.config.cores * self.total_s) if self.total_s else 0.0


def simulate(config: PipelineConfig | None = None, **changes) -> SimResult:
    """Run the pipeline of ``config`` (or ``PipelineConfig(**changes)``) and time every step."""
    cfg = replace(config or PipelineConfig(), **changes) if changes else (config or PipelineConfig())
    B, W = cfg.batch_size, cfg.num_workers
    cpu_chunk = cfg.decode_s + cfg.augment_s
    n_total = cfg.batches * cfg.epochs
    start = np.zeros(n_total)
    got = np.zeros(n_total)
    end = np.zeros(n_total)
    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    seq = 0
    free = cfg.cores
    waiting: list = []                # heap of (cpu used, seq, owner, duration) waiting for a core
    busy = 0.0
    events = 0
    # owners: 0..W-1 are workers, W is the training process
    main = W
    queue = [deque() for _ in range(W + 1)]   # batch ids assigned to each loader
    left = [0] * (W + 1)                       # samples still to load in the current batch
    cur = [-1] * (W + 1)                       # current batch id
    ready = {}                                 # batch id -> time it is ready
    st = {"next": 0, "waiting_for": -1, "issued": 0, "epoch_end": cfg.batches}

    quantum = cfg.quantum_s
    used: dict = {}                   # process -> CPU seconds used (fair scheduling)
    floor = [0.0]                     # smallest CPU time among processes granted a core

    def proc(owner):                  # the copy (-1) and the step (-2) run in the main process
        return main if owner in (-1, -2) else owner

    last_end: dict = {}               # process -> when its last slice ended

    def grant(t, owner, dur):
        # run ``owner`` on a core for one slice of its remaining ``dur``
        nonlocal seq, busy
        if quantum <= 0:                  # first-come first-served, run to completion
            busy += dur
            seq += 1
            push(heap, (t + dur, seq, _CPU, owner, 0.0))
            return
        run = dur if dur <= quantum else quantum
        if owner > -3:
            busy += run
        p = proc(owner)
        u = used.get(p, 0.0)
        if u > floor[0]:
            floor[0] = u                  # ≈ the smallest CPU time among runnable processes
        used[p] = u + run
        last_end[p] = t + run
        seq += 1
        push(heap, (t + run, seq, _CPU, owner, dur - run))

    def wake(t, owner):
        # a process that slept (waited for data or a slot) gets no credit for it
        p = proc(owner)
        if last_end.get(p) != t and used.get(p, 0.0) < floor[0]:
            used[p] = floor[0]
        return used.get(p, 0.0)

    def want_core(t, owner, dur):
        nonlocal free, seq
        if dur <= 0.0:
            seq += 1
            push(heap, (t, seq, _CPU, owner, None))
            return
        if quantum > 0:
            key = wake(t, owner)
        else:
            key = 0.0
        if free > 0:
            free -= 1
            grant(t, owner, dur)
        else:
            seq += 1
            heapq.heappush(waiting, (key, seq, owner, dur))

    def next_sample(t, owner):
        nonlocal seq
        if cfg.read_s > 0:
            seq += 1
            push(heap, (t + cfg.read_s, seq, _READ, owner, None))
        else:
            want_core(t, owner, cpu_chunk)

    def start_batch(t, owner):
        if cur[owner] < 0 and queue[owner]:
            cur[owner] = queue[owner].popleft()
            left[owner] = B
            next_sample(t, owner)

    def issue(t):
        # hand out indices until prefetch_factor * W are outstanding (this epoch only)
        limit = min(st["epoch_end"], st["next"] + cfg.prefetch_factor * W)
        while st["issued"] < limit:
            w = st["issued"] % W
            queue[w].append(st["issued"])
            st["issued"] += 1
            start_batch(t, w)

    def begin_step(t, i):
        # the training loop asks for batch i
        start[i] = t
        if W == 0:
            queue[main].append(i)
            start_batch(t, main)
        elif i in ready:
            take(t, i)
        else:
            st["waiting_for"] = i

    def take(t, i):
        got[i] = t
        ready.pop(i, None)
        st["next"] = i + 1
        if W:
            issue(t)
        want_core(t, -1, cfg.copy_s)          # owner -1: the copy of the training process

    def epoch_start(t):
        nonlocal seq
        e = st["next"] // cfg.batches
        st["epoch_end"] = (e + 1) * cfg.batches
        delay = cfg.worker_startup_s if W and (e == 0 or not cfg.persistent_workers) else 0.0
        seq += 1
        push(heap, (t + delay, seq, _START, 0, None))

    epoch_start(0.0)
    for j in range(cfg.background):          # owners -3, -4, …: other processes, forever busy
        want_core(0.0, -3 - j, math.inf)
    while heap:
        t, _, kind, owner, left_over = pop(heap)
        events += 1
        if left_over is not None:            # a slice ended: release the core, serve the next
            if left_over > 0:
                seq += 1
                heapq.heappush(waiting, (used[proc(owner)], seq, owner, left_over))
            if waiting:
                _, _, o, d = heapq.heappop(waiting)
                grant(t, o, d)
            else:
                free += 1
            if left_over > 0:
                continue
        if kind == _READ:
            want_core(t, owner, cpu_chunk)
        elif kind == _CPU and owner >= 0:     # one sample of a loader is done
            left[owner] -= 1
            if left[owner] > 0:
                next_sample(t, owner)
                continue
            b = cur[owner]
            cur[owner] = -1
            if owner == main:                 # W == 0: the training process loaded it
                take(t, b)
                continue
            ready[b] = t
            if st["waiting_for"] == b:
                st["waiting_for"] = -1
                take(t, b)
            start_batch(t, owner)
        elif kind == _CPU and owner == -1:    # copy done → compute
            if cfg.compute_on_cpu:
                want_core(t, -2, cfg.compute_s)
            else:
                seq += 1
                push(heap, (t + cfg.compute_s, seq, _STEP, -2, None))
        elif kind == _START:
            if W:
                issue(t)
            begin_step(t, st["next"])
        else:                                 # compute of step next-1 done
            i = st["next"] - 1
            end[i] = t
            if i + 1 == n_total:
                break
            if i + 1 == st["epoch_end"]:
                epoch_start(t)
            else:
                begin_step(t, i + 1)
    return SimResult(cfg, start, got, end, busy, events)


def sweep_workers(config: PipelineConfig, workers=(0, 1, 2, 3, 4)) -> list[SimResult]:
    """One simulation per worker count."""
    return [simulate(config, num_workers=int(w)) for w in workers]


def plateau_workers(rates, fraction: float = 0.97) -> int:
    """Fewest workers whose rate reaches ``fraction`` of the best: the index of the first
    ``rates[w] >= fraction · max(rates)``, ``rates[w]`` being samples/s with ``w`` workers
    — where the throughput curve flattens."""
    rates = V.array("rates", rates, ndim=1, finite=True)
    fraction = V.fraction("fraction", fraction)
    return int(np.argmax(rates >= fraction * rates.max()))


def workers_to_plateau(config: PipelineConfig, max_workers: int, fraction: float = 0.97) -> int:
    """:func:`plateau_workers` of the simulated samples/s for 0 … ``max_workers`` workers."""
    max_workers = V.integer("max_workers", max_workers, low=0, high=1024)
    fraction = V.fraction("fraction", fraction)
    rates = [r.samples_per_s for r in sweep_workers(config, range(max_workers + 1))]
    return plateau_workers(rates, fraction)
