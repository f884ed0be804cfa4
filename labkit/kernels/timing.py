"""Timing kernels on a real GPU the right way (chapter 05, ``benchmarks/gpu_check.py``).

A launch returns before the kernel finishes, the first launch compiles, and host-device
copies can dwarf the kernel: so warm up once, keep the data on the device, and time with
CUDA events recorded on the GPU's own stream (NVIDIA, CUDA C++ Best Practices Guide,
"Using CUDA GPU Timers"). Nothing here runs without a GPU (the simulator has no clock).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit.validate import integer


def on_gpu() -> bool:
    import labkit
    return labkit.CUDA_BACKEND == "gpu"


def time_events(launch: Callable[[], None], repeats: int = 5) -> float:
    """Seconds per call of ``launch`` by CUDA events, after one warm-up call."""
    repeats = integer("repeats", repeats, low=1)
    if not on_gpu():
        raise RuntimeError("time_events needs a CUDA GPU (the simulator has no clock)")
    return event_seconds(launch, repeats)


def event_seconds(launch: Callable[[], None], repeats: int) -> float:
    """The measurement behind :func:`time_events`: warm up once, synchronize, time
    ``repeats`` launches between two CUDA events (the simulator's events run but mean
    nothing; gpu_check smoke-tests its sections there)."""
    from numba import cuda
    launch()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    start.record()
    for _ in range(repeats):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


@dataclass(frozen=True)
class MatmulRun:
    """One square matmul timed on the device: seconds per call, FP32 TFLOP/s (2n³ FLOPs),
    whether every output element matched, and the compiled kernel (its registers)."""
    variant: str
    seconds: float
    tflops: float
    correct: bool
    kernel: Any


def launch_shape(variant: str, shape: dict | None = None) -> dict:
    """``ops.matmul_launch`` keywords for a rung: ``shape`` or the ladder's own
    (``models.LADDER_SHAPES``); register2d takes its tile shape as ``blocked``."""
    from labkit.kernels.models import LADDER_SHAPES

    shape = dict(LADDER_SHAPES[variant] if shape is None else shape)
    return {"blocked": shape} if variant == "register2d" else shape


def time_matmul(variant: str, da, db, dc, want: np.ndarray, repeats: int,
                shape: dict | None = None,
                timer: Callable[[Callable[[], None], int], float] = event_seconds) -> MatmulRun:
    """Time ``dc = da @ db`` (device-resident n x n float32) by ``variant`` with ``timer``
    (CUDA events after a warm-up) and compare with ``want``. ``dc`` is filled with NaN
    first, so a kernel that leaves an output element unwritten cannot pass."""
    from labkit.kernels import ops
    from labkit.kernels.numba_run import compiled

    n = dc.shape[0]
    grid, block, fn = ops.matmul_launch(variant, n, n, **launch_shape(variant, shape))
    kernel = compiled(fn)
    dc.copy_to_device(np.full(dc.shape, np.nan, dtype=np.float32))
    secs = timer(lambda: kernel[grid, block](da, db, dc), repeats)
    ok = bool(np.allclose(dc.copy_to_host(), want, rtol=1e-3, atol=1e-2 * math.sqrt(n)))
    return MatmulRun(variant, secs, 2.0 * n ** 3 / secs / 1e12, ok, kernel)


def torch_matmul_seconds(a: np.ndarray, repeats: int) -> float:
    """Seconds per ``torch.matmul(a, a)`` (cuBLAS) on the GPU in FP32 with TF32 off (the
    FP32 baseline of the ladder), timed with CUDA events after one warm-up call
    (:func:`labkit.perf.timing.benchmark` with ``device="cuda"``). Raises RuntimeError when
    the installed torch has no CUDA."""
    import torch

    from labkit.perf.timing import benchmark

    repeats = integer("repeats", repeats, low=1)
    if not torch.cuda.is_available():
        raise RuntimeError("this torch build has no CUDA")
    matmul = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"  # 2.9+
    before = getattr(matmul, name)
    setattr(matmul, name, "ieee" if name == "fp32_precision" else False)
    try:
        ta = torch.from_numpy(a).cuda()
        # one warm-up call, then one sample of ``repeats`` calls between two CUDA events
        return benchmark(lambda: torch.matmul(ta, ta), repeats=1, warmup=1, number=repeats,
                         device="cuda").best
    finally:
        setattr(matmul, name, before)           # the caller's TF32 setting, as it was


def measure_ladder(n: int = 2048, repeats: int = 3, seed: int = 0) -> dict:
    """FP32 TFLOP/s of each rung of the matmul ladder (models.LADDER_SHAPES) at n^3,
    timed with CUDA events on device-resident data; checked against numpy."""
    from numba import cuda

    from labkit.kernels.models import LADDER

    n = integer("n", n, low=32)
    a = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    da, dc = cuda.to_device(a), cuda.device_array((n, n), dtype=np.float32)
    want = a.astype(np.float64) @ a.astype(np.float64)
    out = {}
    for variant in LADDER:
        run = time_matmul(variant, da, da, dc, want, repeats, timer=time_events)
        if not run.correct:
            raise AssertionError(f"matmul {variant} gave a wrong result on the GPU")
        out[variant] = run.tflops
    return out


def device_name() -> str:
    """The name the CUDA driver gives the current device."""
    from numba import cuda
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


OTHER_FORM_FACTORS = ("PCIE", "NVL")
"""Words of a device name that mark another board than labkit.hardware's SXM data sheets:
a PCIe or NVL card of the same chip has a lower clock, power and often HBM bandwidth
(NVIDIA H100 data sheet: the PCIe card's FP32 rate and bandwidth are below the SXM's)."""


SAME_SHEET_MEMORY_GB = {"V100": ("16", "32")}
"""Memory sizes one data sheet covers with the same numbers: NVIDIA Tesla V100 data sheet,
V100 SXM2 "32/16 GB HBM2", one column of numbers for both. Any other key: its sheet's size
only (NVIDIA A100 data sheet: the 40 GB SXM4 has less HBM bandwidth than the 80 GB)."""


def hardware_key(name: str, default: str | None = None) -> str | None:
    """The :mod:`labkit.hardware` key (V100, A100, H100, H200) whose data sheet describes a
    device ``name`` such as "NVIDIA H100 80GB HBM3", or ``default`` when none does.

    The key must stand as a word ("GH200", a Grace Hopper superchip, is not an "H200"); a
    name with a word of :data:`OTHER_FORM_FACTORS` ("NVIDIA H100 PCIe", "NVIDIA H100 NVL")
    or a memory size the sheet does not cover (:data:`SAME_SHEET_MEMORY_GB`;
    "NVIDIA A100-SXM4-40GB": 1.555 TB/s, not the 80 GB card's 2.039) is another board, for
    which the SXM sheet's numbers are wrong; "Tesla V100-SXM2-16GB" is the 32 GB sheet's."""
    import re

    from labkit.hardware import GPUS

    upper = name.upper()
    words = set(re.findall(r"[A-Z0-9]+", upper))
    if words & set(OTHER_FORM_FACTORS):
        return default
    for key, gpu in GPUS.items():
        if key not in words:
            continue
        sheet = re.search(r"(\d+)\s*GB", gpu.name.upper())
        size = re.search(r"(\d+)\s*GB", upper)
        covered = SAME_SHEET_MEMORY_GB.get(key, (sheet[1],) if sheet else ())
        if size and sheet and size[1] not in covered:
            return default
        return key
    return default


def gpu_key(default: str | None = None) -> str | None:
    """The :mod:`labkit.hardware` key of the current GPU, or ``default`` without a GPU or
    for an unknown model."""
    if not on_gpu():
        return default
    return hardware_key(device_name(), default)
