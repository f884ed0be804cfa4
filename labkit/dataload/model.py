"""Images that compress, a real codec, a dataset with per-epoch augmentation, and the
arithmetic of a pipeline.

**Images.** :func:`make_images` draws scenes with structure — a shaded background and a few
flat or shaded rectangles and ellipses, optionally with sensor noise — so that a lossless
codec compresses them several times, as it does drawings and (less) photographs.

**Codec.** :func:`encode` writes a real PNG file (*Portable Network Graphics (PNG)
Specification*, 2nd ed., W3C Recommendation 2003 = ISO/IEC 15948:2004: §5.2 signature,
§5.3 chunk layout with a CRC-32 per chunk, §9.2 filter types, §10 zlib/deflate
compression, §11.2 the IHDR, IDAT and IEND chunks): every scanline is
filtered with filter type 1 (*Sub*: each byte minus the byte ``bpp`` to its left, modulo
256), the filtered stream is deflated with :mod:`zlib`. Any PNG reader (Pillow, libpng)
opens it. :func:`decode` reads PNGs with filter types 0 (None), 1 (Sub) and 2 (Up) — the
chunks, their CRCs, the inflate and the un-filtering (a running sum modulo 256 along a row
for Sub, down a column for Up) — so decoding costs real CPU time, more for bigger or
noisier images, and a cache of decoded pixels saves it at the price of the uncompressed
size in memory (seed 002: 數據壓縮與編碼 vs 數據分片與緩存).

**Augmentation per epoch.** :class:`EncodedImages` seeds the augmentation of item ``i`` in
epoch ``e`` by ``(seed, e, i)``. The epoch must reach the process that loads the item:
with ``persistent_workers=True`` every worker keeps the copy of the dataset it got when it
started ("This allows to maintain the workers `Dataset` instances alive", the DataLoader
docstring, ``torch/utils/data/dataloader.py``), so an epoch attribute set in the training
process never reaches the workers and every epoch repeats the same crops. The
:class:`EpochSampler` carries the epoch *with each index* — it yields ``(epoch, i)`` and
lives in the training process, which sends the indices to the workers — the way
``DistributedSampler.set_epoch`` makes a shuffle change from epoch to epoch
(``torch/utils/data/distributed.py``: "calling the set_epoch() method at the beginning of
each epoch before creating the DataLoader iterator is necessary").

**Bounds.** A loader with ``W`` workers on ``c`` cores, ``L`` CPU-seconds to load a batch
and ``C`` CPU-seconds per training step runs at most at ``1 / max(C, L / W, (L + C) / c)``
batches per second — the slowest of the three resources (the training process, the
workers, the cores); with ``W = 0`` the main process loads and computes in turn,
``1 / (L + C)``: the bottleneck law of a pipeline.

**Steady state.** :func:`steady_window` and :func:`steady_rate` are the one definition of a
steady-state rate, for measured runs and simulated ones alike: the first
``max(1, prefetch_factor × W)`` steps (the pipeline filling: the batches built during
start-up arrive back to back) and the last ``prefetch_factor × W`` (the pipeline draining:
the workers have no indices left) are left out, and a run too short to leave ``min_steps``
steps between them is an error, never a fallback to the whole run.
"""
from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from labkit import validate as V

MEAN = np.array([0.49, 0.48, 0.45], dtype=np.float32)
STD = np.array([0.25, 0.24, 0.26], dtype=np.float32)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"           # PNG spec §5.2
_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}              # channels -> colour type (grey, RGB, RGBA)
_CHANNELS = {v: k for k, v in _COLOUR_TYPES.items()}
MIN_STEADY_STEPS = 8                            # the fewest steps a steady window may hold


