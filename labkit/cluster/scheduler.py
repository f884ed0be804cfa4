"""An event-driven simulator of a GPU cluster's batch scheduler.

The cluster has ``nodes`` nodes of ``gpus_per_node`` GPUs. Every job is **gang-scheduled**:
it starts only when all its GPUs are free at once, and holds them all until it ends (the
all-or-nothing allocation of Kubernetes' Volcano or Slurm; in Ousterhout's original 1982
sense gang scheduling also time-slices whole jobs, which this simulator does not).
**Placement**: a job of g <= gpus_per_node GPUs runs inside one node; a larger job takes
g / gpus_per_node whole free nodes (g must be a multiple). ``placement="pack"`` puts a small
job on the fullest node where it fits (best fit), keeping whole nodes free for big jobs;
``"spread"`` puts it on the emptiest (worst fit), which fragments the cluster.

Policies (the order of the waiting queue and what may jump it):

* ``"fifo"`` — first come, first served; the head of the queue blocks everyone behind it.
* ``"sjf"`` — shortest (declared) job first; non-preemptive; the head blocks the rest.
* ``"priority"`` — highest ``priority`` first (ties: arrival); a job that does not fit
  **preempts** running jobs of lower priority (lowest priority, most recently started
  first) until it fits; a preempted job goes back to the queue with its remaining work
  (checkpoint/restart) plus ``preempt_overhead`` seconds.
* ``"easy"`` — EASY backfilling (Lifka 1995, the Argonne SP scheduler; analysed by
  Mu'alem & Feitelson, IEEE TPDS 2001): FIFO, but when the head does not fit it gets a
  **reservation** at the *shadow time*, the earliest time enough running jobs will have
  ended (by their estimates) for it to fit; a later job may start now only if it fits now
  and does not delay that reservation: it ends (by its estimate) before the shadow time,
  or it uses only GPUs the head will not need then (the "extra" GPUs). Jobs that end at
  the same instant give their GPUs back together, so all of them count at the shadow time
  (:func:`shadow_time`; Mu'alem & Feitelson §2: the shadow time is when enough of the
  running jobs have terminated, and the extra nodes are those free then beyond the head's
  need).

The EASY **backfill pass** is a function of its own, :func:`easy_backfill`, which
``simulate(..., backfill=fn)`` replaces (chapter 11's lab): after the FCFS part has started
what it can and the head of the queue does not fit, ``fn(now, queue, running, free)`` gets
the queue (:class:`Waiting`, in arrival order, the head first), the running jobs
(:class:`Running`, by their estimated ends) and a copy of the free GPUs (:class:`FreeGPUs`,
with the placement rule), and returns the jobs to start now, in order.

Events at the same instant: completions first, then arrivals, then one scheduling pass.
Cost: O(log n) per event for the queue plus, for EASY, one pass over the queue per event.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from labkit import validate as v
from labkit.cluster.jobs import Job

POLICIES = ("fifo", "sjf", "priority", "easy")
PLACEMENTS = ("pack", "spread")


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes × ``gpus_per_node`` GPUs."""
    nodes: int = 8
    gpus_per_node: int = 8

    def __post_init__(self):
        object.__setattr__(self, "nodes", v.integer("nodes", self.nodes, low=1))
        object.__setattr__(self, "gpus_per_node",
                           v.integer("gpus_per_node", self.gpus_per_node, low=1))

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Segment:
    """A job ran on ``alloc`` ((node, gpus), ...) from ``start`` to ``end``."""
    job: int            # index into ScheduleResult.jobs
    start: float
    end: float
    alloc: tuple


@dataclass
class ScheduleResult:
    policy: str
    cluster: Cluster
    placement: str
    jobs: list[Job]
    start: np.ndarray          # first start of each job
    end: np.ndarray            # completion time of each job
    segments: list[Segment]
    preemptions: int = 0
    reservations: dict = field(default_factory=dict)   # EASY: job index -> first shadow time

    @property
    def arrival(self) -> np.ndarray:
        return np.array([j.arrival for j in self.jobs])

    @property
    def duration(self) -> np.ndarray:
        return np.array([j.duration for j in self.jobs])

    @property
    def gpus(self) -> np.ndarray:
        return np.array([j.gpus for j in self.jobs])

    @property
    def makespan(self) -> float:
        return float(self.end.max() - min(j.arrival for j in self.jobs))


