"""Chapter 10's exercises: pipeline schedules, tensor parallelism, ZeRO, a plan's memory, and
the labs that run on two gloo processes (a ZeRO-1 optimizer, a ``parallelize_module``
plan, an FSDP2 wrapping, an expert-parallel MoE layer).

Every checker takes handles (``answer``, ``ref``, ``rng``): inputs are drawn from ``rng``;
the real runs happen inside ``answer.derive`` functions (:mod:`labkit.parallel.zero_lab`,
:mod:`~labkit.parallel.tp_lab`, :mod:`~labkit.parallel.fsdp_lab`,
:mod:`~labkit.parallel.moe_lab`, :func:`labkit.parallel.moe.simulated_run`), which launch
them next to the answer and return plain data; expected values come from ``ref`` or from
one process doing the same work the plain way (``torch.optim.Adam`` on the whole batch, the
unsharded block, the per-token MoE loop). The cases drawn, the other derive functions and
the judges of the real runs' per-rank results live in :mod:`labkit.check.ch10_runs`.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.check.ch10_runs import (_PLANS, _as_route, _drawn_plan, _moe_problem,
                                    _route_cases, _seed, _worker_verdict, _zero_sizes,
                                    first_stage_run, judge_fsdp, judge_moe, judge_tp,
                                    judge_zero, row_parallel_run)
from labkit.check.core import Wrong, exercise, expect_close
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.memory.estimator import activation_bytes_per_layer
from labkit.parallel import fsdp_lab, moe, moe_lab, mp_labs, mp_real, tp_lab, zero, zero_lab
from labkit.parallel.pipeline import pipeline_schedule, stage_order
from labkit.parallel.planner_cost import GPTModel, plan_memory
from labkit.validate import ceil_div


def one_f_one_b_order(stages, microbatches, stage):
    """Reference: stage ``stage``'s 1F1B order as a list of ("F" or "B", micro-batch)."""
    return [(k, j) for k, j, _ in stage_order("1f1b", stages, microbatches, stage)]


def interleaved_bubble(stages, microbatches, chunks):
    """Reference: bubble time over ideal time of the interleaved 1F1B schedule (v = chunks;
    v = 1 is plain 1F1B), read off the simulation."""
    kind = "interleaved" if chunks > 1 else "1f1b"
    return pipeline_schedule(kind, stages, microbatches, chunks).bubble_fraction


def row_parallel(x, w, tp, all_reduce):
    """Reference: (Y, bytes rank 0 sends) of a row-parallel linear layer X·W on ``tp`` ranks:
    X split by columns, W by rows, partial products summed by the ring ``all_reduce``
    passed in (labkit's, :func:`labkit.parallel.collectives.all_reduce`)."""
    parts = [xi @ wi for xi, wi in zip(np.split(x, tp, axis=1), np.split(w, tp, axis=0))]
    run = all_reduce([p.ravel() for p in parts], "ring")
    sent = sum(m.nbytes for m in run.log if m.sender == 0)
    return run.outputs[0].reshape(parts[0].shape), sent


def zero3_bytes(num_params, dp):
    """Reference: ZeRO-3 model-state bytes per rank, mixed-precision Adam: 16·⌈Ψ/dp⌉."""
    return 16 * math.ceil(num_params / dp)


def first_stage_bytes(model, tp, pp, dp, microbatch):
    """Reference: bytes per GPU of the first pipeline stage — model states of Ψ/(t·p)
    parameters (mixed Adam, no ZeRO) + min(p, m) micro-batches in flight × l/p layers of
    2sbh (full recomputation) + one layer's activations without recomputation."""
    return sum(plan_memory(model, tp, pp, dp, microbatch, 0, "full").values())


# ---- 10.1 ----------------------------------------------------------------------------------

def _order(got, p, m, s) -> list[tuple[str, int]]:
    try:
        return [(str(k), int(j)) for k, j in got]
    except (TypeError, ValueError):
        raise Wrong(f"p={p}, m={m}, stage {s}: return a list of (kind, micro-batch) pairs "
                    f"such as [('F', 0), ('B', 0)].") from None


