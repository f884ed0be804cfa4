"""The pipeline simulator calibrated on chapter 07's measured runs, in CPU time
(:func:`calibrated_config`: one :class:`labkit.dataload.sim.PipelineConfig` from a
``num_workers=0`` run, the stage costs and a run with workers; :func:`calibrate_trials`:
one per trial, so that the predictions carry the calibration's spread).
"""
from __future__ import annotations

import itertools
import os

from labkit import validate as V
from labkit.dataload.costs import StageCosts
from labkit.dataload.measure import LoaderRun, Trials
from labkit.dataload.model import background_load, others_from_share
from labkit.dataload.sim import PipelineConfig, linux_slice_s


def calibrated_config(run0: LoaderRun, costs: StageCosts | None = None, *,
                      loader: LoaderRun | None = None, cores: int | None = None,
                      shared: bool = True, quantum_s: float | None = None,
                      **kw) -> PipelineConfig:
    """The simulator calibrated on CPU time.

    From the ``num_workers=0`` run ``run0``: ``L`` = the training thread's mean CPU time in
    ``next()`` (the whole loading of a batch, collation included: split into collate
    (``costs.collate_s``) and decode/augment in ``costs``' measured ratio), ``C`` = the
    mean CPU time of a step — both over the steady window, CPU time, so what other
    processes took from the wall clock is not in them. From a run with workers ``loader``
    (e.g. :func:`loader_alone`): ``transfer_s`` = the workers' CPU per batch − L (handing
    a batch over through shared memory) and ``receive_s`` = the training thread's CPU per
    ``next()`` (taking it); 0 without one.

    The machine (``shared``): the other processes' load during ``run0`` — their cores u
    from ``/proc/stat`` where measured, else ``cores − s`` from the run's CPU share s when
    ``s < 1`` (:func:`labkit.dataload.model.others_from_share`) — becomes ``background``
    weight ``b`` (:func:`labkit.dataload.model.background_load`); the fair share that
    predicts for one process, ``min(1, cores / (1 + b))``, is compared with s and every
    CPU cost is divided by ``s / share`` (about 1), so that the model reproduces its
    calibration point exactly; ``b`` and that factor are monotone in s. ``cores``
    defaults to the CPUs this process may run on; the time slice to Linux's
    (:func:`labkit.dataload.sim.linux_slice_s`)."""
    if not isinstance(run0, LoaderRun) or run0.num_workers != 0 or run0.kind != "pipeline":
        raise ValueError("calibrate on a pipeline run with num_workers=0")
    if loader is not None and (not isinstance(loader, LoaderRun) or loader.num_workers == 0):
        raise ValueError("loader must be a run with num_workers > 0")
    B = run0.batch_size
    cores = len(os.sched_getaffinity(0)) if cores is None else V.integer("cores", cores, low=1)
    L, C = run0.load_cpu_s, run0.step_cpu_mean_s
    s = run0.cpu_share
    background, scale = 0.0, 1.0
    if shared:
        u = run0.others_cores if run0.others_cores is not None else others_from_share(s, cores)
        background = background_load(min(u, cores - 1e-3), cores)
        share = min(1.0, cores / (1.0 + background))
        scale = share / s            # wall seconds per CPU second beyond the fair share
    collate = min(costs.collate_s, L) if costs is not None else 0.0
    ratio = costs.decode_share if costs is not None else 0.0
    per_sample = (L - collate) / B
    transfer = receive = 0.0
    if loader is not None:
        transfer = max(0.0, loader.worker_batch_cpu_s - L)
        receive = loader.load_cpu_s
    quantum = linux_slice_s(cores) if quantum_s is None else V.nonnegative("quantum_s", quantum_s)
    cfg = dict(batch_size=B, cores=cores, decode_s=per_sample * ratio * scale,
               augment_s=per_sample * (1 - ratio) * scale, collate_s=collate * scale,
               transfer_s=transfer * scale, receive_s=receive * scale, compute_s=C * scale,
               background=background, quantum_s=quantum)
    cfg.update(kw)
    return PipelineConfig(**cfg)


def calibrate_trials(sweep: dict, costs: StageCosts | None = None, loaders: Trials | None = None,
                     **kw) -> list[PipelineConfig]:
    """One :func:`calibrated_config` per trial of ``sweep[0]`` (paired with trial k of
    ``loaders``, when given): the predictions then carry the calibration's spread."""
    if 0 not in sweep:
        raise ValueError("sweep must include num_workers=0")
    base = sweep[0].runs
    loads = loaders.runs if loaders is not None else (None,) * len(base)
    return [calibrated_config(r0, costs, loader=lr, **kw)
            for r0, lr in zip(base, itertools.cycle(loads))]
