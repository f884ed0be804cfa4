"""Chapter 08's exercises: quantization, loss scaling (the update rule, a scaler and a
training step that train the digits MLP under CPU autocast), pruning masks, the
distillation loss, efficient convolutions.

Every input comes from the checker's ``rng`` (plus fixed edge cases). The loss scaler and
the training step are judged by training: the learner's object trains the digits MLP in
the answer's process (:func:`scaler_run` with ``train_amp``'s own step, not an exercise's
reference; :func:`step_run` with the learner's step) and the checker compares the run,
step for step, with the same run under ``torch.amp.GradScaler("cpu")`` — with
``train_amp``'s step for 8.6, labkit's 8.7 step for 8.7 — made on the reference's side
(``ref.derive``: :func:`gradscaler_baseline`, :func:`step_run`; a student release replays
them) (:func:`labkit.compress.amp.first_difference`).
"""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.compress.amp import AmpRun, amp_step, first_difference
from labkit.compress.distill import NO_LABEL, kd_loss
from labkit.compress.loss_scaling import LossScaler, gradscaler_step
from labkit.compress.model import (conv_cost, magnitude_mask, qparams, quantize,
                                   structured_mask)


def scale_zero_point(x, bits):
    """Reference: asymmetric per-tensor (scale, zero point) of ``x`` for ``bits`` bits."""
    qp = qparams(x, bits, symmetric=False)
    return float(qp.scale), int(qp.zero_point)


def quantize_per_channel(w, bits):
    """Reference: symmetric per-row quantization of a (out, in) weight → (q, scales)."""
    qp = qparams(w, bits, symmetric=True, axis=0)
    return quantize(w, qp), qp.scale.reshape(-1)


# Reference: one GradScaler update → (scale, good_steps, skipped)
loss_scale_step = gradscaler_step


def separable_cost(kernel, in_ch, out_ch, feature):
    """Reference: (weights, multiply-adds) of a depthwise-separable convolution."""
    c = conv_cost(kernel, in_ch, out_ch, feature)
    return c.separable_params, c.separable_macs


# ---- 8.1 scale and zero point ---------------------------------------------------------

def _zero_point_cases(rng) -> list[tuple[np.ndarray, int]]:
    fixed = [(np.array([-1.0, 0.5, 2.0]), 8), (np.array([-0.1, 6.0]), 8)]
    lo = float(rng.uniform(0.1, 1.0))
    drawn = [(rng.uniform(lo, lo + rng.uniform(1, 4), 50), 8),            # all positive
             (-rng.uniform(lo, lo + rng.uniform(1, 4), 40), 8),           # all negative
             (rng.normal(rng.uniform(-1, 1), rng.uniform(0.5, 2), 100), 4),
             (rng.normal(0, rng.uniform(1, 3), 30), 3)]
    return fixed + drawn


@exercise("8.1", "scale and zero point", reference=scale_zero_point, binds="scale_zero_point",
          answers=("labkit.compress.model:qparams",))
def _(answer, ref, rng):
    for x, b in _zero_point_cases(rng):
        s, z = answer(x.copy(), b)
        ws, wz = ref(x, b)
        if np.isclose(s, ws, rtol=1e-9) and float(z) == int(z) and int(z) == wz:
            continue
        lo, hi = x.min(), x.max()
        if np.isclose(s, (hi - lo) / (2 ** b - 1)) and not np.isclose(s, ws):
            raise Wrong(f"x in [{lo:.3g}, {hi:.3g}]: the range must include 0 so that 0 is exact "
                        f"(zero padding, ReLU outputs): use min(x.min(), 0) and max(x.max(), 0).")
        if np.isclose(s, ws * (2 ** b - 1) / 2 ** b):
            raise Wrong(f"{b} bits give 2^b - 1 = {2 ** b - 1} steps between 0 and 2^b - 1, "
                        f"not 2^b: scale = (max - min) / (2^b - 1).")
        if not np.isclose(s, ws, rtol=1e-9):
            raise Wrong(f"scale {s:.6g}, expected {ws:.6g} for x in [{lo:.3g}, {hi:.3g}], "
                        f"{b} bits: scale = (max - min) / (2^b - 1).")
        raise Wrong(f"zero point {z}, expected {wz}: Z = round(-min / scale), an integer "
                    f"in [0, 2^b - 1], so that the real value 0 maps exactly to Z.")


