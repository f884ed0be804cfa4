"""Communicating less: gradient compression and local/async SGD on a real small task.

The task is scikit-learn's 8×8 digits (1797 images, 10 classes) with a one-hidden-layer
MLP in numpy. ``workers`` simulated data-parallel workers each hold a shard of the
training set. Every method reports the bytes one worker sends and the test accuracy.

* :class:`TopK` — send the k largest-magnitude entries (value + int32 index) with error
  feedback: what was not sent is added to the next gradient (Stich et al., "Sparsified SGD
  with memory", NeurIPS 2018; Lin et al., "Deep Gradient Compression", ICLR 2018).
* :class:`Int8` — per-tensor scale, int8 values (1 byte each, plus a 4-byte scale), with
  optional error feedback (cf. Seide et al. 2014's 1-bit SGD with error feedback).
* :class:`PowerSGD` — rank-r approximation P Qᵀ of each weight matrix by one step of power
  iteration, warm-started Q and error feedback; P and Q are all-reduced, so it works with
  all-reduce (Vogels et al., "PowerSGD", NeurIPS 2019, Algorithm 1).
* :func:`train_local_sgd` — H local steps, then average the parameters (Stich, "Local SGD
  converges fast and communicates little", ICLR 2019).
* :func:`train_async` — a parameter server applies each gradient as it arrives, computed
  on parameters ``staleness`` updates old (Dean et al. 2012, Downpour SGD; Ho et al. 2013).

**Bytes are priced by the collective each method needs** (what one worker *sends*; in a
ring it receives as much), from :func:`labkit.parallel.cost.cost_terms`: a dense gradient of
n bytes goes through a ring all-reduce, 2(p-1)/p·n per worker. Summing on the way works
only for a *linear* compressor whose messages from different workers add up to the message
of the sum: PowerSGD's P and Q (Vogels et al. 2019, abstract: the compressed gradients
are aggregated "using all-reduce"), local SGD's parameters. Top-k is not — two workers'
top-k sets have different indices, and their sum is not k-sparse; top-k "requires costly
All-Gather operations" (arXiv:2510.26709, 2025, abstract) — nor is int8 with a per-worker
scale, so both need a ring all-gather: each of the
p workers contributes a block of b bytes and sends (p-1)·b, its own block and the p-2 it
forwards. At p = 4 that is 3·8k for top-k against the ring's 1.5·4n, twice what counting the
payload 8k against 4n suggests. Async SGD sends each gradient to one parameter server,
whose link carries p times what a worker sends.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from labkit.compress.model import qparams, quantize
from labkit.parallel.cost import cost_terms
from labkit.data import Split, load_digits
from labkit.perf.metrics import top1_accuracy

FLOAT_BYTES = 4


# ---- the task -------------------------------------------------------------------------------

Task = Split  # x_train, y_train, x_test, y_test


def digits_task(seed: int = 0, test_fraction: float = 0.3) -> Task:
    """Digits scaled to [0, 1] in float64, split by a seeded permutation."""
    return load_digits(test_fraction=test_fraction, seed=seed, dtype=np.float64)


def init_params(hidden: int = 64, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 1 / 8, (64, hidden)), np.zeros(hidden),
            rng.normal(0, 1 / math.sqrt(hidden), (hidden, 10)), np.zeros(10)]


def loss_and_grads(params, x, y) -> tuple[float, list[np.ndarray]]:
    """Mean cross-entropy of the ReLU MLP and its gradients (hand-written backward)."""
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0.0)
    z = h @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(-np.log(p[np.arange(n), y] + 1e-12).mean())
    dz = p.copy()
    dz[np.arange(n), y] -= 1.0
    dz /= n
    dh = (dz @ w2.T) * (h > 0)
    return loss, [x.T @ dh, dh.sum(0), h.T @ dz, dz.sum(0)]


def accuracy(params, x, y) -> float:
    """Top-1 accuracy (:func:`labkit.perf.metrics.top1_accuracy`) of the ReLU MLP."""
    w1, b1, w2, b2 = params
    return top1_accuracy(np.maximum(x @ w1 + b1, 0) @ w2 + b2, y)


# ---- compressors --------------------------------------------------------------------------

def ring_allreduce_bytes(nbytes: float, workers: int) -> float:
    """Bytes one worker sends in a ring all-reduce of ``nbytes``: 2(p-1)/p·n."""
    return cost_terms("all_reduce", "ring", nbytes, workers).path_bytes


def ring_allgather_bytes(block: float, workers: int) -> float:
    """Bytes one worker sends in a ring all-gather where each contributes ``block`` bytes:
    (p-1)·block (the gathered vector is p·block; each sends (p-1)/p of it)."""
    return cost_terms("all_gather", "ring", workers * block, workers).path_bytes


class Compressor:
    """Turns every worker's gradients into the mean gradient and counts the bytes one
    worker sends in the collective it needs (uncompressed: a ring all-reduce)."""
    name = "none (fp32)"
    collective = "ring all-reduce"

    def aggregate(self, grads: list[list[np.ndarray]]) -> tuple[list[np.ndarray], int]:
        """(mean of what the workers sent, bytes one worker sends)."""
        mean = [np.mean([g[i] for g in grads], axis=0) for i in range(len(grads[0]))]
        size = sum(g.size for g in grads[0]) * FLOAT_BYTES
        return mean, round(ring_allreduce_bytes(size, len(grads)))


def topk_compress(grad: np.ndarray, memory: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k with error feedback on one flat tensor.

    acc = grad + memory; keep the k entries of largest |acc| (others zero); the new memory
    is acc minus what was kept. Returns (kept, new_memory), both shaped like ``grad``.
    """
    grad = np.asarray(grad, dtype=float)
    if grad.shape != np.shape(memory):
        raise ValueError(f"memory must have the gradient's shape {grad.shape}, "
                         f"got {np.shape(memory)}")
    if not 0 <= k <= grad.size:
        raise ValueError(f"k must be in [0, {grad.size}], got {k}")
    acc = (grad + memory).ravel()
    kept = np.zeros_like(acc)
    if k:
        idx = np.argpartition(np.abs(acc), acc.size - k)[acc.size - k:]
        kept[idx] = acc[idx]
    return kept.reshape(grad.shape), (acc - kept).reshape(grad.shape)


