"""Chapter 07's comparisons: measured DataLoader runs against the bound and the simulator,
and the diagnosis of seed 000's exercise 8 — pure functions of measured numbers and
configurations, with their formatters.

* :func:`compare_trials` — per worker count: the measured samples/s over trials, the
  simulator's prediction over the per-trial calibrations, the closed-form bound, and
  their ratio — each with its spread (median and min–max), so the agreement is stated
  with the measurement's own scatter. :func:`format_agreement` prints it.
* :func:`diagnose_experiments` — exercise 8 measured: the loader alone, the step alone
  (one cached batch) and the full pipeline, and which of them binds;
  :func:`bottleneck_verdict` the same rule on three timed loops' results ("data",
  "compute" or "both", exercise 7.5), :func:`verdicts_by_trial` trial by trial.
* :func:`cpu_breakdown` — a rate's two factors per run: the cores our processes got and
  the CPU a batch cost them; :func:`load_breakdown` — what the calibrated L is made of.
* :func:`compare_workers` and :func:`diagnose` — the same for one run per setting and
  one calibrated configuration.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from labkit import validate as V
from labkit.dataload.model import bottleneck, pipeline_bounds, steady_rate, steady_window
from labkit.dataload.sim import PipelineConfig, bound_rate, simulate, steady_config
from labkit.stats import Spread


# -------------------------------------------------------------------- with spreads
@dataclass(frozen=True)
class Agreement:
    workers: int
    measured: Spread         # samples/s, one per trial
    predicted: Spread        # samples/s, the simulator calibrated on each trial
    bound: Spread            # samples/s, the closed form (bound_rate) of each calibration
    ratio: Spread            # measured / predicted, trial by trial

    @property
    def agrees(self) -> bool:
        """The measured range and the predicted range overlap."""
        return self.measured.overlaps(self.predicted)

    @property
    def above_bound(self) -> bool:
        """The lowest measured rate is above the highest bound: the measurement (or the
        bound's inputs) cannot be right."""
        return self.measured.low > self.bound.high


def compare_trials(measured: dict, configs) -> list[Agreement]:
    """Row per worker count W of ``measured`` ({W: :class:`labkit.dataload.measure.Trials`
    or a sequence of samples/s}): the measured rates, each calibration of ``configs``
    simulated at W workers (long enough for a steady window,
    :func:`labkit.dataload.sim.steady_config`), their bounds, and measured / predicted
    paired by trial (trial k with configuration k, when there are as many; else the
    medians)."""
    configs = list(configs)
    if not configs or not all(isinstance(c, PipelineConfig) for c in configs):
        raise TypeError("configs must be a non-empty sequence of PipelineConfig")
    if not measured:
        raise ValueError("measured must hold at least one worker count")
    rows = []
    for w in sorted(measured):
        m = measured[w]
        rates = m.rate.values if hasattr(m, "rate") else tuple(
            V.positive(f"measured[{w}]", r) for r in m)
        pred = tuple(float(simulate(steady_config(c, int(w))).samples_per_s) for c in configs)
        bound = tuple(float(bound_rate(c, int(w))) for c in configs)
        if len(rates) == len(pred):
            ratio = tuple(a / b for a, b in zip(rates, pred))
        else:
            ratio = (Spread(rates).median / Spread(pred).median,)
        rows.append(Agreement(int(w), Spread(tuple(rates)), Spread(pred), Spread(bound),
                              Spread(ratio)))
    return rows


def format_agreement(rows: list[Agreement]) -> str:
    """One line per worker count: measured, predicted and bound (median and range over
    trials), measured / predicted with its range, and whether the ranges overlap."""
    out = []
    for r in V.instances("rows", rows, Agreement):
        flag = "ranges overlap" if r.agrees else "ranges apart"
        if r.above_bound:
            flag += ", MEASURED ABOVE THE BOUND"
        out.append(f"num_workers={r.workers}: measured {r.measured.format()}  predicted "
                   f"{r.predicted.format()}  bound {r.bound.format()} samples/s   "
                   f"measured/predicted {r.ratio.format('.2f')}  ({flag})")
    return "\n".join(out)


VERDICTS = ("data", "compute", "both")


def verdict_of_rates(loader: float, compute: float, pipeline: float,
                     threshold: float = 0.9) -> str:
    """Exercise 8's rule on three measured rates (samples/s): the slower of the loader
    alone and the step alone binds — ``"data"`` or ``"compute"`` — when the pipeline
    reaches ``threshold`` of its rate; below that the two slow each other down (on a CPU
    they share the cores): ``"both"``."""
    loader, compute, pipeline = (V.positive(n, v) for n, v in
                                 (("loader", loader), ("compute", compute),
                                  ("pipeline", pipeline)))
    threshold = V.fraction("threshold", threshold)
    slower, name = (loader, "data") if loader <= compute else (compute, "compute")
    return name if pipeline >= threshold * slower else "both"


def bottleneck_verdict(loader: dict, compute: dict, pipeline: dict,
                       threshold: float = 0.9) -> str:
    """Exercise 7.5: the verdict (:func:`verdict_of_rates`) of three timed runs, each a
    timed loop's result (:func:`labkit.dataload.measure.timed_loop`): the loader alone,
    the step alone on one cached batch, the full pipeline — by their ``samples_per_s``."""
    rates = []
    for name, run in (("loader", loader), ("compute", compute), ("pipeline", pipeline)):
        if not isinstance(run, dict) or "samples_per_s" not in run:
            raise TypeError(f"{name} must be a timed loop's result (a dict with "
                            f"samples_per_s), got {type(run).__name__}")
        rates.append(run["samples_per_s"])
    return verdict_of_rates(*rates, threshold=threshold)


def verdicts_by_trial(diagnose, loader, compute, pipeline) -> list[str]:
    """``diagnose(loader, compute, pipeline)`` (a function of three timed loops' results,
    the learner's or :func:`bottleneck_verdict`) on trial k of each of three
    :class:`labkit.dataload.measure.Trials`, for every k."""
    if not (len(loader) == len(compute) == len(pipeline)):
        raise ValueError("the three experiments must have as many trials each")
    return [diagnose(l_.result, c.result, p.result)
            for l_, c, p in zip(loader.runs, compute.runs, pipeline.runs)]


@dataclass(frozen=True)
class ExperimentDiagnosis:
    loader: Spread           # samples/s of the loader alone
    compute: Spread          # samples/s of the step alone (one cached batch)
    pipeline: Spread         # samples/s of the full pipeline
    num_workers: int

    @property
    def slower_alone(self) -> str:
        return "loading" if self.loader.median <= self.compute.median else "the training step"

    @property
    def of_slower(self) -> Spread:
        """Pipeline rate / the slower stage's rate alone, trial by trial (medians if the
        trial counts differ)."""
        slow = self.loader if self.slower_alone == "loading" else self.compute
        if len(slow.values) == len(self.pipeline.values):
            return Spread(tuple(p / s for p, s in zip(self.pipeline.values, slow.values)))
        return Spread((self.pipeline.median / slow.median,))

    def verdict(self, threshold: float = 0.9) -> str:
        """:func:`verdict_of_rates`'s rule, in words, on the median over trials of the
        pipeline's rate / the slower stage's rate alone."""
        threshold = V.fraction("threshold", threshold)
        if self.of_slower.median >= threshold:
            return f"{self.slower_alone} binds: the pipeline runs at its rate alone"
        return (f"loading and the step compete: together they reach "
                f"{self.of_slower.median:.0%} of the slower alone ({self.slower_alone})")


def diagnose_experiments(loader, compute, pipeline) -> ExperimentDiagnosis:
    """Seed 000's exercise 8 from three measured experiments (each a
    :class:`labkit.dataload.measure.Trials`, or a single run): the loader alone, the step
    alone on one cached batch, the full pipeline at the loader's worker count."""
    def spread(x):
        return x.rate if hasattr(x, "rate") else Spread((x.samples_per_s,))

    def workers(x):
        return (x.runs[0] if hasattr(x, "runs") else x).num_workers
    if workers(loader) != workers(pipeline):
        raise ValueError(f"the loader alone ran with {workers(loader)} workers, the pipeline "
                         f"with {workers(pipeline)}: compare the same loader")
    return ExperimentDiagnosis(spread(loader), spread(compute), spread(pipeline),
                               workers(pipeline))


def format_experiments(d: ExperimentDiagnosis) -> str:
    return "\n".join([
        f"loader alone (num_workers={d.num_workers}): {d.loader.format()} samples/s",
        f"training step alone (one cached batch): {d.compute.format()} samples/s",
        f"full pipeline (num_workers={d.num_workers}): {d.pipeline.format()} samples/s = "
        f"{d.of_slower.format('.0%')} of the slower stage alone",
        d.verdict()])


@dataclass(frozen=True)
class LoadBreakdown:
    load_s: float            # L: training thread's CPU in next() with num_workers=0
    decode_augment_s: float  # B × (decode + augment), measured apart
    item_overhead_s: float   # B × (dataset[i] − decode − augment)
    collate_s: float         # default_collate of a batch
    batch_size: int

    @property
    def rest_s(self) -> float:
        """What L holds beyond the parts (sampler, fetcher, the loop; may be negative:
        measurement scatter)."""
        return self.load_s - self.decode_augment_s - self.item_overhead_s - self.collate_s


def load_breakdown(run0, costs) -> LoadBreakdown:
    """What the calibrated L of a ``num_workers=0`` run is made of, from the stage costs
    measured apart (:func:`labkit.dataload.costs.measure_stage_costs`)."""
    if run0.num_workers != 0:
        raise ValueError("break down the L of a run with num_workers=0")
    B = run0.batch_size
    return LoadBreakdown(run0.load_cpu_s, B * (costs.decode_s + costs.augment_s),
                         B * costs.item_overhead_s, costs.collate_s, B)


def format_load_breakdown(b: LoadBreakdown) -> str:
    return (f"L = {b.load_s * 1e3:.2f} ms of CPU per batch: {b.batch_size} × (decode + augment) "
            f"{b.decode_augment_s * 1e3:.2f} ms + per-item overhead {b.item_overhead_s * 1e3:.2f} ms "
            f"+ collate {b.collate_s * 1e3:.2f} ms + rest {b.rest_s * 1e3:.2f} ms")


@dataclass(frozen=True)
class CpuRow:
    workers: int
    rate: Spread             # samples/s over the steady window
    our_cores: Spread        # cores our processes got (training + workers CPU / wall)
    cpu_per_batch: Spread    # CPU seconds of ours per batch
    step_cpu: Spread         # CPU seconds of a training step
    others_cores: Spread | None


def cpu_breakdown(measured: dict) -> list[CpuRow]:
    """Per worker count of ``measured`` ({W: Trials}): the two factors of a rate — the
    cores our processes got and the CPU a batch cost them (their ratio × B is the run's
    average rate) — with the step's CPU time and the other processes' cores. When a
    prediction misses, this says which factor moved."""
    rows = []
    for w in sorted(measured):
        runs = measured[w].runs
        others = [r.others_cores for r in runs if r.others_cores is not None]
        rows.append(CpuRow(int(w), measured[w].rate, Spread(tuple(r.our_cores for r in runs)),
                           Spread(tuple(r.cpu_per_batch_s for r in runs)),
                           Spread(tuple(r.step_cpu_mean_s for r in runs)),
                           Spread(tuple(others)) if others else None))
    return rows


def format_cpu_breakdown(rows: list[CpuRow]) -> str:
    out = []
    for r in V.instances("rows", rows, CpuRow):
        others = "" if r.others_cores is None else \
            f"; other processes {r.others_cores.format('.2f')} cores"
        out.append(f"num_workers={r.workers}: {r.rate.format()} samples/s; our processes got "
                   f"{r.our_cores.format('.2f')} cores and spent "
                   f"{(r.cpu_per_batch.median * 1e3):.1f} ms of CPU per batch (the step "
                   f"{r.step_cpu.median * 1e3:.1f} ms){others}")
    return "\n".join(out)


# ------------------------------------------------------------------ one run per setting
@dataclass(frozen=True)
class WorkerRow:
    workers: int
    measured: float          # samples/s
    simulated: float         # samples/s, the calibrated simulator
    bound: float             # samples/s, bound_rate of the configuration
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
    ``config`` simulated at W workers, its bound (:func:`labkit.dataload.sim.bound_rate`;
    B / max(C, L/W, (L + C)/c), B/(L + C) at W = 0, on a machine of its own) and, when
    given, ``shared`` simulated at W workers."""
    rates = [V.positive(f"measured[{w}]", m) for w, m in enumerate(measured)]
    if not rates:
        raise ValueError("measured must hold one rate per worker count, from 0 workers")
    rows = []
    for w, m in enumerate(rates):
        sim_rate = simulate(steady_config(config, w)).samples_per_s
        other = None if shared is None else float(simulate(steady_config(shared, w)).samples_per_s)
        rows.append(WorkerRow(w, float(m), float(sim_rate), float(bound_rate(config, w)), other))
    return rows


def format_worker_rows(rows: list[WorkerRow]) -> str:
    rows = V.instances("rows", rows, WorkerRow)
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


# -------------------------------------------------------------- the chapter's printouts
def format_stage_costs(costs, batch_size: int = 32) -> str:
    """The per-sample and per-batch CPU costs that
    :func:`labkit.dataload.costs.measure_stage_costs` measured."""
    B = V.integer("batch_size", batch_size, low=1)
    return (f"per sample (CPU time): decode {costs.decode_s * 1e6:.0f} µs, augment "
            f"{costs.augment_s * 1e6:.0f} µs, a whole dataset[i] {costs.item_s * 1e6:.0f} µs; "
            f"per {B}-sample batch: collate {costs.collate_s * 1e3:.2f} ms, load ≈ "
            f"{costs.batch_load_s(B) * 1e3:.1f} ms; training step {costs.compute_s * 1e3:.1f} ms "
            f"(one thread)")


def format_run(run) -> str:
    """One timed run (:class:`labkit.dataload.measure.LoaderRun`): its rate, waiting share,
    mean wait and step over the window, and whose loop timed it."""
    return (f"{run.kind}, num_workers={run.num_workers}, batch {run.batch_size}: "
            f"{run.samples_per_s:,.0f} samples/s over {run.window} steps after {run.warmup} "
            f"warm-up; waiting {run.wait_fraction:.0%} (mean wait {run.wait_s.mean() * 1e3:.2f} "
            f"ms, step {run.compute_s.mean() * 1e3:.2f} ms; CPU in next() "
            f"{run.load_cpu_s * 1e3:.2f} ms) — timed by {run.timed_by}")


def format_trials(trials: dict, first_batch: bool = False) -> str:
    """One line per setting ({name: :class:`labkit.dataload.measure.Trials`}): samples/s
    and waiting share as median (min–max) over the trials; with ``first_batch`` the time
    from ``iter()`` to the first batch of the last epoch too."""
    width = max(len(str(k)) for k in trials)
    out = []
    for name, t in trials.items():
        line = (f"{str(name):{width}s}  {t.rate.format()} samples/s, waiting "
                f"{t.wait_fraction.format('.0%')}")
        if first_batch:
            ms = Spread(tuple(v * 1e3 for v in t.first_batch_s.values))
            line += f", first batch of the last epoch after {ms.format('.0f')} ms"
        out.append(line)
    counts = ", ".join(map(str, sorted({len(t) for t in trials.values()})))
    who = next(iter(trials.values()))[0].timed_by
    return "\n".join(out + [f"(median (min–max) of {counts} trials in alternation; timed by "
                            f"{who})"])


def majority(values) -> str:
    """The most frequent of ``values`` (the first one on a tie)."""
    values = list(values)
    if not values:
        raise ValueError("values must not be empty")
    return max(values, key=values.count)


def same_across_epochs(augmented) -> bool:
    """Whether every epoch of :func:`labkit.dataload.randomness.epoch_augmentations` repeats
    epoch 0's augmented samples."""
    return all(np.array_equal(augmented[0], a) for a in augmented[1:])


def format_cache_tradeoff(rows) -> str:
    """:func:`labkit.dataload.costs.cache_tradeoff`'s rows: bytes held and CPU per
    augmented sample, each relative to the first row."""
    b0, t0 = rows[0].bytes_per_sample, rows[0].cpu_per_sample_s
    width = max(len(r.name) for r in rows)
    return "\n".join(f"{r.name:{width}s} {r.bytes_per_sample:7,.0f} B/sample "
                     f"({r.bytes_per_sample / b0:4.1f}×)  {r.cpu_per_sample_s * 1e6:6.0f} µs CPU "
                     f"per augmented sample ({r.cpu_per_sample_s / t0:.2f}×)" for r in rows)


def format_randomness(report) -> str:
    """:func:`labkit.dataload.randomness.worker_randomness` as a table."""
    lines = [f"{'random stream':34s} same in two workers   same in two epochs"]
    lines += [f"{name:34s} {str(w):20s} {e}" for name, w, e in report.rows()]
    return "\n".join(lines)


@dataclass(frozen=True)
class PrefetchRow:
    prefetch_factor: int
    rate: float              # simulated samples/s in steady state
    bound: float             # the closed form, the same for every prefetch_factor

    @property
    def of_bound(self) -> float:
        return self.rate / self.bound


def prefetch_rows(config: PipelineConfig, workers: int, factors=(1, 2, 4),
                  jitter: float = 0.0) -> list[PrefetchRow]:
    """The simulator at ``workers`` workers for each ``prefetch_factor`` of ``factors``,
    with per-sample costs varying by ``jitter`` (coefficient of variation): the rate
    against the bound, which no queue length changes."""
    rows = []
    for pf in factors:
        cfg = steady_config(replace(config, prefetch_factor=V.integer("prefetch_factor", pf, low=1),
                                    jitter=V.nonnegative("jitter", jitter)), workers)
        rows.append(PrefetchRow(int(pf), float(simulate(cfg).samples_per_s),
                                float(bound_rate(cfg))))
    return rows


def format_prefetch(rows: list[PrefetchRow]) -> str:
    rows = V.instances("rows", rows, PrefetchRow)
    return "  ".join(f"prefetch_factor={r.prefetch_factor}: {r.of_bound:.2f} of the bound"
                     for r in rows)


def recurrence_rows(recurrence, load_s, compute_s, workers: int, factors=(1, 2, 4),
                    batch_size: int = 32) -> list[PrefetchRow]:
    """``recurrence(load_s, compute_s, workers, prefetch_factor) -> (wait_s, end_s)`` (the
    learner's, or :func:`labkit.dataload.sim.prefetch_recurrence`) for each
    ``prefetch_factor``: its steady rate over the steady window
    (:func:`labkit.dataload.model.steady_window`) against the bound
    ``B / max(mean C, mean L / W)``, which no queue length changes."""
    L = V.array("load_s", load_s, ndim=1)
    C = V.array("compute_s", compute_s, ndim=1, shape=(len(L),))
    W = V.integer("workers", workers, low=1)
    B = V.integer("batch_size", batch_size, low=1)
    bound = B / max(float(np.mean(C)), float(np.mean(L)) / W)
    rows = []
    for pf in factors:
        pf = V.integer("prefetch_factor", pf, low=1)
        _, end = recurrence(L.copy(), C.copy(), W, pf)
        end = np.asarray(end, dtype=float)
        rows.append(PrefetchRow(pf, steady_rate(end, B, steady_window(len(end), pf, W)), bound))
    return rows