# ---- 8.2 quantize per channel ---------------------------------------------------------

@exercise("8.2", "quantize per channel", reference=quantize_per_channel,
          binds="quantize_per_channel",
          answers=("labkit.compress.model:qparams", "labkit.compress.model:quantize",
                   "labkit.compress.model:QuantLinear"))
def _(answer, ref, rng):
    shapes = [((6, 10), 8), ((4, 7), 4), ((8, 3), 8), ((5, 12), 3)]
    shapes.append(((int(rng.integers(3, 12)), int(rng.integers(3, 12))), int(rng.integers(3, 9))))
    for shape, b in shapes:
        spread = rng.uniform(20, 200)             # the rows' ranges span this factor
        rows = np.geomspace(1 / spread, 1.0, shape[0])[rng.permutation(shape[0])]
        w = rng.normal(size=shape) * rows[:, None]
        q, s = answer(w.copy(), b)
        q, s = np.asarray(q), np.asarray(s, dtype=float).reshape(-1)
        wq, ws = ref(w, b)
        qmax = 2 ** (b - 1) - 1
        if s.size == 1 or (s.size == shape[0] and np.allclose(s, s[0])):
            raise Wrong("one scale for the whole tensor: that is per-tensor quantization; the "
                        "small rows lose all their precision. Give each output channel (row) "
                        "its own scale max|w_row| / (2^(b-1) - 1).")
        if s.size == shape[1] and shape[0] != shape[1]:
            raise Wrong(f"{s.size} scales: you reduced over the wrong axis; one scale per "
                        f"output channel = per row of the (out, in) weight.")
        if s.size != shape[0]:
            raise Wrong(f"expected {shape[0]} scales (one per row), got {s.size}.")
        if q.shape != w.shape:
            raise Wrong(f"q has shape {q.shape}; it must be shaped like w, {w.shape}.")
        if np.abs(q).max() > qmax:
            raise Wrong(f"|q| reaches {np.abs(q).max()}; symmetric {b}-bit values lie in "
                        f"[-{qmax}, {qmax}]: scale = max|w| / (2^(b-1) - 1), and clip.")
        if np.allclose(s, ws * qmax / 2 ** (b - 1)):
            raise Wrong(f"scale = max|w| / 2^(b-1) wastes part of the range; use / (2^(b-1) - 1) "
                        f"= / {qmax}.")
        expect_close(s, ws, f"scales ({shape}, {b} bits)", rtol=1e-9,
                     hint="scale of row i = max_j |w_ij| / (2^(b-1) - 1).")
        expect_close(q, wq, f"q ({shape}, {b} bits)",
                     hint="q = clip(round(w / scale_row), -(2^(b-1) - 1), 2^(b-1) - 1).")


# ---- 8.3 one GradScaler update --------------------------------------------------------

def _update_cases(rng) -> list[tuple[float, bool, int, int]]:
    fixed = [(65536.0, True, 17, 2000), (65536.0, False, 0, 2000), (1024.0, False, 1998, 2000),
             (1024.0, False, 1999, 2000), (8.0, True, 0, 3), (8.0, False, 2, 3),
             (2.0, False, 0, 1)]
    drawn = []
    for _ in range(6):
        gi = int(rng.integers(1, 50))
        good = int(rng.choice([0, gi - 1, int(rng.integers(0, gi))]))
        drawn.append((2.0 ** int(rng.integers(-4, 24)), bool(rng.random() < 0.4), good, gi))
    return fixed + drawn


@exercise("8.3", "dynamic loss scaling", reference=loss_scale_step, binds="loss_scale_step",
          answers=("labkit.compress.model:update_loss_scale",))
