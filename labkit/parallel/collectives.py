"""Collective operations simulated step by step on per-rank numpy arrays.

Each rank holds a 1-D array. A collective is a sequence of *steps*; in one step every
message is sent at once, and each message moves a contiguous range of *chunks* (the vector
cut into ``world`` nearly equal pieces with ``np.array_split``) from a sender to a receiver,
which either adds it into its buffer (``reduce=True``) or copies it (``reduce=False``).
The functions return the final buffers and the full message log, so the result can be
checked (it is exactly the sum, up to floating-point order) and drawn or animated.

Algorithms, after Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005 (T05), and Patarasuk and Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 69(2), 2009:

* ``naive``: every rank sends its whole vector to rank 0, which adds them one by one, then
  rank 0 sends the sum to every rank, one at a time (reduce + broadcast, linear).
* ``ring``: reduce-scatter around the ring (p-1 steps; in step s rank r sends chunk
  (r-s-1) mod p to r+1, which adds it), then all-gather around the ring (p-1 steps; rank r
  sends chunk (r-s) mod p). Rank r owns chunk r after the reduce-scatter.
* ``tree``: binomial-tree reduce to rank 0 then binomial-tree broadcast (T05 §4.1, 4.4),
  ⌈lg p⌉ steps each, whole vector per message.
* ``recursive_halving_doubling``: Rabenseifner's algorithm (T05 §4.4): reduce-scatter by
  recursive halving, then all-gather by recursive doubling, among p' = 2^⌊lg p⌋ ranks. When
  p is not a power of two the r = p - p' extra ranks first send their vector to rank
  i - p' and receive the result at the end (one extra step on each side).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from labkit import validate as V
from labkit.parallel.cost import CostTerms, collective_time, cost_terms

ALLREDUCE_ALGORITHMS = ("naive", "ring", "tree", "recursive_halving_doubling")
REDUCE_SCATTER_ALGORITHMS = ("ring", "pairwise", "recursive_halving")
ALLGATHER_ALGORITHMS = ("ring", "recursive_doubling")
BROADCAST_ALGORITHMS = ("naive", "tree")


@dataclass(frozen=True)
class Message:
    """One message: in ``step``, ``sender`` sends chunks ``chunk[0] .. chunk[1]-1``."""
    step: int
    sender: int
    receiver: int
    chunk: tuple[int, int]
    nbytes: int
    reduce: bool
    phase: str = ""


@dataclass(frozen=True)
class CollectiveRun:
    """Result of a simulated collective: final per-rank buffers and the message log."""
    op: str
    algorithm: str
    world: int
    nbytes: int                       # bytes of the full vector N (T05's n)
    outputs: tuple[np.ndarray, ...]
    log: tuple[Message, ...]
    chunk_bounds: tuple[int, ...] = field(default=())   # element offsets, len world+1
    inputs_chunked: bool = False      # all-gather: rank r starts with chunk r only
    payloads: tuple[np.ndarray, ...] = ()    # record=True: the data each message carried
    history: tuple[tuple[np.ndarray, ...], ...] = ()   # record=True: buffers after each step

    @property
    def steps(self) -> int:
        return 1 + max((m.step for m in self.log), default=-1)

    @property
    def messages(self) -> int:
        return len(self.log)

    @property
    def bytes_sent(self) -> int:
        return sum(m.nbytes for m in self.log)

    def link_bytes(self) -> np.ndarray:
        """``world × world`` matrix: bytes sent from row rank to column rank."""
        out = np.zeros((self.world, self.world), dtype=np.int64)
        for m in self.log:
            out[m.sender, m.receiver] += m.nbytes
        return out

    def step_messages(self, step: int) -> list[Message]:
        return [m for m in self.log if m.step == step]


# ---- validation and bookkeeping ----------------------------------------------------------

def _validate(data: Sequence[np.ndarray], *, min_size: int = 1,
              name: str = "data") -> list[np.ndarray]:
    """Per-rank numeric 1-D arrays of one shape and dtype, whose sum cannot overflow."""
    if isinstance(data, np.ndarray) and data.ndim == 2:
        data = list(data)
    if not isinstance(data, (list, tuple)) or len(data) < 1:
        raise (TypeError if not isinstance(data, (list, tuple)) else ValueError)(
            f"{name} must be a non-empty list of per-rank 1-D arrays (world >= 1), got "
            f"{type(data).__name__} of length "
            f"{len(data) if hasattr(data, '__len__') else '?'}")
    arrays = [V.array(f"{name}[{r}]", a, dtype=None, allow_empty=True)
              for r, a in enumerate(data)]
    shape = arrays[0].shape
    if arrays[0].ndim != 1:
        raise ValueError(f"{name}: each rank's array must be 1-D, got shape {shape}")
    for r, a in enumerate(arrays):
        if a.shape != shape:
            raise ValueError(f"{name}: every rank needs the same size: rank 0 has {shape}, "
                             f"rank {r} has {a.shape}")
        if a.dtype != arrays[0].dtype:
            raise ValueError(f"{name}: every rank needs the same dtype: rank 0 has "
                             f"{arrays[0].dtype}, rank {r} has {a.dtype}")
    if shape[0] < min_size:
        raise ValueError(f"{name}: size must be >= {min_size} elements (one per chunk, world "
                         f"= {len(arrays)}), got {shape[0]}")
    _check_no_overflow(name, arrays)
    return arrays


def _check_no_overflow(name: str, arrays: list[np.ndarray]) -> None:
    """Integer sums wrap around silently in numpy (2**62 × 4 = 0 in int64): refuse them."""
    dt = arrays[0].dtype
    if dt.kind not in "iu" or not arrays[0].size:
        return
    info = np.iinfo(dt)
    total = sum(np.abs(a.astype(np.float64)) for a in arrays)   # bounds every partial sum
    if float(np.max(total)) > float(info.max) * (1 - 1e-12):
        raise ValueError(f"{name}: the sum of {len(arrays)} ranks' {dt} values overflows "
                         f"{dt} (|sum| up to {float(np.max(total)):.3g} > {info.max}); "
                         f"use a wider integer or a float dtype")


def chunk_bounds(size: int, world: int) -> tuple[int, ...]:
    """Element offsets of ``world`` chunks as ``np.array_split`` cuts them (len world+1)."""
    world = V.integer("world", world, low=1)
    size = V.integer("size", size, low=0)
    q, rem = divmod(size, world)
    sizes = [q + (1 if i < rem else 0) for i in range(world)]
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)]))


class _Sim:
    """Buffers plus a message log; ``send`` applies a message at once (see module doc).
    With ``record`` it also keeps each message's payload and every rank's buffer after each
    step (a message of one step never carries a chunk its sender receives in that step, so
    applying them one by one equals applying them at once)."""

    def __init__(self, buffers: list[np.ndarray], bounds: tuple[int, ...],
                 record: bool = False):
        self.buf = buffers
        self.bounds = bounds
        self.item = buffers[0].itemsize
        self.log: list[Message] = []
        self.record = record
        self.payloads: list[np.ndarray] = []
        self.history: list[tuple[np.ndarray, ...]] = []

    def _snapshot(self) -> None:
        self.history.append(tuple(b.copy() for b in self.buf))

    def finish(self) -> None:
        """Close the last step's snapshot (record mode)."""
        if self.record and self.log and len(self.history) < self.log[-1].step + 1:
            self._snapshot()

    def send(self, step: int, src: int, dst: int, lo: int, hi: int, reduce: bool,
             phase: str) -> None:
        a, b = self.bounds[lo], self.bounds[hi]
        if self.record:
            while self.log and len(self.history) < step:      # a new step: close the last
                self._snapshot()
            self.payloads.append(self.buf[src][a:b].copy())
        if reduce:
            np.add(self.buf[dst][a:b], self.buf[src][a:b], out=self.buf[dst][a:b])
        else:
            self.buf[dst][a:b] = self.buf[src][a:b]
        self.log.append(Message(step, src, dst, (lo, hi), (b - a) * self.item, reduce, phase))