class _Nodes:
    """Free GPUs per node, with the nodes grouped by how many GPUs they have free."""

    def __init__(self, nodes: int, gpn: int):
        self.gpn = gpn
        self.free = [gpn] * nodes
        self.by_free = [set() for _ in range(gpn + 1)]
        self.by_free[gpn] = set(range(nodes))
        self.total_free = nodes * gpn

    def copy(self) -> "_Nodes":
        c = _Nodes.__new__(_Nodes)
        c.gpn, c.free, c.total_free = self.gpn, list(self.free), self.total_free
        c.by_free = [set(s) for s in self.by_free]
        return c

    def fits(self, g: int) -> bool:
        if g > self.total_free:
            return False
        if g <= self.gpn:
            return any(self.by_free[f] for f in range(g, self.gpn + 1))
        return len(self.by_free[self.gpn]) * self.gpn >= g

    def choose(self, g: int, placement: str) -> tuple | None:
        """The allocation ((node, gpus), ...) a job of ``g`` GPUs would get, or None."""
        if g > self.total_free:
            return None
        if g <= self.gpn:
            levels = range(g, self.gpn + 1) if placement == "pack" else \
                range(self.gpn, g - 1, -1)
            for f in levels:
                if self.by_free[f]:
                    return ((min(self.by_free[f]), g),)
            return None
        k = g // self.gpn
        whole = self.by_free[self.gpn]
        if len(whole) < k:
            return None
        return tuple((n, self.gpn) for n in sorted(whole)[:k])

    def take(self, alloc: tuple) -> None:
        for n, g in alloc:
            f = self.free[n]
            self.by_free[f].discard(n)
            self.free[n] = f - g
            self.by_free[f - g].add(n)
            self.total_free -= g

    def give(self, alloc: tuple) -> None:
        for n, g in alloc:
            f = self.free[n]
            self.by_free[f].discard(n)
            self.free[n] = f + g
            self.by_free[f + g].add(n)
            self.total_free += g


@dataclass(frozen=True)
class Waiting:
    """A queued job as the backfill pass sees it: its index, GPUs and declared run time."""
    job: int
    gpus: int
    estimate: float


@dataclass(frozen=True)
class Running:
    """A running job: its estimated end (start + declared run time), GPUs and allocation
    ((node, gpus), ...)."""
    end: float
    gpus: int
    alloc: tuple


class FreeGPUs:
    """The free GPUs of a cluster, node by node, with its placement rule.

    ``fits(g)``: could a job of ``g`` GPUs start (inside one node, or on whole free nodes)?
    ``place(g)``: the allocation it would get now, or None (nothing is taken);
    ``take(alloc)`` / ``give(alloc)``: mark an allocation used / free; ``copy()``: an
    independent copy (e.g. the cluster as it will be at the shadow time); ``total``: free
    GPUs in all.
    """

    def __init__(self, nodes: "_Nodes", placement: str = "pack"):
        self._nodes, self.placement = nodes, placement

    @classmethod
    def pool(cls, nodes: int, gpus_per_node: int, used: Sequence = ()) -> "FreeGPUs":
        """An empty cluster of ``nodes`` × ``gpus_per_node``, minus the ``used``
        allocations."""
        free = cls(_Nodes(v.integer("nodes", nodes, low=1),
                          v.integer("gpus_per_node", gpus_per_node, low=1)))
        for alloc in used:
            free.take(alloc)
        return free

    @property
    def total(self) -> int:
        return self._nodes.total_free

    def fits(self, gpus: int) -> bool:
        return self._nodes.fits(gpus)

    def place(self, gpus: int) -> tuple | None:
        return self._nodes.choose(gpus, self.placement)

    def take(self, alloc: tuple) -> None:
        for n, g in alloc:
            if not 0 <= n < len(self._nodes.free) or not 0 < g <= self._nodes.free[n]:
                raise ValueError(f"cannot take {g} GPUs on node {n}: it has "
                                 f"{self._nodes.free[n] if 0 <= n < len(self._nodes.free) else 'no'}"
                                 f" free (allocations are ((node, gpus), ...) from place())")
        self._nodes.take(alloc)

    def give(self, alloc: tuple) -> None:
        for n, g in alloc:
            if not 0 <= n < len(self._nodes.free) or g < 0 or \
                    self._nodes.free[n] + g > self._nodes.gpn:
                raise ValueError(f"cannot give {g} GPUs back to node {n}: more than it has")
        self._nodes.give(alloc)

    def copy(self) -> "FreeGPUs":
        return FreeGPUs(self._nodes.copy(), self.placement)

    def __repr__(self) -> str:
        return f"FreeGPUs(per node {self._nodes.free}, {self.placement})"


