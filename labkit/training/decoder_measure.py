"""Measuring a learner's KV cache and decoder (chapter 03's notebook): the cache's bytes
after each token against exercise 3.6's formula (:func:`cache_growth`), cached steps against
full recomputation (:func:`incremental_vs_full`), the token rows a generation pushes through
the model (:func:`format_generation_work`), attention FLOPs with and without the cache
(:func:`format_attention_totals`), and the time of one new token after ``L`` tokens of
context against recomputation (:func:`decode_timing`), beside its attention FLOPs:
``4 · n_heads · head_dim · L`` with the cache, ``4 · n_heads · head_dim · L²`` recomputing
(:func:`~labkit.training.kv_cache.attention_flops`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.timing import benchmark, threads
from labkit.training.decoder import DecoderConfig, forward, init_decoder
from labkit.training.decoder_traces import config_dict, generation_trace
from labkit.training.kv_cache import KVCache, decode_step, recompute_greedy
from labkit.validate import integer


def cache_growth(cache_cls, config: DecoderConfig | None = None, tokens: int = 4,
                 seed: int = 0) -> tuple[int, ...]:
    """``cache_cls(...).nbytes`` after each of ``tokens`` single-token appends to every layer
    (random keys and values shaped for ``config``)."""
    cfg = DecoderConfig() if config is None else config
    tokens = integer("tokens", tokens, low=1, high=4096)
    rng = np.random.default_rng(seed)
    cache = cache_cls(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype)
    out = []
    for _ in range(tokens):
        for layer in range(cfg.n_layers):
            k, v = rng.standard_normal((2, cfg.n_kv_heads, 1, cfg.head_dim)).astype(cfg.dtype)
            cache.append(layer, k, v)
        out.append(int(cache.nbytes))
    return tuple(out)


def format_cache_growth(nbytes, rule, config: DecoderConfig | None = None) -> str:
    """The cache's bytes after each token, its growth per token, and what
    ``rule(n_heads, n_kv_heads, head_dim, dtype_bytes)`` (exercise 3.6's formula) × layers
    predicts."""
    cfg = DecoderConfig() if config is None else config
    nbytes = [int(b) for b in nbytes]
    growth = sorted({b - a for a, b in zip([0] + nbytes[:-1], nbytes)})
    want = int(rule(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, np.dtype(cfg.dtype).itemsize)) \
        * cfg.n_layers
    return (f"cache bytes after each token: {nbytes}; growth per token: "
            f"{', '.join(map(str, growth))} bytes\n3.6's formula x {cfg.n_layers} layers "
            f"predicts {want} bytes per token ({cfg.dtype}: "
            f"{np.dtype(cfg.dtype).itemsize} bytes a value)")


def incremental_vs_full(step_fn, cache_cls, config: DecoderConfig | None = None,
                        chunks=(5, 1, 1, 3, 1), seed: int = 0) -> float:
    """Largest |logit| difference between ``step_fn`` fed chunks of ``chunks`` tokens on one
    ``cache_cls`` cache and :func:`forward` over the whole sequence at once."""
    cfg = DecoderConfig() if config is None else config
    chunks = [integer("chunks", c, low=1, high=4096) for c in chunks]
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab, sum(chunks))
    model = init_decoder(cfg)
    cache = cache_cls(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype)
    ends = np.cumsum(chunks)
    got = np.concatenate([np.asarray(step_fn(model, cache, tokens[e - c:e]))
                          for c, e in zip(chunks, ends)])
    return float(np.max(np.abs(got - forward(init_decoder(cfg), tokens))))


def format_generation_work(greedy_fn, config: DecoderConfig | None = None, prompt_len: int = 8,
                           steps: int = 24, seed: int = 0) -> str:
    """``greedy_fn`` and :func:`recompute_greedy` on one prompt: their tokens, whether they
    agree, and the token rows each pushed through the model's matrix products."""
    cfg = DecoderConfig() if config is None else config
    prompt = [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab, prompt_len)]
    yours = generation_trace(greedy_fn, config_dict(cfg), prompt, steps)
    full = generation_trace(recompute_greedy, config_dict(cfg), prompt, steps)
    same = "the same tokens" if yours["tokens"] == full["tokens"] else "DIFFERENT tokens"
    return (f"prompt {prompt}\nyour decoder:  {yours['tokens']}\nrecomputation: "
            f"{full['tokens']} ({same})\ntoken rows through the model's products: yours "
            f"{yours['rows']:,}, recomputation {full['rows']:,} "
            f"(x{full['rows'] / max(1, yours['rows']):.1f})")


def format_attention_totals(rule, lengths=(128, 512, 2048), config: DecoderConfig | None = None
                            ) -> str:
    """``rule(length, n_layers, n_heads, head_dim, cached)`` (exercise 3.12) for ``config``'s
    shape, with and without the cache, at each length, and their ratio."""
    cfg = DecoderConfig() if config is None else config
    lines = []
    for L in lengths:
        c = int(rule(L, cfg.n_layers, cfg.n_heads, cfg.head_dim, True))
        r = int(rule(L, cfg.n_layers, cfg.n_heads, cfg.head_dim, False))
        lines.append(f"{L:>5} tokens: attention FLOPs with the cache {c:.3e}, recomputing "
                     f"{r:.3e} (x{r / c:.0f})")
    return "\n".join(lines)