@exercise("10.1", "the 1F1B order of one stage", reference=one_f_one_b_order,
          binds="one_f_one_b_order",
          answers=("labkit.parallel.pipeline:stage_order",
                   "labkit.parallel.pipeline:pipeline_schedule"))
def _(answer, ref, rng):
    # (5, 2), (6, 3), (4, 1), (8, 3): m < p - s - 1 on the first stages (warm-up capped at m)
    cases = [(4, 8), (4, 4), (3, 2), (1, 3), (5, 7), (2, 1), (5, 2), (6, 3), (4, 1), (8, 3)]
    cases += [(int(rng.integers(2, 9)), int(rng.integers(1, 13))) for _ in range(3)]
    for p, m in cases:
        for s in range(p):
            want = ref(p, m, s)
            want = [(str(k), int(j)) for k, j in want]
            got = _order(answer(p, m, s), p, m, s)
            if got == want:
                continue
            if got == [("F", j) for j in range(m)] + [("B", j) for j in range(m)]:
                raise Wrong(f"p={p}, m={m}, stage {s}: that is GPipe's order (all forwards, "
                            f"then all backwards); 1F1B starts a backward as soon as the "
                            f"stage has run its warm-up forwards.")
            want_warm = min(p - s - 1, m)
            beyond = sorted({j for _, j in got if j >= m})
            if beyond:
                raise Wrong(f"p={p}, m={m}, stage {s}: you scheduled micro-batch {beyond[0]}, "
                            f"but there are only m = {m}: the warm-up is min(p - s - 1, m) = "
                            f"{want_warm} forwards, not p - s - 1 = {p - s - 1}.")
            if sorted(got) != sorted(want):
                raise Wrong(f"p={p}, m={m}, stage {s}: every micro-batch needs exactly one F "
                            f"and one B; you returned {len(got)} tasks.")
            warm = next((i for i, (k, _) in enumerate(got) if k == "B"), len(got))
            if warm != want_warm + (1 if want_warm < m else 0):
                raise Wrong(f"p={p}, m={m}, stage {s}: the first backward comes after {warm} "
                            f"forwards; stage s runs min(p - s - 1, m) = {want_warm} warm-up "
                            f"forwards, then one more forward (if any is left) before its "
                            f"first backward.")
            raise Wrong(f"p={p}, m={m}, stage {s}: after the warm-up a stage alternates one "
                        f"forward and one backward (steady state), then drains the "
                        f"remaining backwards. Expected {want}.")


# ---- 10.2 ----------------------------------------------------------------------------------

formula_exercise(
    "10.2", "bubble fraction of the interleaved schedule", interleaved_bubble,
    cases=[(4, 8, 1), (4, 8, 2), (8, 64, 4), (2, 6, 3), (8, 16, 1), (6, 12, 2)],
    call=lambda p, m, v: f"bubble fraction for p={p}, m={m}, v={v}", rtol=1e-9, atol=1e-8,
    answers=("labkit.parallel.pipeline:bubble_formula",
             "labkit.parallel.pipeline:pipeline_schedule"),
    shortcuts=[
        (equals(lambda p, m, v: (p - 1) / m),
         "that is the bubble without interleaving; with v chunks per device each bubble slot "
         "lasts 1/v as long."),
        (equals(lambda p, m, v: (p - 1) / (v * m + p - 1), lambda p, m, v: (p - 1) / (m + p - 1)),
         "that is the idle share of the whole step (bubble / (ideal + bubble)); the paper's "
         "bubble fraction divides the bubble by the ideal time m·(t_f + t_b).")],
    hint="Narayanan et al. SC'21 §2.2.2: (p-1)/(v·m).")


# ---- 10.3 ----------------------------------------------------------------------------------

@exercise("10.3", "a row-parallel linear layer and its all-reduce", reference=row_parallel,
          binds="row_parallel", answers=("labkit.parallel.tensor_parallel:row_parallel_linear",))