def _is_pow2(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def _check_algorithm(name: str, allowed: tuple[str, ...]) -> None:
    V.one_of("algorithm", name, allowed)


# ---- phases (they share a _Sim and return the next free step number) -----------------

def _ring_reduce_scatter(sim: _Sim, p: int, step: int) -> int:
    # In one step rank r sends chunk (r-s-1) and receives chunk (r-s-2): never the same.
    for s in range(p - 1):
        for r in range(p):
            c = (r - s - 1) % p
            sim.send(step, r, (r + 1) % p, c, c + 1, True, "reduce-scatter")
        step += 1
    return step


def _ring_all_gather(sim: _Sim, p: int, step: int) -> int:
    for s in range(p - 1):
        for r in range(p):
            c = (r - s) % p
            sim.send(step, r, (r + 1) % p, c, c + 1, False, "all-gather")
        step += 1
    return step


def _tree_reduce(sim: _Sim, p: int, step: int, nchunks: int) -> int:
    d = 1
    while d < p:
        for r in range(d, p, 2 * d):
            sim.send(step, r, r - d, 0, nchunks, True, "reduce")
        step += 1
        d *= 2
    return step


def _tree_broadcast(sim: _Sim, p: int, step: int, nchunks: int) -> int:
    d = 1
    while d < p:
        d *= 2
    d //= 2
    while d >= 1:
        for r in range(0, p, 2 * d):
            if r + d < p:
                sim.send(step, r, r + d, 0, nchunks, False, "broadcast")
        step += 1
        d //= 2
    return step


def _halving(sim: _Sim, q: int, step: int) -> int:
    """Recursive-halving reduce-scatter among ranks 0..q-1 (q a power of two, q chunks)."""
    lo = [0] * q
    hi = [q] * q
    d = q // 2
    while d >= 1:
        for r in range(q):
            mid = (lo[r] + hi[r]) // 2
            partner = r ^ d
            if r & d:   # keep the upper half, send the lower half
                sim.send(step, r, partner, lo[r], mid, True, "reduce-scatter")
            else:
                sim.send(step, r, partner, mid, hi[r], True, "reduce-scatter")
        for r in range(q):
            mid = (lo[r] + hi[r]) // 2
            if r & d:
                lo[r] = mid
            else:
                hi[r] = mid
        step += 1
        d //= 2
    return step


def _doubling(sim: _Sim, q: int, step: int) -> int:
    """Recursive-doubling all-gather among ranks 0..q-1; rank r starts with chunk r."""
    lo = list(range(q))
    hi = [r + 1 for r in range(q)]
    d = 1
    while d < q:
        for r in range(q):
            sim.send(step, r, r ^ d, lo[r], hi[r], False, "all-gather")
        for r in range(q):
            if r & d:
                lo[r] -= d
            else:
                hi[r] += d
        step += 1
        d *= 2
    return step


# ---- the collectives ---------------------------------------------------------------------

def all_reduce(data: Sequence[np.ndarray], algorithm: str = "ring", *,
               inplace: bool = False) -> CollectiveRun:
    """Every rank ends with the elementwise sum of all ranks' arrays.

    ``algorithm`` is one of :data:`ALLREDUCE_ALGORITHMS` (see the module docstring).
    Chunked algorithms (ring, recursive halving/doubling) need size >= world. With
    ``inplace=True`` the given arrays are the buffers and end up holding the sum, as
    ``torch.distributed.all_reduce`` does; otherwise they are copied first.
    """
    _check_algorithm(algorithm, ALLREDUCE_ALGORITHMS)
    V.boolean("inplace", inplace)
    p_guess = len(data) if hasattr(data, "__len__") else 0
    chunked = algorithm in ("ring", "recursive_halving_doubling")
    arrays = _validate(data, min_size=p_guess if chunked else 1)
    p = len(arrays)
    if algorithm == "recursive_halving_doubling":
        q = 1 << (p.bit_length() - 1)
        bounds = chunk_bounds(arrays[0].size, q)
    else:
        q = p
        bounds = chunk_bounds(arrays[0].size, p if chunked else 1)
    sim = _Sim(arrays if inplace else [a.copy() for a in arrays], bounds)
    nchunks = len(bounds) - 1
    if algorithm == "naive":
        step = 0
        for r in range(1, p):
            sim.send(step, r, 0, 0, nchunks, True, "reduce")
            step += 1
        for r in range(1, p):
            sim.send(step, 0, r, 0, nchunks, False, "broadcast")
            step += 1
    elif algorithm == "ring":
        step = _ring_reduce_scatter(sim, p, 0)
        _ring_all_gather(sim, p, step)
    elif algorithm == "tree":
        step = _tree_reduce(sim, p, 0, nchunks)
        _tree_broadcast(sim, p, step, nchunks)
    else:
        step = 0
        if p > q:
            for r in range(q, p):
                sim.send(step, r, r - q, 0, nchunks, True, "fold-in")
            step += 1
        step = _halving(sim, q, step)
        step = _doubling(sim, q, step)
        if p > q:
            for r in range(q, p):
                sim.send(step, r - q, r, 0, nchunks, False, "fold-out")
    return CollectiveRun("all_reduce", algorithm, p, arrays[0].nbytes, tuple(sim.buf),
                         tuple(sim.log), bounds)


def reduce_scatter(data: Sequence[np.ndarray], algorithm: str = "ring", *,
                   record: bool = False) -> CollectiveRun:
    """Rank r ends with chunk r of the sum (``outputs[r]`` is that chunk only).

    ``ring``: p-1 steps around the ring; ``pairwise``: in step s rank r sends chunk (r+s)
    straight to its owner (T05 §4.3, pairwise exchange); ``recursive_halving`` needs a
    power-of-two world. ``record=True`` keeps what each message carried (``payloads``, in
    log order) and every rank's whole buffer after each step (``history``).
    """
    _check_algorithm(algorithm, REDUCE_SCATTER_ALGORITHMS)
    V.boolean("record", record)
    p_guess = len(data) if hasattr(data, "__len__") else 0
    arrays = _validate(data, min_size=p_guess)
    p = len(arrays)
    if algorithm == "recursive_halving" and not _is_pow2(p):
        raise ValueError(f"world must be a power of two for recursive_halving, got {p}; "
                         f"use algorithm='ring' or 'pairwise'")
    bounds = chunk_bounds(arrays[0].size, p)
    sim = _Sim([a.copy() for a in arrays], bounds, record)
    if algorithm == "ring":
        _ring_reduce_scatter(sim, p, 0)
    elif algorithm == "pairwise":
        # Receivers accumulate into their own chunk, which they never send: no hazards.
        for s in range(1, p):
            for r in range(p):
                c = (r + s) % p
                sim.send(s - 1, r, c, c, c + 1, True, "reduce-scatter")
    else:
        _halving(sim, p, 0)
    sim.finish()
    outs = tuple(sim.buf[r][bounds[r]:bounds[r + 1]].copy() for r in range(p))
    return CollectiveRun("reduce_scatter", algorithm, p, arrays[0].nbytes, outs,
                         tuple(sim.log), bounds, payloads=tuple(sim.payloads),
                         history=tuple(sim.history))


def run_from_log(buffers: Sequence[np.ndarray], chunks: Sequence[np.ndarray],
                 messages: Sequence, history: Sequence = (), *,
                 algorithm: str = "yours") -> CollectiveRun:
    """A reduce-scatter's :class:`CollectiveRun` built from a log of the data it moved:
    ``messages`` are ``(step, sender, receiver, chunk, payload)`` (lab 9.1's form), each
    message's size is its payload's bytes, every message adds. So :func:`simulated_time`,
    :func:`coverage` and the drawings price and show a schedule somebody else ran."""
    arrays = _validate(buffers, name="buffers")
    p = len(arrays)
    bounds = chunk_bounds(arrays[0].size, p)
    log, payloads = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, (tuple, list)) or len(m) != 5:
            raise ValueError(f"messages[{i}] must be (step, sender, receiver, chunk, payload), "
                             f"got {m!r:.80}")
        step, src, dst, c = (V.integer(f"messages[{i}][{k}]", x, low=0)
                             for k, x in enumerate(m[:4]))
        if max(src, dst, c) >= p:
            raise ValueError(f"messages[{i}]: ranks and chunks run 0..{p - 1}, got {m[:4]}")
        payload = np.asarray(m[4])
        log.append(Message(step, src, dst, (c, c + 1), int(payload.nbytes), True,
                           "reduce-scatter"))
        payloads.append(payload)
    outs = tuple(np.asarray(c) for c in chunks)
    return CollectiveRun("reduce_scatter", algorithm, p, arrays[0].nbytes, outs, tuple(log),
                         bounds, payloads=tuple(payloads),
                         history=tuple(tuple(np.asarray(b) for b in h) for h in history))


