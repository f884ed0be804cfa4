"""Exact measurements with torch on CPU (imports torch when called).

* :func:`saved_tensor_bytes`: the bytes autograd keeps for backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks`` (each storage counted once; parameters,
  which live anyway, are left out); :func:`count_saved_storages` the same as
  ``(storages, bytes)``, with any counter of that signature (a learner's) taking its place
  in :func:`transformer_block_saved` and :func:`saved_probe`.
* :class:`TransformerBlock` built from the operations Korthikanti et al. (2022) count, so
  its saved bytes can be compared term by term with
  :func:`labkit.memory.estimator.activation_terms`.
* :func:`peak_step_bytes`: the peak of PyTorch's CPU allocator during a call, from the
  profiler's allocation trace (what a GPU's ``max_memory_allocated`` would show).
* :func:`checkpoint_segments`, :func:`measure_checkpointing` (with any segment function),
  :func:`checkpoint_probe` and :func:`measure_accumulation`: activation checkpointing
  (``torch.utils.checkpoint``) and gradient accumulation, measured.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from labkit.memory.record import record_torch_trace
from labkit.timing import benchmark
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
    import torch  # deferred: torch

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


def count_saved_storages(fn: Callable[[], object], exclude=()) -> tuple[int, int]:
    """``(storages, bytes)`` autograd saves while ``fn()`` runs: :func:`saved_tensor_bytes`
    as two numbers. A storage is identified by ``t.untyped_storage().data_ptr()`` — a view
    (``chunk``, ``transpose``) saves its whole base — and counted with its ``nbytes()``."""
    saved = saved_tensor_bytes(fn, exclude)
    return len(saved.tensors), saved.total_bytes


def _probe_model(case):
    """The forward a :func:`saved_probe` case names, its parameters, and its input:
    ``("block", s, b, h, a, seed)`` the bfloat16 transformer block; ``("mlp", batch, widths,
    seed)`` an fp32 Linear/ReLU stack; ``("shared", n, seed)`` a function that saves one
    tensor twice and a view of another (x·x, then the halves of a chunk)."""
    import torch  # deferred: torch

    kind = case[0]
    if kind == "block":
        _, s, b, h, a, seed = case
        block = make_transformer_block(h, a, "bfloat16", seed)
        block.train()
        x = torch.randn(s, b, h, generator=torch.Generator().manual_seed(seed))
        x = x.to(torch.bfloat16).requires_grad_(True)
        torch.manual_seed(seed)
        return (lambda: block(x).sum()), list(block.parameters())
    if kind == "mlp":
        _, batch, widths, seed = case
        model = torch_mlp(tuple(widths), seed)
        x = torch.randn(batch, widths[0], generator=torch.Generator().manual_seed(seed))
        return (lambda: model(x).sum()), list(model.parameters())
    if kind == "shared":
        _, n, seed = case
        w = torch.randn(n, 2 * n, generator=torch.Generator().manual_seed(seed),
                        requires_grad=True)

        def fn():
            y = torch.randn(4, n, generator=torch.Generator().manual_seed(seed + 1),
                            requires_grad=True)
            z = y * y                       # y saved twice: one storage
            left, right = (z @ w).chunk(2, dim=1)
            return (left.sin() * right.cos()).sum()   # sin, cos save two views of one base
        return fn, [w]
    raise ValueError(f"case must start with 'block', 'mlp' or 'shared', got {kind!r}")


def saved_probe(counter: Callable, case) -> tuple[int, int]:
    """``counter(fn, exclude=parameters)`` for the forward of a case (:func:`_probe_model`):
    what a check compares, as two ints."""
    fn, params = _probe_model(case)
    got = counter(fn, exclude=params)
    count, nbytes = got
    return int(count), int(nbytes)


def saved_variants(case) -> dict[str, tuple[int, int]]:
    """What the tempting wrong counters give for a case: every save counted (``"saves"``),
    storages keyed by the tensor's own ``data_ptr()`` (``"data_ptr"``), each tensor's own
    bytes instead of its storage's (``"view_bytes"``), parameters not left out
    (``"params"``)."""
    import torch  # deferred: torch

    fn, params = _probe_model(case)
    excluded = {p.untyped_storage().data_ptr() for p in params}
    records = []

    def pack(t):
        records.append((t.untyped_storage().data_ptr(), t.data_ptr(),
                        t.untyped_storage().nbytes(), t.numel() * t.element_size()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    mine = [r for r in records if r[0] not in excluded]

    def unique(rows, key, size):
        seen = {}
        for r in rows:
            seen.setdefault(r[key], r[size])
        return len(seen), sum(seen.values())
    return {"saves": (len(mine), sum(r[2] for r in mine)),
            "data_ptr": unique(mine, 1, 2), "view_bytes": unique(mine, 0, 3),
            "params": unique(records, 0, 2)}


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
    import torch  # deferred: torch

    model = torch_mlp(widths, seed)
    x = torch.randn(batch, widths[0], generator=torch.Generator().manual_seed(seed))
    return saved_tensor_bytes(lambda: model(x).sum(), exclude=list(model.parameters()))


def _transformer_block_class():
    import torch  # deferred: torch
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
    import torch  # deferred: torch

    torch.manual_seed(seed)
    block = _transformer_block_class()(hidden, heads)
    return block.to(getattr(torch, dtype))


def transformer_block_saved(seq: int, batch: int, hidden: int, heads: int,
                            dtype: str = "bfloat16", seed: int = 0, *,
                            counter: Callable | None = None) -> SavedTensors:
    """Saved bytes of one training-mode block forward on a (seq, batch, hidden) input.
    ``counter(fn, exclude)`` → ``(storages, bytes)`` counts instead of labkit's hook (the
    result then holds only the total)."""
    import torch  # deferred: torch

    block = make_transformer_block(hidden, heads, dtype, seed)
    block.train()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, batch, hidden, generator=g).to(getattr(torch, dtype))
    x.requires_grad_(True)
    torch.manual_seed(seed)
    if counter is not None:
        _, nbytes = counter(lambda: block(x).sum(), exclude=list(block.parameters()))
        return SavedTensors(int(nbytes), ())
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

def peak_step_bytes(fn: Callable[[], object], repeats: int = 1) -> int:
    """Peak bytes the CPU allocator held above its level at the start of ``fn()``; with
    ``repeats`` > 1 the median over that many runs (the profiler now and then misses a
    memory event — about one run in fifty here — which moves that run's peak by a tensor,
    or loses the run's events). The garbage collector is off meanwhile, so a cycle it
    collects cannot free a tensor in one run and not in another."""
    peaks = []
    for _ in range(repeats):
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            trace = record_torch_trace(fn)
        finally:
            if was_enabled:
                gc.enable()
        delta = np.where(trace.kind == 1, trace.size, -trace.size)
        peaks.append(int(max(0, np.cumsum(delta).max())) if len(delta) else 0)
    return int(np.median(peaks))


@dataclass(frozen=True)
class CheckpointResult:
    segments: int            # 0 = no checkpointing
    peak_bytes: int          # allocator peak during forward + backward
    seconds: float           # median time of forward + backward


def _deep_mlp(num_layers: int, width: int, seed: int):
    import torch  # deferred: torch

    torch.manual_seed(seed)
    layers = []
    for _ in range(num_layers):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers)


def checkpoint_segments(model, x, k: int):
    """Reference of exercise 6.9: ``model`` (an ``nn.Sequential``) on ``x`` in ``k`` segments
    of ``len(model) // k`` modules (the last takes the rest), each but the last run under
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, so forward keeps only
    the segments' inputs and backward recomputes one segment at a time (Chen et al., 2016,
    "Training Deep Nets with Sublinear Memory Cost"; the segments of
    ``torch.utils.checkpoint.checkpoint_sequential``, whose last one is never checkpointed:
    backward needs its activations at once)."""
    from torch.utils.checkpoint import checkpoint  # deferred: torch

    layers = list(model)
    per = len(layers) // k
    bounds = [i * per for i in range(k)] + [len(layers)]

    def run(lo, hi):
        def forward(h):
            for layer in layers[lo:hi]:
                h = layer(h)
            return h
        return forward

    for lo, hi in zip(bounds[:-2], bounds[1:-1]):
        x = checkpoint(run(lo, hi), x, use_reentrant=False)
    return run(bounds[-2], bounds[-1])(x)


def measure_checkpointing(num_layers: int = 16, width: int = 128, batch: int = 1024,
                          segments=(0, 2, 4, 8), repeats: int = 3,
                          seed: int = 0, checkpointed: Callable | None = None
                          ) -> list[CheckpointResult]:
    """Peak memory and time of forward+backward of a deep MLP of ``num_layers``
    Linear+Tanh blocks run in k checkpointed segments (0 = none) by ``checkpointed(model,
    x, k)`` (default :func:`checkpoint_segments`)."""
    import torch  # deferred: torch

    run_segments = checkpoint_segments if checkpointed is None else checkpointed

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
            out = model(x) if k == 0 else run_segments(model, x, k)
            out.sum().backward()
            model.zero_grad(set_to_none=False)   # steady state: gradients stay allocated
            x.grad = None
        return run

    results = []
    for k in segments:
        step(k)()    # warm up
        peak = peak_step_bytes(step(k), repeats=3)
        seconds = benchmark(step(k), repeats=repeats, warmup=0).median
        results.append(CheckpointResult(k, peak, seconds))
    return results


def _probe_layers(num_layers: int, width: int, seed: int, calls: list):
    """The deep MLP as a list of plain layers — a small function per Linear (counting its
    calls in ``calls[0]``), ``torch.tanh`` itself for each Tanh — and its parameters. No
    ``nn.Module``: a check runs this under a profile hook that pays for every Python call,
    and a module call costs a few hundred bytecode instructions of torch's."""
    import torch  # deferred: torch

    g = torch.Generator().manual_seed(seed)
    params, layers = [], []
    for _ in range(num_layers):
        w = (torch.randn(width, width, generator=g) / width ** 0.5).requires_grad_(True)
        b = torch.zeros(width, requires_grad=True)
        params += [w, b]

        def linear(h, w=w, b=b):
            calls[0] += 1
            return torch.nn.functional.linear(h, w, b)
        layers += [linear, torch.tanh]
    return layers, params


