"""Tensor-core numerics emulated in numpy.

A Tensor Core multiplies low-precision inputs (FP16 or BF16) and accumulates in FP32
(NVIDIA, "NVIDIA Tesla V100 GPU Architecture" white paper, 2017: D = A x B + C with FP16
A, B and FP32 C, D; A100/H100 add BF16/TF32 inputs). A product of two FP16 (11-bit
significand) or BF16 (8-bit) numbers is exact in FP32 (24 bits), so the emulation rounds
the inputs, multiplies in FP32 and adds into an accumulator rounded to FP32 after every
step, or to FP16 after every step for "pure FP16". Summing K terms in precision with unit
roundoff u has error bound about K u (Higham, *Accuracy and Stability of Numerical
Algorithms*, §4.2): FP16's u = 2^-11 makes long sums drift, FP32's u = 2^-24 does not.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import numerics    # the float formats and their rounding
from labkit.numerics import round_to_float32 as round_to

FORMATS = tuple(numerics.FORMATS)
UNIT_ROUNDOFF = {name: f.unit_roundoff for name, f in numerics.FORMATS.items()}


def emulated_matmul(a: np.ndarray, b: np.ndarray, inputs: str = "fp16",
                    accumulate: str = "fp32") -> np.ndarray:
    """a @ b with inputs rounded to ``inputs`` and a running sum rounded to ``accumulate``
    after each of the K steps (fp32 = tensor-core style; fp16 = pure half precision)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be 2-D with a.shape[1] == b.shape[0], got "
                         f"{a.shape} and {b.shape}")
    if accumulate not in ("fp32", "fp16"):
        raise ValueError(f"accumulate must be 'fp32' or 'fp16', got {accumulate!r}")
    ar, br = round_to(a, inputs), round_to(b, inputs)
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[1]):
        prod = np.outer(ar[:, k], br[k, :])  # exact in fp32 for fp16/bf16 inputs
        if accumulate == "fp16":
            acc = round_to(acc + round_to(prod, "fp16"), "fp16")
        else:
            acc = acc + prod
    return acc


CONFIGS = {"fp16 in, fp32 accumulate (tensor core)": ("fp16", "fp32"),
           "bf16 in, fp32 accumulate (tensor core)": ("bf16", "fp32"),
           "fp16 in, fp16 accumulate": ("fp16", "fp16"),
           "fp32 in, fp32 accumulate": ("fp32", "fp32")}


@dataclass(frozen=True)
class ErrorVsK:
    ks: np.ndarray
    errors: dict      # config label -> relative error (Frobenius) for each K
    distribution: str

    @property
    def growth(self) -> dict:
        """config label -> error at the largest K / error at the smallest K."""
        return {label: float(e[-1] / e[0]) for label, e in self.errors.items()}

    @property
    def fastest_growing(self) -> str:
        """The accumulator (``"fp16"`` or ``"fp32"``, :data:`CONFIGS`) of the config whose
        error grows most with K."""
        growth = self.growth
        return CONFIGS[max(growth, key=growth.get)][1]


def error_vs_k(ks=(16, 64, 256, 1024, 4096), size: int = 16, distribution: str = "uniform",
               seed: int = 0) -> ErrorVsK:
    """Relative error ||C - C_exact||_F / ||C_exact||_F of (size x K) @ (K x size) for each
    config, against float64 on the unrounded float32 inputs.

    distribution "uniform" (U[0, 1): sums grow with K, the hard case for FP16) or "normal".
    """
    ks = np.asarray(ks, dtype=int)
    if ks.size == 0 or np.any(ks < 1) or np.any(ks > 65536):
        raise ValueError(f"ks must be ints in [1, 65536], got {ks}")
    if not 1 <= size <= 256:
        raise ValueError(f"size must be in [1, 256], got {size}")
    if distribution not in ("uniform", "normal"):
        raise ValueError(f"distribution must be 'uniform' or 'normal', got {distribution!r}")
    rng = np.random.default_rng(seed)
    errors: dict[str, list[float]] = {label: [] for label in CONFIGS}
    for k in ks:
        draw = rng.random if distribution == "uniform" else rng.standard_normal
        a = draw((size, int(k))).astype(np.float32)
        b = draw((int(k), size)).astype(np.float32)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        norm = np.linalg.norm(exact)
        for label, (inputs, acc) in CONFIGS.items():
            got = emulated_matmul(a, b, inputs, acc).astype(np.float64)
            errors[label].append(float(np.linalg.norm(got - exact) / norm))
    return ErrorVsK(ks, {k: np.array(v) for k, v in errors.items()}, distribution)