def _(answer, ref, rng):
    shapes = [(2, (3, 4, 5)), (4, (2, 8, 4)), (1, (2, 3, 2)), (8, (5, 16, 8))]
    t = int(rng.choice([2, 4]))
    shapes.append((t, (int(rng.integers(2, 6)), t * int(rng.integers(1, 4)), int(rng.integers(t, 9)))))
    for t, (n, k, o) in shapes:
        x = rng.normal(size=(n, k)) * 10.0 ** rng.integers(-1, 2)
        w = rng.normal(size=(k, o))
        got = answer.derive(row_parallel_run, x, w, t)
        if not got["pair"]:
            raise Wrong("return a pair (Y, bytes_sent_by_rank_0).")
        want = ref.derive(row_parallel_run, x, w, t)
        parts = [xi @ wi for xi, wi in zip(np.split(x, t, axis=1), np.split(w, t, axis=0))]
        calls = got["calls"]
        if t > 1 and not calls:
            raise Wrong(f"tp={t}: no all-reduce was issued. Call the all_reduce you are given "
                        f"on the flattened partial products (returning what it would cost is "
                        f"not running it), and read the bytes from its run.log.")
        if len(calls) > 1:
            raise Wrong(f"tp={t}: {len(calls)} all-reduces were issued; a row-parallel layer "
                        f"needs one, of the {t} partial products.")
        y = got["y"]
        if t > 1 and y.shape == want["y"].shape and np.allclose(y, parts[0]):
            raise Wrong(f"tp={t}: Y is rank 0's partial product X_0·W_0 alone; the partial "
                        f"sums of all ranks must be all-reduced.")
        if calls:
            c = calls[0]
            if c["world"] != t or not all(
                    np.allclose(np.ravel(a), p.ravel(), rtol=1e-12, atol=1e-12)
                    for a, p in zip(c["inputs"], parts)):
                raise Wrong(f"tp={t}: the all-reduce was given {c['world']} arrays that are "
                            f"not the partial products; rank i's input is X_i·W_i flattened "
                            f"(X split by columns, W by rows, np.split).")
        expect_close(y, want["y"], f"Y for tp={t}", rtol=1e-10, atol=1e-10,
                     hint="Y is the all-reduce's output (any rank's), reshaped to "
                          "(rows of X, columns of W).")
        issued = calls[0]["rank0_bytes"] if calls else 0
        if np.isclose(got["sent"], want["sent"], rtol=1e-12, atol=0) and \
                np.isclose(got["sent"], issued, rtol=1e-12, atol=0):
            continue
        n_bytes = want["y"].size * want["y"].itemsize
        if t > 2 and np.isclose(got["sent"], n_bytes):
            raise Wrong(f"tp={t}: {got['sent']:g} bytes is the whole output; a ring "
                        f"all-reduce sends 2(t-1)/t of it per rank — count the messages in "
                        f"the log.")
        if t > 1 and np.isclose(got["sent"], (t - 1) / t * n_bytes):
            raise Wrong(f"tp={t}: {got['sent']:g} bytes is only the reduce-scatter half; "
                        f"the ring's all-gather sends as much again.")
        raise Wrong(f"tp={t}: bytes rank 0 sends = {got['sent']:g}, but the all-reduce you "
                    f"ran sent {issued:g} from rank 0. Hint: sum m.nbytes over run.log for "
                    f"the messages whose sender is 0.")


# ---- 10.4 ----------------------------------------------------------------------------------

def _sharded(wrong):
    """The test "the answer is ``wrong(Ψ, dp)``", for dp > 1 only (on one rank every ZeRO
    stage holds all 16Ψ bytes, the right answer)."""
    return lambda got, psi, dp: dp > 1 and equals(wrong, rtol=1e-6)(got, psi, dp)


formula_exercise(
    "10.4", "ZeRO-3 bytes per rank", zero3_bytes,
    cases=[(7_000_000_000, 8), (175_000_000_000, 64), (1_000_003, 7), (10, 1),
           (1_500_000_000, 3)],
    call=lambda psi, dp: f"ZeRO-3 bytes for Ψ={psi:,}, dp={dp}", rtol=0, atol=16,
    answers=("labkit.memory.estimator:model_state_bytes",),
    shortcuts=[
        (_sharded(lambda psi, dp: 2 * psi + 14 * psi / dp),
         "that is ZeRO-2 (fp16 parameters replicated); ZeRO-3 partitions the parameters too."),
        (_sharded(lambda psi, dp: 4 * psi + 12 * psi / dp),
         "that is ZeRO-1 (only optimizer states split)."),
        (_sharded(lambda psi, dp: 16 * psi),
         "16Ψ is plain data parallelism; ZeRO-3 divides all model states by dp."),
        (scaled(lambda psi, dp: psi / dp, 12, 8, rtol=1e-6),
         "count all of mixed-precision Adam's 16 bytes per parameter: fp16 weights (2) + fp16 "
         "gradients (2) + fp32 master weights, momentum, variance (12).")],
    hint="Rajbhandari et al. §5: (2 + 2 + 12)·Ψ / Nd.")


