"""What chapter 10's checkers (:mod:`labkit.check.ch10`) run and judge, beside the
checkers themselves: the cases they draw, the derive functions that run an answer and
return plain data (``answer.derive`` / ``ref.derive``: the counted all-reduce of 10.3, the
plan of 10.5), and the validators of the per-rank results of the real runs on two gloo
processes (:mod:`labkit.parallel.zero_lab`, :mod:`~labkit.parallel.tp_lab`,
:mod:`~labkit.parallel.fsdp_lab`, :mod:`~labkit.parallel.moe_lab`), which raise ``Wrong``
with the hint or return.
"""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, expect_close
from labkit.check.handles import UsesLabkit
from labkit.parallel import collectives, moe, mp_labs
from labkit.parallel.planner import GPTModel
from labkit.validate import ceil_div


def _seed(rng) -> int:
    return int(rng.integers(0, 2 ** 31 - 1))


def _worker_verdict(results: list, what: str) -> None:
    """NotImplementedError, UsesLabkit or Wrong for a real run's per-rank results that did
    not get to an answer."""
    if any(r.get("uses_labkit") for r in results):
        raise UsesLabkit(next(r["uses_labkit"] for r in results if r.get("uses_labkit")))
    if any(r.get("missing") for r in results):
        raise NotImplementedError
    for rank, r in enumerate(results):
        if "error" in r:
            raise Wrong(f"your {what} raised {r['error']} on rank {rank} of the real run"
                        + (f":\n{r['traceback'].strip()}" if r.get("traceback") else "."))


# ---- 10.3 ------------------------------------------------------------------------------

class CountedAllReduce:
    """labkit's simulated :func:`~labkit.parallel.collectives.all_reduce`, recording each
    call: the world, the algorithm, the inputs, rank 0's output and the bytes rank 0 sent."""

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, data, algorithm: str = "ring", **kwargs):
        inputs = [np.array(a, copy=True) for a in data]
        run = collectives.all_reduce(data, algorithm, **kwargs)
        self.calls.append({"world": len(inputs), "algorithm": str(algorithm),
                           "inputs": inputs, "output": np.array(run.outputs[0]),
                           "rank0_bytes": int(sum(m.nbytes for m in run.log if m.sender == 0))})
        return run


def row_parallel_run(fn, x, w, tp) -> dict:
    """``fn(x, w, tp, all_reduce)`` with a :class:`CountedAllReduce`: its (Y, bytes) and
    every all-reduce it issued."""
    counted = CountedAllReduce()
    got = fn(x, w, tp, counted)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return {"pair": False, "calls": counted.calls}
    y, sent = got
    return {"pair": True, "y": np.asarray(y, dtype=float), "sent": float(sent),
            "calls": counted.calls}


# ---- 10.5 ------------------------------------------------------------------------------

# (model, t, p, d, b); the last two have m = B/(d·b) < p (m = 4 and 2 on 8 stages)
_PLANS = ((dict(layers=48, hidden=8192, heads=64, batch=1536), 8, 2, 32, 1),
          (dict(layers=128, hidden=25600, heads=160, batch=3072), 8, 64, 6, 1),
          (dict(layers=24, hidden=2304, heads=24, batch=512), 1, 1, 32, 2),
          (dict(layers=96, hidden=12288, heads=96, batch=64), 8, 8, 2, 4),
          (dict(layers=40, hidden=6144, heads=48, batch=1024), 4, 4, 16, 1),
          (dict(layers=32, hidden=4096, heads=32, batch=16), 4, 8, 2, 2),
          (dict(layers=96, hidden=12288, heads=96, batch=8), 8, 8, 4, 1))


def first_stage_run(fn, fields: dict, tp, pp, dp, microbatch) -> float:
    """``fn(GPTModel(**fields), tp, pp, dp, microbatch)`` as a number."""
    return float(fn(GPTModel(**fields), tp, pp, dp, microbatch))


