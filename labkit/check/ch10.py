"""Chapter 10's exercises: pipeline schedules, tensor parallelism, ZeRO and a plan's memory."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.check.formula import equals, formula_exercise
from labkit.memory.estimator import activation_bytes_per_layer
from labkit.parallel.collectives import all_reduce
from labkit.parallel.pipeline import pipeline_schedule, stage_order
from labkit.parallel.planner import GPTModel, plan_memory


def one_f_one_b_order(stages, microbatches, stage):
    """Reference: stage ``stage``'s 1F1B order as a list of ("F" or "B", micro-batch)."""
    return [(k, j) for k, j, _ in stage_order("1f1b", stages, microbatches, stage)]


def interleaved_bubble(stages, microbatches, chunks):
    """Reference: bubble time over ideal time of the interleaved 1F1B schedule (v = chunks;
    v = 1 is plain 1F1B), read off the simulation."""
    kind = "interleaved" if chunks > 1 else "1f1b"
    return pipeline_schedule(kind, stages, microbatches, chunks).bubble_fraction


def row_parallel(x, w, tp):
    """Reference: (Y, bytes rank 0 sends) of a row-parallel linear layer X·W on ``tp`` ranks:
    X split by columns, W by rows, partial products summed by labkit's ring all-reduce."""
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

@exercise("10.1", "the 1F1B order of one stage", reference=one_f_one_b_order,
          binds="one_f_one_b_order")
def _(answer):
    for p, m in ((4, 8), (4, 4), (3, 2), (1, 3), (5, 7), (2, 1)):
        for s in range(p):
            want = one_f_one_b_order(p, m, s)
            got = [(str(k), int(j)) for k, j in answer(p, m, s)]
            if got == want:
                continue
            if got == [("F", j) for j in range(m)] + [("B", j) for j in range(m)]:
                raise Wrong(f"p={p}, m={m}, stage {s}: that is GPipe's order (all forwards, "
                            f"then all backwards); 1F1B starts a backward as soon as the "
                            f"stage has run its warm-up forwards.")
            warm = next((i for i, (k, _) in enumerate(got) if k == "B"), len(got))
            want_warm = min(p - s - 1, m)
            if sorted(got) != sorted(want):
                raise Wrong(f"p={p}, m={m}, stage {s}: every micro-batch needs exactly one F "
                            f"and one B; you returned {len(got)} tasks.")
            if warm != want_warm + (1 if want_warm < m else 0):
                raise Wrong(f"p={p}, m={m}, stage {s}: the first backward comes after {warm} "
                            f"forwards; stage s runs p - s - 1 = {want_warm} warm-up forwards, "
                            f"then one more forward before its first backward.")
            raise Wrong(f"p={p}, m={m}, stage {s}: after the warm-up a stage alternates one "
                        f"forward and one backward (steady state), then drains the "
                        f"remaining backwards. Expected {want}.")


# ---- 10.2 ----------------------------------------------------------------------------------

formula_exercise(
    "10.2", "bubble fraction of the interleaved schedule", interleaved_bubble,
    cases=[(4, 8, 1), (4, 8, 2), (8, 64, 4), (2, 6, 3), (8, 16, 1), (6, 12, 2)],
    call=lambda p, m, v: f"bubble fraction for p={p}, m={m}, v={v}", rtol=1e-9, atol=1e-8,
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
          binds="row_parallel")
