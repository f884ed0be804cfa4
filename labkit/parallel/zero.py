"""ZeRO stages 1–3 and FSDP: memory per rank against communication per step.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(SC 2020). Memory per rank (§5, Fig. 1) comes from
:func:`labkit.memory.estimator.model_state_bytes`. Communication (§7): plain data
parallelism all-reduces the gradients — a reduce-scatter plus an all-gather, 2Ψ elements
sent per rank (asymptotically; exactly 2(Nd-1)/Nd·Ψ with a ring). ZeRO-1 and -2
reduce-scatter the gradients and all-gather the updated parameters: the same 2Ψ. ZeRO-3
also all-gathers the parameters before the forward *and* again before the backward
(having freed them in between): 3Ψ, 1.5× data parallelism (§7.2.2).

PyTorch's FSDP (Zhao et al., "PyTorch FSDP", VLDB 2023) with ``FULL_SHARD`` (FSDP2's
``fully_shard`` with ``reshard_after_forward=True``) is ZeRO-3; ``SHARD_GRAD_OP``
(``reshard_after_forward=False``) keeps the gathered parameters through backward: ZeRO-2's
traffic with ZeRO-3's memory between steps.

Here the volumes are not typed in: :func:`step_traffic` runs labkit's ring collectives on a
vector of ``dp·k`` elements and counts what each rank sends in their message logs, then
scales to Ψ. :func:`zero_sgd_step` runs a whole sharded step and returns the new
parameters, equal to plain data parallelism.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.memory.estimator import ModelStateBytes, model_state_bytes
from labkit.parallel.collectives import all_gather, all_reduce, reduce_scatter

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
_STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}


@dataclass(frozen=True)
class ZeroTraffic:
    """Per-rank elements sent in one step, by collective, from the simulated logs."""
    strategy: str
    dp: int
    num_params: int
    collectives: tuple[tuple[str, float], ...]     # (what, elements sent per rank)

    @property
    def elements_per_rank(self) -> float:
        return sum(v for _, v in self.collectives)

    @property
    def psi_units(self) -> float:
        """Elements sent per rank over Ψ (→ 2 for DDP/ZeRO-1/2, 3 for ZeRO-3 as dp grows)."""
        return self.elements_per_rank / self.num_params


@dataclass(frozen=True)
class ZeroRow:
    name: str
    dp: int
    memory: ModelStateBytes
    comm_volume_psi: float          # elements sent per rank per step / Ψ
    comm_bytes: float               # bytes sent per rank per step at ``bytes_per_element``


def _sent_per_rank(run) -> float:
    sent = [0] * run.world
    for m in run.log:
        sent[m.sender] += m.nbytes
    return max(sent) / run.outputs[0].itemsize


def _check_strategy(strategy):
    return V.one_of("strategy", strategy, STRATEGIES)


def step_traffic(strategy: str, num_params: int, dp: int, *, probe: int = 8) -> ZeroTraffic:
    """Elements each rank sends in one step of ``strategy`` with Ψ = ``num_params``.

    Runs the collectives of one step on a float64 vector of ``dp·probe`` elements (ring
    algorithms split it into dp equal chunks, so per-element counts scale exactly to Ψ)."""
    strategy = _check_strategy(strategy)
    psi = V.integer("num_params", num_params, low=1)
    d = V.integer("dp", dp, low=1)
    k = V.integer("probe", probe, low=1)
    n = d * k
    scale = psi / n
    vecs = [np.arange(n, dtype=float) + r for r in range(d)]
    ops: list[tuple[str, float]] = []
    if strategy == "ddp":
        ops.append(("all-reduce gradients", _sent_per_rank(all_reduce(vecs, "ring")) * scale))
    else:
        rs = reduce_scatter(vecs, "ring")
        ag = all_gather(list(rs.outputs), "ring")
        if _STAGE[strategy] == 3:
            ops.append(("all-gather parameters (forward)", _sent_per_rank(ag) * scale))
            ops.append(("all-gather parameters (backward)", _sent_per_rank(ag) * scale))
            ops.append(("reduce-scatter gradients", _sent_per_rank(rs) * scale))
        else:
            ops.append(("reduce-scatter gradients", _sent_per_rank(rs) * scale))
            ops.append(("all-gather updated parameters", _sent_per_rank(ag) * scale))
    return ZeroTraffic(strategy, d, psi, tuple(ops))


def zero_table(num_params: int, dp: int, precision: str = "mixed", optimizer: str = "adam",
               bytes_per_element: int = 2) -> list[ZeroRow]:
    """Memory per rank and traffic per step for DDP, ZeRO-1/2/3 and FSDP (full shard)."""
    psi = V.integer("num_params", num_params, low=1)
    d = V.integer("dp", dp, low=1)
    bpe = V.integer("bytes_per_element", bytes_per_element, low=1)
    rows = []
    for name in STRATEGIES:
        mem = model_state_bytes(psi, precision, optimizer, _STAGE[name], d)
        tr = step_traffic(name, psi, d)
        rows.append(ZeroRow(name, d, mem, tr.psi_units, tr.elements_per_rank * bpe))
    return rows


def zero_sgd_step(params, grads, lr: float, strategy: str = "zero3") -> tuple[np.ndarray, float]:
    """One SGD step, data parallel over ``len(grads)`` ranks, the way ``strategy`` runs it.

    ``grads[r]`` is rank r's local gradient (1-D, same size as ``params``). DDP all-reduces
    the gradients and every rank updates everything; ZeRO reduce-scatters, each rank updates
    its own shard (its optimizer state would live only there), then all-gathers. Returns the
    new parameters (rank 0's copy; all ranks agree) and elements sent per rank."""
    strategy = _check_strategy(strategy)
    p = V.array("params", params, ndim=1)
    lr = V.positive("lr", lr)
    if not isinstance(grads, (list, tuple)) or not grads:
        raise ValueError("grads must be a non-empty list of per-rank gradients")
    g = [V.array(f"grads[{r}]", x, shape=p.shape) for r, x in enumerate(grads)]
    d = len(g)
    if strategy == "ddp":
        run = all_reduce(g, "ring")
        return p - lr * run.outputs[0] / d, _sent_per_rank(run)
    sent = 0.0
    if _STAGE[strategy] == 3:       # parameters live sharded; gather them to compute
        shards = np.array_split(p, d)
        ag = all_gather(shards, "ring")
        sent += 2 * _sent_per_rank(ag)      # forward and backward gathers
    rs = reduce_scatter(g, "ring")
    sent += _sent_per_rank(rs)
    mine = np.array_split(p, d)
    new = [mine[r] - lr * rs.outputs[r] / d for r in range(d)]
    if _STAGE[strategy] < 3:
        ag = all_gather(new, "ring")
        sent += _sent_per_rank(ag)
        return ag.outputs[0], sent
    return np.concatenate(new), sent      # ZeRO-3 keeps shards; the next step gathers them


class ZeroAdam:
    """ZeRO stage 1 for Adam over ``torch.distributed`` (Rajbhandari et al. SC'20 §5.1,
    P_os; the sharded optimizer of CS336's assignment 2): rank r keeps Adam's moments only
    for shard r of the flattened parameters.

    ``step()`` (after ``loss.backward()``, each rank's ``p.grad`` the mean over its own rows):
    flatten the gradients, padded to p·⌈N/p⌉ elements; ``reduce_scatter_single`` them, so
    rank r receives the sum of shard r, and divide by p (the mean over ranks); update shard
    r with Adam — ``torch.optim.Adam``'s rule, L2 weight decay added to the gradient
    (``torch/optim/adam.py``): g += λw, m = β₁m + (1-β₁)g, v = β₂v + (1-β₂)g²,
    w -= lr·m̂/(√v̂ + ε) with m̂ = m/(1-β₁ᵗ), v̂ = v/(1-β₂ᵗ); then ``all_gather_single``
    the updated shards and copy them back into the parameters. Each rank holds 2⌈N/p⌉
    state elements instead of Adam's 2N; it sends what DDP's all-reduce sends (a
    reduce-scatter and an all-gather, §7)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        import torch  # deferred: torch
        import torch.distributed as dist
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.numel = sum(p.numel() for p in self.params)
        self.shard = V.ceil_div(self.numel, self.world)
        self.m = torch.zeros(self.shard, dtype=self.params[0].dtype)
        self.v = torch.zeros_like(self.m)
        self.t = 0

    def step(self) -> None:
        import torch  # deferred: torch
        import torch.distributed as dist
        n, s, p = self.numel, self.shard, self.world
        flat = torch.zeros(s * p, dtype=self.m.dtype)
        flat[:n] = torch.cat([q.grad.reshape(-1) for q in self.params])
        g = torch.empty(s, dtype=self.m.dtype)
        dist.reduce_scatter_single(g, flat)
        g /= p
        flat[:n] = torch.cat([q.detach().reshape(-1) for q in self.params])
        w = flat[self.rank * s:(self.rank + 1) * s].clone()
        g += self.weight_decay * w
        (b1, b2), self.t = self.betas, self.t + 1
        self.m.mul_(b1).add_(g, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
        w -= self.lr * (self.m / (1 - b1 ** self.t)) / (
            (self.v / (1 - b2 ** self.t)).sqrt() + self.eps)
        dist.all_gather_single(flat, w)
        with torch.no_grad():
            offset = 0
            for q in self.params:
                q.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
