"""Pipeline-parallel schedules simulated by dependency: GPipe, 1F1B and interleaved 1F1B.

A model cut into ``p`` stages runs ``m`` micro-batches per step. Each stage has a fixed
*order* of tasks (the schedule); a task starts when its stage is free and its input is
ready (forward of micro-batch j on virtual stage k needs forward j on k-1; backward j on k
needs backward j on k+1, and the last virtual stage's backward needs its own forward).
Nothing in the result is a closed form: ``makespan``, bubbles and stashes are read off the
simulated tasks, so tests can compare them with the papers' formulas.

Schedules (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC'21, §2.2):

* ``gpipe`` (Huang et al. 2019): all m forwards, then all m backwards (§2.2.1, Fig. 3).
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021): stage s runs p-s-1 warm-up forwards,
  then alternates one forward and one backward, then drains (Fig. 4 top). Same bubble as
  GPipe, but at most p-s micro-batches' activations are stashed instead of m.
* ``interleaved`` (§2.2.2, Fig. 4 bottom): each device holds v model *chunks* (virtual
  stages; chunk c of device s is virtual stage c·p + s), each doing 1/v of the device's work.
  Order as Megatron-LM's ``forward_backward_pipelining_with_interleaving``: forward k of the
  device runs chunk (k // p) mod v of micro-batch (k // pv)·p + k mod p; warm-up
  (p-s-1)·2 + (v-1)·p forwards; backward k runs chunk v-1-((k // p) mod v). Megatron needs
  m to be a multiple of p.

With t_f and t_b the forward and backward time of one micro-batch on one stage, the paper
defines the *bubble fraction* as bubble time over ideal time:
(p-1)(t_f+t_b) / (m(t_f+t_b)) = (p-1)/m, and (p-1)/(v·m) interleaved. ``idle_fraction``
is the share of all device-time spent idle: bubble / (ideal + bubble).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from labkit import validate as V

KINDS = ("gpipe", "1f1b", "interleaved")


class Task(NamedTuple):
    """One forward ("F") or backward ("B") pass of one micro-batch on one chunk of a stage."""
    stage: int
    chunk: int
    microbatch: int
    kind: str
    start: float
    end: float


@dataclass(frozen=True)
class Schedule:
    """A simulated pipeline step (see the module docstring for the definitions)."""
    kind: str
    stages: int
    microbatches: int
    chunks: int
    t_forward: float
    t_backward: float
    tasks: tuple[Task, ...]
    makespan: float
    peak_stash: tuple[int, ...]       # per stage: most (chunk, micro-batch) forwards in flight

    @property
    def ideal_time(self) -> float:
        """m(t_f + t_b): a device's busy time, the step time with no bubble."""
        return sum(t.end - t.start for t in self.tasks) / self.stages

    @property
    def bubble_time(self) -> float:
        return self.makespan - self.ideal_time

    @property
    def bubble_fraction(self) -> float:
        """Bubble time over ideal time (Narayanan et al. SC'21 §2.2), from the simulation."""
        return self.bubble_time / self.ideal_time

    @property
    def idle_fraction(self) -> float:
        """Share of device-time idle: 1 - busy / (p · makespan)."""
        busy = sum(t.end - t.start for t in self.tasks)
        return 1.0 - busy / (self.stages * self.makespan)

    @property
    def peak_activations(self) -> tuple[float, ...]:
        """Peak stash in micro-batches of a whole stage (a chunk holds 1/v of its layers)."""
        return tuple(s / self.chunks for s in self.peak_stash)

    def stage_tasks(self, stage: int) -> list[Task]:
        return sorted((t for t in self.tasks if t.stage == stage), key=lambda t: t.start)

    def order(self, stage: int) -> list[tuple[str, int, int]]:
        """(kind, micro-batch, chunk) of ``stage``'s tasks in the order they run."""
        return [(t.kind, t.microbatch, t.chunk) for t in self.stage_tasks(stage)]


def bubble_formula(kind: str, stages: int, microbatches: int, chunks: int = 1) -> float:
    """The paper's closed form (SC'21 §2.2): (p-1)/m, or (p-1)/(v·m) interleaved."""
    kind = V.one_of("kind", kind, KINDS)
    p = V.integer("stages", stages, low=1)
    m = V.integer("microbatches", microbatches, low=1)
    v = V.integer("chunks", chunks, low=1)
    v = v if kind == "interleaved" else 1
    return (p - 1) / (v * m)


def peak_stash(kind: str, stages: int, microbatches: int, stage: int = 0,
               chunks: int = 1) -> int:
    """Most forwards stage ``stage`` holds at once (chunk-forwards when interleaved), read off
    its order (:func:`stage_order`) without simulating: GPipe m; 1F1B min(p - s, m) (its
    p - s - 1 warm-up forwards, capped at m, and one more); interleaved
    min((p - s - 1)·2 + (v - 1)·p + 1, v·m) (Megatron-LM's warm-up, plus one). Each
    interleaved chunk-forward holds 1/v of a stage's layers."""
    kind, p, m, v, _, _ = _check(kind, stages, microbatches, chunks, 1.0, 1.0)
    s = V.integer("stage", stage, low=0, high=p - 1)
    if kind == "gpipe":
        return m
    if kind == "1f1b":
        return min(p - s, m)
    return min((p - s - 1) * 2 + (v - 1) * p + 1, v * m)


def stage_order(kind: str, stages: int, microbatches: int, stage: int,
                chunks: int = 1) -> list[tuple[str, int, int]]:
    """The order stage ``stage`` runs its tasks in: a list of (kind, micro-batch, chunk)."""
    kind, p, m, v, _, _ = _check(kind, stages, microbatches, chunks, 1.0, 1.0)
    return _stage_order(kind, p, m, V.integer("stage", stage, low=0, high=p - 1), v)


