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
  or it uses only GPUs the head will not need then (the "extra" GPUs).

Events at the same instant: completions first, then arrivals, then one scheduling pass.
Cost: O(log n) per event for the queue plus, for EASY, one pass over the queue per event.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence

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

    @classmethod
    def from_free(cls, free: list, gpn: int) -> "_Nodes":
        c = cls.__new__(cls)
        c.gpn, c.free, c.total_free = gpn, list(free), sum(free)
        c.by_free = [set() for _ in range(gpn + 1)]
        for n, f in enumerate(free):
            c.by_free[f].add(n)
        return c

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


def simulate(jobs: Sequence[Job], cluster: Cluster | None = None, policy: str = "fifo", *,
             placement: str = "pack", preempt_overhead: float = 0.0) -> ScheduleResult:
    """Run ``jobs`` on ``cluster`` under ``policy``; return every start, end and segment."""
    cluster = Cluster() if cluster is None else cluster
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster, got {type(cluster).__name__}")
    policy = v.one_of("policy", policy, POLICIES)
    placement = v.one_of("placement", placement, PLACEMENTS)
    overhead = v.nonnegative("preempt_overhead", preempt_overhead)
    jobs = _check_jobs(jobs, cluster)
    n = len(jobs)
    arrival = [j.arrival for j in jobs]
    gpus = [j.gpus for j in jobs]
    est = [j.estimate for j in jobs]
    prio = [j.priority for j in jobs]
    order = sorted(range(n), key=lambda i: (arrival[i], i))
    remaining = [j.duration for j in jobs]          # work left (priority preemption)
    start = [np.nan] * n
    end = [np.nan] * n
    seg_start = [0.0] * n
    alloc_of: dict[int, tuple] = {}
    token = [0] * n                                  # invalidates stale completion events
    segments: list[Segment] = []
    reservations: dict[int, float] = {}
    nodes = _Nodes(cluster.nodes, cluster.gpus_per_node)
    done_heap: list = []                             # (end, seq, job, token)
    running_est: dict[int, float] = {}               # job -> estimated end (EASY)
    seq = 0
    preemptions = 0

    if policy in ("fifo", "easy"):
        key = lambda i: (arrival[i], i)              # noqa: E731
    elif policy == "sjf":
        key = lambda i: (est[i], arrival[i], i)      # noqa: E731
    else:
        key = lambda i: (-prio[i], arrival[i], i)    # noqa: E731
    queue: list = []                                 # heap of (key, job) except EASY
    fifo: list[int] = []                             # EASY's queue in arrival order

    def launch(i: int, now: float, alloc: tuple) -> None:
        nonlocal seq
        nodes.take(alloc)
        alloc_of[i] = alloc
        if np.isnan(start[i]):
            start[i] = now
        seg_start[i] = now
        seq += 1
        heapq.heappush(done_heap, (now + remaining[i], seq, i, token[i]))
        running_est[i] = now + (est[i] - (jobs[i].duration - remaining[i]))

    def schedule_heap(now: float) -> None:
        nonlocal preemptions
        while queue:
            _, i = queue[0]
            alloc = nodes.choose(gpus[i], placement)
            if alloc is None and policy == "priority":
                alloc = preempt_for(i, now)
            if alloc is None:
                return
            heapq.heappop(queue)
            launch(i, now, alloc)

    def preempt_for(i: int, now: float):
        nonlocal preemptions
        victims = sorted((r for r in alloc_of if prio[r] < prio[i]),
                         key=lambda r: (prio[r], -seg_start[r], -r))
        trial = nodes.copy()
        chosen = []
        for r in victims:
            trial.give(alloc_of[r])
            chosen.append(r)
            if trial.fits(gpus[i]):
                break
        else:
            return None
        for r in chosen:
            alloc = alloc_of.pop(r)
            nodes.give(alloc)
            running_est.pop(r, None)
            segments.append(Segment(r, seg_start[r], now, alloc))
            remaining[r] -= now - seg_start[r]
            remaining[r] += overhead
            token[r] += 1
            preemptions += 1
            heapq.heappush(queue, (key(r), r))
        return nodes.choose(gpus[i], placement)

    def max_fit() -> int:
        """The most GPUs one job could get right now."""
        whole = len(nodes.by_free[nodes.gpn])
        if whole > 1:
            return whole * nodes.gpn
        for f in range(nodes.gpn, 0, -1):
            if nodes.by_free[f]:
                return f
        return 0

    def schedule_easy(now: float) -> None:
        """FCFS start from the head; then reserve the head's shadow time and backfill."""
        nonlocal fifo
        k = 0
        while k < len(fifo):                         # FCFS part
            alloc = nodes.choose(gpus[fifo[k]], placement)
            if alloc is None:
                break
            launch(fifo[k], now, alloc)
            k += 1
        fifo = fifo[k:]
        if not fifo:
            return
        head = fifo[0]
        shadow, at_shadow = shadow_of(head)
        reservations.setdefault(head, shadow)
        limit = max_fit()
        if limit == 0 or len(fifo) == 1:
            return
        # necessary: fits now, and ends before the shadow or fits beside the head then
        spare = at_shadow.total_free - gpus[head]
        horizon = shadow - now
        cand = [i for i in fifo[1:] if gpus[i] <= limit and
                (est[i] <= horizon or gpus[i] <= spare)]
        if not cand:
            return
        started: set = set()
        todo = cand
        while todo:                   # passes until none starts: on nodes, a start can
            again = []                # move where an earlier-rejected job would be placed
            for i in todo:
                g = gpus[i]
                if g > nodes.total_free:
                    again.append(i)
                    continue
                alloc = nodes.choose(g, placement)
                if alloc is None:
                    again.append(i)
                    continue
                if now + est[i] <= shadow:
                    launch(i, now, alloc)
                    started.add(i)
                    continue
                at_shadow.take(alloc)
                if at_shadow.fits(gpus[head]):
                    launch(i, now, alloc)
                    started.add(i)
                else:
                    at_shadow.give(alloc)
                    again.append(i)
            if len(again) == len(todo) or nodes.total_free == 0 or nodes.gpn == \
                    cluster.total_gpus:
                break
            lim, spare = max_fit(), at_shadow.total_free - gpus[head]
            todo = [i for i in fifo[1:] if i not in started and gpus[i] <= lim and
                    (now + est[i] <= shadow or gpus[i] <= spare)]
        if started:
            fifo = [i for i in fifo if i not in started]

    def shadow_of(head: int):
        """Earliest time the head fits if running jobs end at their estimates, and the
        free state then (on a plain list of free GPUs per node: cheaper than _Nodes)."""
        free = list(nodes.free)
        total = nodes.total_free
        g, gpn = gpus[head], nodes.gpn
        for t, r in sorted((t, r) for r, t in running_est.items()):
            for node, x in alloc_of[r]:
                free[node] += x
                total += x
            if total >= g and ((g <= gpn and max(free) >= g) or
                               (g > gpn and free.count(gpn) * gpn >= g)):
                return t, _Nodes.from_free(free, gpn)
        raise AssertionError("the head job fits on an empty cluster")   # pragma: no cover

    a = 0
    while a < n or done_heap or queue or fifo:
        t_arr = arrival[order[a]] if a < n else np.inf
        t_done = done_heap[0][0] if done_heap else np.inf
        now = min(t_arr, t_done)
        if now == np.inf:
            raise AssertionError("jobs left in the queue with nothing running")  # pragma: no cover
        while done_heap and done_heap[0][0] <= now:
            t, _, i, tok = heapq.heappop(done_heap)
            if tok != token[i]:
                continue
            alloc = alloc_of.pop(i)
            nodes.give(alloc)
            running_est.pop(i, None)
            end[i] = t
            remaining[i] = 0.0
            segments.append(Segment(i, seg_start[i], t, alloc))
        while a < n and arrival[order[a]] <= now:
            i = order[a]
            if policy == "easy":
                fifo.append(i)
            else:
                heapq.heappush(queue, (key(i), i))
            a += 1
        if policy == "easy":
            schedule_easy(now)
        else:
            schedule_heap(now)
    segments.sort(key=lambda s: (s.start, s.job))
    return ScheduleResult(policy, cluster, placement, list(jobs), np.array(start, float),
                          np.array(end, float), segments, preemptions, reservations)


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