# ---- 10.5 ----------------------------------------------------------------------------------

@exercise("10.5", "a plan's memory per GPU", reference=first_stage_bytes,
          binds="first_stage_bytes", answers=("labkit.parallel.planner_cost:plan_memory",))
def _(answer, ref, rng):
    for fields, t, p, d, b in (*_PLANS, _drawn_plan(rng), _drawn_plan(rng)):
        model = GPTModel(**fields)
        got = answer.derive(first_stage_run, fields, t, p, d, b)
        want = ref.derive(first_stage_run, fields, t, p, d, b)
        what = f"{model.layers} layers, h={model.hidden}, B={model.batch}, t={t}, p={p}, " \
               f"dp={d}, b={b}"
        if np.isclose(got, want, rtol=1e-6):
            continue
        m = model.batch // (d * b)
        in_flight, lps = min(p, m), ceil_div(model.layers, p)
        states = 16 * math.ceil(model.params / (t * p))
        stash = 2 * model.seq * b * model.hidden            # 2sbh per layer, full recompute
        work = activation_bytes_per_layer(model.seq, b, model.hidden, model.heads, t)
        if m < p and np.isclose(got, states + p * lps * stash + work, rtol=1e-6):
            raise Wrong(f"{what}: with m = B/(d·b) = {m} micro-batches, fewer than p = {p}, "
                        f"the first stage never holds more than m of them: min(p, m) = {m}, "
                        f"not p.")
        if in_flight > 1 and np.isclose(got, states + lps * stash + work, rtol=1e-6):
            raise Wrong(f"{what}: you stored one micro-batch; under 1F1B the first stage holds "
                        f"min(p, m) = {in_flight} micro-batches' activations at its peak.")
        if t > 1 and np.isclose(got, 16 * model.params / p + in_flight * lps * stash + work,
                                rtol=1e-4):
            raise Wrong(f"{what}: tensor parallelism splits the parameters too — each GPU "
                        f"holds Ψ/(t·p) of them.")
        if np.isclose(got, states + in_flight * lps * stash, rtol=1e-6):
            raise Wrong(f"{what}: during backward one layer is recomputed and holds all its "
                        f"activations (sbh(10 + 24/t + 5as/(ht))); add it.")
        expect_close(got, want, f"bytes per GPU for {what}", rtol=1e-6,
                     hint="16·⌈Ψ/(t·p)⌉ + min(p, m)·⌈l/p⌉·2sbh + one layer's activations "
                          "(labkit.memory.estimator.activation_bytes_per_layer).")


# ---- 10.6: ZeRO-1 over gloo ------------------------------------------------------------------

@exercise("10.6", "ZeRO-1: a sharded Adam over gloo", reference=zero.ZeroAdam,
          binds="ZeroAdam")
def _(answer, ref, rng):
    seed, sizes, steps = _seed(rng), _zero_sizes(rng), 3
    results = answer.derive(zero_lab.zero_run, seed, sizes, steps)
    base = zero_lab.zero_baseline(seed, sizes, steps)
    judge_zero(results, base, sizes,
               scaled=zero_lab.zero_baseline(seed, sizes, steps, grad_scale=mp_labs.WORLD))


# ---- 10.7: a parallelize_module plan ---------------------------------------------------

@exercise("10.7", "a tensor-parallel plan with parallelize_module", reference=mp_real.megatron_plan,
          binds="tp_plan")
def _(answer, ref, rng):
    seed = _seed(rng)
    results = answer.derive(tp_lab.tp_run, seed)
    judge_tp(results, tp_lab.tp_baseline(seed))


# ---- 10.8: FSDP2 -----------------------------------------------------------------------

