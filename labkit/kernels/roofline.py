"""Roofline model (Williams, Waterman & Patterson, CACM 52(4), 2009).

Attainable FLOP/s = min(peak FLOP/s, arithmetic intensity x memory bandwidth). A kernel
whose intensity (FLOP per byte moved) is left of the ridge point peak / bandwidth is
memory-bound. Presets are NVIDIA data-sheet numbers (dense, no sparsity):

* A100 SXM4 80GB — NVIDIA A100 Tensor Core GPU data sheet (2021): FP32 19.5 TFLOPS,
  FP16/BF16 Tensor Core 312 TFLOPS, HBM2e 2,039 GB/s.
* H100 SXM5 — NVIDIA H100 Tensor Core GPU data sheet (2023): FP32 67 TFLOPS, FP16/BF16
  Tensor Core 989.5 TFLOPS (the sheet's 1,979 is with 2:4 sparsity), HBM3 3.35 TB/s.
* H200 SXM — NVIDIA H200 Tensor Core GPU data sheet (2024): FP32 67 TFLOPS, FP16/BF16
  Tensor Core 989.5 TFLOPS dense (1,979 with sparsity), HBM3e 4.8 TB/s.

``measure_machine()`` adds this computer: numpy float32 matmul FLOP/s and a STREAM-like
bandwidth (McCalpin, "STREAM" benchmark: a = b + c counts 3 x 8 bytes per element).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_fp32: float          # FLOP/s, CUDA cores (or CPU cores)
    peak_tensor_16: float     # FLOP/s, FP16/BF16 tensor cores, dense (0: none)
    bandwidth: float          # bytes/s of main (HBM or DRAM) memory
    source: str

    def peak(self, precision: str = "fp32") -> float:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if precision == "fp32" or self.peak_tensor_16 == 0:
            return self.peak_fp32
        return self.peak_tensor_16

    def ridge(self, precision: str = "fp32") -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak(precision) / self.bandwidth


PRECISIONS = ("fp32", "fp16 tensor core")
T = 1e12
PRESETS = {
    "A100": Hardware("A100 SXM4 80GB", 19.5 * T, 312 * T, 2.039e12,
                     "NVIDIA A100 Tensor Core GPU data sheet (2021)"),
    "H100": Hardware("H100 SXM5", 67 * T, 989.5 * T, 3.35e12,
                     "NVIDIA H100 Tensor Core GPU data sheet (2023)"),
    "H200": Hardware("H200 SXM", 67 * T, 989.5 * T, 4.8e12,
                     "NVIDIA H200 Tensor Core GPU data sheet (2024)"),
}


def attainable(hw: Hardware, intensity: float | np.ndarray, precision: str = "fp32"):
    """min(peak, intensity x bandwidth) in FLOP/s."""
    i = np.asarray(intensity, dtype=float)
    if np.any(i <= 0):
        raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
    out = np.minimum(hw.peak(precision), i * hw.bandwidth)
    return float(out) if out.ndim == 0 else out


def bound(hw: Hardware, intensity: float, precision: str = "fp32") -> str:
    """'memory-bound' or 'compute-bound'."""
    return "memory-bound" if intensity < hw.ridge(precision) else "compute-bound"


def measure_matmul_flops(n: int = 768, repeats: int = 3) -> float:
    """Best float32 FLOP/s of numpy's n x n matmul (2 n^3 FLOPs)."""
    if n < 16:
        raise ValueError(f"n must be >= 16, got {n}")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def measure_bandwidth(mbytes: int = 32, repeats: int = 5) -> float:
    """Best bytes/s of np.add(b, c, out=a) on float64 arrays of ``mbytes`` MB each
    (STREAM "add": 2 reads + 1 write = 24 bytes per element)."""
    if mbytes < 1:
        raise ValueError(f"mbytes must be >= 1, got {mbytes}")
    n = mbytes * 2 ** 20 // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
    np.add(b, c, out=a)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.add(b, c, out=a)
        best = min(best, time.perf_counter() - t0)
    return 24.0 * n / best


@lru_cache(maxsize=1)
def measure_machine() -> Hardware:
    """This computer as a roofline: measured matmul FLOP/s and STREAM-like bandwidth."""
    return Hardware("this machine (measured)", measure_matmul_flops(), 0.0,
                    measure_bandwidth(), "measured here: numpy matmul, STREAM-like add")


def hardware(name: str) -> Hardware:
    """A preset by name (A100, H100, H200) or "this machine"."""
    if name == "this machine":
        return measure_machine()
    if name not in PRESETS:
        raise ValueError(f"hardware must be one of {sorted(PRESETS) + ['this machine']}, "
                         f"got {name!r}")
    return PRESETS[name]
