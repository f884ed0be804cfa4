"""Chapter 03's decoder lab on plain data: each function runs a learner's answer (a cache
class, a step function, a greedy decoder) on labkit's :mod:`~labkit.training.decoder` model
and returns plain data, what a check of :mod:`labkit.check.ch03` compares with the
reference's. :data:`CACHE_VARIANTS` are the checks' pictures of two mistakes (a cache that
forgets its length, one that hands back only the new keys and values).
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np

from labkit.training.decoder import DecoderConfig, init_decoder
from labkit.training.kv_cache import KVCache
from labkit.validate import one_of


def _config(config) -> DecoderConfig:
    if isinstance(config, DecoderConfig):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"config must be a DecoderConfig or a dict of its fields, got "
                        f"{type(config).__name__}")
    return DecoderConfig(**config)


def config_dict(config: DecoderConfig) -> dict:
    """A :class:`DecoderConfig` as plain data (what a check passes to a trace)."""
    return asdict(config)


def cache_trace(cache_cls, n_layers: int, n_kv_heads: int, head_dim: int, steps) -> list:
    """Build ``cache_cls(n_layers, n_kv_heads, head_dim, dtype)`` and feed it ``steps``: each
    a list, per layer, of ``(k, v)`` arrays (n_kv_heads, new tokens, head_dim). After each
    step: ``{"length", "nbytes", "keys", "values"}`` (the arrays ``append`` returned, per
    layer, copied)."""
    dtype = np.asarray(steps[0][0][0]).dtype.name
    cache = cache_cls(n_layers, n_kv_heads, head_dim, dtype)
    out = []
    for step in steps:
        keys, values = [], []
        for layer, (k, v) in enumerate(step):
            K, V = cache.append(layer, np.array(k), np.array(v))
            keys.append(np.array(K))
            values.append(np.array(V))
        out.append({"length": int(cache.length), "nbytes": int(cache.nbytes),
                    "keys": keys, "values": values})
    return out


def cache_rejects(cache_cls, n_layers: int, n_kv_heads: int, head_dim: int, k, v) -> str:
    """Append ``k, v`` (of a wrong shape) to a fresh ``cache_cls`` cache: the name of the
    exception it raises, or ``"nothing"``."""
    cache = cache_cls(n_layers, n_kv_heads, head_dim, np.asarray(k).dtype.name)
    try:
        cache.append(0, np.array(k), np.array(v))
    except Exception as exc:               # noqa: BLE001 - which one is the answer
        return type(exc).__name__
    return "nothing"


class _NoOffset(KVCache):
    """A cache that forgets how many tokens it holds (``length`` is always 0): a step that
    trusts it puts every chunk at positions 0, 1, … (the check's picture of that mistake)."""

    @property
    def length(self) -> int:
        return 0


class _NoHistory(KVCache):
    """A cache whose ``append`` hands back only the new keys and values (the check's picture
    of attending to the new tokens alone)."""

    def append(self, layer, k, v):
        super().append(layer, k, v)
        return k, v


CACHE_VARIANTS = {"": KVCache, "no-offset": _NoOffset, "no-history": _NoHistory}


def step_trace(step_fn, config, chunks, variant: str = "") -> dict:
    """``step_fn(model, cache, chunk)`` for each chunk of token ids in turn, on one cache
    (``variant`` picks one of :data:`CACHE_VARIANTS`): ``{"logits": [(n, vocab) per chunk],
    "lengths": [cache.length after each], "rows": [model rows per chunk]}``."""
    model = init_decoder(_config(config))
    cfg = model.config
    cache = CACHE_VARIANTS[one_of("variant", variant, tuple(CACHE_VARIANTS))](
        cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype)
    logits, lengths, rows = [], [], []
    for chunk in chunks:
        before = model.work.linear_rows
        logits.append(np.asarray(step_fn(model, cache, [int(t) for t in chunk]), np.float64))
        lengths.append(int(cache.length) if variant == "" else None)
        rows.append(model.work.linear_rows - before)
    return {"logits": logits, "lengths": lengths, "rows": rows}


def generation_trace(greedy_fn, config, prompt, steps: int) -> dict:
    """``greedy_fn(model, prompt, steps)`` on a fresh model: ``{"tokens", "rows", "calls"}``
    (token rows through the model's matrix products, and their calls)."""
    model = init_decoder(_config(config))
    tokens = greedy_fn(model, [int(t) for t in prompt], int(steps))
    return {"tokens": [int(t) for t in tokens], "rows": model.work.linear_rows,
            "calls": model.work.linear_calls}


def rows_per_token(config) -> int:
    """Token rows through the model's products for one token: per layer q, k, v, output,
    up and down (6), and the unembedding."""
    return 6 * _config(config).n_layers + 1
