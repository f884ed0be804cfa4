"""Chapter 08's rows.

* labkit's int8 quantized linear layer (numpy; exact integer accumulation in float64 BLAS)
  against fp32 ``torch.nn.functional.linear``, batch 256, 512 → 512;
* operator fusion by ``torch.compile`` (TorchInductor): the epilogue chain
  relu(x·1.5 − 0.25)·0.5 + r on 4 M floats, compiled vs eager
  (:func:`labkit.compress.train.compile_timing`; compiling takes tens of seconds, too long
  for the chapter's notebook).
"""
from __future__ import annotations

import sys

import numpy as np

from labkit.compress.model import QuantLinear
from labkit.perf import Row, benchmark


def _quant_row() -> Row:
    import torch

    rng = np.random.default_rng(0)
    w = rng.normal(size=(512, 512)).astype(np.float32)
    b = rng.normal(size=512).astype(np.float32)
    x = rng.normal(size=(256, 512)).astype(np.float32)
    ql = QuantLinear(w, b)
    wt, bt, xt = torch.from_numpy(w), torch.from_numpy(b), torch.from_numpy(x)
    ours = benchmark(lambda: ql(x), repeats=5, warmup=1).median
    with torch.no_grad():
        base = benchmark(lambda: torch.nn.functional.linear(xt, wt, bt), repeats=5, warmup=1).median
    return Row("int8 quantized linear 256×512×512 (labkit numpy)", ours, base,
               "fp32 torch linear", goal="4x smaller weights; speed needs int8 kernels")


def _compile_row() -> Row:
    from labkit.compress.train import compile_timing

    c = compile_timing(trials=1)          # checks the compiled chain against eager first
    return Row("epilogue chain, 4M floats: torch.compile", c.compiled_s[0], c.eager_s[0],
               "eager torch", goal="> 1x (fusion removes temporaries)")


def rows() -> list[Row]:
    out = [_quant_row()]
    try:
        out.append(_compile_row())
    except Exception as exc:         # no C++ compiler for inductor, say: keep the other row
        print(f"torch.compile failed ({type(exc).__name__}: {exc}); row skipped", file=sys.stderr)
    return out
