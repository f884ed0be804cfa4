"""A discrete-event simulator of a training input pipeline (read → decode → augment →
collate → hand-over → copy → compute), with DataLoader-style workers, prefetch and a pool
of CPU cores shared by fairly scheduled processes.

What it models, following ``torch.utils.data.DataLoader`` (``_MultiProcessingDataLoaderIter``
in ``torch/utils/data/dataloader.py``):

* ``num_workers = 0``: the training process itself reads, decodes and augments every
  sample of a batch, collates, then copies and computes — nothing overlaps.
* ``num_workers = W > 0``: batch indices go to the workers round-robin; at most
  ``prefetch_factor × W`` batches are outstanding (``_reset`` puts that many indices, and
  ``_process_data`` one more per batch returned); batches return in order. A worker builds
  a whole batch, sample by sample, collates it and hands it over (``transfer_s``: the
  batch into shared memory); the training process pays ``receive_s`` to take it.
* Per sample: ``read_s`` of I/O (no core held), then ``(decode_s + augment_s) × m`` of CPU
  work, ``m`` drawn once per sample from a gamma distribution of mean 1 and coefficient of
  variation ``jitter`` (``seed``; 1 when ``jitter = 0``): images differ in size and
  content, so their decode and augment times differ. The training process spends
  ``copy_s`` (host → device) and ``compute_s`` per batch (on a core when
  ``compute_on_cpu``, else on an accelerator, concurrently with the cores).
* ``cores`` CPU cores. With ``quantum_s = 0`` requests (one sample's work, a collate, a
  step) are served first come first served and hold their core to the end. With
  ``quantum_s > 0`` the cores are time-sliced like Linux's fair scheduler (CFS; EEVDF
  since 6.6): the next slice goes to the runnable process with the least CPU time per
  unit of weight; a process that goes on computing keeps its core for the rest of its
  slice; a woken process starts from the least CPU time among those running (sleeping
  earns no credit) and pre-empts the running process that has used the most, if that one
  has used more. The default slice of Linux 6.6–6.12 is 0.75 ms × (1 + log2 cores)
  (``sysctl_sched_base_slice``, ``kernel/sched/fair.c``): 1.5 ms on 2 cores.
* ``background``: other CPU-bound processes on the machine, a real number — their total
  weight, spread over ⌈background⌉ processes that never sleep (needs ``quantum_s > 0``).
  Fair scheduling then gives each of ``k`` runnable processes of ours about
  ``min(1, cores / (k + background))`` of a core (:class:`labkit.dataload.model.Machine`).
* Epochs: the pipeline drains at an epoch's end; without ``persistent_workers`` new workers
  start, costing ``worker_startup_s`` before the first batch of each epoch.

What a closed-form bound cannot show and :class:`SimResult` records: when every index was
handed out (``batch_issued``), when each batch was ready (``batch_ready``), so the depth
of the prefetch queue over time (:meth:`SimResult.queue`), the start-up transient
(:attr:`SimResult.first_batch_s`, :attr:`SimResult.startup_excess_s`), and with
``jitter > 0`` the rate lost when the stages are balanced and a short queue cannot absorb
the variation (more ``prefetch_factor`` wins it back; the bound is the same for all).
Every completed read, CPU request or slice, copy and step is one event
(``SimResult.events``).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from labkit import validate as V
from labkit.dataload.model import Machine, SteadySteps, steady_steps

LINUX_BASE_SLICE_S = 0.75e-3      # kernel/sched/fair.c, normalized_sysctl_sched_base_slice


def linux_slice_s(cores: int) -> float:
    """Linux 6.6–6.12's base slice: 0.75 ms × (1 + ⌊log2 min(cores, 8)⌋) (the
    ``SCHED_TUNABLESCALING_LOG`` factor of ``update_sysctl`` in ``kernel/sched/fair.c``)."""
    cores = V.integer("cores", cores, low=1)
    return LINUX_BASE_SLICE_S * (1 + int(math.log2(min(cores, 8))))


@dataclass(frozen=True)
class PipelineConfig:
    batch_size: int = V.checked(32, V.integer, low=1)
    num_workers: int = V.checked(0, V.integer, low=0, high=1024)
    prefetch_factor: int = V.checked(2, V.integer, low=1)
    cores: int = V.checked(2, V.integer, low=1, high=4096)
    read_s: float = V.checked(0.0, V.nonnegative)       # per sample, I/O
    decode_s: float = V.checked(2e-4, V.nonnegative)    # per sample, CPU
    augment_s: float = V.checked(3e-4, V.nonnegative)   # per sample, CPU
    collate_s: float = V.checked(0.0, V.nonnegative)    # per batch, CPU, in the loading process
    transfer_s: float = V.checked(0.0, V.nonnegative)   # per batch, CPU, a worker handing it over
    receive_s: float = V.checked(0.0, V.nonnegative)    # per batch, CPU, training process takes it
    copy_s: float = V.checked(0.0, V.nonnegative)       # per batch, host → device (a core)
    compute_s: float = V.checked(5e-3, V.nonnegative)   # per batch (training step)
    compute_on_cpu: bool = True
    batches: int = V.checked(100, V.integer, low=1)     # per epoch
    epochs: int = V.checked(1, V.integer, low=1)
    worker_startup_s: float = V.checked(0.0, V.nonnegative)
    persistent_workers: bool = False
    # other CPU-bound processes (their total weight)
    background: float = V.checked(0.0, V.number, low=0, high=4096)
    quantum_s: float = V.checked(0.0, V.nonnegative)    # time slice; 0 = run to completion
    # the coefficient of variation of a sample's CPU time, and the seed of its draws
    jitter: float = V.checked(0.0, V.nonnegative)
    seed: int = V.checked(0, V.integer, low=0)

    def __post_init__(self):
        V.check_fields(self)
        if self.background and not self.quantum_s > 0:
            raise ValueError("background processes need a time slice: set quantum_s > 0")

    @property
    def load_cpu_s(self) -> float:
        """CPU seconds to build one batch: ``B × (decode + augment) + collate``."""
        return self.batch_size * (self.decode_s + self.augment_s) + self.collate_s

    @property
    def worker_batch_s(self) -> float:
        """CPU seconds a worker spends per batch: building it and handing it over."""
        return self.load_cpu_s + self.transfer_s

    @property
    def step_cpu_s(self) -> float:
        """CPU seconds of the training process per batch with workers: receive + copy +
        the step when it runs on the CPU."""
        return self.receive_s + self.copy_s + (self.compute_s if self.compute_on_cpu else 0.0)

    @property
    def decode_share(self) -> float:
        """decode / (decode + augment): see :func:`decode_share`."""
        return decode_share(self.decode_s, self.augment_s)

    @property
    def machine(self) -> Machine:
        return Machine(self.cores, self.background)


def decode_share(decode_s: float, augment_s: float) -> float:
    """decode / (decode + augment): the share of a sample's CPU work that is decoding (what
    a cache of decoded pixels removes); 0.5 when both are 0."""
    decode_s = V.nonnegative("decode_s", decode_s)
    augment_s = V.nonnegative("augment_s", augment_s)
    total = decode_s + augment_s
    return decode_s / total if total > 0 else 0.5


def bound_rate(config: PipelineConfig, workers: int | None = None) -> float:
    """Samples per second the closed form allows, on a machine shared with
    ``config.background`` CPU-bound processes (:class:`labkit.dataload.model.Machine`).

    Without workers: ``B · σ₁ / (L + copy + C)``, σ₁ = ``min(1, c / (1 + b))`` the share of
    one process. With ``W`` workers, each process runs at most at σ₁ and ours together get
    at most ``c · (W + 1) / (W + 1 + b)`` cores (all of them runnable), so
    ``B / max(M / σ₁, Lw / (W σ₁), (Lw + M) / min(c, c (W + 1) / (W + 1 + b)))`` with
    ``Lw`` = :attr:`PipelineConfig.worker_batch_s` and ``M`` the training process's CPU per
    batch (:attr:`PipelineConfig.step_cpu_s`; with the step on an accelerator ``C`` is a
    fourth term). With ``b = 0`` and no hand-over costs this is
    ``B · steady_throughput(L, C, W, c)`` of :mod:`labkit.dataload.model`. Reads (I/O)
    are not in it; an upper bound, reached by the simulator without jitter."""
    W = config.num_workers if workers is None else V.integer("workers", workers, low=0)
    c, b, B = config.cores, config.background, config.batch_size
    s1 = Machine(c, b).share(1)
    if W == 0:
        cpu = config.load_cpu_s + config.copy_s + (config.compute_s if config.compute_on_cpu else 0)
        seconds = cpu / s1 + (0.0 if config.compute_on_cpu else config.compute_s)
        return B / seconds
    M, Lw = config.step_cpu_s, config.worker_batch_s
    ours = min(float(c), c * (W + 1) / (W + 1 + b))
    terms = [M / s1, Lw / (W * s1), (Lw + M) / ours]
    if not config.compute_on_cpu:
        terms.append(config.compute_s)
    return B / max(terms)


@dataclass(frozen=True)
class QueueTrace:
    """Piecewise-constant counts over time: ``ready[k]`` batches built and not yet taken,
    ``in_flight[k]`` indices handed out and not yet built, from ``t[k]`` to ``t[k + 1]``."""
    t: np.ndarray
    ready: np.ndarray
    in_flight: np.ndarray

    def mean_ready(self, start: float, stop: float) -> float:
        """Time-average of ``ready`` over [start, stop]."""
        edges = np.clip(np.append(self.t, np.inf), start, stop)
        return float(np.sum(self.ready * np.diff(edges)) / (stop - start)) if stop > start else 0.0


@dataclass(frozen=True)
class SimResult(SteadySteps):
    config: PipelineConfig
    step_start: np.ndarray     # when the training loop asks for batch i
    step_got: np.ndarray       # when it has batch i
    step_end: np.ndarray       # when step i's compute ends
    core_busy_s: float         # CPU seconds of our processes
    events: int
    batch_issued: np.ndarray | None = None   # when batch i's index went to a worker
    batch_ready: np.ndarray | None = None    # when batch i was built

    @property
    def steady_args(self) -> tuple[int, int, int, int]:
        c = self.config
        return c.batch_size, c.prefetch_factor, c.num_workers, c.batches

    @property
    def total_s(self) -> float:
        return float(self.step_end[-1])

    @property
    def first_batch_s(self) -> float:
        """Seconds from the start to the first batch in the training loop."""
        return float(self.step_got[0])

    @property
    def startup_excess_s(self) -> float:
        """Seconds the last epoch's steps before its steady window took beyond what the
        steady rate gives them: ``end[a] − t₀ − head · B / rate``, ``a`` the step before the
        window, ``t₀`` the epoch's start (worker start-up, the first batch, the fill)."""
        c = self.config
        first = len(self.step_end) - c.batches
        t0 = float(self.step_end[first - 1]) if first > 0 else 0.0
        head = self.window.start - first
        return float(self.step_end[self.window.start - 1]) - t0 - head * c.batch_size / self.samples_per_s

    @property
    def core_utilisation(self) -> float:
        return self.core_busy_s / (self.config.cores * self.total_s) if self.total_s else 0.0

    def queue(self) -> QueueTrace:
        """Batches ready and waiting, and batches in flight, over time (workers only; with
        ``num_workers = 0`` nothing is ever queued)."""
        if self.batch_issued is None or self.config.num_workers == 0:
            z = np.zeros(1)
            return QueueTrace(z, z.astype(int), z.astype(int))
        times = np.concatenate([self.batch_issued, self.batch_ready, self.batch_ready,
                                self.step_got])
        d_ready = np.concatenate([np.zeros_like(self.batch_issued), np.ones_like(self.batch_ready),
                                  np.zeros_like(self.batch_ready), -np.ones_like(self.step_got)])
        d_flight = np.concatenate([np.ones_like(self.batch_issued), np.zeros_like(self.batch_ready),
                                   -np.ones_like(self.batch_ready), np.zeros_like(self.step_got)])
        order = np.argsort(times, kind="stable")
        t, r, f = times[order], np.cumsum(d_ready[order]), np.cumsum(d_flight[order])
        last = np.append(t[1:] != t[:-1], True)        # keep the count after each instant
        return QueueTrace(t[last], r[last].astype(int), f[last].astype(int))


