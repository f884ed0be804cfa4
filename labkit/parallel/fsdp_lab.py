"""Lab 10.8 run for real: an FSDP2 wrapping on two gloo processes.

:func:`fsdp_run` ships the learner's wrapping function to the shared worker pool (through
:mod:`labkit.parallel.mp_labs`), wraps :class:`LabNet` (residual MLP blocks and a head,
built when first asked for: torch loads only then) and trains it; per rank it returns the
parameters after each step, each parameter's local shard, and the all-gathers and
reduce-scatters by phase. :func:`fsdp_baseline` is SGD on one process with the whole batch,
:func:`fsdp_summary` what the last run showed.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.parallel.mp_labs import (WORLD, CollectiveSpy, _arrays, _error, _last, _load,
                                     _precheck, _Watch, lab_run, lazy_module_attribute)


# ---- 10.8: FSDP2 --------------------------------------------------------------------------

def _torch_modules():
    from torch import nn  # deferred: torch

    class LabNet(nn.Module):
        """``depth`` residual MLP blocks (LayerNorm → Linear → tanh → Linear) and a head."""

        def __init__(self, dim: int = 8, hidden: int = 16, depth: int = 3, out: int = 4):
            super().__init__()
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.Tanh(),
                              nn.Linear(hidden, dim)) for _ in range(depth))
            self.head = nn.Linear(dim, out)

        def forward(self, x):
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    return LabNet


__getattr__ = lazy_module_attribute(globals(), "LabNet", _torch_modules)


NET = {"dim": 8, "hidden": 16, "depth": 3, "out": 4}
FSDP_ROWS, FSDP_LR = 4, 0.1


def fsdp_lab_net(seed: int):
    import torch  # deferred: torch
    torch.manual_seed(seed)
    return __getattr__("LabNet")(**NET).double()


def fsdp_lab_batch(seed: int, step: int, rows: int):
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(seed * 1000 + step + 7)
    return (torch.randn(rows, NET["dim"], generator=g, dtype=torch.float64),
            torch.randn(rows, NET["out"], generator=g, dtype=torch.float64))


def fsdp_baseline(seed: int, steps: int, world: int = WORLD) -> dict:
    """One process, the whole batch, SGD: the parameters after each step."""
    import torch  # deferred: torch
    model = fsdp_lab_net(seed)
    opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR)
    params = []
    for step in range(steps):
        x, y = fsdp_lab_batch(seed, step, world * FSDP_ROWS)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        params.append(_arrays(model.parameters()))
    return {"params": params, "names": [n for n, _ in model.named_parameters()],
            "numel": [int(p.numel()) for p in model.parameters()],
            "units": NET["depth"] + 1}


def fsdp_lab_worker(rank: int, world: int, payload: bytes, seed: int, steps: int,
                    refused) -> dict:
    import torch  # deferred: torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    watch = _Watch(refused)
    with CollectiveSpy() as spy:
        try:
            fn = _load(payload)
            mesh = init_device_mesh("cpu", (world,))
            model = watch(fn, fsdp_lab_net(seed), mesh)
            local = [int(p.to_local().numel()) if isinstance(p, DTensor) else -1
                     for p in model.parameters()]
            opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR)
            params = []
            for step in range(steps):
                spy.step = step
                x, y = fsdp_lab_batch(seed, step, world * FSDP_ROWS)
                rows = slice(rank * FSDP_ROWS, (rank + 1) * FSDP_ROWS)
                opt.zero_grad(set_to_none=True)
                spy.phase = "forward"
                loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
                spy.phase = "backward"
                loss.backward()
                spy.phase = "step"
                opt.step()
                params.append([(p.full_tensor() if isinstance(p, DTensor) else p)
                               .detach().numpy().copy() for p in model.parameters()])
            out = {"params": params, "local": local}
        except Exception as exc:
            out = _error(exc)
    out.update(calls=spy.calls, uses_labkit=watch.hit)
    return out


def fsdp_run(wrap_fn, seed: int, steps: int = 2) -> list[dict]:
    """Lab 10.8: ``wrap_fn(model, mesh)`` → the FSDP2-wrapped :class:`LabNet`, trained
    ``steps`` SGD steps on :data:`WORLD` ranks (each on its rows of the batch). Per rank
    ``{"params", "local", "calls", "uses_labkit"}`` (or ``"missing"``/``"error"``);
    ``local[i]`` is parameter i's local shard size, -1 where it is not a DTensor."""
    _precheck(lambda: wrap_fn(None, None))
    return lab_run("10.8", fsdp_lab_worker, wrap_fn, int(seed), int(steps),
                   args_seen={"seed": int(seed), "steps": int(steps)}, timeout_s=90)


# ---- what the last run showed (for the cells after the check) -------------------------

@dataclass(frozen=True)
class FsdpRunSummary:
    """Lab 10.8's run: what rank 0 stores of each parameter, and the collectives of one
    step on rank 0 by phase as {name: count}."""
    stored: tuple[tuple[str, int, int], ...]      # (name, local elements, elements)
    by_phase: dict

    def lines(self) -> list[str]:
        mine = sum(s for _, s, _ in self.stored)
        total = sum(n for _, _, n in self.stored)
        return [f"rank 0 stores {mine:,} of the model's {total:,} parameters "
                f"({mine / total:.2f})",
                *(f"{phase:9s} {counts}" for phase, counts in self.by_phase.items())]


def fsdp_summary(last: dict | None = None) -> FsdpRunSummary | None:
    run = _last("10.8", last)
    if run is None:
        return None
    base = fsdp_baseline(run["args"]["seed"], 1, len(run["results"]))
    r0 = run["results"][0]
    phases: dict[str, dict[str, int]] = {}
    for c in r0["calls"]:
        if c["step"] == 0 and c["phase"] in ("forward", "backward"):
            d = phases.setdefault(c["phase"], {})
            d[c["op"]] = d.get(c["op"], 0) + 1
    return FsdpRunSummary(tuple(zip(base["names"], r0["local"], base["numel"])), phases)
