"""This machine's roofline, measured (the model is :mod:`labkit.kernels.roofline`).

A roofline (Williams, Waterman & Patterson, CACM 52(4), 2009) needs two numbers, and here
they are measured, not looked up: the peak is the best float32 FLOP/s of a square matmul
(2n³ FLOPs, Goto & van de Geijn's BLAS gets within a few per cent of the hardware peak), the
bandwidth is the STREAM "triad" a = b + s·c on arrays far larger than the caches (McCalpin,
"Memory bandwidth and machine balance", IEEE TCCA newsletter, 1995: 3 × 8 bytes per float64
element, two reads and one write). ``Roofline`` and ``datasheet`` (the GPUs of
``labkit.hardware``) are re-exported from :mod:`labkit.kernels.roofline`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from labkit import validate as v
from labkit.kernels.roofline import Roofline, datasheet  # noqa: F401  (one model)
from labkit.perf.timing import benchmark


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