class _Cores:
    """The cores and a fair scheduler for processes ``0 … n − 1`` (see the module doc);
    ``log``, if a list, gets ``(process, start, end)`` of every run on a core that ends."""

    def __init__(self, cores, quantum, weights, ours, push):
        self.free = cores
        self.quantum = quantum
        self.weight = weights
        self.ours = ours                       # processes whose CPU time counts as busy
        self.push = push                       # push(time, kind, payload)
        n = len(weights)
        self.vr = [0.0] * n                    # CPU seconds / weight
        self.rem = [0.0] * n                   # CPU seconds left of the current request
        self.then = [None] * n                 # (method, args) to call when the request is done
        self.running: dict = {}                # p -> (start, run, slice left after run, token)
        self.holding: dict = {}                # p -> slice left: p finished and may go on
        self.token = [0] * n
        self.runq: list = []                   # heap (key, seq, p)
        self.seq = 0
        self.busy = 0.0
        self.log: list | None = None

    def _start(self, t, p, slice_left):
        run = min(self.rem[p], slice_left) if self.quantum > 0 else self.rem[p]
        self.token[p] += 1
        self.running[p] = (t, run, slice_left - run, self.token[p])
        self.push(t + run, _CPU, (p, self.token[p]))

    def _queue(self, p):
        self.seq += 1
        key = self.vr[p] if self.quantum > 0 else 0.0
        heapq.heappush(self.runq, (key, self.seq, p))

    def _dispatch(self, t):
        """A core is free: give it to the next runnable process, or leave it idle."""
        if self.runq:
            _, _, p = heapq.heappop(self.runq)
            self._start(t, p, self.quantum)
        else:
            self.free += 1

    def request(self, t, p, dur, then, *args):
        """Process ``p`` needs ``dur`` CPU seconds, then calls ``then(t_done, *args)``."""
        self.rem[p], self.then[p] = dur, (then, args)
        if p in self.holding:                  # it goes on computing on its core
            left = self.holding.pop(p)
            if left > 0:
                self._start(t, p, left)
                return
            self._queue(p)
            self._dispatch(t)
            return
        if self.quantum > 0:                   # woken: no credit for the time it slept
            floor = min([self.vr[q] for q in self.running] + [k for k, _, _ in self.runq[:1]],
                        default=self.vr[p])
            self.vr[p] = max(self.vr[p], floor)
        if self.free > 0:
            self.free -= 1
            self._start(t, p, self.quantum)
            return
        if self.quantum > 0 and self.running:  # pre-empt the one that has used the most
            q = max(self.running, key=lambda r: self.vr[r])
            if self.vr[q] > self.vr[p]:
                self._preempt(t, q)
                self._start(t, p, self.quantum)
                return
        self._queue(p)

    def _account(self, p, start, ran):
        if self.log is not None:
            self.log.append((p, start, start + ran))
        self.vr[p] += ran / self.weight[p]
        self.rem[p] -= ran
        if p in self.ours:
            self.busy += ran

    def _preempt(self, t, q):
        start, _, _, _ = self.running.pop(q)
        self.token[q] += 1                     # its pending event is now stale
        self._account(q, start, t - start)
        self._queue(q)

    def event(self, t, p, token):
        """A run of ``p`` ended at ``t``: its request is done or its slice is used up."""
        if token != self.token[p] or p not in self.running:
            return                             # pre-empted before this event
        start, run, left, _ = self.running.pop(p)
        self._account(p, start, run)
        if self.rem[p] > 1e-15:                # slice used up, work left: back in the queue
            self._queue(p)
            self._dispatch(t)
            return
        self.rem[p] = 0.0
        then, args = self.then[p]
        if self.quantum > 0:
            self.holding[p] = left
            then(t, *args)
            if p in self.holding:              # it did not go on computing: release
                del self.holding[p]
                self._dispatch(t)
        else:                                  # first come first served: release first
            self._dispatch(t)
            then(t, *args)


