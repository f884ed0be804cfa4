"""The matmul ladder timed on a real GPU (chapter 05, ``benchmarks/gpu_check.py``).

The events themselves are :mod:`labkit.timing`'s (:func:`~labkit.timing.time_events`,
:func:`~labkit.timing.event_seconds`: warm up once, keep the data on the device, time with
CUDA events); which data sheet the GPU is, :mod:`labkit.hardware.identify`. Nothing here runs
without a GPU (the simulator has no clock). ``on_gpu``, ``time_events``, ``event_seconds``,
``device_name``, ``hardware_key``, ``gpu_key``, ``OTHER_FORM_FACTORS`` and
``SAME_SHEET_MEMORY_GB`` are re-exported from there until the chapter 04/05 branches and the
benchmarks import them from their homes; then remove the re-exports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit._device import on_gpu  # noqa: F401  (re-export, see above)
from labkit.hardware.identify import (  # noqa: F401  (re-exports, see above)
    OTHER_FORM_FACTORS, SAME_SHEET_MEMORY_GB, device_name, gpu_key, hardware_key)
from labkit.kernels import ops
from labkit.kernels.models import LADDER
from labkit.kernels.numba_run import compiled
from labkit.kernels.registry import KERNELS, MATMUL
from labkit.timing import benchmark, event_seconds, time_events
from labkit.validate import integer


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
    (``models.LADDER_SHAPES``); a rung whose registry entry is ``blocked`` (register2d)
    takes its tile shape as ``blocked``."""
    kernel = KERNELS[MATMUL][variant]
    return kernel.keywords(kernel.ladder_shape if shape is None else shape)


def time_matmul(variant: str, da, db, dc, want: np.ndarray, repeats: int,
                shape: dict | None = None,
                timer: Callable[[Callable[[], None], int], float] = event_seconds) -> MatmulRun:
    """Time ``dc = da @ db`` (device-resident n x n float32) by ``variant`` with ``timer``
    (CUDA events after a warm-up) and compare with ``want``. ``dc`` is filled with NaN
    first, so a kernel that leaves an output element unwritten cannot pass."""
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
    (:func:`labkit.timing.benchmark` with ``device="cuda"``). Raises RuntimeError when
    the installed torch has no CUDA."""
    import torch  # deferred: torch is heavy

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
    from numba import cuda  # deferred: numba is heavy

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