def _(answer, ref, rng):
    for scale, inf, good, gi in _update_cases(rng):
        got = answer(scale, inf, good, gi)
        if not isinstance(got, tuple) or len(got) != 3:
            raise Wrong("return (scale, good_steps, skipped).")
        s, g, skip = got
        ws, wg, _ = ref(scale, inf, good, gi)
        where = f"scale={scale:g}, found_inf={inf}, good_steps={good}, growth_interval={gi}"
        if inf and not skip:
            raise Wrong(f"{where}: an inf/NaN gradient must not reach the optimizer: skip the "
                        f"step.")
        if inf and s != ws:
            raise Wrong(f"{where}: on overflow halve the scale (backoff 0.5), got {s:g}.")
        if inf and g != 0:
            raise Wrong(f"{where}: an overflow resets the count of good steps to 0, got {g}.")
        if not inf and skip:
            raise Wrong(f"{where}: finite gradients: take the step.")
        if (s, g) != (ws, wg):
            raise Wrong(f"{where}: got (scale {s:g}, good_steps {g}), expected (scale {ws:g}, "
                        f"good_steps {wg}): count this good step first; when the count reaches "
                        f"growth_interval, double the scale and reset the count.")


# ---- 8.6 a loss scaler, and 8.7 a mixed-precision step, trained ------------------------

def _as_run(record, steps: int, dtype: str):
    """An :class:`~labkit.compress.amp.AmpRun` from a run's plain data (checked)."""
    from labkit.check import ch08_runs as runs  # deferred: torch

    if not isinstance(record, dict) or any(k not in record for k in runs.RUN_FIELDS):
        raise Wrong("the training run did not come back whole (scales, skipped, losses, "
                    "parameters per step).")
    scales = np.asarray(record["scales"], dtype=float)
    skipped = np.asarray(record["skipped"], dtype=bool)
    losses = np.asarray(record["losses"], dtype=float)
    params = np.asarray(record["params"], dtype=np.float32)
    if not (scales.shape == skipped.shape == losses.shape == (steps,)) or \
            params.ndim != 2 or params.shape[0] != steps:
        raise Wrong(f"the training run has the wrong shape: expected {steps} steps.")
    return AmpRun(dtype, scales, skipped, losses, params, float(record.get("accuracy", 0.0)))


def _scaler_settings(rng) -> list[tuple[dict, int, int]]:
    """One fp16 run of 40 steps that overflows from step 0 and grows the scale several
    times, with factors other than GradScaler's defaults (a class that ignores its
    arguments fails). Short: the call watch (:mod:`labkit.check.refuse`) slows the
    answer's run about 25-fold."""
    factors = {"init_scale": 2.0 ** int(rng.integers(21, 27)),
               "growth_factor": float(rng.choice([4.0, 8.0])),
               "backoff_factor": float(rng.choice([0.25, 0.125])),
               "growth_interval": int(rng.integers(3, 8))}
    return [(factors, 40, int(rng.integers(0, 10 ** 4)))]


def _resume_state(rng) -> dict:
    """A GradScaler checkpoint to restore: the state_dict of a scaler mid-run."""
    interval = int(rng.integers(3, 50))
    return {"scale": 2.0 ** int(rng.integers(4, 20)),
            "growth_factor": float(rng.choice([2.0, 4.0])),
            "backoff_factor": float(rng.choice([0.5, 0.25])), "growth_interval": interval,
            "_growth_tracker": int(rng.integers(1, interval))}


STATE_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _same_state(got, want) -> bool:
    if not isinstance(got, dict) or sorted(got) != sorted(STATE_KEYS):
        return False
    try:
        return all(float(got[k]) == float(want[k]) for k in STATE_KEYS)
    except (TypeError, ValueError):
        return False


def _state_text(state) -> str:
    if not isinstance(state, dict):
        return repr(state)
    return "{" + ", ".join(f"{k!r}: {v:g}" if isinstance(v, (int, float)) else f"{k!r}: {v!r}"
                           for k, v in state.items()) + "}"


def _settings_text(factors: dict, seed: int, dtype: str = "float16") -> str:
    return (f"{dtype} autocast, seed {seed}, " +
            ", ".join(f"{k}={v:g}" for k, v in factors.items()))