def _drawn_plan(rng):
    heads = int(rng.choice([16, 32, 48]))
    layers, t, p = int(rng.choice([24, 32, 48])), int(rng.choice([2, 4, 8])), int(rng.choice([2, 4, 8]))
    d, b = int(rng.choice([1, 2, 4])), int(rng.choice([1, 2]))
    batch = d * b * int(rng.integers(1, 3 * p))          # m from 1 to 3p - 1: often m < p
    return dict(layers=layers, hidden=128 * heads, heads=heads, batch=batch), t, p, d, b


# ---- 10.6: ZeRO-1 over gloo ------------------------------------------------------------

ZERO_TOL = 1e-6
ZERO_SLACK_BYTES = 64             # a step counter or two beyond the shards' m and v


def judge_zero(results: list, base: dict, sizes, world: int = mp_labs.WORLD,
               scaled: dict | None = None) -> None:
    """Raise unless the per-rank results of :func:`labkit.parallel.zero_lab.zero_run` are a
    ZeRO-1 Adam: parameters within 1e-6 of ``base`` (one process, ``torch.optim.Adam``),
    a reduce-scatter and an all-gather (no all-reduce) per step, and each rank keeping at
    most 1/p of Adam's state (plus the padding of the last shard)."""
    _worker_verdict(results, "class")
    calls = results[0]["calls"]
    numel = base["numel"]
    padded = world * ceil_div(numel, world)
    for step in range(len(base["params"])):
        ops = [c for c in calls if c["step"] == step and c["phase"] == "step"]
        names = {c["op"] for c in ops}
        if "all_reduce" in names:
            raise Wrong(f"step {step}: your step() called all_reduce. ZeRO-1 reduce-scatters "
                        f"the gradients instead (dist.reduce_scatter_single): each rank needs "
                        f"the summed gradient of its own shard only, then all-gathers the "
                        f"updated parameters — the same bytes as DDP's one all-reduce.")
        rs = [c for c in ops if c["op"].startswith("reduce_scatter")]
        ag = [c for c in ops if c["op"].startswith("all_gather")]
        if not rs:
            raise Wrong(f"step {step}: no reduce-scatter: flatten the gradients (padded to "
                        f"p·⌈N/p⌉ = {padded}) and dist.reduce_scatter_single them, so rank r "
                        f"receives the sum of shard r.")
        if not ag:
            raise Wrong(f"step {step}: no all-gather: after updating its shard each rank must "
                        f"dist.all_gather_single the shards back into every rank's parameters.")
        if sum(c["numel"] for c in rs) < numel or sum(c["numel"] for c in ag) < numel:
            raise Wrong(f"step {step}: the reduce-scatters carried "
                        f"{sum(c['numel'] for c in rs)} and the all-gathers "
                        f"{sum(c['numel'] for c in ag)} elements; the model has {numel} "
                        f"parameters, all of which must go through both.")
    for rank, r in enumerate(results):
        for step, (got, want) in enumerate(zip(r["params"], base["params"])):
            err = max(float(np.max(np.abs(np.asarray(g) - w))) for g, w in zip(got, want))
            if err <= ZERO_TOL:
                continue
            others = results[1 - rank]["params"][step] if world == 2 else got
            if max(float(np.max(np.abs(np.asarray(g) - np.asarray(o))))
                   for g, o in zip(got, others)) > ZERO_TOL:
                raise Wrong(f"step {step}: the ranks hold different parameters (rank {rank} "
                            f"is off by {err:.3g}): every rank must copy the all-gathered "
                            f"vector back into all of its parameters, not only its shard.")
            if scaled is not None and max(
                    float(np.max(np.abs(np.asarray(g) - w)))
                    for g, w in zip(got, scaled["params"][step])) <= ZERO_TOL:
                raise Wrong(f"step {step}: your parameters are what Adam gives with gradients "
                            f"{world}× too large: the reduce-scatter sums over the ranks; "
                            f"divide by the world size for the mean (with weight decay added "
                            f"to the gradient, Adam is not blind to the scale).")
            raise Wrong(f"step {step}: rank {rank}'s parameters differ from torch.optim.Adam "
                        f"on one process with the whole batch by up to {err:.3g} (tolerance "
                        f"{ZERO_TOL:g}). Adam as torch has it: g += λw; m = β₁m + (1-β₁)g; "
                        f"v = β₂v + (1-β₂)g²; w -= lr·(m/(1-β₁ᵗ)) / (√(v/(1-β₂ᵗ)) + ε).")
    share = base["state_bytes"] / world
    limit = share + 2 * 8 * (padded - numel) + ZERO_SLACK_BYTES
    for rank, r in enumerate(results):
        held = r["held_bytes"]
        if held <= limit:
            continue
        raise Wrong(f"rank {rank} keeps {held:,} bytes of tensors between steps, "
                    f"{held / share:.1f}× ZeRO-1's share: 1/p of Adam's {base['state_bytes']:,} "
                    f"is {share:,.0f} bytes, m and v for its shard of ⌈N/p⌉ = {padded // world} "
                    f"elements. Either it holds m and v for all {numel} parameters, or it keeps "
                    f"the flattened gradients or parameters on self — those are temporaries.")


