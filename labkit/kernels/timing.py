"""Timing kernels on a real GPU the right way (chapter 05, ``benchmarks/gpu_check.py``).

A launch returns before the kernel finishes, the first launch compiles, and host-device
copies can dwarf the kernel: so warm up once, keep the data on the device, and time with
CUDA events recorded on the GPU's own stream (NVIDIA, CUDA C++ Best Practices Guide,
"Using CUDA GPU Timers"). Nothing here runs without a GPU (the simulator has no clock).
"""
from __future__ import annotations

from typing import Callable

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


def measure_ladder(n: int = 2048, repeats: int = 3, seed: int = 0) -> dict:
    """FP32 TFLOP/s of each rung of the matmul ladder (models.LADDER_SHAPES) at n^3,
    timed with CUDA events on device-resident data; checked against numpy."""
    from numba import cuda

    from labkit.kernels import ops
    from labkit.kernels.models import LADDER, LADDER_SHAPES
    from labkit.kernels.numba_run import compiled

    n = integer("n", n, low=32)
    a = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    da, dc = cuda.to_device(a), cuda.device_array((n, n), dtype=np.float32)
    want = a @ a
    out = {}
    for variant in LADDER:
        shape = dict(LADDER_SHAPES[variant])
        kw = {"blocked": shape} if variant == "register2d" else shape
        grid, block, fn = ops.matmul_launch(variant, n, n, **kw)
        kernel = compiled(fn)
        secs = time_events(lambda: kernel[grid, block](da, da, dc), repeats)
        if not np.allclose(dc.copy_to_host(), want, rtol=1e-3, atol=1e-2 * np.sqrt(n)):
            raise AssertionError(f"matmul {variant} gave a wrong result on the GPU")
        out[variant] = 2.0 * n ** 3 / secs / 1e12
    return out


def gpu_key(default: str | None = None) -> str | None:
    """The :mod:`labkit.hardware` key (A100, H100, H200, V100) of the current GPU, or
    ``default`` without a GPU or for an unknown model."""
    if not on_gpu():
        return default
    from numba import cuda
    name = cuda.get_current_device().name
    name = (name.decode() if isinstance(name, bytes) else str(name)).upper()
    return next((k for k in ("H200", "H100", "A100", "V100") if k in name), default)