def _scaler_hint(d, want, got, factors: dict) -> str:
    """What the first difference from GradScaler's run says about the scaler."""
    t = d.step
    before = want.scales[t - 1] if t else float(factors["init_scale"])
    if d.what == "skipped":
        if want.skipped[t]:
            return (f"step {t}: a gradient was inf/NaN (fp16 overflowed at S = {before:g}) and "
                    f"GradScaler skipped optimizer.step(); yours took the step. unscale_ must "
                    f"look at every gradient (torch.isfinite) and step() must skip the "
                    f"optimizer when one is not finite.")
        return (f"step {t}: every gradient was finite and GradScaler took the step; yours "
                f"skipped it. Skip only when a gradient is inf or NaN, and reset what you "
                f"found in update().")
    if d.what == "scale":
        head = f"after step {t} GradScaler's scale is {d.a:g}, yours {d.b:g}"
        if want.skipped[t]:
            return (f"{head}: step {t} overflowed, so the scale is multiplied by "
                    f"backoff_factor = {factors['backoff_factor']:g} ({before:g} → {d.a:g}) — "
                    f"the factor given to your constructor.")
        if d.a > before:
            return (f"{head}: GradScaler grew the scale by growth_factor = "
                    f"{factors['growth_factor']:g} after growth_interval = "
                    f"{factors['growth_interval']} consecutive finite steps. Count this step "
                    f"first, then compare the count with growth_interval; reset the count to "
                    f"0 on growth and on an overflow.")
        return (f"{head}: GradScaler kept the scale (fewer than growth_interval = "
                f"{factors['growth_interval']} finite steps since the last overflow or "
                f"growth). Count this step first, then compare; reset the count to 0 on "
                f"growth and on an overflow.")
    return (f"step {t}: the scales and the skipped steps agree, but the parameters differ by "
            f"up to {abs(d.a - d.b):.3g}: the optimizer must see the gradients of the "
            f"unscaled loss — scale(loss) multiplies the loss by S, and unscale_ divides every "
            f"gradient by S once before optimizer.step().")


@exercise("8.6", "a loss scaler that trains under autocast", reference=LossScaler,
          binds="Scaler",
          answers=("torch.amp:GradScaler", "labkit.compress.model:update_loss_scale",
                   "labkit.compress.loss_scaling:gradscaler_step"))
def _(answer, ref, rng):
    from labkit.check import ch08_runs as runs  # deferred: torch

    resume = _resume_state(rng)
    for factors, steps, seed in _scaler_settings(rng):
        got_rec = answer.derive(runs.scaler_run, factors, steps, seed, resume)
        want_rec = ref.derive(runs.gradscaler_baseline, factors, steps, seed)
        got, want = _as_run(got_rec, steps, "float16"), _as_run(want_rec, steps, "float16")
        d = first_difference(want, got)
        if d is not None:
            raise Wrong(f"your scaler and torch.amp.GradScaler('cpu') trained the same network "
                        f"on the same batches ({_settings_text(factors, seed)}) and first "
                        f"differ at step {d.step}. " + _scaler_hint(d, want, got, factors))
        if not _same_state(got_rec.get("state"), want_rec["state"]):
            raise Wrong(f"the runs agree, but after them your state_dict() is "
                        f"{_state_text(got_rec.get('state'))} and GradScaler's "
                        f"{_state_text(want_rec['state'])}: return GradScaler's five entries "
                        f"{', '.join(STATE_KEYS)} (the last: the count of good steps in a "
                        f"row), so that a checkpoint of either scaler loads into the other.")
        resumed = got_rec.get("resumed")
        if not _same_state(resumed, resume) or got_rec.get("resumed_scale") != resume["scale"]:
            raise Wrong(f"Scaler().load_state_dict(s) with s = {_state_text(resume)} gives "
                        f"state_dict() = {_state_text(resumed)} and get_scale() = "
                        f"{got_rec.get('resumed_scale')!r}: restore every entry, so that a "
                        f"run resumed from a checkpoint goes on exactly where it stopped.")