def all_gather(chunks: Sequence[np.ndarray], algorithm: str = "ring") -> CollectiveRun:
    """Rank r starts with ``chunks[r]``; every rank ends with their concatenation.

    Chunks may differ in length (as ``np.array_split`` makes them). ``recursive_doubling``
    needs a power-of-two world.
    """
    _check_algorithm(algorithm, ALLGATHER_ALGORITHMS)
    if not isinstance(chunks, (list, tuple)) or len(chunks) < 1:
        raise (TypeError if not isinstance(chunks, (list, tuple)) else ValueError)(
            "chunks must be a non-empty list of per-rank 1-D arrays (world >= 1)")
    parts = [V.array(f"chunks[{r}]", c, dtype=None, ndim=1) for r, c in enumerate(chunks)]
    p = len(parts)
    if len({c.dtype for c in parts}) != 1:
        raise ValueError("chunks: every rank's chunk needs the same dtype")
    if algorithm == "recursive_doubling" and not _is_pow2(p):
        raise ValueError(f"world must be a power of two for recursive_doubling, got {p}; "
                         f"use algorithm='ring'")
    bounds = tuple(int(x) for x in np.concatenate([[0], np.cumsum([c.size for c in parts])]))
    bufs = []
    for r in range(p):
        b = np.zeros(bounds[-1], dtype=parts[0].dtype)
        b[bounds[r]:bounds[r + 1]] = parts[r]
        bufs.append(b)
    sim = _Sim(bufs, bounds)
    if algorithm == "ring":
        _ring_all_gather(sim, p, 0)
    else:
        _doubling(sim, p, 0)
    return CollectiveRun("all_gather", algorithm, p, int(bufs[0].nbytes), tuple(sim.buf),
                         tuple(sim.log), bounds, inputs_chunked=True)


