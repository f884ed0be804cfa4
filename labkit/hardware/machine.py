"""This machine's roofline, measured (the model is :mod:`labkit.hardware.roofline`).

A roofline (Williams, Waterman & Patterson, CACM 52(4), 2009) needs two numbers, and here
they are measured, not looked up: the peak is the best float32 FLOP/s of a square matmul
(2n³ FLOPs, Goto & van de Geijn's BLAS gets within a few per cent of the hardware peak), the
bandwidth is the STREAM "triad" a = b + s·c on arrays far larger than the caches (McCalpin,
"Memory bandwidth and machine balance", IEEE TCCA newsletter, 1995: 3 × 8 bytes per float64
element, two reads and one write). :func:`hardware` names a machine of the roofline
chapters: a data sheet (:data:`labkit.hardware.PRESETS`) or "this machine", measured.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from labkit import validate as v
from labkit.hardware.datasheets import PRESETS
from labkit.hardware.roofline import Machine, Roofline
from labkit.timing import benchmark, threads as pinned


def measure_peak_flops(n: int = 1024, repeats: int = 5, backend: str = "torch") -> float:
    """Best float32 FLOP/s of an n×n matmul (2n³ FLOPs) with torch (on its current threads) or
    numpy."""
    n = v.integer("n", n, low=16, high=16384)
    repeats = v.integer("repeats", repeats, low=1)
    backend = v.one_of("backend", backend, ("torch", "numpy"))
    if backend == "torch":
        import torch  # deferred: torch is heavy

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


def measure_machine(threads: int | None = None) -> Roofline:
    """This computer as a roofline: measured float32 matmul FLOP/s on ``threads`` threads
    (None: torch's current setting) and triad bandwidth, named with the thread count the
    peak was measured on (cached per thread count: the numbers are measured once)."""
    import torch  # deferred: torch is heavy

    n = torch.get_num_threads() if threads is None else v.integer("threads", threads, low=1)
    return _measure_machine(n)


@lru_cache(maxsize=8)
def _measure_machine(threads: int) -> Roofline:
    with pinned(threads):
        peak = measure_peak_flops()
    cores = os.cpu_count()
    return Roofline(f"this machine ({threads} thread{'s' if threads != 1 else ''} of {cores} "
                    f"cores, measured)", peak, measure_bandwidth(),
                    f"measured here: torch float32 matmul on {threads} thread(s), STREAM triad",
                    measured=True)


def hardware(name: str) -> Machine:
    """A preset by name (A100, H100, H200) or "this machine": its FP32 rate and bandwidth
    as :func:`measure_machine` measures them (float32 matmul FLOP/s and STREAM triad
    bandwidth, one measurement for the course), as :class:`~labkit.hardware.roofline.Machine`."""
    if name == "this machine":
        roof = measure_machine()
        return Machine("this machine (measured)", {"fp32": roof.peak}, roof.bandwidth,
                       roof.source, measured=True)
    if name not in PRESETS:
        raise ValueError(f"hardware must be one of {sorted(PRESETS) + ['this machine']}, "
                         f"got {name!r}")
    return PRESETS[name]