# ---- time per token ------------------------------------------------------------------------

class _CountingCache:
    """Wraps a cache and counts the attention work its ``append`` results imply:
    4 · n_heads · head_dim · (new tokens) · (cached tokens) per layer call."""

    def __init__(self, cache, config: DecoderConfig):
        self.cache, self.config, self.flops = cache, config, 0

    @property
    def length(self):
        return self.cache.length

    @property
    def nbytes(self):
        return self.cache.nbytes

    def append(self, layer, k, v):
        K, V = self.cache.append(layer, k, v)
        self.flops += 4 * self.config.n_heads * self.config.head_dim * k.shape[1] * K.shape[1]
        return K, V


@dataclass(frozen=True)
class DecodeTiming:
    lengths: tuple[int, ...]           # tokens of context before the new token
    cached_s: tuple[float, ...]        # median seconds per new token, with the cache
    recompute_s: tuple[float, ...]     # median seconds per new token, recomputing all
    cached_flops: tuple[int, ...]      # attention FLOPs of that token, with the cache
    recompute_flops: tuple[int, ...]   # ... recomputing
    cache_bytes: tuple[int, ...]       # the cache's nbytes at each length
    config: DecoderConfig

    @property
    def speedups(self) -> tuple[float, ...]:
        """Recompute time over cached time, per length."""
        return tuple(r / c for r, c in zip(self.recompute_s, self.cached_s))


def decode_timing(step_fn=None, cache_cls=None, config: DecoderConfig | None = None,
                  lengths=(16, 32, 64, 128, 256, 512), repeats: int = 5,
                  seed: int = 0) -> DecodeTiming:
    """Median time of one new token after ``L`` tokens of context, for each ``L``: with the
    cache (``step_fn`` on one token, the cache prefilled with L tokens) and recomputing
    (``step_fn`` on all L+1 tokens with an empty cache). ``step_fn(model, cache, tokens)``
    and ``cache_cls(n_layers, n_kv_heads, head_dim, dtype)`` default to labkit's
    :func:`decode_step` and :class:`KVCache` (pass the learner's)."""
    step_fn = decode_step if step_fn is None else step_fn
    cache_cls = KVCache if cache_cls is None else cache_cls
    if not callable(step_fn) or not callable(cache_cls):
        raise TypeError("step_fn and cache_cls must be callable")
    cfg = DecoderConfig() if config is None else config
    lengths = tuple(integer("lengths", L, low=1, high=4096) for L in lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one context length")
    repeats = integer("repeats", repeats, low=1, high=100)
    model = init_decoder(cfg)
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab, max(lengths) + 1)

    def empty():
        return _CountingCache(cache_cls(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype),
                              cfg)

    rows = {k: [] for k in ("c", "r", "cf", "rf", "b")}
    with threads(1):
        for L in lengths:
            _time_one(step_fn, model, empty, tokens, L, repeats, rows)
    return DecodeTiming(lengths, tuple(rows["c"]), tuple(rows["r"]), tuple(rows["cf"]),
                        tuple(rows["rf"]), tuple(rows["b"]), cfg)


def _time_one(step_fn, model, empty, tokens, L: int, repeats: int, rows: dict) -> None:
    """One context length of :func:`decode_timing`: append its row to each list of ``rows``."""
    cache = empty()
    step_fn(model, cache, tokens[:L])                      # prefill L tokens
    rows["b"].append(int(cache.nbytes))
    before = cache.flops
    step_fn(model, cache, tokens[L:L + 1])
    rows["cf"].append(cache.flops - before)
    rows["c"].append(benchmark(lambda: step_fn(model, cache, tokens[L:L + 1]),
                               repeats=repeats, warmup=0).median)
    fresh = empty()
    step_fn(model, fresh, tokens[:L + 1])
    rows["rf"].append(fresh.flops)
    rows["r"].append(benchmark(lambda: step_fn(model, empty(), tokens[:L + 1]),
                               repeats=repeats, warmup=0).median)


def format_decode_timing(result: DecodeTiming) -> str:
    """One line per context length: time per token with and without the cache, the ratio,
    the attention FLOPs of that token and the cache's size."""
    return "\n".join(
        f"context {L:>4}: cached {1e3 * c:7.3f} ms, recompute {1e3 * r:7.3f} ms (x{r / c:5.1f}); "
        f"attention FLOPs {cf:>10,} vs {rf:>12,}; cache {b / 1024:7.1f} KiB"
        for L, c, r, cf, rf, b in zip(result.lengths, result.cached_s, result.recompute_s,
                                      result.cached_flops, result.recompute_flops,
                                      result.cache_bytes))
