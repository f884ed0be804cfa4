"""Chapter 12: profile a step, find the bottleneck, fix it, measure again.

The slow step computes the loss one sample at a time in a Python loop — a pattern that
reads naturally and hides well. ``top_ops`` on its profile shows hundreds of tiny
``aten::cross_entropy`` … ``aten::nll_loss`` calls per step; the fix is one batched call.
"""
from __future__ import annotations

from labkit import validate as v


def loss_step(model, x, y, batched: bool = True):
    """A closure: one Adam training step of ``model`` on (x, y); ``batched=False`` computes
    the loss per sample in a Python loop (the bottleneck), ``True`` in one call (the fix)."""
    import torch
    from torch.nn import functional as F

    v.boolean("batched", batched)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        out = model(xt)
        if batched:
            loss = F.cross_entropy(out, yt)
        else:
            loss = sum(F.cross_entropy(out[i:i + 1], yt[i:i + 1]) for i in range(len(yt)))
            loss = loss / len(yt)
        loss.backward()
        opt.step()
        return loss
    return step


def top_ops(profile, k: int = 6):
    """The ``k`` rows with the most self time per step: (name, calls per step, µs per step)."""
    k = v.integer("k", k, low=1)
    return [(r.name, r.calls / profile.steps, r.self_s / profile.steps * 1e6)
            for r in profile.top(k)]


def format_top(rows) -> str:
    lines = ["| operator | calls per step | self µs per step |", "|---|---:|---:|"]
    lines += [f"| `{n}` | {c:.0f} | {s:.0f} |" for n, c, s in rows]
    return "\n".join(lines)
