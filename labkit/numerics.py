"""Floating-point formats and rounding: the one implementation, used by the tensor-core
emulation (:mod:`labkit.kernels.tensorcore`) and by mixed precision and loss scaling
(:mod:`labkit.compress`).

IEEE 754 binary formats (bfloat16 as in Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep
Learning Training"): with p significand bits (the implicit one included) the unit roundoff
is u = 2^−p: fp32 2^−24, fp16 2^−11 ≈ 4.9e-4 (≈ 3.3 decimal digits), bf16 2^−8 ≈ 3.9e-3
(≈ 2.4 digits). fp16 has 5 exponent bits (max 65504, smallest normal 2^−14, smallest
subnormal 2^−24); bf16 has fp32's 8 (max ≈ 3.4e38, smallest normal 2^−126).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit import validate as V


@dataclass(frozen=True)
class FloatFormat:
    name: str
    exponent_bits: int
    significand_bits: int      # p, with the implicit leading one

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.significand_bits

    @property
    def decimal_digits(self) -> float:
        return -math.log10(self.unit_roundoff)

    @property
    def max(self) -> float:
        emax = 2 ** (self.exponent_bits - 1) - 1
        return (2 - 2.0 ** (1 - self.significand_bits)) * 2.0 ** emax

    @property
    def min_normal(self) -> float:
        return 2.0 ** (2 - 2 ** (self.exponent_bits - 1))

    @property
    def min_subnormal(self) -> float:
        return self.min_normal * 2.0 ** (1 - self.significand_bits)


FORMATS = {"fp32": FloatFormat("fp32", 8, 24), "fp16": FloatFormat("fp16", 5, 11),
           "bf16": FloatFormat("bf16", 8, 8)}


def unit_roundoff(fmt: str) -> float:
    return FORMATS[V.one_of("fmt", fmt, tuple(FORMATS))].unit_roundoff


def round_to(x, fmt: str) -> np.ndarray:
    """``x`` rounded to ``fmt`` (round to nearest even), returned as float64; NaN stays NaN
    and overflow gives ±inf. fp16 is one numpy cast from float64 (one rounding; PyTorch's
    float64 → float16 goes through float32 and can round twice). bf16 is done on the
    float32 bit pattern: add 0x7FFF + the lowest kept bit, drop the low 16 bits; a float64
    ``x`` is rounded to float32 first, as PyTorch's float64 → bfloat16 conversion does.
    (The one implementation: :func:`round_to_float32` is this in float32.)"""
    V.one_of("fmt", fmt, tuple(FORMATS))
    with np.errstate(over="ignore", invalid="ignore"):   # ±inf and NaN are results, not warnings
        x = np.asarray(x, dtype=np.float64)
        if fmt == "fp16":
            return x.astype(np.float16).astype(np.float64)
        f = x.astype(np.float32)
    if fmt == "fp32":
        return f.astype(np.float64)
    b = f.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, out)


def round_to_float32(x, fmt: str) -> np.ndarray:
    """``x`` as float32, rounded to ``fmt`` (round to nearest even), returned as float32:
    :func:`round_to` (NaN stays NaN, overflow gives ±inf)."""
    return round_to(np.asarray(x, dtype=np.float32), fmt).astype(np.float32)
