"""labkit's gradients against PyTorch's (chapter 2): the engine, and a learner's backward rules.

* :func:`two_layer_vs_torch` differentiates ``cross_entropy(relu(X W₁) W₂, y)`` in labkit and
  in PyTorch on the same float64 data and runs :func:`~labkit.autograd.gradcheck.gradcheck`
  (central differences) on it.
* :func:`rules_vs_torch` runs each rule of a learner's
  :class:`~labkit.autograd.rules.RuleSet` in labkit's engine on a seeded example (a batched
  matmul whose ``B`` is broadcast, a bias add, an outer product, relu at 0, sums over
  negative axes, log-softmax of large logits, indexing with repeated indices, softmax over
  axis 0) and compares the output and gradients with PyTorch's autograd.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.functional import log_softmax, softmax
from labkit.autograd.gradcheck import GradcheckResult, gradcheck
from labkit.autograd.rules import RuleSet
from labkit.autograd.tensor import Tensor
from labkit.validate import integer


@dataclass(frozen=True)
class TorchAgreement:
    max_abs_diff: float          # max |labkit gradient − torch gradient| over both weights
    gradcheck: GradcheckResult   # labkit's gradients against central differences


def two_layer_vs_torch(batch: int = 8, sizes=(5, 7, 3), seed: int = 0) -> TorchAgreement:
    """Gradients of ``cross_entropy(relu(X W₁) W₂, y)`` with respect to W₁ and W₂, in labkit
    and in PyTorch (float64, the same seeded data), and labkit's against central differences."""
    import torch  # deferred: torch

    batch = integer("batch", batch, low=1, high=256)
    if isinstance(sizes, (str, bytes)) or len(tuple(sizes)) != 3:
        raise ValueError(f"sizes must be three widths (inputs, hidden, classes), got {sizes!r}")
    n_in, hidden, classes = (integer(f"sizes[{i}]", s, low=1, high=64)
                             for i, s in enumerate(sizes))
    rng = np.random.default_rng(integer("seed", seed, low=0))
    x, y = rng.normal(size=(batch, n_in)), rng.integers(0, classes, batch)
    w1, w2 = rng.normal(size=(n_in, hidden)), rng.normal(size=(hidden, classes))

    def loss_fn(a, b):
        return F.cross_entropy((Tensor(x) @ a).relu() @ b, y)

    p1, p2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
    loss_fn(p1, p2).backward()
    t1, t2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    torch.nn.functional.cross_entropy(torch.relu(torch.tensor(x) @ t1) @ t2,
                                      torch.tensor(y)).backward()
    diff = max(np.abs(p1.grad.data - t1.grad.numpy()).max(),
               np.abs(p2.grad.data - t2.grad.numpy()).max())
    return TorchAgreement(float(diff), gradcheck(loss_fn, w1, w2))