def _(answer):
    rng = np.random.default_rng(103)
    for t, (n, k, o) in ((2, (3, 4, 5)), (4, (2, 8, 4)), (1, (2, 3, 2)), (8, (5, 16, 8))):
        x = rng.normal(size=(n, k)) * 10.0 ** rng.integers(-1, 2)
        w = rng.normal(size=(k, o))
        got = answer(x.copy(), w.copy(), t)
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("return a pair (Y, bytes_sent_by_rank_0).")
        y, sent = got
        want_y, want_sent = row_parallel(x, w, t)
        y = np.asarray(y)
        if t > 1 and y.shape == want_y.shape and np.allclose(
                y, np.split(x, t, axis=1)[0] @ np.split(w, t, axis=0)[0]):
            raise Wrong(f"tp={t}: Y is rank 0's partial product X_0·W_0 alone; the partial "
                        f"sums of all ranks must be all-reduced.")
        expect_close(y, want_y, f"Y for tp={t}", rtol=1e-10, atol=1e-10,
                     hint="split X by columns and W by rows; each rank computes X_i·W_i; "
                          "all_reduce the flattened partials.")
        if np.isclose(float(sent), float(want_sent), rtol=1e-12, atol=0):
            continue
        n_bytes = want_y.size * want_y.itemsize
        if t > 2 and np.isclose(sent, n_bytes):
            raise Wrong(f"tp={t}: {sent} bytes is the whole output; a ring all-reduce sends "
                        f"2(t-1)/t of it per rank — count the messages in the log.")
        if t > 1 and np.isclose(sent, (t - 1) / t * n_bytes):
            raise Wrong(f"tp={t}: {sent} bytes is only the reduce-scatter half; the ring's "
                        f"all-gather sends as much again.")
        expect_close(float(sent), float(want_sent), f"bytes rank 0 sends for tp={t}",
                     rtol=1e-12, atol=0,
                     hint="sum m.nbytes over run.log for messages whose sender is 0.")


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
    shortcuts=[
        (_sharded(lambda psi, dp: 2 * psi + 14 * psi / dp),
         "that is ZeRO-2 (fp16 parameters replicated); ZeRO-3 partitions the parameters too."),
        (_sharded(lambda psi, dp: 4 * psi + 12 * psi / dp),
         "that is ZeRO-1 (only optimizer states split)."),
        (_sharded(lambda psi, dp: 16 * psi),
         "16Ψ is plain data parallelism; ZeRO-3 divides all model states by dp."),
        (lambda got, psi, dp: any(math.isclose(got, k * psi / dp, rel_tol=1e-6) for k in (12, 8)),
         "count all of mixed-precision Adam's 16 bytes per parameter: fp16 weights (2) + fp16 "
         "gradients (2) + fp32 master weights, momentum, variance (12).")],
    hint="Rajbhandari et al. §5: (2 + 2 + 12)·Ψ / Nd.")


# ---- 10.5 ----------------------------------------------------------------------------------

_PLANS = ((GPTModel(48, 8192, 64, batch=1536), 8, 2, 32, 1),
          (GPTModel(128, 25600, 160, batch=3072), 8, 64, 6, 1),
          (GPTModel(24, 2304, 24, batch=512), 1, 1, 32, 2),
          (GPTModel(96, 12288, 96, batch=64), 8, 8, 2, 4),
          (GPTModel(40, 6144, 48, batch=1024), 4, 4, 16, 1))


@exercise("10.5", "a plan's memory per GPU", reference=first_stage_bytes,
          binds="first_stage_bytes")
def _(answer):
    for model, t, p, d, b in _PLANS:
        got = float(answer(model, t, p, d, b))
        parts = plan_memory(model, t, p, d, b, 0, "full")
        want = sum(parts.values())
        what = f"{model.layers} layers, h={model.hidden}, t={t}, p={p}, dp={d}, b={b}"
        if np.isclose(got, want, rtol=1e-6):
            continue
        m = model.batch // (d * b)
        in_flight, lps = min(p, m), -(-model.layers // p)
        states = parts["params"] + parts["grads"] + parts["optimizer"]
        stash = 2 * model.seq * b * model.hidden            # 2sbh per layer, full recompute
        work = activation_bytes_per_layer(model.seq, b, model.hidden, model.heads, t)
        if in_flight > 1 and np.isclose(got, states + lps * stash + work, rtol=1e-6):
            raise Wrong(f"{what}: you stored one micro-batch; under 1F1B the first stage holds "
                        f"min(p, m) = {in_flight} micro-batches' activations at its peak.")
        if t > 1 and np.isclose(got, 16 * model.params / p + parts["activations"], rtol=1e-4):
            raise Wrong(f"{what}: tensor parallelism splits the parameters too — each GPU "
                        f"holds Ψ/(t·p) of them.")
        if np.isclose(got, states + in_flight * lps * stash, rtol=1e-6):
            raise Wrong(f"{what}: during backward one layer is recomputed and holds all its "
                        f"activations (sbh(10 + 24/t + 5as/(ht))); add it.")
        expect_close(got, want, f"bytes per GPU for {what}", rtol=1e-6,
                     hint="16·⌈Ψ/(t·p)⌉ + min(p, m)·⌈l/p⌉·2sbh + one layer's activations "
                          "(labkit.memory.estimator.activation_bytes_per_layer).")
