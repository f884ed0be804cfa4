"""Allocator options, parsed like ``PYTORCH_CUDA_ALLOC_CONF`` (c10/core/AllocatorConfig.cpp).

Supported keys: ``max_split_size_mb``, ``max_non_split_rounding_mb``,
``roundup_power2_divisions`` (one power of two for every size, or per-interval
``[256:1,512:2,>:8]`` with keys in MiB), ``expandable_segments`` (True/False),
``garbage_collection_threshold`` (a fraction strictly between 0 and 1; it acts only once
``set_memory_fraction`` caps the process, as ``set_per_process_memory_fraction`` does).
Anything else raises ``ValueError`` (PyTorch: "Unrecognized CachingAllocator option").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from labkit import validate

from labkit.memory.constants import (
    K_LARGE_BUFFER, K_ROUNDUP_POWER2_INTERVALS, MIN_MAX_SPLIT_SIZE_MB, MiB,
)

KNOWN_OPTIONS = ("max_split_size_mb", "max_non_split_rounding_mb",
                 "roundup_power2_divisions", "expandable_segments",
                 "garbage_collection_threshold")
NO_LIMIT = (1 << 64) - 1   # std::numeric_limits<size_t>::max()


def _is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class AllocatorConfig:
    """Parsed options. ``max_split_size`` is in bytes (``NO_LIMIT`` when unset).

    ``divisions`` has one entry per power-of-two interval starting at 1 MiB
    (index = clamp(log2(size) - 20, 0, 15)); 0 or 1 means "no power-of-two rounding".
    """
    max_split_size: int = NO_LIMIT
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    divisions: tuple[int, ...] = field(default=(0,) * K_ROUNDUP_POWER2_INTERVALS)
    expandable_segments: bool = False
    garbage_collection_threshold: float = 0.0     # 0: off

    def roundup_power2_divisions(self, size: int) -> int:
        """Divisions for ``size`` (AllocatorConfig::roundup_power2_divisions)."""
        index = size.bit_length() - 1 - 20
        index = min(max(index, 0), K_ROUNDUP_POWER2_INTERVALS - 1)
        return self.divisions[index]


def _mb_option(name: str, value) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit():
            raise ValueError(f"{name} must be an integer number of MiB, got {value!r}")
        value = int(text)
    mb = validate.integer(name, value, low=0)
    if mb < MIN_MAX_SPLIT_SIZE_MB:
        raise ValueError(f"{name} too small: must be >= {MIN_MAX_SPLIT_SIZE_MB} (MiB), "
                         f"got {mb}")
    return mb * MiB


def _int_entry(what: str, value) -> int:
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
        return int(value)
    return validate.integer(what, value, low=0)


def _divisions(value) -> tuple[int, ...]:
    """One int for all intervals, or a dict {interval_start_mb | '>': divisions}."""
    n = K_ROUNDUP_POWER2_INTERVALS
    if value is None:
        return (0,) * n
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            pairs = {}
            for item in value.strip("[]").split(","):
                if not item.strip():
                    continue
                if ":" not in item:
                    raise ValueError(f"roundup_power2_divisions entry {item!r} must be key:value")
                k, v = item.split(":", 1)
                pairs[k.strip()] = v.strip()
            value = pairs
        else:
            value = int(value) if value.lstrip("-").isdigit() else value
    if isinstance(value, bool) or not isinstance(value, (int, dict)):
        raise ValueError("roundup_power2_divisions must be a power of two or a dict "
                         f"{{interval_mb: divisions}}, got {value!r}")
    if isinstance(value, int):
        if not _is_pow2(value):
            raise ValueError(f"roundup_power2_divisions must be a power of two, got {value}")
        return (value,) * n
    out = [0] * n
    first, last_index = True, 0
    for key, div in value.items():
        div = _int_entry("roundup_power2_divisions value", div)
        if div != 0 and not _is_pow2(div):
            raise ValueError(f"roundup_power2_divisions values must be a power of two or 0, "
                             f"got {div}")
        if str(key).strip() == ">":
            # AcceleratorAllocatorConfig::parseRoundUpPower2Divisions fills from the
            # interval after the last key (torch >= 2.5; earlier releases overwrote it).
            for i in range(last_index + 1, n):
                out[i] = div
            continue
        mb = _int_entry("roundup_power2_divisions interval (MiB)", key)
        if not _is_pow2(mb):
            raise ValueError(f"roundup_power2_divisions intervals must be powers of two "
                             f"(MiB), got {mb}")
        index = min(max(mb.bit_length() - 1, 0), n - 1)
        if first:
            for i in range(index):
                out[i] = div
            first = False
        out[index] = div
        last_index = index
    return tuple(out)


def _gc_threshold(value) -> float:
    """AllocatorConfig::parseGarbageCollectionThreshold: 0 < t < 1."""
    if value is None:
        return 0.0
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"garbage_collection_threshold must be a number between 0 and 1, "
                             f"got {value!r}") from None
    t = validate.number("garbage_collection_threshold", value)
    if not 0 < t < 1 or math.isnan(t):
        raise ValueError(f"garbage_collection_threshold must be in (0, 1) (PyTorch: "
                         f"\"set it 0.0~1.0\"), got {value!r}")
    return t


def make_config(max_split_size_mb: int | None = None,
                roundup_power2_divisions=None,
                expandable_segments: bool = False,
                max_non_split_rounding_mb: int | None = None,
                garbage_collection_threshold: float | None = None) -> AllocatorConfig:
    """Validated :class:`AllocatorConfig` from keyword options (None = PyTorch's default)."""
    if not isinstance(expandable_segments, bool):
        raise TypeError(f"expandable_segments must be True or False, got {expandable_segments!r}")
    return AllocatorConfig(
        max_split_size=NO_LIMIT if max_split_size_mb is None
        else _mb_option("max_split_size_mb", max_split_size_mb),
        max_non_split_rounding_size=K_LARGE_BUFFER if max_non_split_rounding_mb is None
        else _mb_option("max_non_split_rounding_mb", max_non_split_rounding_mb),
        divisions=_divisions(roundup_power2_divisions),
        expandable_segments=expandable_segments,
        garbage_collection_threshold=_gc_threshold(garbage_collection_threshold),
    )


def parse_alloc_conf(text: str) -> dict:
    """``"max_split_size_mb:128,expandable_segments:True"`` → keyword options for
    :func:`make_config`. Unknown keys raise ``ValueError``."""
    if not isinstance(text, str):
        raise ValueError(f"alloc conf must be a string, got {type(text).__name__}")
    options: dict = {}
    i, items = 0, []
    depth, buf = 0, ""
    for ch in text.replace(" ", ""):   # split on top-level commas only
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(buf)
            buf = ""
        else:
            buf += ch
    if buf:
        items.append(buf)
    for item in items:
        if ":" not in item:
            raise ValueError(f"alloc conf entry {item!r} must look like key:value")
        key, value = item.split(":", 1)
        if key not in KNOWN_OPTIONS:
            raise ValueError(f"Unrecognized CachingAllocator option: {key!r}; "
                             f"known: {', '.join(KNOWN_OPTIONS)}")
        if key == "expandable_segments":
            if value not in ("True", "False"):
                raise ValueError("Expected a single True/False argument for expandable_segments")
            options[key] = value == "True"
        elif key == "roundup_power2_divisions":
            options[key] = value
        else:
            options[key] = value
    del i
    return options