class PerTensorCompressor(Compressor):
    """Each worker compresses each tensor on its own. With error feedback, what a worker did
    not send is kept and added to its next gradient (Seide et al. 2014; Stich et al. 2018).
    The compressed tensors of different workers do not add up (different indices, different
    scales), so every worker gathers everyone's: a ring all-gather of each block."""
    ef = True
    collective = "ring all-gather"

    def compress(self, acc: np.ndarray) -> tuple[np.ndarray, int]:
        """(what the receiver decodes, bytes of this worker's block) for one tensor."""
        raise NotImplementedError

    def aggregate(self, grads):
        if not hasattr(self, "memory"):
            self.memory: dict[tuple[int, int], np.ndarray] = {}
        sent, nbytes = [], 0
        for w, g in enumerate(grads):
            out = []
            for i, t in enumerate(g):
                acc = t + self.memory.get((w, i), 0.0)
                decoded, size = self.compress(acc)
                if self.ef:
                    self.memory[(w, i)] = acc - decoded
                out.append(decoded)
                if w == 0:
                    nbytes += ring_allgather_bytes(size, len(grads))
            sent.append(out)
        return ([np.mean([s[i] for s in sent], axis=0) for i in range(len(sent[0]))],
                round(nbytes))


class TopK(PerTensorCompressor):
    def __init__(self, ratio: float, error_feedback: bool = True):
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        self.ratio, self.ef = ratio, error_feedback
        self.name = f"top-{ratio:.0%}" + (" + EF" if error_feedback else "")
        self.memory = {}

    def compress(self, acc):
        k = max(1, int(round(self.ratio * acc.size)))
        kept, _ = topk_compress(acc, np.zeros_like(acc), k)
        return kept, k * (FLOAT_BYTES + 4)        # value + int32 index


