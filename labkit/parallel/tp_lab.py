"""Lab 10.7 run for real: a ``parallelize_module`` plan on two gloo processes.

:func:`tp_run` ships the learner's plan function to the shared worker pool (through
:mod:`labkit.parallel.mp_labs`) and applies the plan, without and with sequence
parallelism, to :class:`LabBlock` (a pre-norm transformer block, built when first asked
for: torch loads only then); per rank it returns the output, every gradient, each
parameter's local shard, and the functional collectives DTensor issued in forward and
backward (counted as ``CommDebugMode`` counts them). :func:`tp_baseline` is the unsharded
block on one process, :func:`tp_summary` what the last run showed.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.parallel.mp_labs import (_error, _last, _load, _precheck, _Watch, lab_run,
                                     lazy_module_attribute)


# ---- 10.7: a tensor-parallel plan -------------------------------------------------------

def _torch_modules():
    import torch  # deferred: torch
    from torch import nn

    class LabAttention(nn.Module):
        """Multi-head self-attention, non-causal: Q, K, V projections ``wq``, ``wk``,
        ``wv`` and the output projection ``wo``. The number of heads follows from the
        local width (``-1`` in the view), so a column-parallel Q/K/V gives each rank
        whole heads."""

        def __init__(self, dim: int, heads: int):
            super().__init__()
            self.head_dim = dim // heads
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim) for _ in range(4))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            a = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim ** 0.5, dim=-1) @ v
            return self.wo(a.transpose(1, 2).reshape(b, s, -1))

    class LabMLP(nn.Module):
        def __init__(self, dim: int, hidden: int):
            super().__init__()
            self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

        def forward(self, x):
            return self.down(torch.tanh(self.up(x)))

    class LabBlock(nn.Module):
        """A pre-norm transformer block: x + attn(norm1(x)), then + mlp(norm2(·))."""

        def __init__(self, dim: int = 8, heads: int = 4, hidden: int = 16):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(dim), LabAttention(dim, heads)
            self.norm2, self.mlp = nn.LayerNorm(dim), LabMLP(dim, hidden)

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    return LabBlock


__getattr__ = lazy_module_attribute(globals(), "LabBlock", _torch_modules)


BLOCK = {"dim": 8, "heads": 4, "hidden": 16}
TP_SHAPE = (2, 6)                 # batch, sequence


def tp_lab_block(seed: int):
    import torch  # deferred: torch
    torch.manual_seed(seed)
    return __getattr__("LabBlock")(**BLOCK).double()


def tp_lab_input(seed: int):
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(*TP_SHAPE, BLOCK["dim"], generator=g, dtype=torch.float64)


def _block_loss(y):
    return (y ** 2).sum() / (TP_SHAPE[0] * TP_SHAPE[1] * BLOCK["dim"])


def tp_baseline(seed: int) -> dict:
    """One process: the block's output and every parameter's gradient, by name."""
    model = tp_lab_block(seed)
    y = model(tp_lab_input(seed))
    _block_loss(y).backward()
    return {"y": y.detach().numpy(), "grads": {n: p.grad.numpy().copy()
                                               for n, p in model.named_parameters()},
            "numel": {n: int(p.numel()) for n, p in model.named_parameters()}}


def _collective_counter():
    """A ``TorchDispatchMode`` counting the functional collectives DTensor issues
    (``_c10d_functional::all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
    ...; not ``wait_tensor`` nor the autograd wrappers) — what ``torch.distributed.tensor.debug.CommDebugMode``
    counts, without importing the compiler stack it brings along (seconds)."""
    from torch.utils._python_dispatch import TorchDispatchMode  # deferred: torch

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ns, _, name = func._schema.name.partition("::")
            name = name.rstrip("_")
            if ns in ("_c10d_functional", "c10d_functional") and \
                    name.startswith(("all_", "reduce_scatter", "broadcast")):
                self.counts[name] = self.counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    return Counter()


def _tp_variant(rank, world, mesh, fn, seed, sequence_parallel, watch) -> dict:
    from torch.distributed.tensor import DTensor  # deferred: torch
    from torch.distributed.tensor.parallel import parallelize_module
    try:
        plan = watch(fn, sequence_parallel)
        model = parallelize_module(tp_lab_block(seed), mesh, plan)
        x = tp_lab_input(seed)
        if sequence_parallel:
            x = x.chunk(world, dim=1)[rank]
        fwd, bwd = _collective_counter(), _collective_counter()
        with fwd:
            y = model(x)
        if isinstance(y, DTensor):
            y = y.full_tensor()
        with bwd:
            _block_loss(y).backward()
        grads = {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
                 for n, p in model.named_parameters()}
        return {"y": y.detach().numpy().copy(),
                "grads": {n: None if g is None else g.detach().numpy().copy()
                          for n, g in grads.items()},
                "local": {n: int(p.to_local().numel() if isinstance(p, DTensor) else p.numel())
                          for n, p in model.named_parameters()},
                "forward": dict(fwd.counts), "backward": dict(bwd.counts)}
    except Exception as exc:
        return _error(exc)


def tp_lab_worker(rank: int, world: int, payload: bytes, seed: int, refused) -> dict:
    from torch.distributed.device_mesh import init_device_mesh  # deferred: torch
    watch = _Watch(refused)
    fn = _load(payload)
    mesh = init_device_mesh("cpu", (world,))
    out = {str(sp): _tp_variant(rank, world, mesh, fn, seed, sp, watch) for sp in (False, True)}
    out["uses_labkit"] = watch.hit
    return out


def tp_run(plan_fn, seed: int) -> list[dict]:
    """Lab 10.7: ``plan_fn(sequence_parallel)`` → a ``parallelize_module`` plan for
    :class:`LabBlock`, run with both values on :data:`WORLD` ranks. Per rank, for
    ``"False"`` and ``"True"``: ``{"y", "grads", "local", "forward", "backward"}`` (the last
    two: collectives by name) or ``"missing"``/``"error"``; the sequence-parallel ``y`` is
    the rank's sequence shard."""
    _precheck(lambda: plan_fn(False))
    return lab_run("10.7", tp_lab_worker, plan_fn, int(seed), args_seen={"seed": int(seed)},
                   timeout_s=90)


# ---- what the last run showed (for the cells after the check) -------------------------

@dataclass(frozen=True)
class TpRunSummary:
    """Lab 10.7's run: the collectives DTensor issued in one forward and one backward of
    the block, for the plan without and with sequence parallelism (rank 0), and the share
    of each linear weight a rank holds."""
    forward: dict
    backward: dict
    shard: float

    def lines(self) -> list[str]:
        out = [f"each rank holds {self.shard:.2f} of every linear weight"]
        for sp in (False, True):
            name = "with sequence parallelism" if sp else "tensor parallel"
            out.append(f"{name:27s} forward {self.forward[sp]}, backward {self.backward[sp]}")
        return out


def tp_summary(last: dict | None = None) -> TpRunSummary | None:
    run = _last("10.7", last)
    if run is None:
        return None
    r0 = run["results"][0]
    if any("missing" in r0[k] or "error" in r0[k] for k in ("False", "True")):
        return None
    base = tp_baseline(run["args"]["seed"])
    w = "attn.wq.weight"
    return TpRunSummary({sp: r0[str(sp)]["forward"] for sp in (False, True)},
                        {sp: r0[str(sp)]["backward"] for sp in (False, True)},
                        r0["False"]["local"][w] / base["numel"][w])
