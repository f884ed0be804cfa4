"""What each stage of chapter 07's pipeline costs, measured apart in CPU time (seed 002:
数据预处理, data preprocessing, the first place a data flow loses time).

* :func:`measure_stage_costs` — per sample: decode, augment and a whole ``dataset[i]``; per
  batch: torch's ``default_collate`` (in this process) and the training step (one torch
  thread), each the median thread CPU time of a few repeats (:func:`cpu_median`): the
  inputs of :class:`labkit.dataload.sim.PipelineConfig` (:class:`StageCosts`).
* :func:`cache_tradeoff` — storing PNGs at several zlib levels against a cache of decoded
  pixels: bytes held per sample and CPU per augmented sample (:class:`CacheRow`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.dataload.measure import mlp_step_fn, one_thread, owner
from labkit.dataload.model import DecodedCache, EncodedImages, augment, decode
from labkit.dataload.sim import decode_share


@dataclass(frozen=True)
class StageCosts:
    decode_s: float      # per sample, CPU
    augment_s: float     # per sample, CPU
    compute_s: float     # per batch, CPU
    collate_s: float = 0.0   # per batch, CPU (torch's default_collate in this process)
    item_s: float = 0.0      # per sample, CPU of a whole dataset[i] (decode, augment, its RNG)

    @property
    def decode_share(self) -> float:
        """decode / (decode + augment): the share of a sample's CPU work a cache of decoded
        pixels removes (:func:`labkit.dataload.sim.decode_share`)."""
        return decode_share(self.decode_s, self.augment_s)

    def batch_load_s(self, batch_size: int) -> float:
        """CPU seconds to load a batch: batch_size × (decode + augment) + collate."""
        return V.integer("batch_size", batch_size, low=1) * (self.decode_s + self.augment_s) \
            + self.collate_s

    @property
    def item_overhead_s(self) -> float:
        """CPU per sample of ``dataset[i]`` beyond decode + augment (seeding the item's
        generator, indexing, the label)."""
        return max(0.0, self.item_s - self.decode_s - self.augment_s)


def cpu_median(fn, repeats: int = 5, warmup: int = 1) -> float:
    """Median thread CPU seconds of ``fn()`` over ``repeats`` calls after ``warmup``."""
    repeats = V.integer("repeats", repeats, low=1)
    for _ in range(V.integer("warmup", warmup, low=0)):
        fn()
    samples = []
    for _ in range(repeats):
        c0 = time.thread_time()
        fn()
        samples.append(time.thread_time() - c0)
    return float(np.median(samples))


def measure_stage_costs(dataset: EncodedImages, batch_size: int = 32, hidden: int = 256,
                        repeats: int = 5) -> StageCosts:
    """Per-sample decode, augment and whole ``dataset[i]``, per-batch collate (torch's
    ``default_collate``, in this process: no shared memory) and training step, in CPU time
    of this thread (one torch thread): the inputs the simulator needs, measured apart."""
    from torch.utils.data import default_collate  # deferred: torch

    n = min(len(dataset.blobs), 64)
    rng = np.random.default_rng(0)
    imgs = [decode(b) for b in dataset.blobs[:n]]
    t_dec = cpu_median(lambda: [decode(b) for b in dataset.blobs[:n]], repeats) / n
    t_aug = cpu_median(lambda: [augment(im, rng, blur=dataset.blur) for im in imgs], repeats) / n
    t_item = cpu_median(lambda: [dataset[i] for i in range(n)], repeats) / n
    collates = []
    for k in range(repeats):        # fresh items each time, as a loader collates them
        items = [dataset[(k + 1, i)] for i in range(batch_size)]
        c0 = time.thread_time()
        x, y = default_collate(items)
        collates.append(time.thread_time() - c0)
    t_col = float(np.median(collates))
    step = mlp_step_fn(int(np.prod(x.shape[1:])), hidden)
    t_step = one_thread(lambda: cpu_median(lambda: step(x, y), repeats, warmup=2))
    return StageCosts(t_dec, t_aug, t_step, t_col, t_item)


@dataclass(frozen=True)
class CacheRow:
    name: str
    bytes_per_sample: float
    cpu_per_sample_s: float      # decode (if any) + augment, CPU seconds


def cache_tradeoff(images: np.ndarray, labels, *, levels=(1, 6, 9), samples: int = 64,
                   repeats: int = 5, blur: bool = True, cache=None) -> list[CacheRow]:
    """What storing PNGs (at each zlib ``level``) or a cache of decoded pixels costs per
    sample: bytes held and CPU seconds to produce an augmented sample (decode + augment,
    or augment alone from the cache) — seed 002's compression against caching. ``cache``
    wraps a dataset in a cache (``cache(dataset)`` with ``__getitem__`` and
    ``stored_bytes``; :class:`labkit.dataload.model.DecodedCache` by default, or the
    learner's); it is built on the last level's PNGs."""
    cache = cache or DecodedCache
    if not callable(cache):
        raise TypeError(f"cache must be a class or function, got {type(cache).__name__}")
    n = V.integer("samples", samples, low=1)
    rows = []
    for level in levels:
        ds = EncodedImages(images, labels, level=level, blur=blur)
        k = min(len(ds.blobs), n)
        t = cpu_median(lambda d=ds: [d[i] for i in range(k)], repeats) / k
        rows.append(CacheRow(f"PNG, zlib level {level}", ds.stored_bytes / len(ds.blobs), t))
    cached = cache(ds)
    t = cpu_median(lambda: [cached[i] for i in range(k)], repeats) / k
    rows.append(CacheRow(f"decoded pixels ({owner(cache)})", cached.stored_bytes / len(ds.blobs),
                         t))
    return rows