def _step_hint(d, want, got) -> str:
    t = d.step
    if d.what == "skipped" and want.skipped[t]:
        return (f"step {t}: in fp16 a scaled gradient overflowed and GradScaler skipped the "
                f"step; yours took it. Run the forward pass and the loss inside "
                f"torch.autocast('cpu', dtype=dtype), call backward on scaler.scale(loss) "
                f"(not on the loss), and step through scaler.step(optimizer) — it skips the "
                f"step when a gradient is inf — not optimizer.step().")
    if d.what == "skipped":
        return (f"step {t}: labkit's step was taken, yours skipped: gradients left over from "
                f"a skipped step? Call optimizer.zero_grad() first in every step.")
    if d.what == "scale":
        return (f"after step {t} the scale is {d.b:g}, expected {d.a:g}: call "
                f"scaler.update() once at the end of every step.")
    return (f"step {t}: the parameters differ by up to {abs(d.a - d.b):.3g}: "
            f"optimizer.zero_grad(), the loss under torch.autocast with the dtype given, "
            f"scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update().")


def _step_settings(rng) -> list[tuple[dict, int, int, str]]:
    """An fp16 run that overflows from step 0, and a bf16 run (a step that ignores the
    dtype it is given fails there)."""
    fp16 = {"init_scale": 2.0 ** int(rng.integers(21, 26)),
            "growth_interval": int(rng.integers(4, 10))}
    bf16 = {"init_scale": 2.0 ** int(rng.integers(0, 8)),
            "growth_interval": int(rng.integers(4, 10))}
    return [(fp16, 30, int(rng.integers(0, 10 ** 4)), "float16"),
            (bf16, 12, int(rng.integers(0, 10 ** 4)), "bfloat16")]


@exercise("8.7", "a mixed-precision training step", reference=amp_step, binds="amp_step",
          answers=("labkit.compress.amp:autocast_step",))
def _(answer, ref, rng):
    from labkit.check import ch08_runs as runs  # deferred: torch

    for factors, steps, seed, dtype in _step_settings(rng):
        where = (f"your step and labkit's trained the same network with GradScaler on the "
                 f"same batches ({_settings_text(factors, seed, dtype)})")
        try:
            got = _as_run(answer.derive(runs.step_run, factors, steps, seed, dtype), steps, dtype)
        except NotImplementedError:
            raise
        except (RuntimeError, AssertionError) as exc:    # GradScaler checks the call order
            raise Wrong(f"{where}: the run raised {type(exc).__name__}: {exc} (GradScaler "
                        f"checks the order of its calls). Each step calls "
                        f"scaler.scale(loss).backward(), scaler.step(optimizer) and "
                        f"scaler.update(), once each, in this order.") from None
        want = _as_run(ref.derive(runs.step_run, factors, steps, seed, dtype), steps, dtype)
        d = first_difference(want, got)
        if d is not None:
            raise Wrong(f"{where} and first differ at step {d.step}. " + _step_hint(d, want, got))
        bad = np.flatnonzero(~np.isclose(got.losses, want.losses, rtol=1e-6))
        if bad.size:
            t = int(bad[0])
            raise Wrong(f"{where}: the training agrees, but at step {t} your step returned "
                        f"{got.losses[t]:.6g}, the loss is {want.losses[t]:.6g}: return the loss "
                        f"itself, not scaler.scale(loss) (that is the loss times S = "
                        f"{want.scales[t - 1] if t else factors['init_scale']:g}).")


# ---- 8.4 and 8.8 pruning masks --------------------------------------------------------

def _mask_of(answer, w, sp) -> np.ndarray:
    got = np.asarray(answer(w.copy(), sp))
    if got.shape != w.shape:
        raise Wrong(f"mask shape {got.shape}; return a boolean mask shaped like w {w.shape}.")
    if got.dtype != bool and not np.isin(got, (0, 1)).all():
        raise Wrong("return a boolean mask: True keeps a weight, False prunes it.")
    return got.astype(bool)