# ------------------------------------------------------------------------------- images
def make_images(n: int, size: int = 32, seed: int = 0, noise: float = 0.0
                ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` scenes (uint8, (n, size, size, 3)) and their labels (0 … 8).

    A scene is a linear colour gradient in a random direction with two to four shapes on
    it (rectangles and ellipses, flat or shaded along one axis); ``noise`` adds Gaussian
    sensor noise of that standard deviation (grey levels). Without noise PNG compresses
    them about 5× at 32×32 (more at larger sizes); noise makes every pixel unpredictable
    and the ratio falls towards 1 — the difference between drawings and photographs. The
    label is the number of shapes minus two plus three times the kind of the largest
    shape (0 … 8), so it depends on the content."""
    n = V.integer("n", n, low=1)
    size = V.integer("size", size, low=4, high=1024)
    noise = V.nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    yy, xx = (np.mgrid[0:size, 0:size].astype(np.float32) + 0.5) / size
    out = np.empty((n, size, size, 3), np.float32)
    labels = np.empty(n, np.int64)
    for k in range(n):
        c0, c1 = rng.uniform(30, 225, size=(2, 3))
        angle = rng.uniform(0, 2 * np.pi)
        t = (np.cos(angle) * (xx - 0.5) + np.sin(angle) * (yy - 0.5) + 0.71) / 1.42
        img = c0 + (c1 - c0) * t[..., None]
        shapes = int(rng.integers(2, 5))
        largest, largest_area = 0, -1.0
        for _ in range(shapes):
            kind = int(rng.integers(0, 3))          # 0 rectangle, 1 ellipse, 2 shaded ellipse
            cy, cx = rng.uniform(0.15, 0.85, size=2)
            ry, rx = rng.uniform(0.08, 0.35, size=2)
            colour = rng.uniform(0, 255, size=3)
            if kind == 0:
                mask = (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
            else:
                mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
            if kind == 2:
                shade = 1.0 - 0.5 * (yy - cy + ry) / (2 * ry)
                img[mask] = (colour * shade[..., None])[mask]
            else:
                img[mask] = colour
            if ry * rx > largest_area:
                largest, largest_area = kind, ry * rx
        labels[k] = (shapes - 2) + 3 * largest
        out[k] = img
    if noise > 0:
        out += rng.normal(0.0, noise, size=out.shape).astype(np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8), labels


# -------------------------------------------------------------------------------- codec
def _chunk(tag: bytes, data: bytes) -> bytes:
    """length, type, data, CRC-32 of type + data (PNG spec §5.3)."""
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode(image: np.ndarray, level: int = 6) -> bytes:
    """An HWC uint8 image (1, 3 or 4 channels) → the bytes of a PNG file: signature, IHDR
    (8-bit, grey/RGB/RGBA, no interlace), one IDAT with the Sub-filtered scanlines deflated
    at zlib ``level`` (0 stores, 9 compresses hardest), IEND."""
    image = np.ascontiguousarray(V.array("image", image, ndim=(2, 3), dtype=None))
    if image.dtype != np.uint8:
        raise TypeError(f"image must be uint8, got dtype {image.dtype}")
    if image.ndim == 2:
        image = image[..., None]
    h, w, c = image.shape
    if c not in _COLOUR_TYPES:
        raise ValueError(f"image must have 1, 3 or 4 channels, got {c}")
    level = V.integer("level", level, low=0, high=9)
    sub = image.copy()
    sub[:, 1:] = image[:, 1:] - image[:, :-1]       # filter type 1, modulo 256 in uint8
    rows = np.concatenate([np.ones((h, 1), np.uint8), sub.reshape(h, w * c)], axis=1)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, _COLOUR_TYPES[c], 0, 0, 0)
    return (PNG_SIGNATURE + _chunk(b"IHDR", ihdr)
            + _chunk(b"IDAT", zlib.compress(rows.tobytes(), level)) + _chunk(b"IEND", b""))


def _chunks(blob: bytes):
    pos = len(PNG_SIGNATURE)
    while pos + 12 <= len(blob):
        (length,) = struct.unpack_from(">I", blob, pos)
        tag = blob[pos + 4:pos + 8]
        data = blob[pos + 8:pos + 8 + length]
        if len(data) != length or pos + 12 + length > len(blob):
            raise ValueError(f"PNG chunk {tag!r} is truncated")
        (crc,) = struct.unpack_from(">I", blob, pos + 8 + length)
        if zlib.crc32(tag + data) != crc:
            raise ValueError(f"PNG chunk {tag!r} fails its CRC")
        yield tag, data
        pos += 12 + length


def decode(blob: bytes) -> np.ndarray:
    """A PNG file's bytes → the HWC uint8 image (8-bit grey, RGB or RGBA, not interlaced,
    scanlines filtered with None, Sub or Up)."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"blob must be the bytes of a PNG file, got {type(blob).__name__}")
    blob = bytes(blob)
    if not blob.startswith(PNG_SIGNATURE):
        raise ValueError("blob is not a PNG file (no PNG signature)")
    header, idat = None, []
    for tag, data in _chunks(blob):
        if tag == b"IHDR":
            header = struct.unpack(">IIBBBBB", data)
        elif tag == b"IDAT":
            idat.append(data)
        elif tag == b"IEND":
            break
    if header is None or not idat:
        raise ValueError("PNG file without IHDR or IDAT")
    w, h, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise ValueError(f"this decoder reads 8-bit grey/RGB/RGBA non-interlaced PNGs, got "
                         f"bit depth {depth}, colour type {colour}, interlace {interlace}")
    c = _CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8)
    if raw.size != h * (1 + w * c):
        raise ValueError(f"PNG data holds {raw.size} bytes, expected {h * (1 + w * c)}")
    raw = raw.reshape(h, 1 + w * c)
    kinds, data = raw[:, 0], raw[:, 1:].reshape(h, w, c)
    if (kinds == 1).all():                       # the fast path: what encode() writes
        return np.cumsum(data, axis=1, dtype=np.uint8)
    if (kinds == 0).all():
        return data.copy()
    if not np.isin(kinds, (0, 1, 2)).all():
        raise ValueError(f"filter types {sorted(set(kinds.tolist()) - {0, 1, 2})} (Average, "
                         f"Paeth) are not read by this decoder; it reads None, Sub and Up")
    out = np.empty_like(data)
    for y in range(h):
        row = data[y]
        if kinds[y] == 1:
            row = np.cumsum(row, axis=0, dtype=np.uint8)
        elif kinds[y] == 2 and y > 0:
            row = row + out[y - 1]               # uint8 arithmetic wraps modulo 256
        out[y] = row
    return out


# ------------------------------------------------------------------------- augmentation
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
    item ``i`` is ``(augment(decode(blob_i)), label_i)`` with the augmentation seeded by
    ``(seed, epoch, i)``, so a run is reproducible whichever worker loads an item.

    An index is an int (the epoch is then :attr:`epoch`, set by :meth:`set_epoch` — it
    reaches only the process that calls it) or a pair ``(epoch, i)`` as
    :class:`EpochSampler` yields it (the epoch travels with the index, into any worker).
    ``cache=True`` keeps the decoded pixels instead of the PNG bytes: no decode per item,
    :attr:`stored_bytes` the uncompressed size. ``repeat`` makes the dataset ``repeat``
    times longer (item ``i`` shows image ``i % n``)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, *, seed: int = 0,
                 repeat: int = 1, blur: bool = True, cache: bool = False, level: int = 6):
        images = V.array("images", images, ndim=4, dtype=None)
        if images.dtype != np.uint8:
            raise TypeError(f"images must be uint8, got dtype {images.dtype}")
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) != len(images):
            raise ValueError(f"labels has {len(self.labels)} entries for {len(images)} images")
        self.blobs = [encode(im, level) for im in images]
        self.cache = V.boolean("cache", cache)
        self.pixels = np.ascontiguousarray(images) if self.cache else None
        self.seed, self.blur = seed, blur
        self.repeat = V.integer("repeat", repeat, low=1)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.blobs) * self.repeat

    @property
    def stored_bytes(self) -> int:
        """Bytes the dataset holds for its images: the PNG files, or the decoded pixels
        when ``cache=True``."""
        return int(self.pixels.nbytes) if self.cache else sum(len(b) for b in self.blobs)

    @property
    def raw_bytes(self) -> int:
        """Bytes of the decoded pixels (height × width × channels per image)."""
        return sum(int(np.prod(_png_shape(b))) for b in self.blobs)

    def set_epoch(self, epoch: int) -> None:
        """The epoch used for int indices — in this process only (see the module doc)."""
        self.epoch = V.integer("epoch", epoch, low=0)

    def image(self, i: int) -> np.ndarray:
        """The stored image of item ``i`` as uint8 HWC: decoded, or from the cache."""
        j = int(i) % len(self.blobs)
        return self.pixels[j] if self.cache else decode(self.blobs[j])

    def __getitem__(self, index):
        epoch, i = index if isinstance(index, tuple) else (self.epoch, index)
        rng = np.random.default_rng((self.seed, int(epoch), int(i)))
        return augment(self.image(i), rng, blur=self.blur), self.labels[int(i) % len(self.blobs)]

    def load_batch(self, indices) -> tuple[np.ndarray, np.ndarray]:
        """What one DataLoader worker does for one batch: get every item, then stack."""
        items = [self[i] for i in indices]
        return np.stack([x for x, _ in items]), np.array([y for _, y in items])


class DecodedCache:
    """A cache of decoded pixels in front of an :class:`EncodedImages`: every image decoded
    once, when the cache is built (``dataset.image(j)``), then each item augmented afresh
    from the cached pixels with the dataset's own seeding ``(seed, epoch, i)`` — so items
    equal the dataset's, the decode is paid once instead of every epoch, and
    :attr:`stored_bytes` is the uncompressed size (seed 002: caching against compression)."""

    def __init__(self, dataset: EncodedImages):
        if not isinstance(dataset, EncodedImages):
            raise TypeError(f"dataset must be an EncodedImages, got {type(dataset).__name__}")
        self.dataset = dataset
        self.pixels = np.stack([dataset.image(j) for j in range(len(dataset.blobs))])

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def stored_bytes(self) -> int:
        return int(self.pixels.nbytes)

    def __getitem__(self, index):
        d = self.dataset
        epoch, i = index if isinstance(index, tuple) else (d.epoch, index)
        j = int(i) % len(self.pixels)
        rng = np.random.default_rng((d.seed, int(epoch), int(i)))
        return augment(self.pixels[j], rng, blur=d.blur), d.labels[j]


def _png_shape(blob: bytes) -> tuple[int, int, int]:
    w, h, _, colour = struct.unpack_from(">IIBB", blob, len(PNG_SIGNATURE) + 8)
    return h, w, _CHANNELS[colour]


class _EpochIndexed:
    """What a sampler carrying the epoch keeps: ``n`` items, ``num_samples`` indices per
    epoch (default ``n``), and the epoch of the last :meth:`set_epoch` (0 before any)."""

    def __init__(self, n: int, num_samples: int | None = None):
        self.n = V.integer("n", n, low=1)
        self.num_samples = self.n if num_samples is None else V.integer(
            "num_samples", num_samples, low=1)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = V.integer("epoch", epoch, low=0)

    def __len__(self) -> int:
        return self.num_samples


class EpochIndices(_EpochIndexed):
    """Exercise 7.6's sampler: ``num_samples`` (default ``n``) indices ``(epoch, k mod n)``
    for k = 0, 1, … in order, ``epoch`` the last :meth:`set_epoch`'s (0 before any) — the
    epoch carried with each index (:class:`EpochSampler` is the same with a shuffle)."""

    def __iter__(self):
        e, n = self.epoch, self.n
        return ((e, k % n) for k in range(self.num_samples))


class EpochSampler(_EpochIndexed):
    """A sampler (``__iter__`` and ``__len__``) that yields ``(epoch, i)``: the epoch set
    by :meth:`set_epoch` in the training process goes to the workers with each index, so
    per-epoch augmentation holds with ``persistent_workers=True``.

    ``num_samples`` indices per epoch (default ``n``), ``i = k mod n`` for k = 0, 1, …, in
    order or, with ``shuffle``, permuted by a generator seeded with ``(seed, epoch)``."""

    def __init__(self, n: int, *, num_samples: int | None = None, shuffle: bool = False,
                 seed: int = 0):
        super().__init__(n, num_samples)
        self.shuffle = V.boolean("shuffle", shuffle)
        self.seed = seed

    def __iter__(self):
        k = np.arange(self.num_samples) % self.n
        if self.shuffle:
            k = np.random.default_rng((self.seed, self.epoch)).permutation(k)
        return iter([(self.epoch, int(i)) for i in k])


# ------------------------------------------------------------------------ steady state
def steady_window(steps: int, prefetch_factor: int, workers: int,
                  min_steps: int = MIN_STEADY_STEPS) -> slice:
    """The steps of a run of ``steps`` steps that are in steady state:
    ``slice(head, steps - tail)`` with ``head = max(1, prefetch_factor × workers)`` (the
    start-up and the batches prefetched during it) and ``tail = prefetch_factor × workers``
    (the drain at the end of the indices). Raises ValueError when fewer than ``min_steps``
    remain: a shorter run has no steady state to report."""
    steps = V.integer("steps", steps, low=1)
    prefetch_factor = V.integer("prefetch_factor", prefetch_factor, low=1)
    workers = V.integer("workers", workers, low=0)
    min_steps = V.integer("min_steps", min_steps, low=2)
    head, tail = max(1, prefetch_factor * workers), prefetch_factor * workers
    if steps - head - tail < min_steps:
        raise ValueError(f"steps must be >= {head + tail + min_steps} for a steady window of "
                         f"{min_steps} steps with prefetch_factor={prefetch_factor} and "
                         f"{workers} workers (the first {head} and last {tail} are filling and "
                         f"draining), got {steps}")
    return slice(head, steps - tail)


def steady_steps(prefetch_factor: int, workers: int, window: int = 64) -> int:
    """Steps to run for a steady window of ``window`` steps (:func:`steady_window`)."""
    prefetch_factor = V.integer("prefetch_factor", prefetch_factor, low=1)
    workers = V.integer("workers", workers, low=0)
    window = V.integer("window", window, low=MIN_STEADY_STEPS)
    return max(1, prefetch_factor * workers) + prefetch_factor * workers + window


def steady_rate(step_end, batch_size: int, window: slice) -> float:
    """Samples per second over ``window``: ``batch_size × (b − a) / (end[b] − end[a])``
    with ``a`` the step before the window and ``b`` its last step, ``end`` the times the
    steps ended — the rate of the steps inside the window, loop overhead included."""
    end = V.array("step_end", step_end, ndim=1)
    batch_size = V.integer("batch_size", batch_size, low=1)
    a, b = window.start - 1, window.stop - 1
    if a < 0 or b >= len(end) or b <= a:
        raise ValueError(f"window {window} does not fit {len(end)} steps")
    span = float(end[b] - end[a])
    if span <= 0:
        raise ValueError("step_end must increase over the window")
    return batch_size * (b - a) / span


# -------------------------------------------------------------------------------- bounds
def wait_fraction(wait_s, compute_s) -> float:
    """Share of the training loop's time spent waiting for data:
    Σ wait / (Σ wait + Σ compute) over the steps (not the mean of per-step shares)."""
    w = V.array("wait_s", wait_s, ndim=1)
    c = V.array("compute_s", compute_s, ndim=1, shape=(len(w),))
    if (w < 0).any() or (c < 0).any():
        raise ValueError("wait_s and compute_s must be >= 0")
    total = w.sum() + c.sum()
    return float(w.sum() / total) if total > 0 else 0.0


def waiting_share(wait_s: np.ndarray, compute_s: np.ndarray) -> float:
    """:func:`wait_fraction` without the argument checks, for the library's own runs (the
    exercise's reference is cut from a student release; the runs before it must not need
    it)."""
    waited = float(np.sum(wait_s))
    busy = waited + float(np.sum(compute_s))
    return waited / busy if busy > 0 else 0.0


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


# ---------------------------------------------------------------- a machine shared with others
@dataclass(frozen=True)
class Machine:
    """``cores`` cores shared with ``background`` other CPU-bound processes (a real
    number: their total scheduling weight, one process each of weight 1). Under a fair
    scheduler (Linux CFS: CPU time in proportion to weight) ``k`` runnable processes of
    ours get ``min(1, cores / (k + background))`` of a core each."""
    cores: int
    background: float = 0.0

    def __post_init__(self):
        V.integer("cores", self.cores, low=1)
        V.nonnegative("background", self.background)

    def share(self, runnable: int = 1) -> float:
        """CPU share of each of ``runnable`` processes of ours (all CPU-bound)."""
        runnable = V.integer("runnable", runnable, low=1)
        return min(1.0, self.cores / (runnable + self.background))


def background_load(others_cores: float, cores: int) -> float:
    """Other CPU-bound processes implied by their using ``others_cores`` cores while our
    single CPU-bound process ran: with weight b they use b cores when ``1 + b <= cores``
    (no contention) and ``cores · b / (1 + b)`` when they share with us, so
    ``b = u`` for ``u <= cores − 1`` and ``b = u / (cores − u)`` above — continuous at
    ``u = cores − 1`` and increasing in u. Our process then gets ``min(1, cores − u)`` of a
    core: this inverts :meth:`Machine.share` at one runnable process."""
    cores = V.integer("cores", cores, low=1)
    u = V.number("others_cores", others_cores, low=0, high=cores, high_open=True)
    return u if u <= cores - 1 else u / (cores - u)


def others_from_share(cpu_share: float, cores: int) -> float:
    """Cores the other processes used, inferred from our single CPU-bound process getting
    ``cpu_share`` of a core (when nothing measured them directly): ``cores − share`` when
    the share is below 1 (the machine is saturated and they have the rest), else 0 — the
    others may then use anything up to ``cores − 1`` unseen."""
    cores = V.integer("cores", cores, low=1)
    share = V.number("cpu_share", cpu_share, low=0, low_open=True)
    return cores - share if share < 1 else 0.0


class SteadySteps:
    """What a timed training loop shows, for measured runs and simulated ones alike.

    A subclass has ``step_start``, ``step_got`` and ``step_end`` (seconds, one entry per
    step: when the loop asked for the batch, had it, ended the step) and
    :attr:`steady_args`: ``(batch_size, prefetch_factor, workers, epoch_steps)``. The rate
    and the waiting share are those of the last epoch's steady window
    (:func:`steady_window`)."""

    @property
    def steady_args(self) -> tuple[int, int, int, int]:
        raise NotImplementedError

    @property
    def wait_s(self) -> np.ndarray:
        return self.step_got - self.step_start

    @property
    def compute_s(self) -> np.ndarray:
        return self.step_end - self.step_got

    @property
    def window(self) -> slice:
        """The last epoch's steady window, as indices into the step arrays."""
        _, pf, workers, epoch = self.steady_args
        w = steady_window(epoch, pf, workers)
        first = len(self.step_end) - epoch
        return slice(first + w.start, first + w.stop)

    @property
    def samples_per_s(self) -> float:
        """Steady-state samples per second (:func:`steady_rate` over :attr:`window`)."""
        return steady_rate(self.step_end, self.steady_args[0], self.window)

    @property
    def wait_fraction(self) -> float:
        """Share of the steady window's time spent waiting for data (:func:`wait_fraction`)."""
        w = self.window
        return waiting_share(self.wait_s[w], self.compute_s[w])
