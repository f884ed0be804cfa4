"""Op-level FLOP and saved-bytes counters for labkit's Tensor engine.

    with count() as c:
        loss = model(x, y)
        loss.backward()
    c.forward_flops, c.backward_flops, c.saved_bytes

FLOPs come from each op's cost rule in :mod:`labkit.autograd.ops` (2 per multiply-add).
*Saved bytes* are the arrays the reverse rules need (each op's ``saves`` input indices and
``saves_output``), counted once per distinct array while a graph is being recorded -- the
memory a training step must hold until backward. Under :func:`labkit.autograd.no_grad` nothing is recorded, so nothing is saved.
Arrays that belong to parameters (leaf tensors with ``requires_grad``) are kept apart:
they live anyway, whether or not you train.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

_local = threading.local()


def active() -> list["OpCounter"]:
    """The counters open in this thread (thread-local, like grad mode)."""
    stack = getattr(_local, "active", None)
    if stack is None:
        stack = _local.active = []
    return stack


@dataclass
class OpCounter:
    forward: dict = field(default_factory=lambda: defaultdict(int))
    backward: dict = field(default_factory=lambda: defaultdict(int))
    calls: dict = field(default_factory=lambda: defaultdict(int))
    saved: dict = field(default_factory=dict)        # id(array) -> (op, nbytes, kind)
    _keep: list = field(default_factory=list)        # keep saved arrays alive so ids stay unique

    def on_forward(self, op, out, xs, parents, attrs: dict, recorded: bool) -> None:
        self.calls[op.name] += 1
        self.forward[op.name] += int(op.flops(out, xs, **attrs))
        if recorded:
            kept = [(parents[i].data, "parameter" if (parents[i].requires_grad and
                                                       parents[i]._op is None) else "activation")
                    for i in op.saves]
            if op.saves_output:
                kept.append((out, "activation"))
            for arr, kind in kept:
                if id(arr) not in self.saved:
                    self.saved[id(arr)] = (op.name, int(arr.nbytes), kind)
                    self._keep.append(arr)

    def add_forward(self, name: str, flops: int) -> None:
        self.forward[name] += int(flops)

    def on_backward(self, name: str, flops: int) -> None:
        self.backward[name] += int(flops)

    @property
    def forward_flops(self) -> int:
        return int(sum(self.forward.values()))

    @property
    def backward_flops(self) -> int:
        return int(sum(self.backward.values()))

    @property
    def saved_bytes(self) -> int:
        """Bytes of non-parameter arrays kept for backward (activations)."""
        return int(sum(b for _, b, k in self.saved.values() if k == "activation"))

    @property
    def saved_parameter_bytes(self) -> int:
        return int(sum(b for _, b, k in self.saved.values() if k == "parameter"))

    def saved_by_op(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for op, b, k in self.saved.values():
            if k == "activation":
                out[op] += b
        return dict(out)

    def table(self) -> str:
        names = sorted(set(self.forward) | set(self.backward),
                       key=lambda n: -(self.forward.get(n, 0) + self.backward.get(n, 0)))
        lines = [f"{'op':<12} {'calls':>5} {'forward FLOPs':>14} {'backward FLOPs':>15}"]
        for n in names:
            lines.append(f"{n:<12} {self.calls.get(n, 0):>5} {self.forward.get(n, 0):>14,} "
                         f"{self.backward.get(n, 0):>15,}")
        lines.append(f"{'total':<12} {'':>5} {self.forward_flops:>14,} {self.backward_flops:>15,}")
        return "\n".join(lines)


@contextmanager
def count():
    """Count FLOPs (forward and backward, per op) and bytes saved for backward inside the block."""
    c = OpCounter()
    stack = active()
    stack.append(c)
    try:
        yield c
    finally:
        stack.remove(c)
