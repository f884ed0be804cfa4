"""Rooflines: this machine measured, and the data-sheet GPUs of ``labkit.hardware``.

Roofline model (Williams, Waterman & Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 52(4), 2009): a kernel that does F FLOPs and moves
Q bytes of main memory has arithmetic intensity I = F / Q and runs at most at

    attainable(I) = min(peak FLOP/s, I × bandwidth),

so its time is at least max(F / peak, Q / bandwidth). The ridge point peak / bandwidth
separates memory-bound (I below it) from compute-bound kernels.

This machine is measured, not looked up: the peak is the best float32 FLOP/s of a square
matmul (2n³ FLOPs, Goto & van de Geijn's BLAS gets within a few per cent of the hardware
peak), the bandwidth is the STREAM "triad" a = b + s·c on arrays far larger than the caches
(McCalpin, "Memory bandwidth and machine balance", IEEE TCCA newsletter, 1995: 3 × 8 bytes
per float64 element, two reads and one write).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from labkit import validate as v
from labkit.perf.timing import benchmark


@dataclass(frozen=True)
class Roofline:
    name: str
    peak: float            # FLOP/s
    bandwidth: float       # bytes/s of main memory
    source: str
    measured: bool = False

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the two roofs meet."""
        return self.peak / self.bandwidth

    def attainable(self, intensity):
        """min(peak, I × bandwidth) in FLOP/s."""
        i = np.asarray(intensity, dtype=float)
        if np.any(~np.isfinite(i)) or np.any(i <= 0):
            raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
        out = np.minimum(self.peak, i * self.bandwidth)
        return float(out) if out.ndim == 0 else out

    def min_time(self, flops: float, nbytes: float) -> float:
        """Roofline lower bound on the time: max(F / peak, Q / bandwidth) seconds."""
        flops = v.nonnegative("flops", flops)
        nbytes = v.nonnegative("nbytes", nbytes)
        return max(flops / self.peak, nbytes / self.bandwidth)

    def bound(self, intensity: float) -> str:
        """'memory-bound' or 'compute-bound'."""
        intensity = v.positive("intensity", intensity)
        return "memory-bound" if intensity < self.ridge else "compute-bound"


def datasheet(key: str, precision: str = "fp32") -> Roofline:
    """The roofline of a data-sheet GPU (``labkit.hardware.GPUS``) at ``precision``."""
    from labkit.hardware import gpu

    g = gpu(key)
    return Roofline(f"{g.key} {precision} (data sheet)", g.peak(precision), g.hbm_bandwidth,
                    g.source)


def measure_peak_flops(n: int = 1024, repeats: int = 5, backend: str = "torch") -> float:
    """Best float32 FLOP/s of an n×n matmul (2n³ FLOPs) with torch (all threads) or numpy."""
    n = v.integer("n", n, low=16, high=16384)
    repeats = v.integer("repeats", repeats, low=1)
    backend = v.one_of("backend", backend, ("torch", "numpy"))
    if backend == "torch":
        import torch

        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, n, generator=g)
        mm = lambda: torch.mm(a, b)  # noqa: E731
    else:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        mm = lambda: a @ b  # noqa: E731
    # the best sample, not the median: a peak is what the machine can do, and other
    # processes only ever slow a run down
    return 2.0 * n ** 3 / benchmark(mm, repeats=repeats, warmup=1).best


def measure_bandwidth(mbytes: int = 64, repeats: int = 5) -> float:
    """Best bytes/s of the STREAM triad a = b + 3·c on float64 arrays of ``mbytes`` MiB each
    (24 bytes per element: 2 reads, 1 write; write-allocate traffic not counted, as STREAM)."""
    mbytes = v.integer("mbytes", mbytes, low=1, high=4096)
    repeats = v.integer("repeats", repeats, low=1)
    n = mbytes * 2 ** 20 // 8
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)

    def triad():
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)       # numpy needs 2 passes: count the real traffic below

    # pass 1 reads c, writes a (16 B/elt); pass 2 reads a and b, writes a (24 B/elt)
    return 40.0 * n / benchmark(triad, repeats=repeats, warmup=1).best


@lru_cache(maxsize=1)
def measure_machine() -> Roofline:
    """This computer as a roofline: measured float32 matmul FLOP/s and triad bandwidth
    (cached for the session: the numbers are measured once)."""
    import os

    return Roofline(f"this machine ({os.cpu_count()} CPU cores, measured)",
                    measure_peak_flops(), measure_bandwidth(),
                    "measured here: torch float32 matmul, STREAM triad", measured=True)


def plot_roofline(machines, points=(), ax=None, intensity_range=(1 / 16, 1024)):
    """Log-log rooflines of ``machines`` with labelled ``points`` (name, intensity) placed
    on the first machine's roof."""
    import matplotlib.pyplot as plt

    machines = list(machines)
    if not machines:
        raise ValueError("machines must hold at least one Roofline")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    i = np.geomspace(*intensity_range, 200)
    for k, m in enumerate(machines):
        style = "-" if m.measured else "--"
        ax.loglog(i, m.attainable(i), style, color=f"C{k}", label=f"{m.name}")
        ax.plot([m.ridge], [m.peak], "o", color=f"C{k}", ms=4)
    for name, intensity in points:
        y = machines[0].attainable(intensity)
        ax.plot([intensity], [y], "*", ms=12, color="k")
        ax.annotate(name, (intensity, y), textcoords="offset points", xytext=(6, -12),
                    fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax.figure
