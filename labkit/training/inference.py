"""Inference experiments: batch size vs latency/throughput, precision, and the KV cache.

* :func:`batch_sweep` measures a no-grad forward at several batch sizes; :func:`fit_latency`
  fits latency = overhead + batch × per-sample time, the model that explains the sweep: a
  call pays a fixed cost (Python and operator dispatch, reading every weight once) and a
  cost per sample, so throughput batch / latency rises towards 1 / per-sample time.
  :func:`weight_reuse` is the FLOPs done per byte of weights read: 2·batch / itemsize.
* :func:`precision_effect` runs one MLP in float32, bfloat16 and float16.
* :func:`kv_cache_bytes_per_token_per_layer` and :func:`kv_cache_bytes` size the key/value
  cache of autoregressive decoding, and :func:`torch_kv_cache_bytes` measures it on a small
  grouped-query attention decoder in PyTorch.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from labkit.timing import benchmark
from labkit.torch_models import torch_mlp
from labkit.validate import integer, one_of

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class BatchPoint:
    batch: int
    latency_s: float      # median seconds per forward of one batch
    throughput: float     # samples per second = batch / latency


@dataclass(frozen=True)
class BatchSweep:
    points: tuple[BatchPoint, ...]
    width: int
    depth: int

    @property
    def latency_growth(self) -> float:
        """Latency at the largest batch over latency at the smallest (the last and first
        points)."""
        return self.points[-1].latency_s / self.points[0].latency_s

    @property
    def throughput_gain(self) -> float:
        """Throughput at the largest batch over throughput at the smallest."""
        return self.points[-1].throughput / self.points[0].throughput


def batch_sweep(batches=(1, 4, 16, 64, 256), width: int = 256, depth: int = 3,
                repeats: int = 7, seed: int = 0) -> BatchSweep:
    """Median latency of a no_grad forward of a depth x width MLP at each batch size."""
    import torch  # deferred: torch

    batches = tuple(int(b) for b in batches)
    if not batches or min(batches) < 1 or max(batches) > 4096:
        raise ValueError(f"batches must be integers in [1, 4096], got {batches}")
    if not 1 <= width <= 2048 or not 1 <= depth <= 16:
        raise ValueError(f"width must be in [1, 2048] and depth in [1, 16], got {width}, {depth}")
    model = torch_mlp((width,) * (depth + 1), seed).eval()
    gen = torch.Generator().manual_seed(seed)
    points = []
    with torch.inference_mode():
        for b in batches:
            x = torch.randn(b, width, generator=gen)
            t = benchmark(lambda: model(x), repeats=repeats, warmup=2).median
            points.append(BatchPoint(b, t, b / t))
    return BatchSweep(tuple(points), width, depth)


def best_batch_on(rule, points, budget_s: float):
    """``rule(sweep, budget_s)`` on the :class:`BatchSweep` of ``points`` — ``(batch,
    latency_s)`` pairs, throughput batch / latency — as plain data: the batch it returns
    (an int) or None, else a string naming what it returned (exercise 3.3's check runs a
    learner's rule this way)."""
    sweep = BatchSweep(tuple(BatchPoint(int(b), float(t), int(b) / float(t)) for b, t in points),
                       0, 0)
    out = rule(sweep, float(budget_s))
    if out is None or (isinstance(out, (int, np.integer)) and not isinstance(out, bool)):
        return None if out is None else int(out)
    return f"{type(out).__name__} {out!r}"


@dataclass(frozen=True)
class LatencyFit:
    overhead_s: float       # fixed cost per call (seconds)
    per_sample_s: float     # extra cost per sample in the batch (seconds)

    def latency(self, batch: int) -> float:
        return self.overhead_s + batch * self.per_sample_s

    @property
    def max_throughput(self) -> float:
        """The throughput the model tends to as the batch grows: 1 / per-sample time."""
        return float("inf") if self.per_sample_s <= 0 else 1.0 / self.per_sample_s

    @property
    def half_batch(self) -> float:
        """Batch at which the fixed cost equals the per-sample cost (throughput = half max)."""
        return float("inf") if self.per_sample_s <= 0 else self.overhead_s / self.per_sample_s


def fit_latency(sweep: BatchSweep) -> LatencyFit:
    """Least-squares fit of latency(B) = t0 + B t1 to the sweep (both clipped at >= 0),
    weighted by 1/latency so small and large batches count alike (relative error)."""
    if not isinstance(sweep, BatchSweep) or len(sweep.points) < 2:
        raise ValueError("sweep must be a BatchSweep with at least two batch sizes")
    b = np.array([p.batch for p in sweep.points], float)
    t = np.array([p.latency_s for p in sweep.points], float)
    w = 1.0 / t
    a = np.stack([np.ones_like(b), b], axis=1) * w[:, None]
    (t0, t1), *_ = np.linalg.lstsq(a, t * w, rcond=None)
    return LatencyFit(max(float(t0), 0.0), max(float(t1), 0.0))


def weight_reuse(batch: int, itemsize: int = 4) -> float:
    """FLOPs per byte of weights for a batch through a linear layer: each weight is read
    once per call and used in one multiply-add (2 FLOPs) per sample: 2·batch / itemsize."""
    batch = integer("batch", batch, low=1)
    itemsize = integer("itemsize", itemsize, low=1)
    return 2.0 * batch / itemsize


@dataclass(frozen=True)
class PrecisionResult:
    width: int
    scale: float
    errors: dict            # dtype name -> |output - float64 output| (array)
    argmax_agreement: dict  # dtype name -> fraction of rows whose argmax matches float64
    overflow: dict          # dtype name -> number of non-finite outputs


def precision_effect(width: int = 128, depth: int = 4, scale: float = 1.0, batch: int = 64,
                     seed: int = 0) -> PrecisionResult:
    """Run one MLP (same weights) in float64 and in float32/bfloat16/float16 on the same input.

    bfloat16 keeps float32's 8 exponent bits with 7 mantissa bits; float16 has 5 exponent
    bits (max 65504) and 10 mantissa bits (IEEE 754-2008; Kalamkar et al. 2019).
    """
    import torch  # deferred: torch

    if not 1 <= width <= 1024 or not 1 <= depth <= 16 or not 1 <= batch <= 4096:
        raise ValueError(f"width in [1, 1024], depth in [1, 16], batch in [1, 4096]; got "
                         f"{width}, {depth}, {batch}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    model = torch_mlp((width,) * depth + (10,), seed, dtype=torch.float64).eval()
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64) * scale
    errors, agree, overflow = {}, {}, {}
    with torch.no_grad():
        ref = model(x)
        for name in DTYPES:
            dt = getattr(torch, name)
            out = copy_model(model, dt)(x.to(dt)).to(torch.float64)
            finite = torch.isfinite(out)
            err = (out - ref).abs().where(finite, torch.tensor(np.inf, dtype=torch.float64))
            errors[name] = np.minimum(err.numpy(), 1e30)
            agree[name] = float((out.argmax(1) == ref.argmax(1)).double().mean())
            overflow[name] = int((~finite).sum())
    return PrecisionResult(width, float(scale), errors, agree, overflow)


@dataclass(frozen=True)
class PrecisionScan:
    scales: tuple[float, ...]
    results: tuple[PrecisionResult, ...]    # one per scale, same order

    def at(self, scale: float) -> PrecisionResult:
        for s, r in zip(self.scales, self.results):
            if s == scale:
                return r
        raise ValueError(f"scale must be one of the scanned scales {self.scales}, got {scale!r}")

    def first_overflow(self, dtype: str = "float16") -> float | None:
        """The smallest scanned input scale at which ``dtype`` produced a non-finite output."""
        one_of("dtype", dtype, DTYPES)
        return next((s for s, r in sorted(zip(self.scales, self.results),
                                          key=lambda sr: sr[0]) if r.overflow[dtype]), None)


def precision_scan(scales=(1.0, 10.0, 100.0, 1e3, 1e4, 1e5), **kwargs) -> PrecisionScan:
    """:func:`precision_effect` at each input scale (other arguments passed on)."""
    scales = tuple(float(s) for s in scales)
    if not scales:
        raise ValueError("scales must hold at least one input scale")
    return PrecisionScan(scales, tuple(precision_effect(scale=s, **kwargs) for s in scales))


def format_precision(scan: PrecisionScan, scales) -> str:
    """One line per input scale in ``scales`` (each one of ``scan.scales``): each format's
    largest error against float64 and its count of non-finite outputs."""
    lines = []
    for scale in scales:
        r = scan.at(scale)
        lines.append(f"input scale {scale:g}: " + "; ".join(
            f"{k} max err {r.errors[k].max():.2g}, overflows {r.overflow[k]}" for k in r.errors))
    return "\n".join(lines)


@dataclass(frozen=True)
class DtypeFacts:
    name: str
    bits: int
    max: float            # largest finite value
    eps: float            # gap between 1 and the next value: 2^-(significand bits - 1)
    unit_roundoff: float  # u = eps / 2, the largest relative rounding error (round to nearest)
    digits: float         # -log10(u): significant decimal digits


def dtype_facts(names=DTYPES) -> tuple[DtypeFacts, ...]:
    """``torch.finfo`` of each format, with the unit roundoff u = eps/2 and -log10 u digits
    (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., 2002, chap. 2):
    float32 u = 2^-24, bfloat16 2^-8, float16 2^-11."""
    import torch  # deferred: torch

    out = []
    for name in names:
        fi = torch.finfo(getattr(torch, one_of("names", name, DTYPES)))
        u = fi.eps / 2
        out.append(DtypeFacts(name, fi.bits, float(fi.max), float(fi.eps), u,
                              float(-np.log10(u))))
    return tuple(out)


def format_dtype_facts(facts) -> str:
    """One line per :class:`DtypeFacts`: bits, largest value, eps, unit roundoff, digits."""
    return "\n".join(f"{f.name:>8}: {f.bits} bits, largest {f.max:.6g}, eps {f.eps:.3g}, "
                     f"unit roundoff {f.unit_roundoff:.3g} (~{f.digits:.1f} significant digits)"
                     for f in facts)


def copy_model(model, dtype):
    return copy.deepcopy(model).to(dtype)


# ---- the KV cache ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DecoderShape:
    """What sizes a decoder's KV cache (the model's config.json fields)."""
    name: str
    layers: int
    n_heads: int            # query heads
    n_kv_heads: int         # key/value heads (= n_heads without grouped-query attention)
    head_dim: int


# from the models' Hugging Face config.json files (num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size / num_attention_heads)
DECODERS = {
    "Llama-2-7B": DecoderShape("Llama-2-7B", 32, 32, 32, 128),
    "Llama-2-70B": DecoderShape("Llama-2-70B", 80, 64, 8, 128),
}


def kv_cache_bytes_per_token_per_layer(n_kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """2 · n_kv_heads · head_dim · dtype_bytes: one key and one value vector per KV head.

    With grouped-query attention (Ainslie et al. 2023) the query heads share ``n_kv_heads``
    < ``n_heads`` key/value heads, and only those are cached; multi-query attention
    (Shazeer 2019) is ``n_kv_heads = 1``.
    """
    n_kv_heads = integer("n_kv_heads", n_kv_heads, low=1)
    head_dim = integer("head_dim", head_dim, low=1)
    dtype_bytes = integer("dtype_bytes", dtype_bytes, low=1)
    return 2 * n_kv_heads * head_dim * dtype_bytes


def kv_cache_bytes(model: DecoderShape, seq: int, batch: int = 1, dtype_bytes: int = 2) -> int:
    """Bytes of the KV cache after ``seq`` tokens for ``batch`` sequences: per token per
    layer × layers × seq × batch."""
    if not isinstance(model, DecoderShape):
        raise TypeError(f"model must be a DecoderShape (see DECODERS), got {model!r}")
    seq = integer("seq", seq, low=0)
    batch = integer("batch", batch, low=1)
    return (kv_cache_bytes_per_token_per_layer(model.n_kv_heads, model.head_dim, dtype_bytes)
            * model.layers * seq * batch)


@dataclass(frozen=True)
class KVCacheRow:
    model: str
    per_token_bytes: int    # all layers: per token per layer × layers
    cache_bytes: int        # × seq × batch


def kv_cache_rows(rule=None, seq: int = 4096, batch: int = 8, dtype_bytes: int = 2
                  ) -> tuple[KVCacheRow, ...]:
    """The KV cache of each of :data:`DECODERS` after ``seq`` tokens for ``batch`` sequences,
    from ``rule(n_heads, n_kv_heads, head_dim, dtype_bytes)`` -> bytes per token per layer
    (exercise 3.6's signature; default :func:`kv_cache_bytes_per_token_per_layer`)."""
    if rule is None:
        def rule(n_heads, n_kv_heads, head_dim, dtype_bytes):
            return kv_cache_bytes_per_token_per_layer(n_kv_heads, head_dim, dtype_bytes)
    elif not callable(rule):
        raise TypeError(f"rule must be a function, got {type(rule).__name__}")
    seq = integer("seq", seq, low=0)
    batch = integer("batch", batch, low=1)
    dtype_bytes = integer("dtype_bytes", dtype_bytes, low=1)
    rows = []
    for name, m in DECODERS.items():
        per_token = int(rule(m.n_heads, m.n_kv_heads, m.head_dim, dtype_bytes)) * m.layers
        rows.append(KVCacheRow(name, per_token, per_token * seq * batch))
    return tuple(rows)


def format_kv_cache_rows(rows, seq: int, batch: int) -> str:
    """One line per :class:`KVCacheRow` of :func:`kv_cache_rows` (made with ``seq`` tokens and
    ``batch`` sequences): KiB per token and GiB for the whole cache."""
    seq = integer("seq", seq, low=0)
    batch = integer("batch", batch, low=1)
    return "\n".join(f"{row.model}: {row.per_token_bytes / 1024:.0f} KiB per token; batch "
                     f"{batch} x {seq} tokens: {row.cache_bytes / 2**30:.1f} GiB" for row in rows)


def torch_kv_cache_bytes(n_heads: int = 8, n_kv_heads: int = 2, head_dim: int = 16,
                         layers: int = 2, steps: int = 12, batch: int = 1,
                         dtype: str = "bfloat16", seed: int = 0) -> int:
    """Decode ``steps`` tokens with a tiny grouped-query attention stack in PyTorch, caching
    each layer's keys and values (shape (batch, n_kv_heads, tokens, head_dim)) the way
    Hugging Face's ``DynamicCache`` does; returns the bytes the cache holds at the end."""
    import torch  # deferred: torch

    n_heads = integer("n_heads", n_heads, low=1)
    n_kv_heads = integer("n_kv_heads", n_kv_heads, low=1)
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    head_dim = integer("head_dim", head_dim, low=1)
    layers = integer("layers", layers, low=1)
    steps = integer("steps", steps, low=1, high=4096)
    batch = integer("batch", batch, low=1)
    one_of("dtype", dtype, ("float32", "bfloat16", "float16"))
    dt = getattr(torch, dtype)
    hidden = n_heads * head_dim
    g = torch.Generator().manual_seed(seed)
    wq = [torch.randn(hidden, hidden, generator=g).to(dt) / hidden ** 0.5 for _ in range(layers)]
    wkv = [torch.randn(hidden, 2 * n_kv_heads * head_dim, generator=g).to(dt) / hidden ** 0.5
           for _ in range(layers)]
    cache: list[list] = [[None, None] for _ in range(layers)]
    x = torch.randn(batch, 1, hidden, generator=g).to(dt)
    with torch.inference_mode():
        for _ in range(steps):
            h = x
            for i in range(layers):
                q = (h @ wq[i]).view(batch, 1, n_heads, head_dim).transpose(1, 2)
                k, v = (h @ wkv[i]).view(batch, 1, 2, n_kv_heads, head_dim).unbind(2)
                k, v = k.transpose(1, 2), v.transpose(1, 2)
                ck, cv = cache[i]
                cache[i] = [k if ck is None else torch.cat([ck, k], dim=2),
                            v if cv is None else torch.cat([cv, v], dim=2)]
                rep = n_heads // n_kv_heads       # each KV head serves `rep` query heads
                kk = cache[i][0].repeat_interleave(rep, dim=1)
                vv = cache[i][1].repeat_interleave(rep, dim=1)
                att = torch.softmax(q @ kk.transpose(-1, -2) / head_dim ** 0.5, dim=-1)
                h = (att @ vv).transpose(1, 2).reshape(batch, 1, hidden)
            x = h
    return int(sum(t.untyped_storage().nbytes() for pair in cache for t in pair))
