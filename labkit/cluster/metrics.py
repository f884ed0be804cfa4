"""What a schedule achieved: completion time, waiting, slowdown, utilisation, fairness.

For job *j* with arrival a, first start s, end e and run time d:

* job completion time (JCT) = e − a;
* queueing delay = JCT − d (all the time it was not running, preemptions included);
* slowdown = JCT / d; *bounded* slowdown = max(1, JCT / max(d, τ)) with τ = 10 s, so that
  very short jobs do not dominate the mean (Feitelson, Rudolph, Schwiegelshohn, Sevcik &
  Wong, "Theory and practice in parallel job scheduling", JSSPP 1997, §4);
* utilisation = GPU-seconds of work done / (GPUs × (last end − first arrival));
* fairness: Jain's index J(x) = (Σ xᵢ)² / (n Σ xᵢ²) of the slowdowns (Jain, Chiu & Hawe,
  "A quantitative measure of fairness and discrimination for resource allocation in shared
  computer systems", DEC TR-301, 1984): 1 when every job is slowed equally, 1/n when one
  job takes all the slowdown.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as v
from labkit.cluster.scheduler import ScheduleResult, busy_gpus

BOUND_S = 10.0


def jain_index(x) -> float:
    """Jain's fairness index (Σx)² / (n Σx²) of non-negative values ``x``."""
    x = v.array("x", x, ndim=1, finite=True)
    if np.any(x < 0):
        raise ValueError("x must be non-negative")
    s2 = float(np.sum(x * x))
    if s2 == 0:
        return 1.0
    return float(np.sum(x) ** 2 / (x.size * s2))


@dataclass(frozen=True)
class Metrics:
    policy: str
    jobs: int
    mean_jct: float
    p95_jct: float
    mean_queueing: float
    max_queueing: float
    mean_slowdown: float          # bounded slowdown, τ = 10 s
    utilisation: float
    fairness: float               # Jain's index of the bounded slowdowns
    makespan: float
    preemptions: int

    def row(self) -> str:
        return (f"{self.policy:9s} mean JCT {self.mean_jct / 3600:7.2f} h  p95 "
                f"{self.p95_jct / 3600:7.2f} h  mean wait {self.mean_queueing / 3600:7.2f} h  "
                f"slowdown {self.mean_slowdown:8.2f}  util {self.utilisation:5.1%}  "
                f"Jain {self.fairness:.3f}")


def jct(result: ScheduleResult) -> np.ndarray:
    return result.end - result.arrival


def queueing_delay(result: ScheduleResult) -> np.ndarray:
    return jct(result) - result.duration


def bounded_slowdown(result: ScheduleResult, tau: float = BOUND_S) -> np.ndarray:
    tau = v.positive("tau", tau)
    return np.maximum(1.0, jct(result) / np.maximum(result.duration, tau))


def utilisation(result: ScheduleResult) -> float:
    work = float(np.sum(result.gpus * result.duration))
    return work / (result.cluster.total_gpus * result.makespan)


def summarize(result: ScheduleResult) -> Metrics:
    """All the metrics of one schedule."""
    if not isinstance(result, ScheduleResult):
        raise TypeError(f"result must be a ScheduleResult, got {type(result).__name__}")
    j = jct(result)
    q = queueing_delay(result)
    sd = bounded_slowdown(result)
    return Metrics(result.policy, len(result.jobs), float(j.mean()), float(np.percentile(j, 95)),
                   float(q.mean()), float(q.max()), float(sd.mean()), utilisation(result),
                   jain_index(sd), result.makespan, result.preemptions)


def utilisation_curve(result: ScheduleResult):
    """(times, fraction of GPUs busy from each time on)."""
    t, busy = busy_gpus(result)
    return t, busy / result.cluster.total_gpus