def _rows_cases(rng) -> list[tuple[np.ndarray, float]]:
    # two hand-made weights where the L2 norm disagrees with L-infinity (row 0: one big
    # entry, norm 2; row 1: four of 1.2, norm 2.4, max 1.2) and with L1 (row 0: four ones,
    # norm 2, sum 4; row 1: one 2.1)
    by_hand = [np.array([[2, 0, 0, 0], [1.2] * 4, [3] * 4, [4] * 4], dtype=float),
               np.array([[1] * 4, [2.1, 0, 0, 0], [3] * 4, [4] * 4], dtype=float)]
    shapes = [((8, 5), 0.5), ((10, 4), 0.3), ((7, 9), 0.25), ((6, 6), 0.0), ((5, 3), 1.0),
              ((int(rng.integers(5, 14)), int(rng.integers(3, 10))), float(rng.uniform(0.1, 0.9)))]
    cases = []
    for shape, sp in shapes:
        w = rng.normal(size=shape)
        w[0] *= 0.05                 # a weak row whose entries are not all the smallest
        w[1, 0] = 0.001              # a strong row holding the smallest single entry
        w[1, 1:] *= 4
        cases.append((w[rng.permutation(shape[0])], sp))
    return cases + [(w, 0.25) for w in by_hand]


@exercise("8.4", "a structured pruning mask", reference=structured_mask, binds="structured_mask")
def _(answer, ref, rng):
    for w, sp in _rows_cases(rng):
        shape = w.shape
        got = _mask_of(answer, w, sp)
        want = np.asarray(ref(w, sp))
        if not np.all(got == got[:, :1], axis=1).all():
            raise Wrong("your mask removes single weights; structured pruning removes whole "
                        "output channels (rows), so the layer really becomes smaller.")
        kept = got[:, 0]
        k = int(round(sp * shape[0]))
        if (~kept).sum() != k:
            raise Wrong(f"{shape[0]} rows, sparsity {sp:g}: prune round(sparsity · rows) = {k} "
                        f"rows, you pruned {(~kept).sum()}.")
        if not np.array_equal(got, want):
            raise Wrong(f"wrong rows pruned ({shape}, sparsity {sp:g}): drop the rows with the "
                        f"smallest L2 norm ‖w_i‖₂, keep the strongest.")


def _weights_cases(rng) -> list[tuple[np.ndarray, float]]:
    cases = []
    for shape, sp in (((8, 6), 0.5), ((5, 9), 0.3), ((12, 4), 0.75), ((6, 6), 0.0),
                      ((4, 5), 1.0), ((int(rng.integers(4, 12)), int(rng.integers(4, 12))),
                                      float(rng.uniform(0.1, 0.9)))):
        # rows of very different scales (so a per-row ranking differs from the layer's) and
        # large negative weights (so ranking w instead of |w| differs)
        rows = np.geomspace(0.05, 2.0, shape[0])[rng.permutation(shape[0])]
        w = rng.normal(size=shape) * rows[:, None]
        w[rng.random(shape) < 0.2] *= -6
        cases.append((w, sp))
    return cases


def _per_row(w, sp):
    k = int(round(sp * w.shape[1]))
    mask = np.ones(w.shape, bool)
    for i, row in enumerate(np.abs(w)):
        mask[i, np.argsort(row, kind="stable")[:k]] = False
    return mask


def _smallest_signed(w, sp):
    k = int(round(sp * w.size))
    mask = np.ones(w.size, bool)
    mask[np.argsort(w.ravel(), kind="stable")[:k]] = False
    return mask.reshape(w.shape)


@exercise("8.8", "an unstructured pruning mask", reference=magnitude_mask, binds="magnitude_mask")
def _(answer, ref, rng):
    for w, sp in _weights_cases(rng):
        got = _mask_of(answer, w, sp)
        want = np.asarray(ref(w, sp))
        k = int(round(sp * w.size))
        where = f"w of shape {w.shape}, sparsity {sp:g}"
        if np.array_equal(got, want):
            continue
        if np.array_equal(got, ~want):
            raise Wrong(f"{where}: your mask is inverted: True keeps a weight, False prunes it.")
        if np.array_equal(got, _per_row(w, sp)) and not np.array_equal(want, _per_row(w, sp)):
            raise Wrong(f"{where}: you pruned the same share of every row; unstructured "
                        f"magnitude pruning (Han et al. 2015) ranks all the layer's weights "
                        f"together, so rows of small weights lose more.")
        if (~got).sum() != k:
            raise Wrong(f"{where}: prune round(sparsity · size) = {k} weights, you pruned "
                        f"{int((~got).sum())}.")
        if np.array_equal(got, _smallest_signed(w, sp)):
            raise Wrong(f"{where}: you pruned the most negative weights; rank by magnitude "
                        f"|w| — a large negative weight matters as much as a large positive one.")
        raise Wrong(f"{where}: wrong weights pruned: zero the {k} weights of smallest |w| "
                    f"across the whole layer, keep the rest.")