def checkpoint_probe(checkpointed: Callable, num_layers: int, width: int, batch: int,
                     k: int, seed: int = 0) -> dict:
    """What a check compares for a segment-checkpointing function ``checkpointed(model, x,
    k)`` on a deep MLP (``model``: a list of Linear and Tanh layers, as ``list(model)`` of
    an ``nn.Sequential`` gives): the allocator's peak of forward + backward (bytes,
    gradients already allocated), one activation's bytes (batch · width · 4), how many
    Linear forwards ran (recomputation adds to the num_layers of one forward), and the
    largest difference of the output and of the gradients from a plain forward + backward."""
    import torch  # deferred: torch

    calls = [0]
    layers, params = _probe_layers(num_layers, width, seed, calls)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed + 1),
                    requires_grad=True)
    h = x
    for layer in layers:
        h = layer(h)
    h.sum().backward()
    grads0 = [t.grad.clone() for t in [*params, x]]
    x.grad = None

    def run():
        for p in params:
            p.grad.zero_()
        x.grad = None
        out = checkpointed(layers, x, k)
        out.sum().backward()
        return out

    calls[0] = 0
    out = run()                           # the result, and a warm-up
    linear_calls = calls[0]
    grads = [torch.zeros_like(t) if t.grad is None else t.grad.clone() for t in [*params, x]]
    out_diff = float((out.detach() - h.detach()).abs().max())
    grad_diff = max(float((a - b).abs().max()) for a, b in zip(grads, grads0))
    peak = peak_step_bytes(run, repeats=3)
    return {"peak": int(peak), "activation": batch * width * 4, "linear_calls": linear_calls,
            "out_diff": out_diff, "grad_diff": grad_diff}