def _zero_sizes(rng) -> tuple[int, int, int]:
    return int(rng.integers(12, 20)), int(rng.integers(48, 80)), int(rng.integers(7, 14))


# ---- 10.7: a parallelize_module plan ---------------------------------------------------

LINEARS = ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.up", "mlp.down")
# forward collectives of one block: Megatron's g, one all-reduce after each row-parallel
# layer (Shoeybi et al. 2019 §3: "two all-reduces in the forward path"); with sequence
# parallelism each becomes an all-gather before and a reduce-scatter after (Korthikanti
# et al. 2022 §4.2.2)
TP_FORWARD = {False: {"all_reduce": 2},
              True: {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}}


def judge_tp(results: list, base: dict, world: int = mp_labs.WORLD) -> None:
    """Raise unless the per-rank results of :func:`labkit.parallel.tp_lab.tp_run` are
    Megatron's split (both plans): every linear layer sharded 1/t, the forward's
    collectives those of :data:`TP_FORWARD`, output and gradients equal to one process."""
    if any(r.get("uses_labkit") for r in results):
        raise UsesLabkit(next(r["uses_labkit"] for r in results if r.get("uses_labkit")))
    for sp in (False, True):
        label = f"tp_plan(sequence_parallel={sp})"
        runs = [r[str(sp)] for r in results]
        if any(v.get("missing") for v in runs):
            raise NotImplementedError
        if "error" in runs[0]:
            raise Wrong(f"{label}: the block raised {runs[0]['error']} with your plan. Q, K, V "
                        f"and mlp.up are ColwiseParallel, attn.wo and mlp.down RowwiseParallel"
                        + (" (output_layouts=Shard(1)); norm1 and norm2 SequenceParallel; attn "
                           "and mlp PrepareModuleInput from Shard(1) to Replicate()." if sp
                           else "."))
        for name in LINEARS:
            n = base["numel"][f"{name}.weight"]
            if runs[0]["local"][f"{name}.weight"] * world != n:
                raise Wrong(f"{label}: {name}.weight is not sharded (rank 0 holds "
                            f"{runs[0]['local'][name + '.weight']} of its {n} elements): "
                            f"tensor parallelism splits every linear layer of the block over "
                            f"the {world} ranks.")
        fwd = {k: v for k, v in runs[0]["forward"].items() if v}
        if fwd != TP_FORWARD[sp]:
            ar = fwd.get("all_reduce", 0)
            raise Wrong(f"{label}: the forward issued {fwd or 'no collectives'}; Megatron's "
                        f"split issues {TP_FORWARD[sp]}. "
                        + ("An all-gather means a column-parallel layer gathered its output "
                           "(output_layouts=Replicate()): pair each ColwiseParallel with a "
                           "RowwiseParallel so the only communication is one all-reduce per "
                           "half of the block." if not sp and not ar else
                           "With sequence parallelism the activations between the halves stay "
                           "sharded along the sequence: each half all-gathers its input "
                           "(PrepareModuleInput) and reduce-scatters its output "
                           "(RowwiseParallel(output_layouts=Shard(1))), no all-reduce." if sp else
                           "Shard Q, K, V and mlp.up by columns, attn.wo and mlp.down by rows."))
        want_y = base["y"]
        for rank, v in enumerate(runs):
            want = np.split(want_y, world, axis=1)[rank] if sp else want_y
            expect_close(v["y"], want, f"{label}: the block's output on rank {rank}",
                         rtol=1e-9, atol=1e-12)
            for name, g in base["grads"].items():
                expect_close(v["grads"][name], g, f"{label}: the gradient of {name}",
                             rtol=1e-9, atol=1e-12)