_CPU, _READ, _STEP, _EPOCH = range(4)       # events: a run on a core, a read, a step, workers up


def simulate(config: PipelineConfig | None = None, **changes) -> SimResult:
    """Run the pipeline of ``config`` (or ``PipelineConfig(**changes)``) and time every step
    (:class:`LoaderSim`)."""
    cfg = replace(config or PipelineConfig(), **changes) if changes else (config or PipelineConfig())
    return LoaderSim(cfg).run()


class LoaderSim:
    """One run of the pipeline: its state, and one method per event.

    The cores' processes by owner: ``workers`` (``0 … W − 1``), the training process
    ``main`` (``W``; with ``W = 0`` it loads its own batches), the ``others`` (background,
    ``W + 1 …``). Events, in time order (ties in the order pushed): a run on a core ends
    (:meth:`_Cores.event`, which calls what the request was for: :meth:`build`,
    :meth:`built`, :meth:`compute` or :meth:`step_done`), a sample's read ends
    (:meth:`read_done`), a step on the accelerator ends (:meth:`step_done`), an epoch's
    workers are up (:meth:`epoch_go`)."""

    def __init__(self, cfg: PipelineConfig):
        if cfg.read_s + cfg.load_cpu_s + cfg.copy_s + cfg.compute_s <= 0:
            raise ValueError("a step must cost something: read_s, decode_s, augment_s, "
                             "collate_s, copy_s and compute_s are all 0")
        self.cfg = cfg
        W = cfg.num_workers
        self.n_total = n = cfg.batches * cfg.epochs
        self.step_start, self.step_got, self.step_end, self.batch_issued, self.batch_ready = \
            np.zeros((5, n))
        self.clock: list = []                   # heap of (time, seq, kind, payload)
        self.seq = self.events = 0
        n_bg = math.ceil(cfg.background - 1e-12) if cfg.background > 0 else 0
        self.workers, self.main, self.others = range(W), W, range(W + 1, W + 1 + n_bg)
        weights = [1.0] * (W + 1) + [cfg.background / max(n_bg, 1)] * n_bg
        self.cores = _Cores(cfg.cores, cfg.quantum_s, weights, set(range(W + 1)), self.push)
        self.sample_s = cfg.decode_s + cfg.augment_s
        k = 1.0 / cfg.jitter ** 2 if cfg.jitter > 0 else 0.0   # gamma: mean 1, CV jitter
        self.mult = np.random.default_rng(cfg.seed).gamma(k, 1.0 / k, size=(n, cfg.batch_size)) \
            if k else None
        self.assigned = [deque() for _ in range(W + 1)]   # batch ids each loader is to build
        self.loading = [False] * (W + 1)        # whether each loader is building a batch
        self.ready: dict = {}                   # batch id -> when built, until taken
        self.next = 0                           # the batch the loop takes next
        self.waiting_for: int | None = None     # the batch the loop waits for
        self.issued = 0                         # indices handed out so far
        self.epoch_end = cfg.batches            # the first batch of the next epoch
        self.done = False

    def push(self, t, kind, payload):
        self.seq += 1
        heapq.heappush(self.clock, (t, self.seq, kind, payload))

    def run(self) -> SimResult:
        self.epoch_start(0.0)
        for q in self.others:                   # other processes, forever busy
            self.cores.request(0.0, q, math.inf, None)
        handlers = {_CPU: self.cores.event, _READ: self.read_done, _STEP: self.step_done,
                    _EPOCH: self.epoch_go}
        while self.clock and not self.done:
            t, _, kind, payload = heapq.heappop(self.clock)
            self.events += 1
            handlers[kind](t, *payload)
        return SimResult(self.cfg, self.step_start, self.step_got, self.step_end,
                         self.cores.busy, self.events, self.batch_issued, self.batch_ready)

    def cpu(self, t, p, dur, then, *args):
        """``p`` needs ``dur`` CPU seconds, then ``then(t_done, *args)`` (at once for none)."""
        if dur <= 0.0:
            then(t, *args)
        else:
            self.cores.request(t, p, dur, then, *args)

    def build(self, t, p, b, k=0):
        """Loader ``p`` builds batch ``b`` from sample ``k`` on: a read (I/O, no core), then
        the sample's CPU work; after the last sample, collate (and hand over, a worker)."""
        cfg = self.cfg
        while k < cfg.batch_size:
            dur = self.sample_s * (self.mult[b, k] if self.mult is not None else 1.0)
            nxt = k + 1
            if cfg.read_s > 0:
                self.push(t + cfg.read_s, _READ, (p, b, nxt, dur))
                return
            if dur > 0:
                self.cores.request(t, p, dur, self.build, p, b, nxt)
                return
            k = nxt
        extra = cfg.collate_s + (cfg.transfer_s if p != self.main else 0.0)
        self.cpu(t, p, extra, self.built, p, b)

    def read_done(self, t, p, b, nxt, dur):
        """Event: a sample's read ended; its CPU work follows, then sample ``nxt``."""
        self.cpu(t, p, dur, self.build, p, b, nxt)

    def start_batch(self, t, p):               # loader p starts its next batch if idle
        if not self.loading[p] and self.assigned[p]:
            self.loading[p] = True
            self.build(t, p, self.assigned[p].popleft())

    def built(self, t, p, b):
        self.loading[p] = False
        self.batch_ready[b] = t
        if p == self.main:                      # W == 0: the training process loaded it
            self.take(t, b)
            return
        self.ready[b] = t
        if self.waiting_for == b:
            self.waiting_for = None
            self.take(t, b)
        self.start_batch(t, p)

    def issue(self, t):
        """Hand out indices round robin until ``prefetch_factor × W`` are outstanding
        (this epoch's only)."""
        W = self.cfg.num_workers
        limit = min(self.epoch_end, self.next + self.cfg.prefetch_factor * W)
        while self.issued < limit:
            i, w = self.issued, self.issued % W
            self.assigned[w].append(i)
            self.batch_issued[i] = t
            self.issued += 1
            self.start_batch(t, w)

    def begin_step(self, t, i):
        self.step_start[i] = t
        if not self.workers:
            self.batch_issued[i] = t
            self.assigned[self.main].append(i)
            self.start_batch(t, self.main)
        elif i in self.ready:
            self.take(t, i)
        else:
            self.waiting_for = i

    def take(self, t, i):
        cfg, W = self.cfg, self.cfg.num_workers
        self.step_got[i] = t
        self.ready.pop(i, None)
        self.next = i + 1
        if W:                                   # an index for each batch taken
            self.issue(t)
        pre = cfg.copy_s + (cfg.receive_s if W else 0.0)
        self.cpu(t, self.main, pre, self.compute, i)

    def compute(self, t, i):
        if self.cfg.compute_on_cpu:
            self.cpu(t, self.main, self.cfg.compute_s, self.step_done, i)
        else:
            self.push(t + self.cfg.compute_s, _STEP, (i,))

    def step_done(self, t, i):
        """Event (step on the accelerator) or end of a CPU request (step on a core)."""
        self.step_end[i] = t
        if i + 1 == self.n_total:
            self.done = True
        elif i + 1 == self.epoch_end:
            self.epoch_start(t)
        else:
            self.begin_step(t, i + 1)

    def epoch_start(self, t):
        cfg, e = self.cfg, self.next // self.cfg.batches
        self.epoch_end = (e + 1) * cfg.batches
        fresh = self.workers and (e == 0 or not cfg.persistent_workers)   # workers start
        delay = cfg.worker_startup_s if fresh else 0.0
        self.push(t + delay, _EPOCH, ())

    def epoch_go(self, t):
        """Event: the epoch's workers are up; hand out indices and ask for the next batch."""
        if self.workers:
            self.issue(t)
        self.begin_step(t, self.next)