def broadcast(data: np.ndarray, world: int, root: int = 0,
              algorithm: str = "tree") -> CollectiveRun:
    """Every rank ends with ``data`` (held by ``root`` at the start).

    ``naive``: the root sends to each rank in turn (p-1 steps); ``tree``: binomial tree,
    ⌈lg p⌉ steps (T05 §4.1). Ranks are renumbered so that the root is 0.
    """
    _check_algorithm(algorithm, BROADCAST_ALGORITHMS)
    world = V.integer("world", world, low=1)
    root = V.integer("root", root, low=0, high=world - 1)
    x = V.array("data", data, dtype=None, ndim=1)
    bufs = [x.copy() if r == root else np.zeros_like(x) for r in range(world)]
    # relative rank v lives at physical rank (v + root) % world
    perm = [(v + root) % world for v in range(world)]
    sim = _Sim([bufs[perm[v]] for v in range(world)], (0, x.size))
    if algorithm == "naive":
        for v in range(1, world):
            sim.send(v - 1, 0, v, 0, 1, False, "broadcast")
    else:
        _tree_broadcast(sim, world, 0, 1)
    log = tuple(Message(m.step, perm[m.sender], perm[m.receiver], m.chunk, m.nbytes,
                        m.reduce, m.phase) for m in sim.log)
    return CollectiveRun("broadcast", algorithm, world, int(x.nbytes), tuple(bufs), log,
                         (0, x.size))


