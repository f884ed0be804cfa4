"""Count what a PyTorch computation does, operator by operator: FLOPs and bytes.

``count_ops(fn)`` runs ``fn()`` under a ``TorchDispatchMode`` and records every ATen
operator that reaches the dispatcher: its FLOPs by PyTorch's own formulas
(``torch.utils.flop_counter``: matmul-like ops count 2·m·n·k, convolutions
2·(output elements)·(C_in/groups)·k_h·k_w; elementwise ops count 0 there, so we count them as
one FLOP per output element) and the bytes it touches if nothing stays in cache (every
tensor argument read once, every output written once). FLOPs / bytes per operator is its
arithmetic intensity for the roofline.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

# ops that only change metadata (no data moved, no FLOPs)
VIEW_OPS = {"t", "transpose", "view", "_unsafe_view", "as_strided", "expand", "reshape",
            "permute", "detach", "alias", "unsqueeze", "squeeze", "select", "slice",
            "_reshape_alias", "resolve_conj", "resolve_neg", "lift_fresh", "empty",
            "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros_like",
            "_record_function_enter_new", "_record_function_exit"}
ELEMENTWISE = {"relu", "clamp_min", "threshold_backward", "add", "add_", "mul", "mul_",
               "sub", "div", "sum", "mean", "neg", "exp", "log", "sigmoid", "tanh",
               "_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
               "nll_loss_backward", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
               "_foreach_add_", "addcmul_", "addcdiv_", "sqrt", "lerp_", "fill_", "copy_",
               "ones_like", "zero_", "clone", "_to_copy", "where", "sgn"}


@dataclass(frozen=True)
class OpCount:
    name: str          # ATen op, e.g. "addmm"
    calls: int
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class OpCounts:
    ops: tuple[OpCount, ...]
    sequence: tuple[OpCount, ...] = ()      # every call in dispatch order (calls = 1 each)

    @property
    def flops(self) -> float:
        return float(sum(o.flops for o in self.ops))

    @property
    def matmul_flops(self) -> float:
        return float(sum(o.flops for o in self.ops if o.name not in ELEMENTWISE))

    @property
    def bytes(self) -> float:
        return float(sum(o.bytes for o in self.ops))

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def by_name(self) -> dict[str, OpCount]:
        return {o.name: o for o in self.ops}


def _nbytes(x) -> int:
    import torch  # deferred: torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


def _numel(x) -> int:
    import torch  # deferred: torch

    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(_numel(y) for y in x)
    return 0


def count_ops(fn: Callable[[], object]) -> OpCounts:
    """Run ``fn()`` once and count FLOPs and bytes of every ATen operator it dispatches."""
    from torch.utils._python_dispatch import TorchDispatchMode  # deferred: torch
    from torch.utils.flop_counter import flop_registry

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    table: "OrderedDict[str, list]" = OrderedDict()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            if name in VIEW_OPS:
                return out
            packet = func.overloadpacket
            if packet in flop_registry:
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
            elif name in ELEMENTWISE and name not in ("copy_", "fill_", "clone", "_to_copy",
                                                      "ones_like", "zero_"):
                flops = _numel(out)
            else:
                flops = 0
            moved = _nbytes(list(args) + list(kwargs.values())) + _nbytes(out)
            if name.endswith("_") and name not in ("fill_", "zero_"):
                moved -= _nbytes(out)    # in place: the output is the first input
            row = table.setdefault(name, [0, 0, 0])
            row[0] += 1
            row[1] += flops
            row[2] += moved
            sequence.append(OpCount(name, 1, float(flops), float(moved)))
            return out

    sequence: list[OpCount] = []
    with Mode():
        fn()
    return OpCounts(tuple(OpCount(k, c, float(f), float(b)) for k, (c, f, b) in table.items()),
                    tuple(sequence))