# ---- 10.8: FSDP2 -----------------------------------------------------------------------

def judge_fsdp(results: list, base: dict, world: int = mp_labs.WORLD) -> None:
    """Raise unless the per-rank results of :func:`labkit.parallel.fsdp_lab.fsdp_run` are a
    bottom-up FSDP2 wrapping: every parameter a DTensor shard, one all-gather per unit in
    each forward and one reduce-scatter per unit in each backward (units: the blocks and
    the root), parameters after each step equal to one process."""
    _worker_verdict(results, "wrapping")
    names, units = base["names"], base["units"]
    local = [sum(r["local"][i] for r in results) for i in range(len(names))]
    for i, name in enumerate(names):
        if results[0]["local"][i] < 0:
            raise Wrong(f"{name} is not sharded (a plain tensor, whole on every rank): "
                        f"fully_shard the root last — fully_shard(model, mesh=mesh) takes the "
                        f"parameters no block owns.")
        if local[i] != base["numel"][i]:
            raise Wrong(f"{name}: the ranks' shards hold {local[i]} of its {base['numel'][i]} "
                        f"elements.")
    calls = results[0]["calls"]
    for step in range(len(base["params"])):
        gathers = sum(1 for c in calls if c["step"] == step and c["phase"] == "forward"
                      and c["op"].startswith("all_gather"))
        scatters = sum(1 for c in calls if c["step"] == step and c["phase"] == "backward"
                       and c["op"].startswith("reduce_scatter"))
        if gathers == 1 and units > 1:
            raise Wrong(f"step {step}: one all-gather brought every parameter at once: "
                        f"fully_shard groups the parameters of a module into one unit, so "
                        f"wrapping only the root gathers the whole model for the forward. "
                        f"fully_shard each block first (bottom-up), then the root: one "
                        f"block's parameters are unsharded at a time.")
        if gathers != units or scatters != units:
            raise Wrong(f"step {step}: {gathers} all-gathers in forward and {scatters} "
                        f"reduce-scatters in backward; with each of the {units - 1} blocks and "
                        f"the root wrapped there is one of each per unit ({units}).")
    for rank, r in enumerate(results):
        for step, (got, want) in enumerate(zip(r["params"], base["params"])):
            for name, g, w in zip(names, got, want):
                expect_close(g, w, f"rank {rank}, step {step}: {name}", rtol=1e-9,
                             atol=1e-12, hint="each rank trains on its own rows; FSDP "
                             "averages the gradients in its reduce-scatter.")


# ---- 10.9: top-k routing with a capacity -----------------------------------------------

