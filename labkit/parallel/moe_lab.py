"""Lab 10.10 run for real: an expert-parallel MoE layer on two gloo processes.

:func:`moe_run` ships the learner's layer to the shared worker pool (through
:mod:`labkit.parallel.mp_labs`) and runs it there with ``all_to_all_single`` as its
all-to-all (each call counted); per rank it returns the output and the bytes sent.
:func:`moe_summary` compares what the last run sent with
:func:`labkit.parallel.moe.all_to_all_bytes`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.parallel.moe import all_to_all_bytes, capacity, lab_inputs
from labkit.parallel.mp_labs import _error, _last, _load, _Watch, lab_run


# ---- 10.10: expert parallelism over gloo ------------------------------------------------

def moe_lab_worker(rank: int, world: int, payload: bytes, problem: dict, refused) -> dict:
    import torch  # deferred: torch
    import torch.distributed as dist
    watch = _Watch(refused)
    calls: list[int] = []

    def all_to_all(output, input):
        calls.append(int(input.numel() * input.element_size()))
        return dist.all_to_all_single(output, input)

    try:
        layer = _load(payload)
        inp = lab_inputs(**problem)
        w1, w2 = inp.local_experts(rank)
        with torch.no_grad():
            y = watch(layer, torch.from_numpy(inp.x[rank].copy()),
                      torch.from_numpy(inp.router_w.copy()), torch.from_numpy(w1.copy()),
                      torch.from_numpy(w2.copy()), inp.k, inp.capacity_factor, all_to_all)
        out = {"y": np.asarray(y.detach().numpy() if isinstance(y, torch.Tensor) else y)}
    except Exception as exc:
        out = _error(exc)
    out.update(calls=calls, sent=int(sum(calls) * (world - 1) / world),
               uses_labkit=watch.hit)
    return out


def moe_run(layer_fn, problem: dict) -> list[dict]:
    """Lab 10.10 for real: ``layer_fn(x, router_w, w1, w2, k, capacity_factor, all_to_all)``
    on :data:`WORLD` gloo ranks, ``all_to_all`` = ``torch.distributed.all_to_all_single``
    (counted). ``problem``: the keyword arguments of :func:`labkit.parallel.moe.lab_inputs`
    (``world`` must be :data:`WORLD`). Per rank ``{"y", "calls" (bytes of each call's
    input), "sent", "uses_labkit"}`` or ``"missing"``/``"error"``."""
    return lab_run("10.10", moe_lab_worker, layer_fn, dict(problem),
                   args_seen={"problem": dict(problem)}, timeout_s=60)


# ---- what the last run showed (for the cells after the check) -------------------------

@dataclass(frozen=True)
class MoeRunSummary:
    """Lab 10.10's real run: bytes each rank's two all-to-alls sent to the other ranks,
    against 2(p-1)/p·E·C·d·8 (:func:`labkit.parallel.moe.all_to_all_bytes`)."""
    sent: tuple[int, ...]
    formula: float
    experts: int
    capacity: int
    dim: int

    def lines(self) -> list[str]:
        return [f"all-to-all bytes sent per rank: {list(self.sent)}; 2(p-1)/p·E·C·d·8 with "
                f"E={self.experts}, C={self.capacity}, d={self.dim}: {self.formula:.0f}"]


def moe_summary(last: dict | None = None) -> MoeRunSummary | None:
    run = _last("10.10", last)
    if run is None:
        return None
    inp = lab_inputs(**run["args"]["problem"])
    T, d = inp.x.shape[1:]
    E = inp.router_w.shape[1]
    C = capacity(T, E, inp.k, inp.capacity_factor)
    return MoeRunSummary(tuple(r["sent"] for r in run["results"]),
                         all_to_all_bytes(E, C, d, inp.world), E, C, d)
