"""Model parallelism for real: PyTorch's own distributed APIs on 2 CPU processes (gloo).

Each ``*_worker`` runs inside a process group started by
:func:`labkit.parallel.launch.pool_run` (gloo, free port, forks of a fork server) and
returns numbers that :func:`run_all` compares with the same computation in one process:

* tensor parallelism — ``torch.distributed.tensor.parallel.parallelize_module`` with
  ``ColwiseParallel`` on the first linear layer of an MLP and ``RowwiseParallel`` on the
  second (Megatron's split, Shoeybi et al. 2019 §3) on a 1-D CPU ``DeviceMesh``; forward,
  backward and one SGD step;
* sharded data parallelism — FSDP2's ``fully_shard`` (ZeRO-3: each rank keeps half of every
  parameter, gathers it to compute); each rank trains on its half of the batch;
* pipeline parallelism — ``torch.distributed.pipelining``: ``PipelineStage`` per rank and
  ``ScheduleGPipe`` with 4 micro-batches; the loss and gradients of a two-stage MLP.

All in float64 so that "equal to the single-process reference" can mean 1e-6 and tighter.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.parallel.launch import pool_run

DIM, HIDDEN, BATCH, SEED = 16, 32, 8, 0


def _mlp():
    import torch  # deferred: torch
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, DIM)).double()


def _data():
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(SEED + 1)
    return (torch.randn(BATCH, DIM, generator=g, dtype=torch.float64),
            torch.randn(BATCH, DIM, generator=g, dtype=torch.float64))


def _loss(y, t):
    return ((y - t) ** 2).mean()


def _sgd_step(model, lr: float, whole=lambda tensor: tensor) -> dict:
    """Forward and backward on the whole batch and one SGD step: the output, loss, the first
    layer's gradient and both layers' weights after the step, as numpy arrays. ``whole``
    turns a parameter or gradient into the full tensor (``DTensor.full_tensor`` when the
    model is sharded)."""
    import torch  # deferred: torch
    x, t = _data()
    y = model(x)
    loss = _loss(y, t)
    loss.backward()
    g0 = whole(model[0].weight.grad).clone()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return {"y": y.detach().numpy(), "loss": float(loss.detach()), "grad0": g0.numpy(),
            "w0_after": whole(model[0].weight).detach().numpy().copy(),
            "w2_after": whole(model[2].weight).detach().numpy().copy()}


def reference(lr: float = 0.1) -> dict:
    """One process: output, loss, the first layer's gradient and weights after one SGD step."""
    return _sgd_step(_mlp(), lr)


def tp_worker(rank: int, world: int, lr: float = 0.1) -> dict:
    """DTensor tensor parallelism: colwise first linear, rowwise second."""
    from torch.distributed.device_mesh import init_device_mesh  # deferred: torch
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (world,))
    model = parallelize_module(_mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    # the output is a plain (replicated) tensor after the all-reduce; parameters and their
    # gradients are DTensors sharded over the ranks (W1 by output rows, W2 by input columns)
    out = _sgd_step(model, lr, whole=lambda dtensor: dtensor.full_tensor())
    out["local_rows"] = model[0].weight.to_local().shape[0]
    return out


def fsdp_worker(rank: int, world: int, lr: float = 0.1) -> dict:
    """FSDP2 ``fully_shard``: each rank holds a 1/world shard of every parameter and trains
    on its 1/world of the batch; gradients are reduce-scattered and averaged."""
    import torch  # deferred: torch
    from torch.distributed.fsdp import fully_shard
    model = _mlp()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    x, t = _data()
    part = BATCH // world
    xs, ts = x[rank * part:(rank + 1) * part], t[rank * part:(rank + 1) * part]
    loss = _loss(model(xs), ts)
    loss.backward()
    shard_rows = model[0].weight.to_local().shape[0]
    g0 = model[0].weight.grad.full_tensor()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    opt.step()
    return {"grad0": g0.numpy(), "w0_after": model[0].weight.full_tensor().detach().numpy(),
            "w2_after": model[2].weight.full_tensor().detach().numpy(),
            "shard_rows": shard_rows, "loss_part": float(loss.detach())}


def pipeline_worker(rank: int, world: int, microbatches: int = 4) -> dict:
    """``torch.distributed.pipelining``: rank 0 runs Linear+Tanh, rank 1 the last Linear;
    ScheduleGPipe over ``microbatches`` micro-batches computes the loss and gradients."""
    import torch  # deferred: torch
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    full = _mlp()
    part = torch.nn.Sequential(full[0], full[1]) if rank == 0 else torch.nn.Sequential(full[2])
    stage = PipelineStage(part, rank, world, torch.device("cpu"))

    # loss per micro-batch; the schedule divides the accumulated gradients by the number of
    # micro-batches (scale_grads=True), which makes them the gradients of the batch mean
    sched = ScheduleGPipe(stage, n_microbatches=microbatches, loss_fn=_loss)
    x, t = _data()
    losses: list = []
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=t, losses=losses)
    out = {"stage_params": sum(p.numel() for p in part.parameters())}
    if rank == 0:
        out["grad0"] = part[0].weight.grad.numpy()
    else:
        out["loss"] = sum(float(v.detach()) for v in losses) / microbatches
    return out


@dataclass(frozen=True)
class RealRun:
    name: str
    api: str
    max_error: float
    seconds: float
    detail: str