@dataclass(frozen=True)
class AccumulationResult:
    micro_batches: int
    peak_bytes: int
    max_grad_diff: float     # vs one full-batch step


def measure_accumulation(batch: int = 256, widths=(128, 512, 512, 10),
                         micro_batches=(1, 2, 4, 8), seed: int = 0) -> list[AccumulationResult]:
    """Gradient accumulation: k micro-batches of batch/k, loss scaled by 1/k, give the
    full-batch gradient with smaller activation peaks."""
    import torch  # deferred: torch

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
    import torch  # deferred: torch

    for xs, ys in zip(x.chunk(k), y.chunk(k)):
        (torch.nn.functional.cross_entropy(model(xs), ys) / k).backward()


def deep_mlp_saved(counter: Callable, num_layers: int = 16, width: int = 128,
                   batch: int = 1024, seed: int = 0) -> tuple[int, int]:
    """``counter(fn, exclude=parameters)`` on the forward of the deep MLP that
    :func:`measure_checkpointing` runs: each Linear saves its input, each Tanh its output —
    the next Linear's input, the same storage — so n blocks save n + 1 activations (the
    input, then one per block)."""
    import torch  # deferred: torch

    model = _deep_mlp(num_layers, width, seed)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed),
                    requires_grad=True)
    count, nbytes = counter(lambda: model(x).sum(), exclude=list(model.parameters()))
    return int(count), int(nbytes)