def _route_cases(rng):
    import torch  # deferred: torch
    fixed = [(10, 4, 1, 1.0), (12, 4, 2, 1.0), (9, 3, 2, 0.5), (8, 4, 2, 4.0), (16, 8, 3, 1.25),
             (7, 5, 1, 0.3)]
    drawn = [(int(rng.integers(6, 30)), int(rng.integers(2, 9)), 0, float(rng.uniform(0.4, 2)))
             for _ in range(3)]
    for T, E, k, cf in fixed + drawn:
        k = k or int(rng.integers(1, min(E, 3) + 1))
        skew = rng.normal(size=E) * 1.5          # a router that prefers some experts
        logits = torch.from_numpy(rng.normal(size=(T, E)) + skew)
        yield logits, k, cf


def _as_route(got, T, k):
    import torch  # deferred: torch
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Wrong("return three (tokens, k) tensors: (expert, slot, gate).")
    out = [torch.as_tensor(v) for v in got]
    if any(tuple(v.shape) != (T, k) for v in out):
        raise Wrong(f"expert, slot and gate must each have shape (tokens, k) = ({T}, {k}); "
                    f"yours are {[tuple(v.shape) for v in out]}.")
    return out


# ---- 10.10: dispatch and combine through all-to-all ------------------------------------

def _moe_problem(rng, world: int) -> dict:
    # two or three experts per rank: with one, a buffer read as (E/p, p, ...) instead of
    # (p, E/p, ...) would hold the same rows
    return dict(seed=_seed(rng), world=world, tokens=int(rng.integers(8, 17)), dim=6, hidden=8,
                experts_per_rank=int(rng.integers(2, 4)), k=int(rng.integers(1, 3)),
                capacity_factor=float(rng.uniform(0.6, 1.4)), skew=1.0)


def judge_moe(ys: list, calls: list, problem: dict, how: str) -> None:
    """Raise unless each rank's output is the per-token loop's and each rank called
    all_to_all twice (dispatch, combine)."""
    inp = moe.lab_inputs(**problem)
    where = (f"{how}, {inp.world} ranks × {problem['experts_per_rank']} experts, "
             f"{problem['tokens']} tokens per rank, k={inp.k}, capacity factor "
             f"{inp.capacity_factor:.2f}")
    for rank, n in enumerate(calls):
        if n == 0:
            raise Wrong(f"{where}: rank {rank} never called all_to_all; the other ranks' "
                        f"experts are only reachable through it.")
        if n != 2:
            raise Wrong(f"{where}: rank {rank} called all_to_all {n} times: once to dispatch "
                        f"the (E, C, d) buffer, once to return the experts' outputs.")
    want = inp.expected()
    for rank, (y, w) in enumerate(zip(ys, want)):
        y = np.asarray(y, dtype=float)
        if y.shape == w.shape and np.allclose(y, w, rtol=1e-9, atol=1e-12):
            continue
        if y.shape == w.shape:
            gone = moe.kept_assignments(inp.x[rank], inp.router_w, inp.k,
                                        inp.capacity_factor) == 0
            if np.any(np.abs(y[gone]) > 1e-12):
                raise Wrong(f"{where}: rank {rank}: tokens whose every assignment was dropped "
                            f"(slot -1) got a non-zero output; a dropped assignment is in no "
                            f"buffer and adds nothing — and -1 is not an index (Python reads "
                            f"it as the last slot).")
            alt = moe.dense_reference(inp.x[rank], inp.router_w, inp.w1, inp.w2, inp.k,
                                      inp.capacity_factor, use_gates=False)
            if np.allclose(y, alt, rtol=1e-9, atol=1e-12):
                raise Wrong(f"{where}: rank {rank}: the outputs are not scaled by the gates: "
                            f"combine y_t = Σ_j gate[t, j]·(expert e_j's output for t).")
        expect_close(y, w, f"{where}: rank {rank}'s output", rtol=1e-9, atol=1e-12,
                     hint="the received buffer (p·E_local, C, d) holds, for each source rank "
                          "j, its slots for your E_local experts: view it as (p, E_local, C, "
                          "d) before running each expert on its p·C rows, and undo that "
                          "before the second all_to_all.")
