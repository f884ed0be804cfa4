"""Storage formats for a dataset of small samples, written to a directory and read back.

* ``per_file``: one file per sample (``000123.bin``: the raw record) — what a folder of
  JPEGs is. Reading a sample costs an ``open``/``read``/``close`` (three system calls and a
  path lookup) for a few KB.
* ``shards``: samples packed into a few large files with an offset index (the idea of
  TFRecord, WebDataset tar shards, or the CIFAR binaries): one open per shard, then a
  ``seek`` + ``read`` (or a slice of a memory map) per sample; sequential reads of a
  shard are what disks and object stores do best.
* ``memmap``: one ``.npy`` array opened with ``np.load(mmap_mode="r")``: a sample is an
  array slice, the OS page cache does the I/O (fixed-size samples only).

Measured here with a warm page cache (the files were just written; dropping the cache
needs root). Cold-cache costs are larger still for per-file reads (a disk seek, or an
object-store request, per file).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labkit import validate as V
from labkit.timing import benchmark

FORMATS = ("per_file", "shards", "memmap")


def record_offsets(sizes) -> np.ndarray:
    """Start offsets of records packed back to back, plus the end: [0, s0, s0+s1, …]."""
    s = V.array("sizes", sizes, ndim=1, dtype=np.int64, allow_empty=True)
    if (s < 0).any():
        raise ValueError("sizes must be >= 0")
    return np.concatenate([[0], np.cumsum(s)]).astype(np.int64)


def write_per_file(directory, records: list[bytes]) -> Path:
    d = Path(directory) / "per_file"
    d.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(records):
        (d / f"{i:06d}.bin").write_bytes(r)
    return d


def read_per_file(directory: Path, i: int) -> bytes:
    with open(Path(directory) / f"{i:06d}.bin", "rb") as fh:
        return fh.read()


def write_shards(directory, records: list[bytes], shard_size: int = 1024) -> Path:
    """Shards ``shard-00000.bin`` … of ``shard_size`` records each, and ``index.npy`` with
    one row (shard, offset, length) per record."""
    shard_size = V.integer("shard_size", shard_size, low=1)
    d = Path(directory) / "shards"
    d.mkdir(parents=True, exist_ok=True)
    index = []
    for s in range(0, len(records), shard_size):
        chunk = records[s:s + shard_size]
        off = record_offsets([len(r) for r in chunk])
        (d / f"shard-{s // shard_size:05d}.bin").write_bytes(b"".join(chunk))
        index += [(s // shard_size, off[k], len(r)) for k, r in enumerate(chunk)]
    np.save(d / "index.npy", np.array(index, dtype=np.int64).reshape(-1, 3))
    return d


class ShardReader:
    """Random access into shards: the shard files stay open (memory-mapped)."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.index = np.load(self.dir / "index.npy")
        self._maps: dict[int, np.memmap] = {}

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> bytes:
        s, off, n = self.index[i]
        m = self._maps.get(int(s))
        if m is None:
            m = self._maps[int(s)] = np.memmap(self.dir / f"shard-{int(s):05d}.bin",
                                               dtype=np.uint8, mode="r")
        return m[off:off + n].tobytes()


def write_memmap(directory, array: np.ndarray) -> Path:
    path = Path(directory) / "samples.npy"
    np.save(path, array)
    return path


@dataclass(frozen=True)
class FormatTiming:
    name: str
    seconds_per_sample: float
    files: int
    bytes_on_disk: int


def measure_formats(images: np.ndarray, directory, *, reads: int = 2000, seed: int = 0,
                    repeats: int = 3) -> list[FormatTiming]:
    """Write ``images`` in each format under ``directory``, then time ``reads`` random-order
    reads of one sample each (as bytes)."""
    images = V.array("images", images, dtype=np.uint8)
    reads = V.integer("reads", reads, low=1)
    records = [im.tobytes() for im in images]
    order = np.random.default_rng(seed).integers(0, len(records), size=reads)
    pf = write_per_file(directory, records)
    sh = write_shards(directory, records, shard_size=max(1, len(records) // 4))
    mm_path = write_memmap(directory, images)
    reader = ShardReader(sh)
    mm = np.load(mm_path, mmap_mode="r")
    fns = {"per_file": lambda: [read_per_file(pf, int(i)) for i in order],
           "shards": lambda: [reader[int(i)] for i in order],
           "memmap": lambda: [mm[int(i)].tobytes() for i in order]}
    size = lambda p: sum(f.stat().st_size for f in Path(p).iterdir()) if Path(p).is_dir() \
        else Path(p).stat().st_size  # noqa: E731
    files = {"per_file": len(records), "shards": len(os.listdir(sh)), "memmap": 1}
    disk = {"per_file": size(pf), "shards": size(sh), "memmap": size(mm_path)}
    return [FormatTiming(k, benchmark(f, repeats=repeats).median / reads, files[k], disk[k])
            for k, f in fns.items()]


def read_cost_ratios(timings: list[FormatTiming]) -> dict[str, float]:
    """How many times a per-file read costs each other format's read, from
    :func:`measure_formats`: ``{"shards": t_per_file / t_shards, "memmap": …}`` — the number
    to print instead of typing "several times"."""
    by = {t.name: t.seconds_per_sample for t in timings}
    if "per_file" not in by:
        raise ValueError("timings must include the per_file format")
    return {k: by["per_file"] / v for k, v in by.items() if k != "per_file" and v > 0}
