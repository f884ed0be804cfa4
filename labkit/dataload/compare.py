"""Chapter 07's comparisons: measured DataLoader runs against the bound and the simulator,
and the diagnosis of seed 000's exercise 8 — pure functions of measured numbers and
configurations, with their formatters.

* :func:`compare_workers` — per worker count: measured samples/s, the simulator's
  (:func:`labkit.dataload.sim.simulate`), the bound ``B · steady_throughput`` of
  :mod:`labkit.dataload.model`, and optionally a second (shared-machine) simulation.
* :func:`diagnose` — the numbers that say which resource binds: the wait share without
  workers, what the step alone, loading alone on one core and all the cores allow, the best
  measured run and the bottleneck of :func:`labkit.dataload.model.bottleneck` there.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit import validate as V
from labkit.dataload.model import bottleneck, pipeline_bounds, steady_throughput
from labkit.dataload.sim import PipelineConfig, simulate


@dataclass(frozen=True)
class WorkerRow:
    workers: int
    measured: float          # samples/s
    simulated: float         # samples/s, the calibrated simulator
    bound: float             # samples/s, B · steady_throughput(L, C, W, c)
    shared: float | None     # samples/s, the shared-machine simulator (None if not given)

    @property
    def ratio(self) -> float:
        """measured / simulated."""
        return self.measured / self.simulated

    @property
    def shared_ratio(self) -> float | None:
        return None if self.shared is None else self.measured / self.shared


def compare_workers(measured, config: PipelineConfig,
                    shared: PipelineConfig | None = None) -> list[WorkerRow]:
    """Row W (W = 0, 1, …, len(measured) − 1) compares ``measured[W]`` samples/s with
    ``config`` simulated at W workers, the bound B / max(C, L/W, (L + C)/c) (B/(L + C) at
    W = 0) and, when given, ``shared`` simulated at W workers."""
    rates = [V.positive(f"measured[{w}]", m) for w, m in enumerate(measured)]
    if not rates:
        raise ValueError("measured must hold one rate per worker count, from 0 workers")
    rows = []
    for w, m in enumerate(rates):
        sim_rate = simulate(config, num_workers=w).samples_per_s
        bound = config.batch_size * steady_throughput(config.load_cpu_s, config.compute_s, w,
                                                      config.cores)
        other = None if shared is None else float(simulate(shared, num_workers=w).samples_per_s)
        rows.append(WorkerRow(w, float(m), float(sim_rate), float(bound), other))
    return rows


def format_worker_rows(rows: list[WorkerRow]) -> str:
    return "\n".join(f"num_workers={r.workers}: measured {r.measured:7,.0f}  simulated "
                     f"{r.simulated:7,.0f}  bound {r.bound:7,.0f} samples/s   "
                     f"measured/simulated = {r.ratio:.2f}" for r in rows)


@dataclass(frozen=True)
class Diagnosis:
    wait_share_no_workers: float    # of the num_workers=0 run
    step_alone: float               # samples/s the step allows: B / C
    loading_one_core: float         # samples/s one loader allows: B / L
    cores_limit: float              # samples/s all cores allow: B·c / (L + C)
    best_workers: int               # the measured run with the most samples/s
    best_rate: float
    best_wait_share: float
    bottleneck: str                 # model.bottleneck at best_workers
    cores: int


def diagnose(runs: dict, config: PipelineConfig) -> Diagnosis:
    """Seed 000's exercise 8 on measured ``runs`` ({num_workers: LoaderRun}, with 0) and
    the ``config`` calibrated on them (its L = ``load_cpu_s``, C, c and B)."""
    if 0 not in runs:
        raise ValueError("runs must include the num_workers=0 run")
    L, C, c, B = config.load_cpu_s, config.compute_s, config.cores, config.batch_size
    one = pipeline_bounds(L, C, 1, c)
    best = max(runs, key=lambda w: runs[w].samples_per_s)
    return Diagnosis(
        wait_share_no_workers=runs[0].wait_fraction,
        step_alone=B / one["training step"],
        loading_one_core=B / one["loading (per worker)"],
        cores_limit=B / one["cores"],
        best_workers=best,
        best_rate=runs[best].samples_per_s,
        best_wait_share=runs[best].wait_fraction,
        bottleneck=bottleneck(L, C, best, c),
        cores=c)


def format_diagnosis(d: Diagnosis) -> str:
    return "\n".join([
        f"wait share with num_workers=0: {d.wait_share_no_workers:.0%}",
        f"step alone (no loading) allows {d.step_alone:,.0f} samples/s; loading alone on one "
        f"core {d.loading_one_core:,.0f} samples/s; both on {d.cores} cores at most "
        f"{d.cores_limit:,.0f} samples/s",
        f"best measured: num_workers={d.best_workers}, {d.best_rate:,.0f} samples/s, still "
        f"waiting {d.best_wait_share:.0%}",
        f"the binding resource per the bound: {d.bottleneck}"])
