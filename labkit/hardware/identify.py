"""Which data sheet describes the GPU here: the device's name mapped to a
:data:`labkit.hardware.GPUS` key (or None for a board the sheets do not describe).

Used by the timing benchmarks (``benchmarks/gpu_check.py``), chapter 01's MFU
(:func:`labkit.perf.stack.gpu_peak`) and the ladder measurements of chapter 05.
"""
from __future__ import annotations

import re

from labkit._device import on_gpu
from labkit.hardware.datasheets import GPUS

DEFAULT_GPU = "H100"
"""The GPU a prediction uses without a GPU, and whose peak an unrecognised GPU is measured
against (labelled as such: chapter 01's MFU)."""


def device_name() -> str:
    """The name the CUDA driver gives the current device (numba's)."""
    from numba import cuda  # deferred: numba is heavy

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


def torch_gpu_key(default: str | None = None) -> str | None:
    """The :mod:`labkit.hardware` key of the GPU torch sees (``torch.cuda.get_device_name()``
    through :func:`hardware_key`), or ``default`` without one or for an unknown model.
    Ask torch, not numba, about what torch runs on: numba's simulator
    (NUMBA_ENABLE_CUDASIM=1) on a GPU machine would make the two disagree."""
    import torch  # deferred: torch is heavy

    if not torch.cuda.is_available():
        return default
    return hardware_key(torch.cuda.get_device_name(), default)