def reservation(now: float, head: Waiting, running: Sequence[Running],
                free: FreeGPUs) -> tuple[float, FreeGPUs]:
    """The head's reservation: (shadow time, the free GPUs then). On a copy of ``free`` the
    running jobs give their allocations back in order of their estimated ends — every job
    ending at the same instant together — until the head fits (Mu'alem & Feitelson 2001,
    §2)."""
    later = free.copy()
    ends = sorted(running, key=lambda r: r.end)
    shadow, i = now, 0
    while not later.fits(head.gpus):
        shadow = ends[i].end
        while i < len(ends) and ends[i].end == shadow:      # ties end together
            later.give(ends[i].alloc)
            i += 1
    return shadow, later


def easy_backfill(now: float, queue: Sequence[Waiting], running: Sequence[Running],
                  free: FreeGPUs) -> list[int]:
    """EASY's backfill pass (Lifka 1995; Mu'alem & Feitelson, IEEE TPDS 12(6), 2001, §2):
    the jobs behind the head ``queue[0]`` (which does not fit now) to start now, in order.

    1. The shadow time (:func:`reservation`): give back the running jobs' GPUs in order of
       their estimated ends, every job ending at the same instant together, until the head
       fits; the cluster as it is then is the reservation's (the extra GPUs are what it has
       beyond the head's need).
    2. One pass over the rest of the queue in order: a job that fits now starts if it ends
       (by its estimate) no later than the shadow time, or if the cluster at the shadow time
       still fits the head with this job's GPUs taken (then they are taken there too).
    """
    head = queue[0]
    shadow, later = reservation(now, head, running, free)
    started = []
    for job in queue[1:]:
        alloc = free.place(job.gpus)
        if alloc is None:
            continue
        if now + job.estimate > shadow:          # still running at the shadow time
            later.take(alloc)
            if not later.fits(head.gpus):
                later.give(alloc)
                continue
        free.take(alloc)
        started.append(job.job)
    return started


def shadow_time(now: float, free_gpus: int, running, head_gpus: int) -> tuple[float, int]:
    """EASY's reservation on a pool of GPUs: (shadow time, extra GPUs). ``running`` lists
    (estimated end, GPUs) of the running jobs in any order. The shadow time is the earliest
    end by which enough GPUs are free for the head — ``now`` if they already are — counting
    every job that ends at that instant; the extra GPUs are those free then beyond
    ``head_gpus`` (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001, §2)."""
    now = v.nonnegative("now", now)
    avail = v.integer("free_gpus", free_gpus, low=0)
    head = v.integer("head_gpus", head_gpus, low=1)
    ends = sorted((v.nonnegative("running end", e), v.integer("running GPUs", g, low=0))
                  for e, g in running)
    shadow, i = now, 0
    while avail < head and i < len(ends):
        shadow = ends[i][0]
        while i < len(ends) and ends[i][0] == shadow:     # ties end together
            avail += ends[i][1]
            i += 1
    if avail < head:
        raise ValueError(f"head_gpus={head} never fits: only {avail} GPUs free when every "
                         f"running job has ended")
    return shadow, avail - head


def can_backfill(now: float, free_gpus: int, running, head_gpus: int, job_gpus: int,
                 job_estimate: float) -> bool:
    """May a job of ``job_gpus`` GPUs and declared ``job_estimate`` seconds start now under
    EASY, the head of the queue needing ``head_gpus``? It must fit now, and either end by
    the shadow time or use no more than the extra GPUs (:func:`shadow_time`)."""
    job = v.integer("job_gpus", job_gpus, low=1)
    est = v.positive("job_estimate", job_estimate)
    if job > v.integer("free_gpus", free_gpus, low=0):
        return False
    shadow, extra = shadow_time(now, free_gpus, running, head_gpus)
    return now + est <= shadow or job <= extra