@exercise("10.8", "FSDP2: fully_shard a model bottom-up", reference=mp_real.fsdp_wrap,
          binds="shard_model")
def _(answer, ref, rng):
    seed = _seed(rng)
    results = answer.derive(fsdp_lab.fsdp_run, seed, 2)
    judge_fsdp(results, fsdp_lab.fsdp_baseline(seed, 2))


# ---- 10.9: top-k routing with a capacity ---------------------------------------------------

@exercise("10.9", "top-k routing with a capacity factor", reference=moe.route, binds="route",
          answers=("labkit.parallel.moe:capacity",))
def _(answer, ref, rng):
    import torch  # deferred: torch
    for logits, k, cf in _route_cases(rng):
        T, E = logits.shape
        where = f"T={T} tokens, E={E} experts, k={k}, capacity factor {cf:g}"
        expert, slot, gate = _as_route(answer(logits.clone(), k, cf), T, k)
        w_expert, w_slot, w_gate = ref(logits, k, cf)
        if not torch.equal(expert.long(), w_expert):
            raise Wrong(f"{where}: the experts differ; token t's experts are its k largest "
                        f"softmax probabilities, most probable first (torch.topk).")
        C = moe.capacity(T, E, k, cf)
        if not torch.allclose(gate.double(), w_gate, rtol=1e-9, atol=1e-12):
            top = torch.softmax(logits, -1).topk(k, -1).values
            if k > 1 and torch.allclose(gate.double(), top, rtol=1e-9):
                raise Wrong(f"{where}: your gates are the raw probabilities; with k ≥ 2 GShard "
                            f"renormalises the k chosen ones to sum to 1.")
            if k == 1 and torch.allclose(gate.double(), torch.ones_like(top)):
                raise Wrong(f"{where}: with k = 1 the gate is the probability p_e itself "
                            f"(Switch Transformer eq. 2), not 1: it scales the expert's output "
                            f"and carries the router's gradient.")
            raise Wrong(f"{where}: the gates differ (p = softmax(logits); g = p_e for k = 1, "
                        f"p_e over the sum of the k chosen for k ≥ 2).")
        slot = slot.long()
        if torch.equal(slot, w_slot):
            continue
        kept = int((slot >= 0).sum())
        used = int(slot.max()) + 1 if kept else 0
        if kept == T * k and int((w_slot < 0).sum()):
            raise Wrong(f"{where}: you dropped nothing, but capacity C = ⌈k·T/E · factor⌉ = "
                        f"{C}: an expert takes its first C tokens only; mark the rest -1.")
        if used != C and int((w_slot < 0).sum()):
            floor = math.floor(k * T / E * cf)
            why = ("you rounded down; capacity is rounded up" if used == floor else
                   "count all k·T assignments: C = ⌈k·T/E · capacity factor⌉"
                   if used == math.ceil(T / E * cf) else "C = ⌈k·T/E · capacity factor⌉")
            raise Wrong(f"{where}: your buffers hold {used} slots per expert, C = {C}: {why}.")
        raise Wrong(f"{where}: the slots differ; an expert's buffer is filled in token order "
                    f"(token t's slot = the number of earlier tokens routed to the same "
                    f"expert), and a token whose slot would be ≥ C gets -1.")


# ---- 10.10: dispatch and combine through all-to-all --------------------------------------

@exercise("10.10", "expert parallelism: dispatch and combine through all-to-all",
          reference=moe.moe_layer, binds="moe_layer")
def _(answer, ref, rng):
    sims = [_moe_problem(rng, world) for world in (2, 3, 4)]
    for problem in sims:
        res = answer.derive(moe.simulated_run, problem)
        if any(e == "NotImplementedError" for e in res["errors"]):
            raise NotImplementedError
        bad = next((e for e in res["errors"] if e), None)
        if bad:
            raise Wrong(f"simulated run on {problem['world']} ranks: your layer raised {bad}.")
        judge_moe(res["y"], res["calls"], problem, "simulated all-to-all")
    problem = _moe_problem(rng, mp_labs.WORLD)
    results = answer.derive(moe_lab.moe_run, problem)
    _worker_verdict(results, "layer")
    judge_moe([r["y"] for r in results], [len(r["calls"]) for r in results], problem,
              "gloo all_to_all_single")
