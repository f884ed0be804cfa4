"""Chapter 12: profile a step, find the bottleneck, fix it, measure again.

The slow step computes the loss one sample at a time in a Python loop — a pattern that
reads naturally and hides well. ``top_ops`` on its profile shows hundreds of tiny
``aten::cross_entropy`` … ``aten::nll_loss`` calls per step; the fix is one batched call,
which the learner writes (exercise 12.4) and :func:`loss_report` checks by counting the
ATen operators ``torch.profiler`` records: a batched loss makes the same number of calls
at every batch size, the per-sample loop one more set per sample.
"""
from __future__ import annotations

from labkit import validate as v


def per_sample_loss(logits, targets):
    """Mean cross-entropy computed one sample at a time in a Python loop (the bottleneck)."""
    from torch.nn import functional as F  # deferred: torch

    n = len(targets)
    return sum(F.cross_entropy(logits[i:i + 1], targets[i:i + 1]) for i in range(n)) / n


def batched_loss(logits, targets):
    """Mean cross-entropy of the batch in one call (the fix): ``F.cross_entropy``, which is
    log-softmax (the log-sum-exp with the row maximum subtracted) then the negative
    log-likelihood, averaged over the batch (PyTorch docs, ``torch.nn.functional.cross_entropy``,
    ``reduction='mean'``)."""
    from torch.nn import functional as F  # deferred: torch

    return F.cross_entropy(logits, targets)


def loss_step(model, x, y, batched: bool = True, loss=None):
    """A closure: one Adam training step of ``model`` on (x, y). The loss is ``loss(logits,
    targets)`` when given (the learner's), else :func:`batched_loss` (``batched=True``, the
    fix) or :func:`per_sample_loss` (``False``, the bottleneck)."""
    import torch  # deferred: torch

    v.boolean("batched", batched)
    if loss is None:
        loss = batched_loss if batched else per_sample_loss
    elif not callable(loss):
        raise TypeError(f"loss must be a function (logits, targets) -> loss, got "
                        f"{type(loss).__name__}")
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        out = loss(model(xt), yt)
        out.backward()
        opt.step()
        return out
    return step


def aten_calls(fn) -> int:
    """ATen operator calls ``torch.profiler`` records while ``fn()`` runs (nested calls
    included: every one passed through the dispatcher)."""
    from torch.profiler import ProfilerActivity, profile  # deferred: torch

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name.startswith("aten::"))


def loss_report(loss, spec: dict) -> dict:
    """Run ``loss(logits, targets)`` and its backward on the batch ``spec`` describes
    (``seed``, ``batch``, ``classes``, ``scale`` of the logits), and return plain data: the
    loss, the gradient of the logits, whether both are finite, and the ATen calls of
    forward and backward (:func:`aten_calls`). Exercise 12.4's derive function."""
    import torch  # deferred: torch

    g = torch.Generator().manual_seed(int(spec["seed"]))
    logits = (torch.randn(spec["batch"], spec["classes"], generator=g, dtype=torch.float64)
              * spec["scale"]).requires_grad_(True)
    targets = torch.randint(0, spec["classes"], (spec["batch"],), generator=g)
    box = {}

    def run():
        out = loss(logits, targets)
        box["loss"] = out
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out.backward()
    calls = aten_calls(run)
    out = box["loss"]
    if not isinstance(out, torch.Tensor) or out.numel() != 1:
        return {"scalar": False, "type": type(out).__name__}
    value = float(out.detach())
    grad = logits.grad.detach().numpy().copy() if logits.grad is not None else None
    finite = bool(torch.isfinite(out).item()) and grad is not None and bool(
        torch.isfinite(logits.grad).all())
    return {"scalar": True, "loss": value, "grad": grad, "finite": finite, "calls": calls}


def op_calls(rows) -> dict:
    """How many times each name occurs in profiler ``rows`` (plain trees,
    :func:`labkit.perf.stack.event_rows`), children included: one step's calls per operator.
    Exercise 12.7's reference."""
    out: dict[str, int] = {}
    todo = list(rows)
    while todo:
        r = todo.pop()
        out[r["name"]] = out.get(r["name"], 0) + 1
        todo.extend(r["children"])
    return out


def format_calls(before: dict, after: dict, k: int = 8) -> str:
    """Markdown table: the ``k`` operators called most in ``before`` (name -> calls per
    step), with their calls in ``after`` (0 when absent)."""
    k = v.integer("k", k, low=1)
    top = sorted(before, key=lambda n: (-before[n], n))[:k]
    lines = ["| operator | calls per step, per-sample loss | calls per step, batched |",
             "|---|---:|---:|"]
    lines += [f"| `{n}` | {before[n]} | {after.get(n, 0)} |" for n in top]
    lines.append(f"| **all rows** | {sum(before.values())} | {sum(after.values())} |")
    return "\n".join(lines)


def top_ops(profile, k: int = 6):
    """The ``k`` rows with the most self time per step: (name, calls per step, µs per step);
    the profiler's own ``ProfilerStep#`` ranges (the step itself) are not operators."""
    k = v.integer("k", k, low=1)
    rows = [r for r in profile.top(len(profile.rows)) if not r.name.startswith("ProfilerStep")]
    return [(r.name, r.calls / profile.steps, r.self_s / profile.steps * 1e6) for r in rows[:k]]


def format_top(rows) -> str:
    lines = ["| operator | calls per step | self µs per step |", "|---|---:|---:|"]
    lines += [f"| `{n}` | {c:.0f} | {s:.0f} |" for n, c, s in rows]
    return "\n".join(lines)