def _check_jobs(jobs: Sequence[Job], cluster: Cluster) -> list[Job]:
    if isinstance(jobs, Job) or not hasattr(jobs, "__len__"):
        raise TypeError(f"jobs must be a sequence of Job, got {type(jobs).__name__}")
    if len(jobs) == 0:
        raise ValueError("jobs must not be empty")
    out = []
    for j in jobs:
        if not isinstance(j, Job):
            raise TypeError(f"jobs must contain Job records, got {type(j).__name__}")
        if j.gpus > cluster.total_gpus:
            raise ValueError(f"job {j.id} asks for {j.gpus} GPUs; the cluster has "
                             f"{cluster.total_gpus}")
        if j.gpus > cluster.gpus_per_node and j.gpus % cluster.gpus_per_node:
            raise ValueError(f"job {j.id} asks for {j.gpus} GPUs: a job larger than a node "
                             f"must take whole nodes (a multiple of gpus_per_node="
                             f"{cluster.gpus_per_node})")
        out.append(j)
    return out


class ClusterSim:
    """The scheduler's state by name — ``free`` (GPUs per node), ``queue`` (a heap in the
    policy's :meth:`key` order; EASY's in arrival order), ``running`` (job -> estimated end,
    GPUs, allocation: what the backfill pass sees), ``completions`` (a heap of (end, seq,
    job, token); preempting a job moves its token on, so its old completion is stale),
    ``remaining`` work, and the result's starts, ends, segments and reservations — and one
    method per kind of event: :meth:`finish`, :meth:`arrive`, :meth:`start`,
    :meth:`preempt`, then one pass per instant, :meth:`schedule_queue` (FIFO, SJF,
    priority) or :meth:`schedule_easy` (FCFS, the head's reservation, :meth:`backfill`)."""

    def __init__(self, jobs: list[Job], cluster: Cluster, policy: str, placement: str,
                 overhead: float, backfill: Callable):
        n = len(jobs)
        self.jobs, self.cluster, self.policy = jobs, cluster, policy
        self.placement, self.overhead, self.backfill_pass = placement, overhead, backfill
        self.free = _Nodes(cluster.nodes, cluster.gpus_per_node)
        self.arrivals = sorted(range(n), key=lambda i: (jobs[i].arrival, i))
        self.times = [jobs[i].arrival for i in self.arrivals] + [np.inf]
        self.arrived = 0                                 # how many of self.arrivals
        self.queue: list = []
        self.running: dict[int, Running] = {}
        self.completions: list = []
        self.seq = 0                                     # completions' tie-breaker
        self.token = [0] * n
        self.remaining = [j.duration for j in jobs]
        self.first_start, self.end = [np.nan] * n, [np.nan] * n
        self.segment_start = [0.0] * n
        self.segments: list[Segment] = []
        self.preemptions = 0
        self.reservations: dict[int, float] = {}
        self.waiting = [Waiting(i, j.gpus, j.estimate) for i, j in enumerate(jobs)]

    def key(self, i: int) -> tuple:
        """The queue's order: arrival (FIFO), declared length (SJF), priority."""
        j = self.jobs[i]
        if self.policy == "sjf":
            return (j.estimate, j.arrival, i)
        if self.policy == "priority":
            return (-j.priority, j.arrival, i)
        return (j.arrival, i)

    def run(self) -> ScheduleResult:
        """Completions first, then arrivals, then one scheduling pass, instant by instant."""
        n = len(self.jobs)
        while self.arrived < n or self.completions or self.queue:
            now = min(self.times[self.arrived],
                      self.completions[0][0] if self.completions else np.inf)
            if now == np.inf:
                raise AssertionError("jobs left in the queue with nothing running")  # pragma: no cover
            while self.completions and self.completions[0][0] <= now:
                self.finish(*heapq.heappop(self.completions))
            while self.times[self.arrived] <= now:
                self.arrive(self.arrivals[self.arrived])
            if self.policy == "easy":
                self.schedule_easy(now)
            else:
                self.schedule_queue(now)
        self.segments.sort(key=lambda s: (s.start, s.job))
        return ScheduleResult(self.policy, self.cluster, self.placement, list(self.jobs),
                              np.array(self.first_start, float), np.array(self.end, float),
                              self.segments, self.preemptions, self.reservations)

    # ---- events -----------------------------------------------------------------------

    def finish(self, t: float, seq: int, i: int, token: int) -> None:
        """Job ``i``'s completion at ``t`` (ignored if it was preempted since)."""
        if token != self.token[i]:
            return
        alloc = self.running.pop(i).alloc
        self.free.give(alloc)
        self.end[i] = t
        self.remaining[i] = 0.0
        self.segments.append(Segment(i, self.segment_start[i], t, alloc))

    def arrive(self, i: int) -> None:
        """Job ``i`` (the next to arrive) joins the queue."""
        self.arrived += 1
        if self.policy == "easy":
            self.queue.append(i)
        else:
            heapq.heappush(self.queue, (self.key(i), i))

    def start(self, i: int, now: float, alloc: tuple) -> None:
        """Job ``i`` takes ``alloc`` and runs its remaining work."""
        job = self.jobs[i]
        self.free.take(alloc)
        if np.isnan(self.first_start[i]):
            self.first_start[i] = now
        self.segment_start[i] = now
        self.seq += 1
        heapq.heappush(self.completions, (now + self.remaining[i], self.seq, i, self.token[i]))
        estimated_end = now + (job.estimate - (job.duration - self.remaining[i]))
        self.running[i] = Running(estimated_end, job.gpus, alloc)

    def preempt(self, r: int, now: float) -> None:
        """Stop job ``r``: its GPUs back, its work left plus the overhead back in the queue
        (checkpoint/restart)."""
        alloc = self.running.pop(r).alloc
        self.free.give(alloc)
        self.segments.append(Segment(r, self.segment_start[r], now, alloc))
        self.remaining[r] -= now - self.segment_start[r]
        self.remaining[r] += self.overhead
        self.token[r] += 1
        self.preemptions += 1
        heapq.heappush(self.queue, (self.key(r), r))

    # ---- scheduling passes --------------------------------------------------------------

    def schedule_queue(self, now: float) -> None:
        """Start jobs from the head of the ordered queue while the head fits (priority:
        preempting lower-priority jobs for it)."""
        while self.queue:
            i = self.queue[0][1]
            alloc = self.free.choose(self.jobs[i].gpus, self.placement)
            if alloc is None and self.policy == "priority":
                alloc = self.preempt_for(i, now)
            if alloc is None:
                return
            heapq.heappop(self.queue)
            self.start(i, now, alloc)

    def preempt_for(self, i: int, now: float) -> tuple | None:
        """Preempt running jobs of lower priority than ``i`` — lowest priority, most
        recently started first — until ``i`` fits; its allocation then, or None (and
        nothing preempted) if even all of them would not make room."""
        prio = self.jobs[i].priority
        victims = sorted((r for r in self.running if self.jobs[r].priority < prio),
                         key=lambda r: (self.jobs[r].priority, -self.segment_start[r], -r))
        trial = self.free.copy()
        for k, r in enumerate(victims):
            trial.give(self.running[r].alloc)
            if trial.fits(self.jobs[i].gpus):
                break
        else:
            return None
        for r in victims[:k + 1]:
            self.preempt(r, now)
        return self.free.choose(self.jobs[i].gpus, self.placement)

    def schedule_easy(self, now: float) -> None:
        """FCFS from the head; then the head's reservation (its shadow time, kept from the
        first pass that saw it blocked) and the backfill pass."""
        while self.queue:
            alloc = self.free.choose(self.jobs[self.queue[0]].gpus, self.placement)
            if alloc is None:
                break
            self.start(self.queue.pop(0), now, alloc)
        if not self.queue:
            return
        head = self.queue[0]
        if head not in self.reservations:
            self.reservations[head] = self.shadow_of(head)
        if len(self.queue) > 1 and self.free.total_free > 0:
            self.backfill(now)

    def backfill(self, now: float) -> None:
        """Run the backfill pass on views of the state and start what it returns, checking
        each index and that each job fits when it starts."""
        chosen = self.backfill_pass(now, [self.waiting[i] for i in self.queue],
                                    list(self.running.values()),
                                    FreeGPUs(self.free.copy(), self.placement))
        behind = set(self.queue[1:])
        started: set = set()
        for i in list(chosen if chosen is not None else ()):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i not in behind \
                    or i in started:
                raise ValueError(f"the backfill pass at t = {now:g} returned {i!r}: return "
                                 f"the indices (Waiting.job) of queued jobs behind the head, "
                                 f"each once")
            gpus = self.jobs[i].gpus
            alloc = self.free.choose(gpus, self.placement)
            if alloc is None:
                raise ValueError(f"the backfill pass at t = {now:g} started job {i} "
                                 f"({gpus} GPUs), which does not fit then: take each "
                                 f"started job's GPUs from `free` (free.take(free.place(g))) "
                                 f"before deciding the next")
            self.start(int(i), now, alloc)
            started.add(int(i))
        if started:
            self.queue = [i for i in self.queue if i not in started]

    def shadow_of(self, head: int) -> float:
        """The earliest time the head fits if running jobs end at their estimates, jobs
        ending together freeing together (on a plain list of free GPUs per node)."""
        free, total = list(self.free.free), self.free.total_free
        g, gpn = self.jobs[head].gpus, self.free.gpn
        ends = sorted((r.end, i) for i, r in self.running.items())
        k = 0
        while k < len(ends):
            t = ends[k][0]
            while k < len(ends) and ends[k][0] == t:
                for node, x in self.running[ends[k][1]].alloc:
                    free[node] += x
                    total += x
                k += 1
            if total >= g and ((g <= gpn and max(free) >= g) or
                               (g > gpn and free.count(gpn) * gpn >= g)):
                return t
        raise AssertionError("the head job fits on an empty cluster")   # pragma: no cover