def coverage(run: CollectiveRun) -> np.ndarray:
    """How many ranks' inputs each (rank, chunk) buffer holds, before each step and at the end.

    Returns an int array of shape ``(steps + 1, world, nchunks)``, computed from the log
    alone (sets of contributing ranks, updated step by step), so it can be animated.
    """
    if not isinstance(run, CollectiveRun):
        raise TypeError(f"run must be a CollectiveRun, got {type(run).__name__}")
    p = run.world
    n = len(run.chunk_bounds) - 1
    if run.op == "broadcast":
        root = next((m.sender for m in run.log if m.step == 0), 0)
        have = [[{0} if r == root else set() for _ in range(n)] for r in range(p)]
    elif run.inputs_chunked:
        have = [[{r} if c == r else set() for c in range(n)] for r in range(p)]
    else:
        have = [[{r} for _ in range(n)] for r in range(p)]
    frames = [[[len(s) for s in row] for row in have]]
    for step in range(run.steps):
        msgs = run.step_messages(step)
        snap = {(m.sender, c): set(have[m.sender][c]) for m in msgs
                for c in range(*m.chunk)}
        for m in msgs:
            for c in range(*m.chunk):
                if m.reduce:
                    have[m.receiver][c] |= snap[(m.sender, c)]
                else:
                    have[m.receiver][c] = set(snap[(m.sender, c)])
        frames.append([[len(s) for s in row] for row in have])
    return np.array(frames, dtype=int)


