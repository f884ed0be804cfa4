"""Energy of a schedule: power × time, per job and per policy.

Power model (stated, simple, linear in the GPUs busy; Barroso & Hölzle, "The case for
energy-proportional computing", IEEE Computer 40(12), 2007, on why idle power matters),
every number from one GPU:

* a GPU running a job draws ``busy_fraction`` × its TDP (thermal design power, the board's
  maximum, from that GPU's data sheet in :data:`labkit.hardware.GPUS`; 1.0 by default, an
  upper bound: training kernels run near the limit);
* an idle GPU (powered, nothing scheduled) draws ``idle_fraction`` × the same TDP. No data
  sheet gives an idle power — NVIDIA's V100, A100, H100 and H200 sheets state only the
  maximum — so ``idle_fraction`` has no default: measure the GPU you model (``nvidia-smi
  --query-gpu=power.draw,power.limit --format=csv`` with nothing running on it) and pass
  it. Host CPUs, memory, network and cooling (PUE) are left out.

Energy of a job = its GPUs × the time it ran (every segment, if preempted) × busy power;
the cluster's energy over the schedule adds the idle GPU-seconds × idle power, from the
first arrival to the last end.
A policy that finishes sooner (higher utilisation) wastes less idle energy even when every
job's own energy is the same.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as v
from labkit.cluster.scheduler import ScheduleResult
from labkit.hardware import GPUS, MEASURED_POWER, gpu as gpu_sheet

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class PowerModel:
    """Busy and idle power of one GPU model ``gpu`` (a key of :data:`labkit.hardware.GPUS`),
    as fractions of its TDP; ``idle_fraction`` is required (no data sheet gives it)."""
    gpu: str
    idle_fraction: float
    busy_fraction: float = 1.0

    def __post_init__(self):
        v.one_of("gpu", self.gpu, tuple(GPUS))
        v.fraction("idle_fraction", self.idle_fraction)
        v.fraction("busy_fraction", self.busy_fraction)
        if self.idle_fraction > self.busy_fraction:
            raise ValueError(f"idle_fraction ({self.idle_fraction}) must be <= busy_fraction "
                             f"({self.busy_fraction})")

    @classmethod
    def measured(cls, gpu: str) -> "PowerModel":
        """Idle power from the reading recorded for ``gpu`` in
        :data:`labkit.hardware.MEASURED_POWER` (idle watts / that GPU's TDP)."""
        m = MEASURED_POWER.get(v.one_of("gpu", gpu, tuple(GPUS)))
        if m is None:
            raise ValueError(f"no power reading is recorded for gpu={gpu!r} (only for "
                             f"{', '.join(MEASURED_POWER)}): measure it with nvidia-smi "
                             f"and pass idle_fraction")
        return cls(gpu, m.idle_watts / gpu_sheet(gpu).tdp_watts)

    @property
    def tdp(self) -> float:
        return gpu_sheet(self.gpu).tdp_watts

    @property
    def busy_watts(self) -> float:
        return self.busy_fraction * self.tdp

    @property
    def idle_watts(self) -> float:
        return self.idle_fraction * self.tdp


@dataclass(frozen=True)
class EnergyReport:
    policy: str
    job_joules: np.ndarray       # per job: GPU-seconds run × busy power
    busy_joules: float
    idle_joules: float
    makespan: float

    @property
    def total_joules(self) -> float:
        return self.busy_joules + self.idle_joules

    @property
    def total_kwh(self) -> float:
        return self.total_joules / J_PER_KWH

    @property
    def idle_share(self) -> float:
        return self.idle_joules / self.total_joules


def schedule_energy(result: ScheduleResult, power: PowerModel) -> EnergyReport:
    """Energy of every job and of the whole cluster over ``result``'s schedule."""
    if not isinstance(result, ScheduleResult):
        raise TypeError(f"result must be a ScheduleResult, got {type(result).__name__}")
    if not isinstance(power, PowerModel):
        raise TypeError(f"power must be a PowerModel, got {type(power).__name__}")
    gpu_s = np.zeros(len(result.jobs))
    for seg in result.segments:           # preempted jobs: every segment they ran
        gpu_s[seg.job] += (seg.end - seg.start) * sum(g for _, g in seg.alloc)
    busy = float(gpu_s.sum())
    span = result.makespan
    idle = result.cluster.total_gpus * span - busy
    return EnergyReport(result.policy, gpu_s * power.busy_watts, busy * power.busy_watts,
                        max(idle, 0.0) * power.idle_watts, span)
