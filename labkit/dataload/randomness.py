"""Randomness in DataLoader workers, measured on real loaders: which random streams repeat
across workers and across epochs (:func:`worker_randomness`), and whether an epoch's
augmentations reach persistent workers (:func:`epoch_augmentations`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.dataload.model import EncodedImages, EpochSampler


class _Draws:
    """Item i: (i, worker id, numpy's global RNG, a Generator stored on the dataset,
    torch's global RNG, an RNG seeded by (epoch, i))."""

    def __init__(self, n):
        self.n = n
        self.stored = np.random.default_rng(0)

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        import torch  # deferred: torch
        from torch.utils.data import get_worker_info

        epoch, i = index
        info = get_worker_info()
        return np.array([i, -1 if info is None else info.id, np.random.random(),
                         self.stored.random(), torch.rand(()).item(),
                         np.random.default_rng((epoch, i)).random()])


@dataclass(frozen=True)
class RandomnessReport:
    sources: tuple[str, ...]
    same_across_workers: tuple[bool, ...]   # worker 0's k-th draw == worker 1's k-th draw
    same_across_epochs: tuple[bool, ...]    # epoch 0's draws == epoch 1's

    def rows(self) -> list[tuple[str, bool, bool]]:
        return list(zip(self.sources, self.same_across_workers, self.same_across_epochs))


def worker_randomness(num_workers: int = 2, items: int = 8, *,
                      persistent_workers: bool = False) -> RandomnessReport:
    """Which random streams repeat in a real DataLoader: across workers (does worker 1
    draw what worker 0 drew?) and across two epochs. Since PyTorch 1.9 each worker seeds
    numpy's global RNG from the loader's base seed and its id (``_worker_loop`` in
    ``torch/utils/data/_utils/worker.py``, pytorch/pytorch#56488), as it seeds ``random``
    and torch; a ``numpy.random.Generator`` stored on the dataset is copied into every
    worker with the same state, so all workers draw the same numbers — and, when new
    workers start each epoch from the unchanged copy in the main process, every epoch too."""
    from torch.utils.data import DataLoader  # deferred: torch

    W = V.integer("num_workers", num_workers, low=2, high=8)
    items = V.integer("items", items, low=2 * W)
    sampler = EpochSampler(items)
    loader = DataLoader(_Draws(items), batch_size=1, sampler=sampler, num_workers=W,
                        persistent_workers=persistent_workers)
    epochs = []
    for e in range(2):
        sampler.set_epoch(e)
        epochs.append(np.concatenate([b.numpy() for b in loader]))
    del loader
    names = ("numpy global RNG", "Generator stored on the dataset", "torch global RNG",
             "seeded by (epoch, index)")
    first = epochs[0]
    w0, w1 = first[first[:, 1] == 0], first[first[:, 1] == 1]
    k = min(len(w0), len(w1))
    across_w = tuple(bool(np.allclose(w0[:k, 2 + j], w1[:k, 2 + j])) for j in range(4))
    across_e = tuple(bool(np.allclose(epochs[0][:, 2 + j], epochs[1][:, 2 + j])) for j in range(4))
    return RandomnessReport(names, across_w, across_e)


def epoch_augmentations(dataset: EncodedImages, *, num_workers: int = 1, epochs: int = 2,
                        persistent_workers: bool = True, epoch_sampler: bool = True,
                        items: int = 4, sampler=None) -> np.ndarray:
    """The first ``items`` augmented samples of each epoch from a real DataLoader:
    shape (epochs, items, C, H, W). With ``epoch_sampler`` the epoch travels with the
    indices (``sampler(n, num_samples=items)``, :class:`labkit.dataload.model.EpochSampler`
    by default, or the learner's); without it the loop sets
    ``dataset.set_epoch`` in the training process only, as the chapter did before — with
    persistent workers every epoch then repeats epoch 0's augmentations."""
    from torch.utils.data import DataLoader  # deferred: torch

    W = V.integer("num_workers", num_workers, low=0, high=8)
    epochs = V.integer("epochs", epochs, low=1)
    items = V.integer("items", items, low=1)
    if epoch_sampler:
        sampler = (sampler or EpochSampler)(len(dataset), num_samples=items)
    else:
        sampler = range(items)
    loader = DataLoader(dataset, batch_size=items, sampler=sampler, num_workers=W,
                        persistent_workers=persistent_workers and W > 0)
    out = []
    for e in range(epochs):
        (sampler.set_epoch if epoch_sampler else dataset.set_epoch)(e)
        x, _ = next(iter(loader))
        out.append(x.numpy())
    dataset.set_epoch(0)
    del loader
    return np.stack(out)