def simulated_time(run: CollectiveRun, *, alpha: float, beta: float,
                   gamma: float = 0.0) -> float:
    """Time of the logged schedule under the α-β-γ model (Hockney; T05 §2).

    Each step costs α + β·(largest message) + γ·(largest reduced message): messages of one
    step go over different links at once. Compare with :func:`cost.collective_time`.
    """
    if not isinstance(run, CollectiveRun):
        raise TypeError(f"run must be a CollectiveRun, got {type(run).__name__}")
    alpha, beta, gamma = (V.nonnegative(k, v) for k, v in
                          (("alpha", alpha), ("beta", beta), ("gamma", gamma)))
    total = 0.0
    for step in range(run.steps):
        msgs = run.step_messages(step)
        big = max(m.nbytes for m in msgs)
        red = max((m.nbytes for m in msgs if m.reduce), default=0)
        total += alpha + beta * big + gamma * red
    return total


@dataclass(frozen=True)
class AlgorithmSummary:
    """One all-reduce algorithm run on some data, set beside its α-β-γ formula.

    ``correct``: every rank ends with the element-wise sum (``np.allclose``);
    ``max_bytes_into_rank``: the most bytes any one rank receives (the hot link of the naive
    algorithm); ``terms``: :func:`labkit.parallel.cost.cost_terms` for the same op, size and
    world; ``simulated_s`` / ``formula_s``: :func:`simulated_time` of the logged schedule and
    :func:`labkit.parallel.cost.collective_time` under the same α, β, γ (T05 §2).
    """
    algorithm: str
    world: int
    nbytes: int
    correct: bool
    steps: int
    messages: int
    bytes_sent: int
    max_bytes_into_rank: int
    terms: CostTerms
    simulated_s: float
    formula_s: float


def uniform_vectors(world: int, elements: int, multiple: int = 8) -> list[np.ndarray]:
    """``world`` float32 vectors of ones, the length rounded down to a multiple of
    ``multiple``·world (so every algorithm's chunks are equal and the formulas are exact)."""
    p = V.integer("world", world, low=1)
    k = V.integer("multiple", multiple, low=1) * p
    n = V.integer("elements", elements, low=k) // k * k
    return [np.ones(n, dtype=np.float32) for _ in range(p)]     # p arrays, not one p times


def compare_allreduce(data: Sequence[np.ndarray], *, alpha: float = 0.0, beta: float = 0.0,
                      gamma: float = 0.0) -> list[AlgorithmSummary]:
    """Run every algorithm of :data:`ALLREDUCE_ALGORITHMS` on ``data`` (one array per rank)
    and set its counts and time beside the formulas of :mod:`labkit.parallel.cost`."""
    out = []
    for alg in ALLREDUCE_ALGORITHMS:
        run = all_reduce(data, alg)          # validates data
        expected = np.sum([np.asarray(d) for d in data], axis=0)
        out.append(AlgorithmSummary(
            alg, run.world, run.nbytes,
            all(np.allclose(o, expected) for o in run.outputs),
            run.steps, run.messages, run.bytes_sent, int(run.link_bytes().sum(0).max()),
            cost_terms("all_reduce", alg, run.nbytes, run.world),
            simulated_time(run, alpha=alpha, beta=beta, gamma=gamma),
            collective_time("all_reduce", alg, run.nbytes, run.world,
                            alpha=alpha, beta=beta, gamma=gamma)))
    return out
