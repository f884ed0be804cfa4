"""Synthetic images with a realistic per-sample cost, and the arithmetic of a pipeline.

A sample is stored *encoded* (zlib-compressed bytes with a small header, standing in for a
PNG/JPEG file): ``decode`` inflates it, ``augment`` does what a vision pipeline does per
sample on the CPU — random crop after zero padding, horizontal flip, brightness/contrast
jitter, a 3×3 blur, conversion to float32 CHW and per-channel normalisation. All of it is
numpy work in the process that calls it, so it costs real CPU time on the cores it runs on.

The bounds: a loader with ``W`` workers on ``c`` cores, ``L`` CPU-seconds to load a batch
and ``C`` seconds of compute per batch (on the CPU as well), runs at most at
``1 / max(C, L / W, (L + C) / c)`` batches per second — the slowest of the three resources
(the training process, the workers, the cores); with ``W = 0`` the main process loads and
computes in turn, ``1 / (L + C)``. This is the bottleneck law of a pipeline: it runs at
the rate of its slowest stage.
"""
from __future__ import annotations

import math
import struct
import zlib

import numpy as np

from labkit import validate as V

MEAN = np.array([0.49, 0.48, 0.45], dtype=np.float32)
STD = np.array([0.25, 0.24, 0.26], dtype=np.float32)
_HEADER = struct.Struct("<HHH")