def int8_quantize(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Symmetric 8-bit per tensor: scale = max|x| / 127, q = round(x / scale) in
    [-127, 127] (:func:`labkit.compress.model.qparams` with ``symmetric=True``). An all-zero
    ``x`` gets scale 1; an empty ``x``, or one holding NaN or ±inf, raises ValueError (no
    scale represents it: a gradient that overflowed must be skipped, not sent)."""
    qp = qparams(x, bits=8, symmetric=True)
    return quantize(x, qp).astype(np.int8), float(qp.scale)


class Int8(PerTensorCompressor):
    def __init__(self, error_feedback: bool = True):
        self.ef = error_feedback
        self.name = "int8" + (" + EF" if error_feedback else "")
        self.memory = {}

    def compress(self, acc):
        q, scale = int8_quantize(acc)
        return q.astype(float) * scale, acc.size + 4   # 1 byte each + a float32 scale


class PowerSGD(Compressor):
    """Vogels et al. 2019, Algorithm 1, for every 2-D tensor; 1-D tensors go uncompressed."""

    def __init__(self, rank: int = 2, seed: int = 0):
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.rank = rank
        self.name = f"PowerSGD rank {rank}"
        self.rng = np.random.default_rng(seed)
        self.q: dict[int, np.ndarray] = {}
        self.memory: dict[tuple[int, int], np.ndarray] = {}

    def aggregate(self, grads):
        nw = len(grads)
        out, nbytes = [], 0
        for i in range(len(grads[0])):
            ms = [g[i] + self.memory.get((w, i), 0.0) for w, g in enumerate(grads)]
            if ms[0].ndim != 2:
                out.append(np.mean(ms, axis=0))
                nbytes += ring_allreduce_bytes(ms[0].size * FLOAT_BYTES, nw)
                continue
            m, n = ms[0].shape
            r = min(self.rank, m, n)
            q = self.q.get(i)
            if q is None:
                q = self.rng.standard_normal((n, r))
            p = np.mean([mm @ q for mm in ms], axis=0)          # all-reduce of P
            p, _ = np.linalg.qr(p)                               # orthogonalise
            q = np.mean([mm.T @ p for mm in ms], axis=0)         # all-reduce of Q
            self.q[i] = q
            approx = p @ q.T
            for w in range(nw):
                self.memory[(w, i)] = ms[w] - approx
            out.append(approx)
            nbytes += ring_allreduce_bytes((m + n) * r * FLOAT_BYTES, nw)   # P, then Q
        return out, round(nbytes)


# ---- training loops ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainResult:
    name: str
    bytes_per_worker: int        # what one worker sent over the whole run, by its collective
    test_accuracy: float
    losses: tuple[float, ...]    # mean training loss of each step
    bytes_curve: tuple[int, ...]  # cumulative bytes per worker after each step
    collective: str = "ring all-reduce"   # how the bytes were priced


def _shards(task: Task, workers: int) -> list[np.ndarray]:
    if int(workers) != workers or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    return np.array_split(np.arange(len(task.y_train)), workers)


def _batch(rng, shard, batch):
    return rng.choice(shard, size=min(batch, len(shard)), replace=False)


def train_sync(compressor: Compressor | None = None, *, task: Task | None = None,
               workers: int = 4, steps: int = 200, batch: int = 16, lr: float = 0.2,
               hidden: int = 64, seed: int = 0) -> TrainResult:
    """Synchronous data-parallel SGD: every step all workers' gradients are aggregated."""
    comp = compressor or Compressor()
    task = task or digits_task(seed)
    shards = _shards(task, workers)
    if steps < 1 or batch < 1:
        raise ValueError(f"steps and batch must be >= 1, got {steps}, {batch}")
    rng = np.random.default_rng(seed)
    params = init_params(hidden, seed)
    losses, curve, total = [], [], 0
    for _ in range(steps):
        grads, ls = [], []
        for s in shards:
            b = _batch(rng, s, batch)
            loss, g = loss_and_grads(params, task.x_train[b], task.y_train[b])
            grads.append(g)
            ls.append(loss)
        mean, nbytes = comp.aggregate(grads)
        params = [p - lr * g for p, g in zip(params, mean)]
        total += nbytes
        losses.append(float(np.mean(ls)))
        curve.append(total)
    return TrainResult(comp.name, total, accuracy(params, task.x_test, task.y_test),
                       tuple(losses), tuple(curve), comp.collective)


def train_local_sgd(period: int, *, task: Task | None = None, workers: int = 4,
                    steps: int = 200, batch: int = 16, lr: float = 0.2, hidden: int = 64,
                    seed: int = 0) -> TrainResult:
    """Each worker steps on its own copy; every ``period`` steps the copies are averaged
    (one ring all-reduce of the parameters)."""
    if period < 1:
        raise ValueError(f"period must be >= 1, got {period}")
    task = task or digits_task(seed)
    shards = _shards(task, workers)
    rng = np.random.default_rng(seed)
    copies = [init_params(hidden, seed) for _ in shards]
    size = round(ring_allreduce_bytes(sum(p.size for p in copies[0]) * FLOAT_BYTES,
                                      len(shards)))
    losses, curve, total = [], [], 0
    for step in range(1, steps + 1):
        ls = []
        for w, s in enumerate(shards):
            b = _batch(rng, s, batch)
            loss, g = loss_and_grads(copies[w], task.x_train[b], task.y_train[b])
            copies[w] = [p - lr * gi for p, gi in zip(copies[w], g)]
            ls.append(loss)
        if step % period == 0 or step == steps:
            avg = [np.mean([c[i] for c in copies], axis=0) for i in range(len(copies[0]))]
            copies = [[a.copy() for a in avg] for _ in shards]
            total += size
        losses.append(float(np.mean(ls)))
        curve.append(total)
    return TrainResult(f"local SGD, H={period}", total,
                       accuracy(copies[0], task.x_test, task.y_test), tuple(losses),
                       tuple(curve))


def train_async(staleness: int, *, task: Task | None = None, workers: int = 4,
                steps: int = 200, batch: int = 16, lr: float = 0.2, hidden: int = 64,
                seed: int = 0) -> TrainResult:
    """Parameter server: ``workers × steps`` updates, worker (u mod workers) computes update
    u's gradient on the parameters of update u - ``staleness``; it sends the gradient and
    receives fresh parameters; ``bytes_per_worker`` counts what it sends (the gradient; the
    server's link carries ``workers`` times that). ``lr`` is divided by ``workers`` so each
    gradient counts as much as in synchronous SGD's mean.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    task = task or digits_task(seed)
    shards = _shards(task, workers)
    rng = np.random.default_rng(seed)
    history = [init_params(hidden, seed)]
    size = sum(p.size for p in history[0]) * FLOAT_BYTES
    losses, curve, total, ls = [], [], 0, []
    for u in range(workers * steps):
        w = u % workers
        old = history[max(0, len(history) - 1 - staleness)]
        b = _batch(rng, shards[w], batch)
        loss, g = loss_and_grads(old, task.x_train[b], task.y_train[b])
        history.append([p - lr / workers * gi for p, gi in zip(history[-1], g)])
        history = history[-(staleness + 1):]
        ls.append(loss)
        if w == 0:
            total += size
        if w == workers - 1:
            losses.append(float(np.mean(ls)))
            curve.append(total)
            ls = []
    return TrainResult(f"async SGD, staleness {staleness}", total,
                       accuracy(history[-1], task.x_test, task.y_test), tuple(losses),
                       tuple(curve), "to a parameter server")


def compare_methods(*, steps: int = 150, workers: int = 4, seed: int = 0) -> list[TrainResult]:
    """Every method on the same task and seed (the chapter's table and plot)."""
    task = digits_task(seed)
    kw = dict(task=task, workers=workers, steps=steps, seed=seed)
    jobs = [
        ("sync fp32", lambda: train_sync(None, **kw)),
        ("top-1%", lambda: train_sync(TopK(0.01, error_feedback=False), **kw)),
        ("top-1% + EF", lambda: train_sync(TopK(0.01), **kw)),
        ("int8 + EF", lambda: train_sync(Int8(), **kw)),
        ("PowerSGD r=2", lambda: train_sync(PowerSGD(2, seed), **kw)),
        ("local SGD H=8", lambda: train_local_sgd(8, **kw)),
        ("async, staleness 3", lambda: train_async(3, **kw)),
    ]
    return [fn() for _, fn in tqdm(jobs, desc="training", leave=False)]