def simulate(jobs: Sequence[Job], cluster: Cluster | None = None, policy: str = "fifo", *,
             placement: str = "pack", preempt_overhead: float = 0.0,
             backfill: Callable | None = None) -> ScheduleResult:
    """Run ``jobs`` on ``cluster`` under ``policy``; return every start, end and segment.
    ``backfill`` replaces EASY's backfill pass (:func:`easy_backfill`; ``policy="easy"``
    only): a function ``(now, queue, running, free) -> [job index, ...]``. The state and
    its events: :class:`ClusterSim`."""
    cluster = Cluster() if cluster is None else cluster
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster, got {type(cluster).__name__}")
    policy = v.one_of("policy", policy, POLICIES)
    if backfill is not None and (policy != "easy" or not callable(backfill)):
        raise (TypeError if policy == "easy" else ValueError)(
            f"backfill must be a function and is EASY's pass (policy='easy'), got "
            f"{type(backfill).__name__} with policy={policy!r}")
    placement = v.one_of("placement", placement, PLACEMENTS)
    overhead = v.nonnegative("preempt_overhead", preempt_overhead)
    jobs = _check_jobs(jobs, cluster)
    return ClusterSim(jobs, cluster, policy, placement, overhead,
                      easy_backfill if backfill is None else backfill).run()