def _err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def all_worker(rank: int, world: int, microbatches: int = 4) -> dict:
    """The three runs one after another in one process group (one start-up, not three)."""
    out = {}
    for name, fn, args in (("tp", tp_worker, ()), ("fsdp", fsdp_worker, ()),
                           ("pipeline", pipeline_worker, (microbatches,))):
        t0 = time.perf_counter()
        out[name] = fn(rank, world, *args)
        out[name]["seconds"] = time.perf_counter() - t0
    return out


def _check_tp(res, seconds=0.0) -> RealRun:
    ref = reference()
    err = max(_err(r[k], ref[k]) for r in res for k in ("y", "grad0", "w0_after", "w2_after"))
    err = max(err, max(abs(r["loss"] - ref["loss"]) for r in res))
    return RealRun("tensor parallel MLP", "DTensor parallelize_module (Colwise/Rowwise)",
                   err, seconds,
                   f"each rank holds {res[0]['local_rows']} of {HIDDEN} rows of W1")


def _check_fsdp(res, seconds=0.0) -> RealRun:
    ref = reference()
    err = max(_err(r[k], ref[k]) for r in res for k in ("grad0", "w0_after", "w2_after"))
    return RealRun("sharded data parallel", "FSDP2 fully_shard", err, seconds,
                   f"each rank stores {res[0]['shard_rows']} of {HIDDEN} rows of W1")


def _check_pipeline(res, seconds=0.0, microbatches: int = 4) -> RealRun:
    ref = reference()
    err = max(_err(res[0]["grad0"], ref["grad0"]), abs(res[1]["loss"] - ref["loss"]))
    return RealRun("two-stage pipeline", f"torch.distributed.pipelining ScheduleGPipe, "
                   f"{microbatches} micro-batches", err, seconds,
                   f"stage parameters {res[0]['stage_params']} + {res[1]['stage_params']}")


def _microbatches(world, microbatches):
    w = V.integer("world", world, low=2, high=2)
    mb = V.integer("microbatches", microbatches, low=1)
    V.divides("microbatches", mb, "BATCH", BATCH)
    return w, mb


def run_all(world: int = 2, microbatches: int = 4, timeout_s: float = 120.0) -> list[RealRun]:
    """The three real runs in ``world`` = 2 gloo processes (the shared pool,
    :func:`labkit.parallel.launch.pool_run`), each compared with :func:`reference`;
    ``seconds`` is the time inside the process group, start-up excluded."""
    w, mb = _microbatches(world, microbatches)
    res = pool_run(all_worker, w, mb, timeout_s=timeout_s)
    secs = {k: max(r[k]["seconds"] for r in res) for k in ("tp", "fsdp", "pipeline")}
    return [_check_tp([r["tp"] for r in res], secs["tp"]),
            _check_fsdp([r["fsdp"] for r in res], secs["fsdp"]),
            _check_pipeline([r["pipeline"] for r in res], secs["pipeline"], mb)]


def pipeline_timed(rank: int, world: int, microbatches: int) -> dict:
    t0 = time.perf_counter()
    out = pipeline_worker(rank, world, microbatches)
    out["seconds"] = time.perf_counter() - t0
    return out


def run_pipeline(world: int = 2, microbatches: int = 4, timeout_s: float = 120.0) -> RealRun:
    """The pipeline run alone (``torch.distributed.pipelining``, ScheduleGPipe) in the shared
    pool, compared with :func:`reference`."""
    w, mb = _microbatches(world, microbatches)
    res = pool_run(pipeline_timed, w, mb, timeout_s=timeout_s)
    return _check_pipeline(res, max(r["seconds"] for r in res), mb)


# ---- references of the chapter's PyTorch labs (10.7, 10.8) -----------------------------

def megatron_plan(sequence_parallel: bool = False) -> dict:
    """The ``parallelize_module`` plan of :class:`labkit.parallel.tp_lab.LabBlock`
    (norm1 → attn(wq, wk, wv, wo) → +, norm2 → mlp(up, down) → +), Megatron-LM's split
    (Shoeybi et al. 2019 §3): Q, K, V and the MLP's first layer column-parallel, the
    attention output and the MLP's second layer row-parallel, so each half of the block
    ends in one all-reduce. With ``sequence_parallel`` (Korthikanti et al. 2022 §4.2.2, the
    plan torchtitan's ``parallelize_llama`` uses) the layer norms run on a sequence shard
    (``SequenceParallel``), each half all-gathers its input (``PrepareModuleInput`` from
    ``Shard(1)`` to ``Replicate()``) and reduce-scatters its output
    (``RowwiseParallel(output_layouts=Shard(1))``)."""
    from torch.distributed.tensor import Replicate, Shard  # deferred: torch
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    plan = {"attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(), "mlp.up": ColwiseParallel()}
    if not sequence_parallel:
        plan.update({"attn.wo": RowwiseParallel(), "mlp.down": RowwiseParallel()})
        return plan
    gather = dict(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    plan.update({"norm1": SequenceParallel(), "norm2": SequenceParallel(),
                 "attn": PrepareModuleInput(**gather), "mlp": PrepareModuleInput(**gather),
                 "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
                 "mlp.down": RowwiseParallel(output_layouts=Shard(1))})
    return plan


def fsdp_wrap(model, mesh):
    """FSDP2 on :class:`labkit.parallel.fsdp_lab.LabNet`: ``fully_shard`` each block, then the
    root (which takes the parameters left: the head), bottom-up as the ``fully_shard``
    docs ask, so a forward all-gathers one block's parameters at a time."""
    from torch.distributed.fsdp import fully_shard  # deferred: torch
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