def steady_config(config: PipelineConfig, workers: int | None = None,
                  window: int = 64) -> PipelineConfig:
    """``config`` (at ``workers`` workers) with enough batches per epoch for a steady
    window of ``window`` steps (:func:`labkit.dataload.model.steady_steps`)."""
    W = config.num_workers if workers is None else V.integer("workers", workers, low=0)
    need = steady_steps(config.prefetch_factor, W, window)
    return replace(config, num_workers=W, batches=max(config.batches, need))


def sweep_workers(config: PipelineConfig, workers=(0, 1, 2, 3, 4)) -> list[SimResult]:
    """One simulation per worker count, each long enough for a steady window."""
    return [simulate(steady_config(config, int(w))) for w in workers]


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


def prefetch_recurrence(load_s, compute_s, workers: int, prefetch_factor: int = 2
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The prefetch queue as a recurrence, per batch k (no core contention: the step on an
    accelerator, a core per worker; :func:`simulate` without its cores and costs per
    sample): ``D = prefetch_factor × W`` indices out at most — index k goes out at 0 for
    k < D, else when batch ``k − D`` is taken (``_try_put_index`` after each batch
    returned, ``torch/utils/data/dataloader.py``); worker ``k mod W`` (round robin) builds
    it once it has the index and has built its previous batch: ``ready_k = max(issued_k,
    free_w) + load_s[k]``; the loop takes it when it is ready and step k − 1 has ended,
    ``take_k = max(end_{k−1}, ready_k)``, and ends step k at ``end_k = take_k +
    compute_s[k]`` (``end_{−1} = 0``). Returns ``(wait_s, end_s)`` with ``wait_s[k] =
    take_k − end_{k−1}``. With constant costs the steady period is ``max(C, L / W)``:
    the bound; with costs that vary it is longer, the more so the shorter the queue."""
    L = V.array("load_s", load_s, ndim=1)
    C = V.array("compute_s", compute_s, ndim=1, shape=(len(L),))
    if (L < 0).any() or (C < 0).any():
        raise ValueError("load_s and compute_s must be >= 0")
    W = V.integer("workers", workers, low=1)
    D = V.integer("prefetch_factor", prefetch_factor, low=1) * W
    n = len(L)
    free, take = np.zeros(W), np.zeros(n)
    wait, end = np.zeros(n), np.zeros(n)
    prev = 0.0
    for k in range(n):
        issued = 0.0 if k < D else take[k - D]
        ready = max(issued, free[k % W]) + L[k]
        free[k % W] = ready
        take[k] = max(prev, ready)
        wait[k] = take[k] - prev
        end[k] = take[k] + C[k]
        prev = end[k]
    return wait, end


def jittered_costs(config: PipelineConfig, batches: int, jitter: float, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per-batch load and step seconds for :func:`prefetch_recurrence`: each batch's load
    the sum of ``B`` samples' ``(decode_s + augment_s) × m``, ``m`` gamma-distributed with
    mean 1 and coefficient of variation ``jitter`` (as :func:`simulate` draws them), plus
    ``collate_s``; the step ``compute_s`` every time."""
    batches = V.integer("batches", batches, low=1)
    jitter = V.nonnegative("jitter", jitter)
    B = config.batch_size
    rng = np.random.default_rng(seed)
    m = rng.gamma(1 / jitter ** 2, jitter ** 2, size=(batches, B)) if jitter > 0 else \
        np.ones((batches, B))
    load = (config.decode_s + config.augment_s) * m.sum(axis=1) + config.collate_s
    return load, np.full(batches, config.compute_s)