def backfill_schedule(backfill: Callable, rows: Sequence, nodes: int, gpus_per_node: int,
                      placement: str = "pack") -> list[float]:
    """Start times of EASY with ``backfill`` as its backfill pass on the jobs ``rows``
    ((arrival, gpus, duration, estimate), ...) on ``nodes`` × ``gpus_per_node`` GPUs: plain
    data in and out (chapter 11's check of the learner's pass)."""
    jobs = [Job(i, float(a), int(g), float(d), estimate=float(e))
            for i, (a, g, d, e) in enumerate(rows)]
    r = simulate(jobs, Cluster(nodes, gpus_per_node), "easy", placement=placement,
                 backfill=backfill)
    return [float(t) for t in r.start]


def compare_policies(jobs: Sequence[Job], cluster: Cluster | None = None, *,
                     placement: str = "pack", preempt_overhead: float = 0.0,
                     backfill: Callable | None = None) -> dict[str, ScheduleResult]:
    """The same jobs under every policy of :data:`POLICIES`; EASY with ``backfill`` as its
    backfill pass when one is given (:func:`simulate`)."""
    return {p: simulate(jobs, cluster, p, placement=placement,
                        preempt_overhead=preempt_overhead,
                        backfill=backfill if p == "easy" else None) for p in POLICIES}


def busy_gpus(result: ScheduleResult, times: np.ndarray | None = None):
    """(times, GPUs busy from each time to the next): the step function of the cluster's
    occupancy, from the segments."""
    t0 = np.array([s.start for s in result.segments])
    t1 = np.array([s.end for s in result.segments])
    g = np.array([sum(x for _, x in s.alloc) for s in result.segments], float)
    ts = np.concatenate([t0, t1])
    dg = np.concatenate([g, -g])
    o = np.argsort(ts, kind="stable")
    ts, level = ts[o], np.cumsum(dg[o])
    uniq, last = np.unique(ts[::-1], return_index=True)
    idx = len(ts) - 1 - last
    return uniq, level[idx]