def _max_error(name: str, got, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        raise ValueError(f"{name} has shape {got.shape}, expected {want.shape}")
    return float(np.abs(got - want).max())


@dataclass(frozen=True)
class RuleError:
    """One rule of a rule set against PyTorch's autograd on one seeded example."""
    op: str              # the op whose rule (or forward) it is
    case: str            # the example
    whose: str           # "yours", "labkit's reference" or "labkit's"
    max_error: float     # max |labkit with the rule set − torch| (inf: the rule failed)
    note: str = ""       # why it failed


def _rule_cases(rng):
    """(op, case, arrays, labkit function, torch function) per rule the engine can swap."""
    import torch  # deferred: torch

    relu_x = rng.normal(size=(3, 6))
    relu_x[0, :2] = 0.0                              # relu's gradient at 0 is 0 in torch
    idx = (np.array([0, 2, 2, 1, 2]), np.array([1, 0, 0, 3, 0]))     # repeats accumulate
    return [
        ("matmul", "A (4, 3, 5) @ B (5, 2): B broadcast over the batch",
         (rng.normal(size=(4, 3, 5)), rng.normal(size=(5, 2))), lambda a, b: a @ b, None),
        ("add", "X (5, 3) + bias (3,): the bias broadcast over the batch",
         (rng.normal(size=(5, 3)), rng.normal(size=3)), lambda a, b: a + b, None),
        ("mul", "column (4, 1) * row (1, 3): an outer product",
         (rng.normal(size=(4, 1)), rng.normal(size=(1, 3))), lambda a, b: a * b, None),
        ("relu", "relu of (3, 6), zeros included", (relu_x,), lambda x: x.relu(), None),
        ("sum", "sum over axes (0, -1) of (2, 3, 4)", (rng.normal(size=(2, 3, 4)),),
         lambda x: x.sum(axis=(0, -1)), None),
        ("mean", "mean over axis 1 of (3, 5), keepdims", (rng.normal(size=(3, 5)),),
         lambda x: x.mean(axis=1, keepdims=True), None),
        ("log_softmax", "log_softmax over axis 1 of (3, 6) logits of size ~1000",
         (rng.normal(size=(3, 6)) * 1000,), lambda x: log_softmax(x, 1),
         lambda x: torch.log_softmax(x, 1)),
        ("getitem", "x[rows, cols] of (3, 4) with repeated pairs", (rng.normal(size=(3, 4)),),
         lambda x: x[idx], lambda x: x[tuple(torch.from_numpy(i) for i in idx)]),
        ("softmax", "softmax over axis 0 of (4, 3)", (rng.normal(size=(4, 3)),),
         lambda x: softmax(x, 0), lambda x: torch.softmax(x, 0)),
    ]


def rules_vs_torch(rules, seed: int = 1) -> list[RuleError]:
    """Each rule of ``rules`` (a :class:`~labkit.autograd.rules.RuleSet`) run by labkit's
    engine on a seeded example, against PyTorch's autograd: the largest difference over the
    output (for a replaced forward) and the gradients of every input."""
    import torch  # deferred: torch

    if not isinstance(rules, RuleSet):
        raise TypeError(f"rules must be a labkit.autograd.rules.RuleSet, got "
                        f"{type(rules).__name__}")
    strict = RuleSet(**rules.rules, forward=rules.forwards, strict=True)
    rng = np.random.default_rng(integer("seed", seed, low=0))
    rows = []
    for op, case, arrays, fn, torch_fn in _rule_cases(rng):
        key = op if strict.rule_for(op) is not None else (
            f"{op} forward" if op in strict.forwards else None)     # the row's name
        if key is None:
            continue
        leaves = [Tensor(a, requires_grad=True) for a in arrays]
        ts = [torch.tensor(a, requires_grad=True) for a in arrays]
        want = (torch_fn or fn)(*ts)
        g = rng.normal(size=tuple(want.shape))
        want.backward(torch.tensor(g))
        try:
            with strict:
                out = fn(*leaves)
                out.backward(g)
        except Exception as exc:               # noqa: BLE001 - the rule failed: say how
            rows.append(RuleError(key, case, rules.whose(key), float("inf"),
                                  f"{type(exc).__name__}: {exc}"))
            continue
        err = float(np.abs(out.data - want.detach().numpy()).max())
        for leaf, t in zip(leaves, ts):
            err = max(err, _max_error(f"the gradient of {op}'s input", leaf.grad.data,
                                      t.grad.numpy()))
        rows.append(RuleError(key, case, rules.whose(key), err))
    return rows


def format_rule_errors(rows: list[RuleError]) -> str:
    """The rows of :func:`rules_vs_torch` as a table."""
    lines = [f"{'op':<20} {'rule':<19} {'max |labkit - torch|':>21}  example"]
    for r in rows:
        lines.append(f"{r.op:<20} {r.whose:<19} {r.max_error:>21.2e}  {r.case}")
        if r.note:
            lines.append(f"{'':<20} failed: {r.note}")
    return "\n".join(lines)
