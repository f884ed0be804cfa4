"""Inference experiments in PyTorch: batch size vs latency/throughput, and precision."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def batch_sweep(batches=(1, 4, 16, 64, 256), width: int = 256, depth: int = 3,
                repeats: int = 7, seed: int = 0) -> BatchSweep:
    """Median latency of a no_grad forward of a depth x width MLP at each batch size."""
    import torch

    from labkit.torch_models import torch_mlp
    from labkit.perf import time_call

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
            t = time_call(lambda: model(x), repeats=repeats, warmup=2).median
            points.append(BatchPoint(b, t, b / t))
    return BatchSweep(tuple(points), width, depth)


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
    import torch

    from labkit.torch_models import torch_mlp

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


def copy_model(model, dtype):
    import copy
    return copy.deepcopy(model).to(dtype)