def make_images(n: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` smooth random colour images (uint8, (n, size, size, 3)) and labels in [0, 10).

    Each image is a few low-frequency sinusoids plus noise, so it compresses like a photo
    (about 2-3x with zlib) rather than like noise."""
    n = V.integer("n", n, low=1)
    size = V.integer("size", size, low=4, high=1024)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    f = rng.uniform(0.5, 3.0, size=(n, 3, 2)).astype(np.float32)
    ph = rng.uniform(0, 2 * np.pi, size=(n, 3)).astype(np.float32)
    img = 127.5 + 100 * np.sin(2 * np.pi * (f[:, :, 0, None, None] * yy + f[:, :, 1, None, None] * xx)
                               + ph[:, :, None, None])
    img = img + rng.normal(0, 6, size=img.shape)
    img = np.clip(img, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(img), rng.integers(0, 10, size=n)


def encode(image: np.ndarray, level: int = 6) -> bytes:
    """An HWC uint8 image → header (h, w, c) + zlib-compressed pixels."""
    image = np.ascontiguousarray(V.array("image", image, ndim=3, dtype=np.uint8))
    level = V.integer("level", level, low=0, high=9)
    return _HEADER.pack(*image.shape) + zlib.compress(image.tobytes(), level)


def decode(blob: bytes) -> np.ndarray:
    """Inverse of :func:`encode`."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) < _HEADER.size:
        raise TypeError(f"blob must be bytes made by encode(), got {type(blob).__name__}")
    h, w, c = _HEADER.unpack_from(blob)
    return np.frombuffer(zlib.decompress(bytes(blob[_HEADER.size:])), np.uint8).reshape(h, w, c)


def augment(image: np.ndarray, rng: np.random.Generator, pad: int = 4, blur: bool = True
            ) -> np.ndarray:
    """Random crop (after ``pad`` zeros each side), random flip, brightness/contrast
    jitter, optional 3×3 box blur, then float32 CHW normalised by (MEAN, STD)."""
    img = V.array("image", image, ndim=3, dtype=None)
    h, w, _ = img.shape
    p = np.pad(img.astype(np.float32) / 255.0, ((pad, pad), (pad, pad), (0, 0)))
    dy, dx = rng.integers(0, 2 * pad + 1, size=2)
    x = p[dy:dy + h, dx:dx + w]
    if rng.random() < 0.5:
        x = x[:, ::-1]
    b, c = rng.uniform(-0.1, 0.1), rng.uniform(0.8, 1.2)
    x = (x - x.mean()) * c + x.mean() + b
    if blur:   # 3x3 box filter as a sum of shifted views
        q = np.pad(x, ((1, 1), (1, 1), (0, 0)), mode="edge")
        x = sum(q[i:i + h, j:j + w] for i in range(3) for j in range(3)) / 9.0
    x = (np.clip(x, 0, 1) - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


class EncodedImages:
    """A map-style dataset (``__len__`` and ``__getitem__``, all ``DataLoader`` needs):
    item ``i`` is ``(augment(decode(blob_i)), label_i)``, with the augmentation seeded by
    ``(seed, epoch, i)`` so that a run is reproducible whatever worker loads the item."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, *, seed: int = 0,
                 repeat: int = 1, blur: bool = True):
        images = V.array("images", images, ndim=4, dtype=np.uint8)
        self.blobs = [encode(im) for im in images]
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) != len(self.blobs):
            raise ValueError(f"labels has {len(self.labels)} entries for {len(self.blobs)} images")
        self.seed, self.blur = seed, blur
        self.repeat = V.integer("repeat", repeat, low=1)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.blobs) * self.repeat

    def __getitem__(self, i: int):
        j = int(i) % len(self.blobs)
        rng = np.random.default_rng((self.seed, self.epoch, int(i)))
        return augment(decode(self.blobs[j]), rng, blur=self.blur), self.labels[j]

    def load_batch(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """What one DataLoader worker does for one batch: get every item, then collate."""
        items = [self[i] for i in indices]
        return np.stack([x for x, _ in items]), np.array([y for _, y in items])


def wait_fraction(wait_s, compute_s) -> float:
    """Share of the training loop's time spent waiting for data:
    Σ wait / (Σ wait + Σ compute) over the steps (not the mean of per-step shares)."""
    w = V.array("wait_s", wait_s, ndim=1)
    c = V.array("compute_s", compute_s, ndim=1, shape=(len(w),))
    if (w < 0).any() or (c < 0).any():
        raise ValueError("wait_s and compute_s must be >= 0")
    total = w.sum() + c.sum()
    return float(w.sum() / total) if total > 0 else 0.0


def steady_throughput(load_s: float, compute_s: float, workers: int, cores: int) -> float:
    """Batches per second of a loader with ``workers`` worker processes on ``cores`` cores
    when loading a batch costs ``load_s`` CPU-seconds and a training step ``compute_s``
    CPU-seconds: ``1/(L + C)`` without workers, else ``1 / max(C, L/W, (L + C)/cores)``."""
    bounds = pipeline_bounds(load_s, compute_s, workers, cores)
    if workers == 0:
        return 1.0 / (load_s + compute_s)
    return 1.0 / max(bounds.values())


def pipeline_bounds(load_s: float, compute_s: float, workers: int, cores: int) -> dict[str, float]:
    """Seconds per batch each resource needs, the bottleneck law's three terms:
    ``{"training step": C, "loading (per worker)": L / max(W, 1), "cores": (L + C) / c}``.
    With W ≥ 1, :func:`steady_throughput` is 1 / the largest of them."""
    L = V.positive("load_s", load_s)
    C = V.positive("compute_s", compute_s)
    W = V.integer("workers", workers, low=0)
    c = V.integer("cores", cores, low=1)
    return {"training step": C, "loading (per worker)": L / max(W, 1), "cores": (L + C) / c}


def bottleneck(load_s: float, compute_s: float, workers: int, cores: int) -> str:
    """The binding resource: the key of :func:`pipeline_bounds` with the most seconds per
    batch (the first in that order on a tie); with ``workers == 0`` no resource binds alone
    — loading and the step run one after the other (1/(L + C), :func:`steady_throughput`)
    — so it is ``"loading and step in series"``."""
    bounds = pipeline_bounds(load_s, compute_s, workers, cores)
    if workers == 0:
        return "loading and step in series"
    return max(bounds, key=bounds.get)


def workers_needed(load_s: float, compute_s: float) -> int:
    """Fewest workers that keep an accelerator busy when each worker needs ``load_s`` for a
    batch and the accelerator ``compute_s`` per step (enough idle cores assumed):
    ⌈L / C⌉, since W workers deliver W/L batches per second and the step consumes 1/C."""
    L = V.positive("load_s", load_s)
    C = V.positive("compute_s", compute_s)
    return max(1, math.ceil(L / C - 1e-12))
