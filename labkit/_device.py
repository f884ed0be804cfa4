"""Find out, before numba is imported, whether a real CUDA GPU is here.

Under ``NUMBA_ENABLE_CUDASIM=1`` ``numba.cuda.is_available()`` is True, so numba cannot tell
a real GPU from the simulator. The CUDA driver can: ``libcuda.so.1`` loads, ``cuInit(0)``
succeeds and ``cuDeviceGetCount`` reports at least one device. Without a device we set the
simulator variable, which numba reads when it is first imported.
"""
from __future__ import annotations

import ctypes
import os
import sys
import warnings


def real_gpu_count() -> int:
    """Number of CUDA devices the driver reports (0 when there is no driver or device)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return 0
    try:
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except (AttributeError, OSError):
        return 0


def select_cuda_backend() -> str:
    """Return ``"gpu"`` or ``"simulator"``, setting NUMBA_ENABLE_CUDASIM when needed.

    An explicit ``NUMBA_ENABLE_CUDASIM`` in the environment wins either way.
    """
    forced = os.environ.get("NUMBA_ENABLE_CUDASIM")
    if forced is not None:
        return "simulator" if forced not in ("", "0") else "gpu"
    if real_gpu_count() > 0:
        return "gpu"
    if "numba" in sys.modules:
        warnings.warn(
            "numba was imported before labkit on a machine without a GPU: the CUDA "
            "simulator could not be selected. Import labkit first, or set "
            "NUMBA_ENABLE_CUDASIM=1 before starting Python.",
            stacklevel=3,
        )
        return "gpu"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return "simulator"


def on_simulator() -> bool:
    """True when numba.cuda runs on the CPU simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


def on_gpu() -> bool:
    """True when numba.cuda runs on a real GPU (``labkit.CUDA_BACKEND == "gpu"``: labkit
    selected the backend by :func:`select_cuda_backend` on import)."""
    return not on_simulator()
