"""Roofline model (Williams, Waterman & Patterson, CACM 52(4), 2009).

Attainable FLOP/s = min(peak FLOP/s, arithmetic intensity x memory bandwidth). A kernel
whose intensity (FLOP per byte moved) is left of the ridge point peak / bandwidth is
memory-bound. The presets are :mod:`labkit.hardware`'s data sheets (dense rates, no
sparsity); a comparison uses one precision for every machine and says which: FP32 on the
CUDA cores (what labkit's kernels use), TF32 or BF16 on the Tensor Cores. A machine that
lacks a precision (this computer has only a measured FP32 rate) is left out of that
comparison rather than drawn at another precision.

``measure_machine()`` adds this computer, measured by :mod:`labkit.perf.machine` (float32
matmul FLOP/s and the STREAM triad bandwidth, McCalpin's "STREAM" benchmark).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from labkit import hardware as _hw


@dataclass(frozen=True)
class Hardware:
    """One machine's roofs: dense FLOP/s per precision and main-memory bandwidth."""
    name: str
    flops: dict = field(default_factory=dict)   # precision -> FLOP/s
    bandwidth: float = 0.0                       # bytes/s of main (HBM or DRAM) memory
    source: str = ""

    @property
    def peak_fp32(self) -> float:
        return self.flops["fp32"]

    def has(self, precision: str) -> bool:
        return precision in self.flops

    def peak(self, precision: str = "fp32") -> float:
        return _hw.peak_rate(self.flops, precision, self.name, PRECISIONS)

    def ridge(self, precision: str = "fp32") -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak(precision) / self.bandwidth


PRECISIONS = ("fp32", "tf32", "bf16")
"""fp32: CUDA cores; tf32 and bf16: Tensor Cores (dense)."""


def _preset(key: str) -> Hardware:
    g = _hw.gpu(key)
    return Hardware(g.name, {p: g.flops[p] for p in PRECISIONS if p in g.flops},
                    g.hbm_bandwidth, g.source)


PRESETS = {key: _preset(key) for key in ("A100", "H100", "H200")}


def attainable(hw: Hardware, intensity: float | np.ndarray, precision: str = "fp32"):
    """min(peak, intensity x bandwidth) in FLOP/s."""
    i = np.asarray(intensity, dtype=float)
    if not np.all(np.isfinite(i)) or np.any(i <= 0):
        raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
    out = np.minimum(hw.peak(precision), i * hw.bandwidth)
    return float(out) if out.ndim == 0 else out


def bound(hw: Hardware, intensity: float, precision: str = "fp32") -> str:
    """'memory-bound' or 'compute-bound'."""
    return "memory-bound" if intensity < hw.ridge(precision) else "compute-bound"


@lru_cache(maxsize=1)
def measure_machine() -> Hardware:
    """This computer as a roofline, measured once by :func:`labkit.perf.measure_machine`
    (float32 matmul FLOP/s and STREAM triad bandwidth: one measurement for the course)."""
    from labkit.perf.machine import measure_machine as measure

    roof = measure()
    return Hardware("this machine (measured)", {"fp32": roof.peak}, roof.bandwidth, roof.source)


def hardware(name: str) -> Hardware:
    """A preset by name (A100, H100, H200) or "this machine"."""
    if name == "this machine":
        return measure_machine()
    if name not in PRESETS:
        raise ValueError(f"hardware must be one of {sorted(PRESETS) + ['this machine']}, "
                         f"got {name!r}")
    return PRESETS[name]