# ---- 8.9 the distillation loss -------------------------------------------------------

def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def kd_by_hand(s, t, y, T, alpha) -> dict[str, float]:
    """The distillation loss computed in float64 numpy, and the values of its usual
    mistakes, by name (Hinton et al. 2015, §2)."""
    lp_s, lp_t = _log_softmax(s / T), _log_softmax(t / T)
    p_s, p_t = np.exp(lp_s), np.exp(lp_t)
    kl = np.mean(np.sum(p_t * (lp_t - lp_s), axis=1))
    kl_reverse = np.mean(np.sum(p_s * (lp_s - lp_t), axis=1))
    kl_probs = np.mean(np.sum(p_t * (lp_t - p_s), axis=1))     # F.kl_div(softmax(s/T), …)
    lab = y != NO_LABEL
    ce = -np.mean(_log_softmax(s)[lab][np.arange(lab.sum()), y[lab]])
    ce_T = -np.mean(lp_s[lab][np.arange(lab.sum()), y[lab]])
    a, T2 = alpha, T * T
    return {"right": a * T2 * kl + (1 - a) * ce,
            "no T²": a * kl + (1 - a) * ce,
            "swapped": a * T2 * kl_reverse + (1 - a) * ce,
            "softmax": a * T2 * kl_probs + (1 - a) * ce,
            "class mean": a * T2 * kl / s.shape[1] + (1 - a) * ce,
            "batch sum": a * T2 * kl * len(s) + (1 - a) * ce,
            "CE at T": a * T2 * kl + (1 - a) * ce_T,
            "no alpha": T2 * kl + ce}


KD_HINTS = {
    "no T²": "the soft term must be multiplied by T²: its gradients scale as 1/T², and T² "
             "keeps them comparable to the hard term's when T changes (Hinton et al. 2015, §2).",
    "swapped": "that is KL(student ‖ teacher): the KL direction is swapped. The teacher's "
               "distribution is the target: KL(p_t ‖ p_s) = Σ p_t (log p_t − log p_s) — "
               "F.kl_div(input=log p_s, target=p_t).",
    "softmax": "F.kl_div takes log-probabilities as its input: pass F.log_softmax(s / T), "
               "not F.softmax(s / T).",
    "class mean": "reduction='mean' averages over classes too; the KL of a batch is "
                  "reduction='batchmean' (the sum over classes, the mean over images).",
    "batch sum": "the KL term is summed over the batch: take the mean over images "
                 "(reduction='batchmean').",
    "CE at T": "the hard-label term is the cross-entropy at T = 1: F.cross_entropy(s, labels), "
               "not of s / T.",
    "no alpha": "weight the two terms: α·T²·KL + (1 − α)·CE.",
}


def _kd_cases(rng) -> list[tuple]:
    cases = []
    for T, alpha in ((4.0, 0.9), (float(rng.uniform(1.5, 6)), float(rng.uniform(0.2, 0.8))),
                     (2.0, 1.0), (1.0, 0.5)):
        n, c = int(rng.integers(5, 13)), 10
        s = (rng.normal(size=(n, c)) * rng.uniform(0.5, 2)).astype(np.float32)
        t = (rng.normal(size=(n, c)) * rng.uniform(2, 5)).astype(np.float32)
        y = rng.integers(0, c, n)
        y[rng.random(n) < 0.4] = NO_LABEL          # images of the transfer set: no label
        y[0] = int(rng.integers(0, c))             # at least one labelled image
        cases.append((s, t, y, T, alpha))
    return cases


@exercise("8.9", "the distillation loss", reference=kd_loss, binds="kd_loss",
          answers=("labkit.compress.model:kd_loss",))
