"""Jobs of a GPU cluster: a record, a seeded generator and a CSV trace loader.

A job asks for ``gpus`` GPUs for ``duration`` seconds from its ``arrival`` on; it runs only
when all its GPUs are free at once (gang scheduling). ``estimate`` is the run time the user
declared (what SJF and backfilling see); it defaults to the true duration and may be larger
(users over-estimate: Mu'alem & Feitelson, IEEE TPDS 12(6), 2001, §5), never smaller
(a real scheduler kills a job at its declared limit).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from labkit import validate as v

#: GPU counts of the generator and their default weights: most deep-learning jobs ask for
#: one GPU, a few ask for many (the shape reported for Microsoft's Philly cluster by Jeon
#: et al., USENIX ATC 2019, §2; the weights here are illustrative, not theirs).
GPU_SIZES = (1, 2, 4, 8, 16, 32)
GPU_WEIGHTS = (0.50, 0.15, 0.15, 0.12, 0.05, 0.03)


@dataclass(frozen=True)
class Job:
    """One job: ``gpus`` GPUs for ``duration`` s from ``arrival`` on (higher ``priority``
    wins under the priority policy)."""
    id: int
    arrival: float
    gpus: int
    duration: float
    priority: int = 0
    estimate: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "id", v.integer("id", self.id, low=0))
        object.__setattr__(self, "arrival", v.nonnegative("arrival", self.arrival))
        object.__setattr__(self, "gpus", v.integer("gpus", self.gpus, low=1))
        object.__setattr__(self, "duration", v.positive("duration", self.duration))
        object.__setattr__(self, "priority", v.integer("priority", self.priority))
        est = self.duration if self.estimate is None else v.positive("estimate", self.estimate)
        if est < self.duration:
            raise ValueError(f"estimate must be >= duration ({self.duration!r}) for job "
                             f"{self.id}, got {est!r}")
        object.__setattr__(self, "estimate", est)

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.duration


def generate_jobs(n: int, *, total_gpus: int = 64, load: float = 0.8, seed: int = 0,
                  median_duration: float = 600.0, sigma: float = 1.5, max_gpus: int | None = None,
                  priorities: int = 3, overestimate: float = 1.0) -> list[Job]:
    """``n`` jobs with Poisson arrivals tuned so the offered load is ``load``.

    GPU counts come from :data:`GPU_SIZES` (capped at ``max_gpus``, default ``total_gpus``)
    with :data:`GPU_WEIGHTS`; durations are log-normal (median ``median_duration`` s, log
    standard deviation ``sigma``: heavy-tailed, as job durations are); priorities are
    uniform in 0..``priorities``-1; ``estimate = duration × U(1, overestimate)``. The arrival
    rate is λ = load · total_gpus / E[gpus · duration], so that the GPU-seconds asked for per
    second are ``load`` × the cluster (offered load, Kleinrock, *Queueing Systems* I, 1975).
    """
    n = v.integer("n", n, low=1)
    total_gpus = v.integer("total_gpus", total_gpus, low=1)
    load = v.number("load", load, low=0, low_open=True, high=10)
    seed = v.integer("seed", seed, low=0)
    median_duration = v.positive("median_duration", median_duration)
    sigma = v.nonnegative("sigma", sigma)
    max_gpus = total_gpus if max_gpus is None else v.integer("max_gpus", max_gpus, low=1,
                                                             high=total_gpus)
    priorities = v.integer("priorities", priorities, low=1)
    overestimate = v.number("overestimate", overestimate, low=1)
    sizes = np.array([s for s in GPU_SIZES if s <= max_gpus])
    w = np.array(GPU_WEIGHTS[:len(sizes)], float)
    w /= w.sum()
    rng = np.random.default_rng(seed)
    gpus = rng.choice(sizes, size=n, p=w)
    dur = median_duration * np.exp(sigma * rng.standard_normal(n))
    mean_work = float(np.dot(sizes, w)) * median_duration * math.exp(sigma ** 2 / 2)
    rate = load * total_gpus / mean_work
    arrival = np.cumsum(rng.exponential(1 / rate, size=n))
    arrival -= arrival[0]
    prio = rng.integers(0, priorities, size=n)
    est = dur * rng.uniform(1.0, overestimate, size=n)
    return [Job(i, float(arrival[i]), int(gpus[i]), float(dur[i]), int(prio[i]), float(est[i]))
            for i in range(n)]


def offered_load(jobs: Iterable[Job], total_gpus: int) -> float:
    """The load a workload really offers: the GPU-seconds its jobs ask for over the
    GPU-seconds the cluster has while they arrive, Σ gpus·duration / (total_gpus × (last
    arrival − first arrival)) (offered load: Kleinrock, *Queueing Systems* I, 1975, §2.1).
    A sample drawn for ``load`` scatters around it (random sizes, heavy-tailed durations).
    Over a whole schedule, utilisation = this × arrival span / makespan: what it loses
    beyond the offered load is the drain after the last arrival."""
    jobs = list(jobs)
    if not jobs or not all(isinstance(j, Job) for j in jobs):
        raise TypeError("jobs must be a non-empty sequence of Job")
    total_gpus = v.integer("total_gpus", total_gpus, low=1)
    arrivals = [j.arrival for j in jobs]
    span = max(arrivals) - min(arrivals)
    if span <= 0:
        raise ValueError("jobs must arrive over a time span > 0 to offer a load (they all "
                         f"arrive at {arrivals[0]!r})")
    return sum(j.gpu_seconds for j in jobs) / (total_gpus * span)


REQUIRED = ("arrival", "gpus", "duration")
OPTIONAL = ("id", "priority", "estimate")


def _field(row_no: int, name: str, text: str, kind: str):
    where = f"row {row_no}, field {name!r}"
    text = (text or "").strip()
    if text == "":
        raise ValueError(f"{where}: empty; it must be {kind}")
    try:
        val = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number; it must be {kind}") from None
    if not math.isfinite(val):
        raise ValueError(f"{where}: {text!r}; it must be {kind}")
    if "integer" in kind and val != int(val):
        raise ValueError(f"{where}: {text!r} is not an integer; it must be {kind}")
    return val


def load_trace(source: str | Path | Iterable[str]) -> list[Job]:
    """Jobs from a CSV trace with a header row.

    Columns ``arrival`` (s, >= 0), ``gpus`` (integer >= 1) and ``duration`` (s, > 0) are
    required; ``id`` (integer >= 0, default the row index), ``priority`` (integer, default 0)
    and ``estimate`` (s, >= duration) are optional; other columns are ignored. ``source`` is
    a path or an iterable of lines. A bad row raises ``ValueError`` naming the row (1 = the
    first row after the header) and the field.
    """
    if isinstance(source, (str, Path)) and "\n" not in str(source):
        text = Path(source).read_text(encoding="utf-8")
        lines: Iterable[str] = io.StringIO(text)
    elif isinstance(source, str):
        lines = io.StringIO(source)
    else:
        lines = source
    reader = csv.DictReader(lines)
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"trace header {header} lacks the column(s) {missing}; required: "
                         f"{list(REQUIRED)}, optional: {list(OPTIONAL)}")
    reader.fieldnames = header
    jobs, seen = [], set()
    for k, row in enumerate(reader, start=1):
        if None in row:
            raise ValueError(f"row {k}: more fields than the header's {len(header)}")
        arrival = _field(k, "arrival", row["arrival"], "a number >= 0")
        gpus = _field(k, "gpus", row["gpus"], "an integer >= 1")
        duration = _field(k, "duration", row["duration"], "a number > 0")
        if arrival < 0:
            raise ValueError(f"row {k}, field 'arrival': {row['arrival']!r} is negative; it "
                             f"must be a number >= 0")
        if gpus < 1:
            raise ValueError(f"row {k}, field 'gpus': {row['gpus']!r}; it must be an "
                             f"integer >= 1")
        if duration <= 0:
            raise ValueError(f"row {k}, field 'duration': {row['duration']!r}; it must be a "
                             f"number > 0")
        jid = k - 1
        if "id" in header and (row["id"] or "").strip():
            jid = int(_field(k, "id", row["id"], "an integer >= 0"))
            if jid < 0:
                raise ValueError(f"row {k}, field 'id': {row['id']!r}; it must be an "
                                 f"integer >= 0")
        if jid in seen:
            raise ValueError(f"row {k}, field 'id': {jid} is used by an earlier row")
        seen.add(jid)
        prio = 0
        if "priority" in header and (row["priority"] or "").strip():
            prio = int(_field(k, "priority", row["priority"], "an integer"))
        est = None
        if "estimate" in header and (row["estimate"] or "").strip():
            est = _field(k, "estimate", row["estimate"], "a number >= duration")
            if est < duration:
                raise ValueError(f"row {k}, field 'estimate': {row['estimate']!r} is less "
                                 f"than the duration {row['duration']!r}; it must be a "
                                 f"number >= duration")
        jobs.append(Job(jid, arrival, int(gpus), duration, prio, est))
    if not jobs:
        raise ValueError("the trace has a header but no rows")
    return jobs


def to_csv(jobs: Iterable[Job]) -> str:
    """The CSV text :func:`load_trace` reads back (round trip)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", "arrival", "gpus", "duration", "priority", "estimate"])
    for j in jobs:
        w.writerow([j.id, repr(j.arrival), j.gpus, repr(j.duration), j.priority,
                    repr(j.estimate)])
    return out.getvalue()