def _stage_order(kind: str, p: int, m: int, s: int, v: int) -> list[tuple[str, int, int]]:
    if kind == "gpipe":
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    if kind == "1f1b":
        warm = min(p - s - 1, m)
        out = [("F", j, 0) for j in range(warm)]
        f, b = warm, 0
        while f < m:
            out.append(("F", f, 0))
            f += 1
            out.append(("B", b, 0))
            b += 1
        out += [("B", j, 0) for j in range(b, m)]
        return out
    # interleaved (Megatron-LM schedules.py, forward_backward_pipelining_with_interleaving)
    total = m * v

    def fwd(k):
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k):
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warm = min((p - s - 1) * 2 + (v - 1) * p, total)
    out = [fwd(k) for k in range(warm)]
    for i in range(total - warm):
        out.append(fwd(warm + i))
        out.append(bwd(i))
    out += [bwd(k) for k in range(total - warm, total)]
    return out


def _check(kind, stages, microbatches, chunks, t_forward, t_backward):
    kind = V.one_of("kind", kind, KINDS)
    p = V.integer("stages", stages, low=1)
    m = V.integer("microbatches", microbatches, low=1)
    v = V.integer("chunks", chunks, low=1)
    tf = V.positive("t_forward", t_forward)
    tb = V.positive("t_backward", t_backward)
    if kind == "interleaved":
        if v < 2:
            raise ValueError(f"chunks must be >= 2 for the interleaved schedule (virtual "
                             f"stages per device), got {v}")
        if m % p:
            raise ValueError(f"microbatches={m} must be a multiple of stages={p} for the "
                             f"interleaved schedule (as Megatron-LM requires)")
    elif v != 1:
        raise ValueError(f"chunks must be 1 for {kind!r} (only 'interleaved' splits a stage "
                         f"into chunks), got {v}")
    return kind, p, m, v, tf, tb


def pipeline_schedule(kind: str, stages: int, microbatches: int, chunks: int = 1,
                      t_forward: float = 1.0, t_backward: float = 2.0) -> Schedule:
    """Simulate one training step of a ``stages``-deep pipeline by dependency.

    ``t_forward``/``t_backward``: time of one micro-batch's forward/backward on one whole
    stage; an interleaved chunk takes 1/chunks of it. Raises ValueError naming the
    parameter for 0 stages, an unknown kind, chunks != 1 outside 'interleaved', or
    microbatches not a multiple of stages for 'interleaved'.
    """
    kind, p, m, v, tf, tb = _check(kind, stages, microbatches, chunks, t_forward, t_backward)
    tfc, tbc = tf / v, tb / v
    last = p * v - 1
    orders = [_stage_order(kind, p, m, s, v) for s in range(p)]
    # finish[(F/B)][virtual stage][micro-batch]
    fdone = [[None] * m for _ in range(p * v)]
    bdone = [[None] * m for _ in range(p * v)]
    pos = [0] * p
    free = [0.0] * p
    tasks: list[Task] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            order, i, t_free = orders[s], pos[s], free[s]
            n = len(order)
            while i < n:
                kd, j, c = order[i]
                vs = c * p + s
                if kd == "F":
                    ready = 0.0 if vs == 0 else fdone[vs - 1][j]
                    if ready is None:
                        break
                    start = t_free if t_free > ready else ready
                    end = start + tfc
                    fdone[vs][j] = end
                else:
                    ready = fdone[vs][j] if vs == last else bdone[vs + 1][j]
                    if ready is None:
                        break
                    start = t_free if t_free > ready else ready
                    end = start + tbc
                    bdone[vs][j] = end
                tasks.append(Task(s, c, j, kd, start, end))
                t_free = end
                i += 1
            if i != pos[s]:
                remaining -= i - pos[s]
                pos[s], free[s] = i, t_free
                progressed = True
        if not progressed:     # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"schedule {kind!r} deadlocked at positions {pos}")
    stash = []
    for s in range(p):
        cur = peak = 0
        for kd, _, _ in orders[s]:
            cur += 1 if kd == "F" else -1
            peak = max(peak, cur)
        stash.append(peak)
    return Schedule(kind, p, m, v, tf, tb, tuple(tasks), max(free), tuple(stash))


@dataclass(frozen=True)
class ScheduleComparison:
    """GPipe, 1F1B and interleaved 1F1B simulated on the same (p, m, v), side by side.

    ``bubble``: simulated bubble fraction per kind; ``stash``: stage 0's peak number of
    micro-batches whose activations are stashed (in whole-stage units; an interleaved chunk
    counts 1/v); ``formula``: Narayanan et al. SC'21 §2.2.2's interleaved bubble (p-1)/(v·m).
    """
    stages: int
    microbatches: int
    chunks: int
    bubble: dict
    stash: dict
    formula: float

    @property
    def least_stash(self) -> str:
        """The kind with the smallest stage-0 stash (first of equals, in KINDS order)."""
        return min(self.stash, key=self.stash.get)


def compare_schedules(stages: int, microbatches: int, chunks: int = 2) -> ScheduleComparison:
    """Simulate the three KINDS (``chunks`` applies to 'interleaved' only, the others get 1)."""
    runs = {k: pipeline_schedule(k, stages, microbatches, chunks if k == "interleaved" else 1)
            for k in KINDS}
    return ScheduleComparison(stages, microbatches, chunks,
                              {k: r.bubble_fraction for k, r in runs.items()},
                              {k: r.peak_activations[0] for k, r in runs.items()},
                              bubble_formula("interleaved", stages, microbatches, chunks))
