"""Lab 10.6 run for real: a ZeRO-1 optimizer class on two gloo processes.

:func:`zero_run` ships the learner's class to the shared worker pool (through
:mod:`labkit.parallel.mp_labs`) and returns per rank the parameters after each step, every
``torch.distributed`` collective it called, and the bytes of tensors it keeps alive
between steps (measured: every live tensor storage in the process that is not a
parameter, a gradient or there before the optimizer was built); :func:`zero_baseline` is
``torch.optim.Adam`` on one process, :func:`zero_summary` what the last run showed.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.parallel.mp_labs import (WORLD, CollectiveSpy, _arrays, _error, _last,
                                     _live_storages, _load, _precheck, _storage_ptrs,
                                     _Watch, lab_run)
from labkit.torch_models import torch_mlp


# ---- 10.6: a ZeRO-1 optimizer -------------------------------------------------------------

ADAM = {"lr": 0.05, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}
ZERO_ROWS = 4                     # rows per rank per step


def zero_lab_model(seed: int, sizes: tuple[int, int, int]):
    """Linear(a, b) → tanh → Linear(b, c), float64, seeded."""
    import torch  # deferred: torch
    a, b, c = sizes
    return torch_mlp((a, b, c), seed, dtype=torch.float64, activation="tanh")


def zero_lab_batch(seed: int, step: int, sizes, rows: int):
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(seed * 1000 + step)
    return (torch.randn(rows, sizes[0], generator=g, dtype=torch.float64),
            torch.randn(rows, sizes[2], generator=g, dtype=torch.float64))


def zero_baseline(seed: int, sizes, steps: int, world: int = WORLD,
                  grad_scale: float = 1.0) -> dict:
    """One process, the whole batch (``world`` × :data:`ZERO_ROWS` rows), ``torch.optim.Adam``
    with :data:`ADAM`: the parameters after each step and the bytes of Adam's state.
    ``grad_scale`` multiplies the loss (the mistake of summing the ranks' gradients is
    ``grad_scale = world``)."""
    import torch  # deferred: torch
    model = zero_lab_model(seed, sizes)
    opt = torch.optim.Adam(model.parameters(), **ADAM)
    params = []
    for step in range(steps):
        x, y = zero_lab_batch(seed, step, sizes, world * ZERO_ROWS)
        opt.zero_grad(set_to_none=True)
        (grad_scale * torch.nn.functional.mse_loss(model(x), y)).backward()
        opt.step()
        params.append(_arrays(model.parameters()))
    state = sum(t.numel() * t.element_size() for s in opt.state.values()
                for t in s.values() if isinstance(t, torch.Tensor) and t.ndim)
    numel = sum(p.numel() for p in model.parameters())
    return {"params": params, "state_bytes": int(state), "numel": int(numel)}


def zero_lab_worker(rank: int, world: int, payload: bytes, seed: int, sizes, steps: int,
                    refused) -> dict:
    import torch  # deferred: torch
    watch = _Watch(refused)
    with CollectiveSpy() as spy:
        try:
            cls = _load(payload)
            model = zero_lab_model(seed, sizes)
            before = _live_storages(collect=False)
            opt = watch(cls, model.parameters(), **ADAM)
            params = []
            for step in range(steps):
                spy.step, spy.phase = step, "backward"
                x, y = zero_lab_batch(seed, step, sizes, world * ZERO_ROWS)
                rows = slice(rank * ZERO_ROWS, (rank + 1) * ZERO_ROWS)
                model.zero_grad(set_to_none=True)
                torch.nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
                spy.phase = "step"
                watch(opt.step)
                params.append(_arrays(model.parameters()))
            del x, y
            exclude = set(before) | _storage_ptrs(model.parameters()) | \
                _storage_ptrs(p.grad for p in model.parameters())
            held = sum(n for ptr, n in _live_storages().items() if ptr not in exclude)
            out = {"params": params, "held_bytes": int(held)}
        except Exception as exc:
            out = _error(exc)
    out.update(calls=spy.calls, uses_labkit=watch.hit)
    return out


def zero_run(cls, seed: int, sizes, steps: int = 3) -> list[dict]:
    """Lab 10.6: ``cls(params, **ADAM)`` with ``.step()`` on :data:`WORLD` gloo ranks; per
    rank ``{"params", "held_bytes", "calls", "uses_labkit"}`` (or ``"missing"``/``"error"``)."""
    _precheck(lambda: cls([_dummy_param()], **ADAM).step())
    return lab_run("10.6", zero_lab_worker, cls, int(seed), tuple(int(s) for s in sizes),
                   int(steps), args_seen={"seed": int(seed), "sizes": tuple(sizes),
                                          "steps": int(steps)}, timeout_s=60)


def _dummy_param():
    import torch  # deferred: torch
    return torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))


# ---- what the last run showed (for the cells after the check) -------------------------

@dataclass(frozen=True)
class ZeroRunSummary:
    """Lab 10.6's run: bytes each rank kept between steps against ``torch.optim.Adam``'s
    state on one process, and the collectives of one step on rank 0 as (name, elements)."""
    held: tuple[int, ...]
    adam_bytes: int
    numel: int
    step_ops: tuple[tuple[str, int], ...]

    @property
    def share(self) -> float:
        return max(self.held) / self.adam_bytes

    def lines(self) -> list[str]:
        out = [f"your optimizer on {len(self.held)} ranks, {self.numel:,} parameters: rank "
               + ", rank ".join(f"{r} keeps {b:,} B" for r, b in enumerate(self.held))
               + f" of tensors between steps = {self.share:.3f} × torch.optim.Adam's "
               f"{self.adam_bytes:,} B on one process"]
        out.append("one step on rank 0: " + ", ".join(f"{op} of {n:,} elements"
                                                     for op, n in self.step_ops))
        return out


def zero_summary(last: dict | None = None) -> ZeroRunSummary | None:
    """The summary of the last lab 10.6 run (``LAST``, or ``last``), None without one."""
    run = _last("10.6", last)
    if run is None:
        return None
    a, res = run["args"], run["results"]
    base = zero_baseline(a["seed"], a["sizes"], a["steps"], len(res))
    ops = tuple((c["op"], c["numel"]) for c in res[0]["calls"]
                if c["step"] == 0 and c["phase"] == "step")
    return ZeroRunSummary(tuple(r["held_bytes"] for r in res), base["state_bytes"],
                          base["numel"], ops)