def _(answer, ref, rng):
    from labkit.check import ch08_runs as runs  # deferred: torch

    for s, t, y, T, alpha in _kd_cases(rng):
        where = (f"on {len(s)} images ({int((y == NO_LABEL).sum())} without a label), T = "
                 f"{T:g}, α = {alpha:g}")
        try:
            got = answer.derive(runs.kd_value_grad, s, t, y, T, alpha)
        except NotImplementedError:
            raise
        except (IndexError, RuntimeError) as exc:
            if (y >= 0).all():
                raise
            raise Wrong(f"kd_loss {where} raised {type(exc).__name__}: {exc}. Labels −100 "
                        f"mark images without a label: leave them out of the cross-entropy "
                        f"(F.cross_entropy ignores −100, its default ignore_index).") from None
        if got.get("value") is None or got.get("type") != "tensor":
            raise Wrong(f"kd_loss returned a {got.get('type')}: return the loss as a torch "
                        f"scalar (0-d tensor) that the student's gradient flows through.")
        want = ref.derive(runs.kd_value_grad, s, t, y, T, alpha)
        hand = kd_by_hand(s.astype(np.float64), t.astype(np.float64), y, T, alpha)
        value = float(got["value"])
        if np.isnan(value):
            raise Wrong(f"kd_loss {where} is NaN: labels −100 mark images without a label; "
                        f"leave them out of the cross-entropy (F.cross_entropy ignores −100, "
                        f"its default ignore_index).")
        if not (np.isclose(value, want["value"], rtol=1e-4, atol=1e-6)
                and np.isclose(value, hand["right"], rtol=1e-4, atol=1e-6)):
            name = next((k for k in KD_HINTS if not np.isclose(hand[k], hand["right"],
                                                                rtol=1e-4)
                         and np.isclose(value, hand[k], rtol=1e-4, atol=1e-6)), None)
            hint = KD_HINTS[name] if name else (
                "L = α·T²·KL(softmax(t/T) ‖ softmax(s/T)) + (1 − α)·CE(labels, "
                "softmax(s)); KL averaged over the images, CE over the labelled ones "
                "(labels −100 have none).")
            raise Wrong(f"kd_loss {where} = {value:.6g}, expected {hand['right']:.6g}: {hint}")
        if got["grad"] is None:
            raise Wrong(f"kd_loss {where} has the right value, but no gradient reaches the "
                        f"student's logits: compute it with torch operations on them (no "
                        f"numpy, no .detach() of the student).")
        expect_close(got["grad"], want["grad"], f"the gradient of kd_loss {where}",
                     rtol=1e-4, atol=1e-6,
                     hint="detach only the teacher; the student's logits enter both terms.")


# ---- 8.5 depthwise-separable cost ----------------------------------------------------

@exercise("8.5", "depthwise-separable cost", reference=separable_cost, binds="separable_cost",
          answers=("labkit.compress.model:conv_cost",
                   "labkit.compress.train:torch_separable_params"))
def _(answer, ref, rng):
    cases = [(3, 32, 64, 112), (3, 512, 512, 14), (5, 16, 24, 56), (1, 8, 8, 4), (7, 3, 3, 9)]
    cases += [(int(rng.choice([3, 5, 7])), int(rng.integers(2, 700)), int(rng.integers(2, 700)),
               int(rng.integers(2, 120))) for _ in range(3)]
    for k, m, n, f in cases:
        p, macs = answer(k, m, n, f)
        wp, wm = ref(k, m, n, f)
        if (p, macs) == (wp, wm):
            continue
        where = f"kernel {k}, M={m}, N={n}, D_F={f}"
        if p == k * k * m and macs == k * k * m * f * f:
            raise Wrong(f"{where}: that is only the depthwise part; add the 1×1 pointwise "
                        f"convolution (M·N weights, M·N·D_F² multiply-adds).")
        if p == k * k * m * n + m * n:
            raise Wrong(f"{where}: a depthwise filter sees one input channel: D_K²·M weights, "
                        f"not D_K²·M·N.")
        if macs == k * k * m + m * n:
            raise Wrong(f"{where}: every weight is applied at all D_F² output positions.")
        raise Wrong(f"{where}: got ({p}, {macs}), expected ({wp}, {wm}): weights D_K²·M + M·N, "
                    f"multiply-adds D_K²·M·D_F² + M·N·D_F² (Howard et al. 2017, §3.1).")
