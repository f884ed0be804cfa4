"""A paged KV cache against contiguous max-length reservation (Kwon et al., "Efficient Memory
Management for Large Language Model Serving with PagedAttention", SOSP 2023 — vLLM).

A serving system keeps the keys and values of every token of every running request (the KV
cache). Two ways to hold it:

* **contiguous reservation** (the systems the paper starts from): when a request starts,
  reserve one contiguous slot for the longest sequence it may reach, ``max_len`` tokens; the
  part it has not filled is waste — ``max_len - tokens`` per running request, whatever the
  request's real length;
* **paging** (PagedAttention): the cache is cut into physical *KV blocks* of
  ``block_tokens`` tokens; a request's *block table* maps its logical blocks to physical ones,
  and a new block is taken from the free list only when its last block is full; a finished
  request returns its blocks. A request of t tokens holds ⌈t / B⌉ blocks, so only its last
  block is partly empty: waste ⌈t/B⌉·B − t < B per request (internal fragmentation in the
  last block only — the abstract's "near-zero waste in KV cache memory"; vLLM's block
  manager: ``vllm/core/block_manager.py``, ``allocate`` / ``append_slots`` / ``free``).

Both are measured in token slots (multiply by the bytes of one token's keys and values —
2 · layers · hidden · bytes per element — for bytes).

A stream of requests is a list of events ``(request, tokens)``: ``tokens > 0`` appends that
many tokens to the request (its prompt when it arrives, then one per decoding step),
``tokens == 0`` says the request finished. :func:`request_events` draws one (continuous
batching: requests arrive at random, every running request decodes one token per step);
:func:`kv_usage` (labkit's block manager) replays it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit.validate import ceil_div, check_fields, checked, integer, positive


def kv_usage(events, block_tokens: int, max_len: int) -> list[tuple[int, int, int, int]]:
    """After each event: ``(blocks_in_use, pool_blocks, paged_waste, contiguous_waste)``.

    ``pool_blocks`` is how many physical blocks the pool has had to provide so far (a block
    comes from the free list when there is one, else a new one is added to the pool);
    ``paged_waste`` = blocks in use · B − tokens stored; ``contiguous_waste`` = running
    requests · ``max_len`` − tokens stored (token slots)."""
    block_tokens = integer("block_tokens", block_tokens, low=1)
    max_len = integer("max_len", max_len, low=1)
    tables: dict = {}          # request -> list of physical block ids
    tokens: dict = {}
    free: list[int] = []
    pool = stored = in_use = 0
    out = []
    for i, (req, n) in enumerate(events):
        n = integer(f"events[{i}] tokens", n, low=0)
        if n == 0:
            if req not in tables:
                raise ValueError(f"events[{i}]: request {req!r} finished but never started")
            blocks = tables.pop(req)
            free.extend(reversed(blocks))
            in_use -= len(blocks)
            stored -= tokens.pop(req)
        else:
            have = tokens.get(req, 0) + n
            if have > max_len:
                raise ValueError(f"events[{i}]: request {req!r} reaches {have} tokens, more "
                                 f"than max_len={max_len}")
            table = tables.setdefault(req, [])
            while len(table) * block_tokens < have:
                if free:
                    table.append(free.pop())
                else:
                    table.append(pool)
                    pool += 1
                in_use += 1
            tokens[req] = have
            stored += n
        out.append((in_use, pool, in_use * block_tokens - stored,
                    len(tables) * max_len - stored))
    return out


@dataclass(frozen=True)
class RequestStream:
    """Requests of random lengths served with continuous batching.

    ``requests`` arrive, about ``arrivals`` per decoding step (Poisson); each has a prompt
    and an output length drawn from geometric distributions with means ``mean_prompt`` and
    ``mean_output`` (illustrative values, not a published workload), cut so that prompt +
    output <= ``max_len``; each running request decodes one token per step."""
    requests: int = checked(48, integer, low=1)
    max_len: int = checked(2048, integer, low=2)
    mean_prompt: float = checked(200.0, positive)
    mean_output: float = checked(300.0, positive)
    arrivals: float = checked(0.25, positive)
    seed: int = checked(0, integer, low=0)

    def __post_init__(self):
        check_fields(self)


def request_events(stream: RequestStream) -> list[tuple[int, int]]:
    """The events of ``stream`` (see the module docstring), seeded."""
    if not isinstance(stream, RequestStream):
        raise TypeError(f"stream must be a RequestStream, got {type(stream).__name__}")
    rng = np.random.default_rng(stream.seed)
    m = stream.max_len
    prompts = np.minimum(rng.geometric(1 / stream.mean_prompt, stream.requests), m - 1)
    outputs = rng.geometric(1 / stream.mean_output, stream.requests)
    outputs = np.maximum(1, np.minimum(outputs, m - prompts))
    gaps = rng.poisson(1 / stream.arrivals, stream.requests)
    arrive = np.cumsum(gaps) - gaps[0]
    events, running, nxt, step = [], {}, 0, 0
    while nxt < stream.requests or running:
        while nxt < stream.requests and arrive[nxt] <= step:
            events.append((nxt, int(prompts[nxt])))
            running[nxt] = int(outputs[nxt])
            nxt += 1
        for r in list(running):
            events.append((r, 1))
            running[r] -= 1
            if running[r] == 0:
                events.append((r, 0))
                del running[r]
        step += 1
    return events


@dataclass(frozen=True)
class KVResult:
    """Token slots after each event: stored, reserved by paging and by contiguous
    reservation; what the paged pool had to provide."""
    block_tokens: int
    max_len: int
    tokens: np.ndarray
    paged: np.ndarray              # blocks in use · B
    contiguous: np.ndarray         # running requests · max_len
    pool_blocks: int

    @property
    def paged_waste(self) -> float:
        """Share of the paged reservation holding no token, averaged over the stream."""
        return float(1 - self.tokens.sum() / self.paged.sum())

    @property
    def contiguous_waste(self) -> float:
        return float(1 - self.tokens.sum() / self.contiguous.sum())

    @property
    def peak(self) -> tuple[int, int, int]:
        """Peak token slots: (stored, paged, contiguous)."""
        return int(self.tokens.max()), int(self.paged.max()), int(self.contiguous.max())


def simulate(stream: RequestStream, block_tokens: int = 16,
             usage: Callable | None = None) -> KVResult:
    """Serve ``stream`` with a paged cache of ``block_tokens``-token blocks and with
    contiguous reservation; ``usage(events, block_tokens, max_len)`` (a learner's block
    manager, of :func:`kv_usage`'s signature) replaces labkit's."""
    block_tokens = integer("block_tokens", block_tokens, low=1)
    events = request_events(stream)
    steps = (kv_usage if usage is None else usage)(events, block_tokens, stream.max_len)
    if len(steps) != len(events):
        raise ValueError(f"usage returned {len(steps)} steps for {len(events)} events")
    arr = np.asarray(steps, dtype=np.int64).reshape(len(events), 4)
    tokens = arr[:, 0] * block_tokens - arr[:, 2]
    return KVResult(block_tokens, stream.max_len, tokens, arr[:, 0] * block_tokens,
                    tokens + arr[:, 3], int(arr[:, 1].max(initial=0)))


def paged_bound(lengths, block_tokens: int) -> int:
    """Slots paging wastes on requests of ``lengths`` tokens: Σ ⌈t/B⌉·B − t, each < B."""
    b = integer("block_tokens", block_tokens, low=1)
    return sum(ceil_div(int(t), b) * b - int(t) for t in lengths)
