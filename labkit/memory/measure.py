"""Exact measurements with torch on CPU (imports torch when called).

* :func:`saved_tensor_bytes`: the bytes autograd keeps for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks`` (each storage counted once; parameters,
  which live anyway, are left out).
* :class:`TransformerBlock` built from the operations Korthikanti et al. (2022) count, so
  its saved bytes can be compared term by term with
  :func:`labkit.memory.estimator.activation_terms`.
* :func:`peak_step_bytes`: the peak of PyTorch's CPU allocator during a call, from the
  profiler's allocation trace (what a GPU's ``max_memory_allocated`` would show).
* :func:`measure_checkpointing` and :func:`measure_accumulation`: activation
  checkpointing (``torch.utils.checkpoint``) and gradient accumulation, measured.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from labkit.torch_models import torch_mlp


@dataclass(frozen=True)
class SavedTensors:
    total_bytes: int
    tensors: tuple[tuple[tuple[int, ...], str, int], ...]   # (shape, dtype, bytes) per storage


def saved_tensor_bytes(fn: Callable[[], object], exclude=()) -> SavedTensors:
    """Run ``fn()`` (a forward pass) and count what autograd saves for backward.

    Storages are identified by data pointer so a tensor saved by two ops (a ReLU output
    that is also the next Linear's input) counts once; tensors sharing storage with
    anything in ``exclude`` (the parameters) are skipped.
    """
    import torch

    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, tuple] = {}

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in excluded and ptr not in seen:
            seen[ptr] = (tuple(t.shape), str(t.dtype).replace("torch.", ""), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    tensors = tuple(seen.values())
    return SavedTensors(sum(t[2] for t in tensors), tensors)


def count_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def transformer_block_params(hidden: int, ffn_mult: int = 4) -> int:
    """Parameters of one block (QKV, output projection, 2-layer MLP, two LayerNorms, with
    biases): 3h²+3h + h²+h + 2·m·h² + m·h + h + 4h = (4 + 2m)h² + (9 + m)h; m = 4 gives
    12h² + 13h."""
    h, m = int(hidden), int(ffn_mult)
    if h < 1 or m < 1:
        raise ValueError(f"hidden and ffn_mult must be >= 1, got {hidden}, {ffn_mult}")
    return (4 + 2 * m) * h * h + (9 + m) * h


def mlp_saved(batch: int, widths, seed: int = 0) -> SavedTensors:
    """Saved bytes of an fp32 MLP forward (Linear/ReLU stack, output summed)."""
    import torch

    model = torch_mlp(widths, seed)
    x = torch.randn(batch, widths[0], generator=torch.Generator().manual_seed(seed))
    return saved_tensor_bytes(lambda: model(x).sum(), exclude=list(model.parameters()))


def _transformer_block_class():
    import torch
    from torch import nn

    class TransformerBlock(nn.Module):
        """LN → QKV → softmax(QKᵀ/√d) → dropout → ·V → proj → dropout → +x →
        LN → fc1 → GeLU → fc2 → dropout → +x, as in Megatron (Korthikanti Fig. 2)."""

        def __init__(self, hidden: int, heads: int, p: float = 0.1):
            super().__init__()
            if hidden % heads:
                raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
            self.h, self.a, self.p = hidden, heads, p
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)

        def forward(self, x):                       # x: (s, b, h)
            s, b, h = x.shape
            a, d = self.a, h // self.a
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(s, b * a, d).transpose(0, 1) for t in (q, k, v))
            scores = torch.bmm(q, k.transpose(1, 2)) * (d ** -0.5)
            probs = torch.softmax(scores, dim=-1)
            probs = nn.functional.dropout(probs, self.p, self.training)
            ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, h)
            x = x + nn.functional.dropout(self.proj(ctx), self.p, self.training)
            y = self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
            return x + nn.functional.dropout(y, self.p, self.training)

    return TransformerBlock


def make_transformer_block(hidden: int, heads: int, dtype: str = "bfloat16", seed: int = 0):
    import torch

    torch.manual_seed(seed)
    block = _transformer_block_class()(hidden, heads)
    return block.to(getattr(torch, dtype))


def transformer_block_saved(seq: int, batch: int, hidden: int, heads: int,
                            dtype: str = "bfloat16", seed: int = 0) -> SavedTensors:
    """Saved bytes of one training-mode block forward on a (seq, batch, hidden) input."""
    import torch

    block = make_transformer_block(hidden, heads, dtype, seed)
    block.train()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, batch, hidden, generator=g).to(getattr(torch, dtype))
    x.requires_grad_(True)
    torch.manual_seed(seed)
    return saved_tensor_bytes(lambda: block(x).sum(), exclude=list(block.parameters()))


@dataclass(frozen=True)
class ExtraTerms(Mapping):
    """Bytes torch on CPU saves for :class:`TransformerBlock` beyond Korthikanti's count
    (:func:`transformer_extra_terms`): ``masks`` (dropout masks stored in the activation
    dtype) and ``layernorm`` (both LayerNorms' mean and 1/std), ``total`` their sum. As a
    mapping it reads ``{label: bytes}`` with the labels of :attr:`LABELS` (what a table
    prints); :meth:`as_dict` gives that dict."""
    masks: int
    layernorm: int
    LABELS: ClassVar[dict[str, str]] = {
        "masks": "dropout masks in the activation dtype: (as²b + 2sbh)·(itemsize-1)",
        "layernorm": "LayerNorm mean and rstd: 4sb·itemsize",
    }
    _FIELDS: ClassVar[dict[str, str]] = {label: name for name, label in LABELS.items()}

    @property
    def total(self) -> int:
        return self.masks + self.layernorm

    def as_dict(self) -> dict[str, int]:
        return dict(self.items())

    def __getitem__(self, label: str) -> int:
        return getattr(self, self._FIELDS[label])

    def __iter__(self) -> Iterator[str]:
        return iter(self.LABELS.values())

    def __len__(self) -> int:
        return len(self.LABELS)


def transformer_extra_terms(seq: int, batch: int, hidden: int, heads: int,
                            itemsize: int = 2) -> ExtraTerms:
    """What torch on CPU saves beyond Korthikanti's count for :class:`TransformerBlock`
    with 16-bit activations (``itemsize`` = 2):

    * ``masks``: dropout on CPU multiplies by a noise tensor of the activation dtype and
      saves it, so each mask takes 2 bytes per element where the paper (GPU, fused dropout)
      counts 1: +as²b for the attention-probability mask, +sbh for each of the two output
      masks, (as²b + 2sbh)·(itemsize − 1);
    * ``layernorm``: each LayerNorm saves its mean and 1/std, one value per token each:
      2 LayerNorms × 2 × sb × itemsize (the paper leaves them out as negligible).
    """
    s, b, h, a = int(seq), int(batch), int(hidden), int(heads)
    return ExtraTerms(masks=(itemsize - 1) * (a * s * s * b + 2 * s * b * h),
                      layernorm=4 * s * b * itemsize)


# ---- peak memory of a call --------------------------------------------------------------

def peak_step_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes the CPU allocator held above its level at the start of ``fn()``."""
    from labkit.memory.record import record_torch_trace

    trace = record_torch_trace(fn)
    delta = np.where(trace.kind == 1, trace.size, -trace.size)
    if len(delta) == 0:
        return 0
    return int(max(0, np.cumsum(delta).max()))


@dataclass(frozen=True)
class CheckpointResult:
    segments: int            # 0 = no checkpointing
    peak_bytes: int          # allocator peak during forward + backward
    seconds: float           # median time of forward + backward


def _deep_mlp(num_layers: int, width: int, seed: int):
    import torch

    torch.manual_seed(seed)
    layers = []
    for _ in range(num_layers):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def measure_checkpointing(num_layers: int = 16, width: int = 128, batch: int = 1024,
                          segments=(0, 2, 4, 8), repeats: int = 3,
                          seed: int = 0) -> list[CheckpointResult]:
    """Peak memory and time of forward+backward of a deep MLP with
    ``torch.utils.checkpoint.checkpoint_sequential`` split into k segments (0 = none)."""
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    from labkit.perf import benchmark

    for name, v in (("num_layers", num_layers), ("width", width), ("batch", batch),
                    ("repeats", repeats)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    for k in segments:
        if not isinstance(k, int) or k < 0 or k > 2 * num_layers:
            raise ValueError(f"segments must be ints in [0, {2 * num_layers}], got {k!r}")
    model = _deep_mlp(num_layers, width, seed)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed),
                    requires_grad=True)

    def step(k):
        def run():
            if k == 0:
                out = model(x)
            else:
                out = checkpoint_sequential(model, k, x, use_reentrant=False)
            out.sum().backward()
            model.zero_grad(set_to_none=False)   # steady state: gradients stay allocated
            x.grad = None
        return run

    results = []
    for k in segments:
        step(k)()    # warm up
        peak = peak_step_bytes(step(k))
        seconds = benchmark(step(k), repeats=repeats, warmup=0).median
        results.append(CheckpointResult(k, peak, seconds))
    return results


@dataclass(frozen=True)
class AccumulationResult:
    micro_batches: int
    peak_bytes: int
    max_grad_diff: float     # vs one full-batch step


def measure_accumulation(batch: int = 256, widths=(128, 512, 512, 10),
                         micro_batches=(1, 2, 4, 8), seed: int = 0) -> list[AccumulationResult]:
    """Gradient accumulation: k micro-batches of batch/k, loss scaled by 1/k, give the
    full-batch gradient with smaller activation peaks."""
    import torch

    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    model = torch_mlp(widths, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, widths[0], generator=g)
    y = torch.randint(0, widths[-1], (batch,), generator=g)
    for k in micro_batches:
        if not isinstance(k, int) or k < 1 or batch % k:
            raise ValueError(f"micro_batches must divide batch={batch}, got {k!r}")

    def grads(k):
        model.zero_grad(set_to_none=True)
        for xs, ys in zip(x.chunk(k), y.chunk(k)):
            loss = torch.nn.functional.cross_entropy(model(xs), ys) / k
            loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    reference = grads(1)
    out = []
    for k in micro_batches:
        got = grads(k)
        diff = max(float((a - b).abs().max()) for a, b in zip(got, reference))
        model.zero_grad(set_to_none=True)
        for p in model.parameters():        # grads exist, as in steady-state training
            p.grad = torch.zeros_like(p)
        peak = peak_step_bytes(lambda: _accumulate(model, x, y, k))
        out.append(AccumulationResult(k, peak, diff))
    return out


def _accumulate(model, x, y, k):
    import torch

    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        (torch.nn.functional.cross_entropy(model(xs), ys) / k).backward()
