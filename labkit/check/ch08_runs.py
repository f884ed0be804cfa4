"""The training runs behind chapter 08's checks 8.6, 8.7 and 8.9, as module-level
functions of an object that return plain data (``answer.derive`` / ``ref.derive``).

When grading, these run in the answer's process under the call watch
(:class:`labkit.check.refuse.watch`), which slows every Python call — an import of many
modules most of all. So importing this module does, outside the watch, what the first
training run would otherwise do inside it: it imports ``torch._dynamo`` (which torch's
first optimizer imports, about 800 modules with sympy), loads the digits (scikit-learn) and
trains two steps in each precision (torch's first calls fill its caches).
The answer's process imports this module when it resolves the derive function, before the
watched call; the checker imports it before its first call.
"""
from __future__ import annotations

import numpy as np
import torch
import torch._dynamo  # noqa: F401  (imported by torch.optim's first optimizer)

from labkit.compress.amp import AmpRun, train_amp
from labkit.data import load_digits

DIGITS = load_digits()
for _dtype in ("float16", "bfloat16"):
    train_amp(DIGITS, torch.amp.GradScaler("cpu"), dtype=_dtype, steps=2)
RUN_FIELDS = ("scales", "skipped", "losses", "params")


def record(run: AmpRun) -> dict:
    """A run of :func:`labkit.compress.amp.train_amp` as plain data."""
    return {"scales": run.scales, "skipped": run.skipped, "losses": run.losses,
            "params": run.params, "accuracy": run.accuracy}


def scaler_run(scaler_cls, factors: dict, steps: int, seed: int, resume: dict,
               dtype: str = "float16") -> dict:
    """Exercise 8.6, next to the answer: the digits MLP trained by :func:`train_amp`
    (its own step under CPU autocast, :func:`labkit.compress.amp.autocast_step`, no
    exercise's reference) with the loss scaler ``scaler_cls(**factors)``; its
    ``state_dict()`` after the run; and the state of a fresh ``scaler_cls()`` after
    ``load_state_dict(resume)`` (a checkpoint restored), with its ``get_scale()``."""
    scaler = scaler_cls(**factors)
    out = record(train_amp(DIGITS, scaler, dtype=dtype, steps=steps, seed=seed))
    out["state"] = scaler.state_dict()
    fresh = scaler_cls()
    fresh.load_state_dict(dict(resume))
    out["resumed"], out["resumed_scale"] = fresh.state_dict(), fresh.get_scale()
    return out


def gradscaler_run(factors: dict, steps: int, seed: int, dtype: str = "float16",
                   step_fn=None) -> dict:
    """The same run with ``torch.amp.GradScaler("cpu", **factors)`` (and ``step_fn`` as the
    training step, :func:`train_amp`'s own by default), with the scaler's ``state_dict()``
    after it."""
    scaler = torch.amp.GradScaler("cpu", **factors)
    out = record(train_amp(DIGITS, scaler, dtype=dtype, steps=steps, seed=seed,
                           step_fn=step_fn))
    out["state"] = scaler.state_dict()
    return out


def gradscaler_baseline(scaler_cls, factors: dict, steps: int, seed: int) -> dict:
    """Exercise 8.6's baseline, for ``ref.derive`` (so that a student release replays it
    from its recording): :func:`gradscaler_run` — the run of :func:`scaler_run` with
    ``torch.amp.GradScaler("cpu", **factors)`` in place of the answer's scaler, which the
    answer's run must equal bit for bit. ``scaler_cls`` (labkit's LossScaler, the
    reference) is not used: torch's scaler is the one to equal."""
    return gradscaler_run(factors, steps, seed)


def step_run(step_fn, factors: dict, steps: int, seed: int, dtype: str) -> dict:
    """Exercise 8.7, next to the answer (and, with labkit's step, for the reference): the
    GradScaler run of :func:`gradscaler_run` with ``step_fn`` as each training step."""
    return gradscaler_run(factors, steps, seed, dtype, step_fn)


def kd_value_grad(kd, student, teacher, labels, T, alpha) -> dict:
    """Exercise 8.9, next to the answer: ``kd(student, teacher, labels, T, alpha)`` on
    float32 torch tensors, and the gradient of the loss with respect to the student's
    logits (None when no gradient reaches them)."""
    s = torch.tensor(np.asarray(student), dtype=torch.float32, requires_grad=True)
    t = torch.tensor(np.asarray(teacher), dtype=torch.float32)
    y = torch.tensor(np.asarray(labels), dtype=torch.int64)
    out = kd(s, t, y, float(T), float(alpha))
    if not isinstance(out, torch.Tensor):
        value = float(out) if isinstance(out, (int, float, np.floating)) else None
        return {"value": value, "grad": None, "type": type(out).__name__}
    if out.numel() != 1:
        return {"value": None, "grad": None, "type": f"tensor of shape {tuple(out.shape)}"}
    grad = None
    if out.requires_grad:
        out.backward()
        grad = None if s.grad is None else s.grad.numpy()
    return {"value": float(out.detach()), "grad": grad, "type": "tensor"}
