"""Expert parallelism: top-k routing with a capacity, dispatch and combine by all-to-all.

A mixture-of-experts layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch
Transformer, Fedus et al. 2021) replaces the MLP by E experts and a router. For token x
the router's probabilities are p = softmax(x·W_r) over the E experts; the token goes to its
k most probable experts, and the layer's output is y = Σ_j g_j·E_{e_j}(x). The gates:
Switch (k = 1, §2.1 eq. 2) keeps g = p_e; GShard (k = 2, Algorithm 1) renormalises the
chosen probabilities to sum to 1, g_j = p_{e_j} / Σ_i p_{e_i} — this module does the same
for any k ≥ 2.

**Capacity.** Experts run on fixed-size buffers (the all-to-all and the batched GEMM need
static shapes), so each expert takes at most C tokens of a group of T tokens. Switch §2.2
eq. 3: expert capacity = (tokens per batch / number of experts) × capacity factor; with k
assignments per token DeepSpeed (``deepspeed/moe/sharded_moe.py``: ``_capacity``, top-2
with ``capacity_factor * 2``) and Megatron-LM (``megatron/core/transformer/moe/
moe_utils.py``: ``get_capacity(num_tokens=num_tokens * topk, ...)``) both use
C = ⌈k·T/E · capacity factor⌉. GShard §2.2 bounds the tokens one expert processes by a
uniform threshold of order N/E, its expert capacity. An expert that is asked for more
than C keeps the first C in token order (Megatron-LM's ``drop_policy="position"``) and
drops the rest: a dropped assignment contributes nothing (the layer's residual carries the
token on). GShard instead gives every first choice priority over second choices.

**Expert parallelism.** Rank r of p holds experts r·E/p … (r+1)·E/p - 1 and routes its own
T tokens. It packs a buffer (E, C, d) — slot s of expert e holds the token routed there —
and one ``all_to_all_single`` sends block j (the E/p experts of rank j) to rank j; each rank
runs its experts on the p·C tokens it received; a second all-to-all returns the results,
which each rank combines with its gates (GShard §3.1: dispatch, experts, combine).

:func:`route` and :func:`moe_layer` are the references of labs 10.9 and 10.10,
:func:`dense_reference` the per-token loop they are checked against, :func:`run_simulated`
runs a layer on p threads joined by a simulated all-to-all (:class:`ThreadAllToAll`), and
:func:`capacity_sweep` measures dropped tokens and padding against the capacity factor.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from labkit import validate as V


def capacity(tokens: int, experts: int, k: int, capacity_factor: float) -> int:
    """C = ⌈k·T/E · capacity factor⌉ (see the module docstring for the sources)."""
    t = V.integer("tokens", tokens, low=1)
    e = V.integer("experts", experts, low=1)
    k = V.integer("k", k, low=1, high=e)
    cf = V.positive("capacity_factor", capacity_factor)
    return int(math.ceil(k * t / e * cf - 1e-9))


def route(logits, k: int, capacity_factor: float):
    """Top-k routing with a capacity: ``(expert, slot, gate)``, each (T, k).

    ``logits`` (T, E) torch tensor. ``expert[t, j]`` is token t's j-th most probable expert
    (probabilities p = softmax(logits), descending); ``gate[t, j]`` its gate (p for k = 1,
    p renormalised over the k chosen for k ≥ 2); ``slot[t, j]`` the token's position in that
    expert's buffer — the number of earlier tokens (t' < t) routed to the same expert — or
    -1 where that position is ≥ C = :func:`capacity` (the assignment is dropped)."""
    import torch  # deferred: torch
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(f"logits must be a (tokens, experts) torch tensor, got "
                         f"{type(logits).__name__}")
    T, E = logits.shape
    k = V.integer("k", k, low=1, high=E)
    C = capacity(T, E, k, capacity_factor)
    probs = torch.softmax(logits, dim=-1)
    top, expert = probs.topk(k, dim=-1)
    gate = top / top.sum(-1, keepdim=True) if k > 1 else top
    onehot = torch.nn.functional.one_hot(expert, E)                     # (T, k, E)
    before = onehot.reshape(T * k, E).cumsum(0).reshape(T, k, E) - onehot
    slot = (before * onehot).sum(-1)
    slot = torch.where(slot < C, slot, torch.full_like(slot, -1))
    return expert, slot, gate


def moe_layer(x, router_w, w1, w2, k: int, capacity_factor: float, all_to_all):
    """One rank's expert-parallel MoE layer (the module docstring): ``x`` (T, d) this rank's
    tokens, ``router_w`` (d, E), ``w1`` (E/p, d, h) and ``w2`` (E/p, h, d) this rank's
    experts (expert e(x) = tanh(x·w1[e])·w2[e]), ``all_to_all(output, input)`` with the
    contract of ``torch.distributed.all_to_all_single`` (even splits along dim 0)."""
    import torch  # deferred: torch
    T, d = x.shape
    E, local = router_w.shape[1], w1.shape[0]
    world = E // local
    expert, slot, gate = route(x @ router_w, k, capacity_factor)
    C = capacity(T, E, k, capacity_factor)
    kept = slot >= 0
    token = torch.arange(T).unsqueeze(1).expand(T, k)[kept]
    send = x.new_zeros(E, C, d)
    send[expert[kept], slot[kept]] = x[token]
    recv = torch.empty_like(send)
    all_to_all(recv, send)                     # block j: rank j's tokens for my experts
    h = recv.view(world, local, C, d).transpose(0, 1).reshape(local, world * C, d)
    out = torch.bmm(torch.tanh(torch.bmm(h, w1)), w2)
    back = out.view(local, world, C, d).transpose(0, 1).reshape(E, C, d).contiguous()
    done = torch.empty_like(back)
    all_to_all(done, back)                     # block j: my tokens, through rank j's experts
    y = x.new_zeros(T, d)
    y.index_add_(0, token, gate[kept].unsqueeze(1) * done[expert[kept], slot[kept]])
    return y


def _token_loop(x, router_w, k: int, capacity_factor: float):
    """Token by token (numpy): each token's chosen experts, gates and whether each
    assignment is kept (the expert's first C tokens in token order)."""
    x, r = np.asarray(x, float), np.asarray(router_w, float)
    T, E = x.shape[0], r.shape[1]
    C = capacity(T, E, k, capacity_factor)
    used = [0] * E
    for t in range(T):
        z = x[t] @ r
        p = np.exp(z - z.max())
        p /= p.sum()
        chosen = sorted(range(E), key=lambda e: -p[e])[:k]
        g = p[chosen] / p[chosen].sum() if k > 1 else p[chosen]
        kept = []
        for e in chosen:
            kept.append(used[e] < C)
            used[e] += 1
        yield t, chosen, g, kept


def dense_reference(x, router_w, w1, w2, k: int, capacity_factor: float, *,
                    use_gates: bool = True) -> np.ndarray:
    """The layer token by token, with all E experts in one place (numpy, float64): what
    :func:`moe_layer` must give on each rank for that rank's tokens ``x`` (T, d);
    ``w1`` (E, d, h), ``w2`` (E, h, d). Capacity and drops as in :func:`route`.
    ``use_gates=False`` is a mistake (gates left out), for a check's hint."""
    x = np.asarray(x, float)
    w1, w2 = np.asarray(w1, float), np.asarray(w2, float)
    y = np.zeros_like(x)
    for t, chosen, g, kept in _token_loop(x, router_w, k, capacity_factor):
        for e, ge, keep in zip(chosen, g if use_gates else np.ones(k), kept):
            if keep:
                y[t] += ge * (np.tanh(x[t] @ w1[e]) @ w2[e])
    return y


def kept_assignments(x, router_w, k: int, capacity_factor: float) -> np.ndarray:
    """How many of each token's k assignments are kept (0: the token skips the layer)."""
    return np.array([sum(kept) for _, _, _, kept in _token_loop(x, router_w, k,
                                                                 capacity_factor)])


@dataclass(frozen=True)
class MoeInputs:
    """One lab problem: ``x`` (p, T, d) the tokens of each rank, ``router_w`` (d, E),
    ``w1`` (E, d, h), ``w2`` (E, h, d); rank r holds experts r·E/p … (r+1)·E/p - 1."""
    x: np.ndarray
    router_w: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    k: int
    capacity_factor: float

    @property
    def world(self) -> int:
        return self.x.shape[0]

    def local_experts(self, rank: int):
        e = self.w1.shape[0] // self.world
        return self.w1[rank * e:(rank + 1) * e], self.w2[rank * e:(rank + 1) * e]

    def expected(self) -> list[np.ndarray]:
        """Each rank's output by :func:`dense_reference`."""
        return [dense_reference(self.x[r], self.router_w, self.w1, self.w2, self.k,
                                self.capacity_factor) for r in range(self.world)]


def lab_inputs(seed: int, world: int = 2, tokens: int = 12, dim: int = 6, hidden: int = 8,
               experts_per_rank: int = 2, k: int = 2, capacity_factor: float = 1.0,
               skew: float = 1.0) -> MoeInputs:
    """Seeded inputs for the MoE labs. ``skew`` adds a direction shared by all tokens, so
    the router prefers some experts (the imbalance that makes a capacity drop tokens)."""
    seed = V.integer("seed", seed, low=0)
    world = V.integer("world", world, low=1)
    rng = np.random.default_rng(seed)
    E = V.integer("experts_per_rank", experts_per_rank, low=1) * world
    d, h = V.integer("dim", dim, low=1), V.integer("hidden", hidden, low=1)
    T = V.integer("tokens", tokens, low=1)
    x = rng.standard_normal((world, T, d)) + V.nonnegative("skew", skew) * rng.standard_normal(d)
    return MoeInputs(x, rng.standard_normal((d, E)), rng.standard_normal((E, d, h)) / np.sqrt(d),
                     rng.standard_normal((E, h, d)) / np.sqrt(h), V.integer("k", k, low=1, high=E),
                     V.positive("capacity_factor", capacity_factor))


class ThreadAllToAll:
    """A simulated ``all_to_all_single`` for ``world`` threads, one per rank: each call waits
    for every rank's input, then hands rank r block r of each; ``log`` lists every message
    (call, sender, receiver, bytes) a rank sent to another."""

    def __init__(self, world: int, timeout_s: float = 20.0):
        self.world = V.integer("world", world, low=1)
        self.barrier = threading.Barrier(self.world, timeout=timeout_s)
        self.slots: list = [None] * self.world
        self.calls = [0] * self.world
        self.log: list[tuple[int, int, int, int]] = []
        self.local = threading.local()
        self._lock = threading.Lock()

    def __call__(self, output, input) -> None:
        import torch  # deferred: torch
        r = self.local.rank
        if input.shape[0] % self.world or output.shape != input.shape:
            raise ValueError(f"all_to_all: input {tuple(input.shape)} and output "
                             f"{tuple(output.shape)} must have the same shape, with dim 0 "
                             f"divisible by world={self.world}")
        call = self.calls[r]
        self.calls[r] += 1
        self.slots[r] = input.detach().clone()
        self.barrier.wait()                    # every rank's input is posted
        received = torch.cat([self.slots[j].chunk(self.world)[r] for j in range(self.world)])
        with self._lock:
            for j, block in enumerate(self.slots[r].chunk(self.world)):
                if j != r:
                    self.log.append((call, r, j, block.numel() * block.element_size()))
        self.barrier.wait()                    # every rank has read: slots may be reused
        output.copy_(received)


def run_simulated(layer, inputs: MoeInputs) -> dict:
    """``layer(x, router_w, w1, w2, k, capacity_factor, all_to_all)`` on ``inputs.world``
    threads joined by a :class:`ThreadAllToAll`: each rank's output (or error), the
    all-to-all calls per rank and the bytes each rank sent."""
    import torch  # deferred: torch
    a2a = ThreadAllToAll(inputs.world)
    out: list = [None] * inputs.world
    errors: list = [None] * inputs.world

    def rank_main(r: int) -> None:
        a2a.local.rank = r
        w1, w2 = inputs.local_experts(r)
        try:
            with torch.no_grad():
                y = layer(torch.from_numpy(inputs.x[r].copy()), torch.from_numpy(inputs.router_w),
                          torch.from_numpy(w1.copy()), torch.from_numpy(w2.copy()), inputs.k,
                          inputs.capacity_factor, a2a)
            out[r] = y.detach().numpy().copy() if isinstance(y, torch.Tensor) else y
        except threading.BrokenBarrierError:
            errors[r] = "BrokenBarrierError: the ranks called all_to_all different numbers of times"
        except NotImplementedError:
            errors[r] = "NotImplementedError"
            a2a.barrier.abort()
        except Exception as exc:
            errors[r] = f"{type(exc).__name__}: {exc}"
            a2a.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(inputs.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent = [0] * inputs.world
    for _, src, _, nbytes in a2a.log:
        sent[src] += nbytes
    return {"y": out, "errors": errors, "calls": list(a2a.calls), "sent": sent}


def simulated_run(layer, problem: dict) -> dict:
    """Lab 10.10's derive function: :func:`run_simulated` on ``lab_inputs(**problem)``."""
    return run_simulated(layer, lab_inputs(**problem))


@dataclass(frozen=True)
class CapacitySweep:
    """Routing of one batch at each capacity factor: ``capacity`` C, ``dropped`` fraction of
    the T·k assignments, ``padding`` fraction of the E·C buffer slots left empty (compute and
    all-to-all bytes spent on nothing); ``loads`` tokens asked of each expert (before the
    capacity), ``imbalance`` = max load / mean load — the capacity factor from which nothing
    is dropped; ``aux_loss`` Switch's balancing loss E·Σ f_e·P_e (§2.2 eq. 4, α = 1: f_e the
    share of assignments, P_e the mean probability of expert e; 1 when balanced)."""
    factors: tuple[float, ...]
    capacity: tuple[int, ...]
    dropped: tuple[float, ...]
    padding: tuple[float, ...]
    loads: tuple[int, ...]
    imbalance: float
    aux_loss: float
    k: int


def capacity_sweep(route_fn, logits, k: int, factors=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
                   ) -> CapacitySweep:
    """Route ``logits`` (T, E) with ``route_fn(logits, k, cf)`` at each capacity factor."""
    import torch  # deferred: torch
    if isinstance(logits, np.ndarray):
        logits = torch.from_numpy(logits)
    T, E = logits.shape
    factors = tuple(V.positive(f"factors[{i}]", f) for i, f in enumerate(factors))
    caps, dropped, padding = [], [], []
    for cf in factors:
        expert, slot, _ = route_fn(logits, k, cf)
        slot = np.asarray(slot)
        C = capacity(T, E, k, cf)
        kept = int((slot >= 0).sum())
        caps.append(C)
        dropped.append(1 - kept / (T * k))
        padding.append(1 - kept / (E * C))
    expert = np.asarray(route_fn(logits, k, factors[-1])[0])
    loads = np.bincount(expert.ravel(), minlength=E)
    probs = torch.softmax(logits, -1).mean(0).numpy()
    aux = float(E * np.sum(loads / loads.sum() * probs))
    return CapacitySweep(factors, tuple(caps), tuple(dropped), tuple(padding),
                         tuple(int(v) for v in loads), float(loads.max() / loads.mean()),
                         aux, int(k))


def sweep_logits(seed: int = 0, tokens: int = 512, experts: int = 8, dim: int = 16,
                 skew: float = 1.0) -> np.ndarray:
    """Router logits of a batch whose tokens share a direction (``skew``), so the router is
    unbalanced the way an untrained one is."""
    inp = lab_inputs(seed, world=1, tokens=tokens, dim=dim, hidden=1,
                     experts_per_rank=experts, skew=skew)
    return inp.x[0] @ inp.router_w


def all_to_all_bytes(experts: int, capacity_: int, dim: int, world: int,
                     bytes_per_element: int = 8) -> float:
    """Bytes one rank sends in one MoE layer's forward: two all-to-alls (dispatch, combine),
    each sending (p-1)/p of its E·C·d buffer."""
    return 2 * (world - 1) / world * experts * capacity_ * dim * bytes_per_element
