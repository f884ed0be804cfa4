"""Roofline model: the course's one (Williams, Waterman & Patterson, "Roofline: an insightful
visual performance model for multicore architectures", CACM 52(4), 2009).

A kernel that does F FLOPs and moves Q bytes of main memory has arithmetic intensity
I = F / Q and runs at most at

    attainable(I) = min(peak FLOP/s, I × bandwidth),

so its time is at least max(F / peak, Q / bandwidth). The ridge point peak / bandwidth
separates memory-bound (I below it) from compute-bound kernels.

* :class:`Roofline` — one machine at one precision: the formulas above.
* :class:`Machine` — one machine's rates, a peak per precision and one bandwidth;
  ``hw.roofline("bf16")`` is its :class:`Roofline` at that precision. A comparison uses one
  precision for every machine and says which: FP32 on the CUDA cores (what labkit's kernels
  use), TF32 or BF16 on the Tensor Cores. A machine that lacks a precision (this computer has
  only a measured FP32 rate) is left out of that comparison rather than drawn at another one.

The GPUs are :mod:`labkit.hardware.datasheets` (dense rates, no sparsity): ``PRESETS``
(A100, H100, H200 as :class:`Machine`) and ``datasheet(key, precision)`` (a
:class:`Roofline`). This computer is measured by :mod:`labkit.hardware.machine` (float32
matmul FLOP/s and the STREAM triad bandwidth, McCalpin's "STREAM" benchmark), which returns a
:class:`Roofline`; ``hardware("this machine")`` is the same measurement as :class:`Machine`.
The ridge is computed once, by :attr:`Roofline.ridge`: :meth:`Machine.ridge` and
:meth:`labkit.hardware.GPU.ridge` delegate to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from labkit import validate as v

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
"""Every precision a data sheet (:mod:`labkit.hardware.datasheets`) gives a rate for."""


def peak_rate(flops: dict, precision: str, machine: str,
              precisions: tuple[str, ...] = PRECISIONS) -> float:
    """``flops[precision]``; the error says which precisions exist and which ``machine``
    has (a comparison uses one precision for every machine, never a fallback)."""
    v.one_of("precision", precision, precisions)
    if precision not in flops:
        raise ValueError(f"{machine} has no {precision} rate (it has "
                         f"{', '.join(flops)}): compare at one of those")
    return flops[precision]


@dataclass(frozen=True)
class Roofline:
    """One machine's roofs at one precision."""
    name: str
    peak: float            # FLOP/s
    bandwidth: float       # bytes/s of main (HBM or DRAM) memory
    source: str = ""
    measured: bool = False

    def __post_init__(self):
        v.positive("peak", self.peak)
        v.positive("bandwidth", self.bandwidth)

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak / self.bandwidth

    def attainable(self, intensity):
        """min(peak, I × bandwidth) in FLOP/s (a float, or an array for an array of I)."""
        i = np.asarray(intensity, dtype=float)
        if not np.all(np.isfinite(i)) or np.any(i <= 0):
            raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
        out = np.minimum(self.peak, i * self.bandwidth)
        return float(out) if out.ndim == 0 else out

    def min_time(self, flops: float, nbytes: float) -> float:
        """Roofline lower bound on the time: max(F / peak, Q / bandwidth) seconds."""
        flops = v.nonnegative("flops", flops)
        nbytes = v.nonnegative("nbytes", nbytes)
        return max(flops / self.peak, nbytes / self.bandwidth)

    def bound(self, intensity: float) -> str:
        """'memory-bound' (I below the ridge) or 'compute-bound'."""
        intensity = v.positive("intensity", intensity)
        return "memory-bound" if intensity < self.ridge else "compute-bound"


ROOFLINE_PRECISIONS = ("fp32", "tf32", "bf16")
"""The precisions the course's roofline comparisons use. fp32: CUDA cores; tf32 and bf16:
Tensor Cores (dense)."""


@dataclass(frozen=True)
class Machine:
    """One machine's rates: dense FLOP/s per precision and main-memory bandwidth."""
    name: str
    flops: dict = field(default_factory=dict)   # precision -> FLOP/s
    bandwidth: float = 0.0                       # bytes/s of main (HBM or DRAM) memory
    source: str = ""
    measured: bool = False

    def has(self, precision: str) -> bool:
        return precision in self.flops

    def peak(self, precision: str = "fp32") -> float:
        return peak_rate(self.flops, precision, self.name, ROOFLINE_PRECISIONS)

    def roofline(self, precision: str = "fp32") -> Roofline:
        """This machine's :class:`Roofline` at ``precision`` (one it has)."""
        return Roofline(f"{self.name}, {precision}", self.peak(precision), self.bandwidth,
                        self.source, self.measured)

    def ridge(self, precision: str = "fp32") -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof
        (:attr:`Roofline.ridge`)."""
        return self.roofline(precision).ridge


def attainable(hw: Machine, intensity: float | np.ndarray, precision: str = "fp32"):
    """min(peak, intensity x bandwidth) in FLOP/s (:meth:`Roofline.attainable`)."""
    return hw.roofline(precision).attainable(intensity)


def bound(hw: Machine, intensity: float, precision: str = "fp32") -> str:
    """'memory-bound' or 'compute-bound' (:meth:`Roofline.bound`)."""
    return hw.roofline(precision).bound(intensity)


def ratios(fast: Machine, slow: Machine, precision: str = "fp32") -> dict:
    """How many times ``fast``'s roofs are ``slow``'s at ``precision``: ``{"peak":
    peak_fast / peak_slow, "bandwidth": bandwidth_fast / bandwidth_slow, "ridge": ...}``
    (one precision for both: a machine without it is refused, not substituted)."""
    a, b = fast.roofline(precision), slow.roofline(precision)
    return {"peak": a.peak / b.peak, "bandwidth": a.bandwidth / b.bandwidth,
            "ridge": a.ridge / b.ridge}


def format_rooflines(roofs) -> str:
    """One line per :class:`Roofline`: peak (TFLOP/s), bandwidth (GB/s) and ridge point
    (FLOP/byte) — chapter 01's comparison of this machine with the data sheets."""
    lines = []
    for r in v.instances("roofs", roofs, Roofline, "objects"):
        lines.append(f"{r.name:44s} peak {r.peak / 1e12:8.3f} TFLOP/s   bandwidth "
                     f"{r.bandwidth / 1e9:7.0f} GB/s   ridge {r.ridge:5.1f} FLOP/byte")
    return "\n".join(lines)
