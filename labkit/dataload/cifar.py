"""The CIFAR-10 (and CIFAR-100) binary format, read and written.

From the dataset page (https://www.cs.toronto.edu/~kriz/cifar.html, "Binary version"): each
file is a sequence of records ``<1 x label><3072 x pixel>``; the first 1024 pixel bytes are
the red channel, the next 1024 green, the last 1024 blue, each stored row-major (the first
32 bytes are the red values of the image's first row). Files hold 10,000 records, so
exactly 30,730,000 bytes. CIFAR-100 records carry two label bytes,
``<1 x coarse label><1 x fine label><3072 x pixel>``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from labkit import validate as V

SIDE = 32
PIXELS = 3 * SIDE * SIDE


def record_size(label_bytes: int = 1) -> int:
    return V.one_of("label_bytes", label_bytes, (1, 2)) + PIXELS


def decode_record(record: bytes, label_bytes: int = 1) -> tuple[int, np.ndarray]:
    """One record → (label, image HWC uint8 of shape (32, 32, 3)); with two label bytes
    (CIFAR-100) the fine label, the second byte, is returned."""
    if len(record) != record_size(label_bytes):
        raise ValueError(f"a record has {record_size(label_bytes)} bytes, got {len(record)}")
    a = np.frombuffer(bytes(record), np.uint8)
    return int(a[label_bytes - 1]), a[label_bytes:].reshape(3, SIDE, SIDE).transpose(1, 2, 0)


def read_cifar_bin(path, label_bytes: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A whole file → (images (N, 32, 32, 3) uint8, labels (N,) int64), vectorised."""
    size = record_size(label_bytes)
    raw = np.fromfile(Path(path), dtype=np.uint8)
    if raw.size % size:
        raise ValueError(f"{path}: {raw.size} bytes is not a whole number of {size}-byte records")
    rec = raw.reshape(-1, size)
    images = rec[:, label_bytes:].reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), rec[:, label_bytes - 1].astype(np.int64)


def write_cifar_bin(path, images, labels, coarse_labels=None) -> Path:
    """Write records in the binary format (two label bytes when ``coarse_labels`` given)."""
    images = V.array("images", images, ndim=4, dtype=np.uint8)
    if images.shape[1:] != (SIDE, SIDE, 3):
        raise ValueError(f"images must have shape (N, 32, 32, 3), got {images.shape}")
    labels = V.array("labels", labels, ndim=1, shape=(len(images),), dtype=np.uint8)
    cols = [labels[:, None]]
    if coarse_labels is not None:
        cols.insert(0, V.array("coarse_labels", coarse_labels, ndim=1, shape=(len(images),),
                               dtype=np.uint8)[:, None])
    rec = np.concatenate(cols + [images.transpose(0, 3, 1, 2).reshape(len(images), -1)], axis=1)
    path = Path(path)
    rec.tofile(path)
    return path
