"""The KV cache of :mod:`labkit.training.decoder`'s model and decoding with it: labkit's
references of chapter 03's exercises 3.7 and 3.9–3.12.

Generating text one token at a time, a decoder recomputes nothing it has seen: each layer's
keys and values of earlier tokens are kept in a **KV cache** and every new token attends
over it (Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023, size and
shard this cache). The learner writes the cache (:class:`KVCache`), the rotary
positions (:func:`~labkit.training.decoder.rope`), the attention over the cache
(:func:`attend`), the decoding step (:func:`decode_step`) and greedy decoding
(:func:`greedy_decode`). labkit's versions of those five are the references of exercises
3.7–3.11, and :func:`attention_flops` of 3.12; :func:`recompute_greedy` is the baseline
without a cache.

Work per generated token, with ``L`` tokens of context: with a cache each layer projects one
token and attends one query over ``L`` keys (``4 · n_heads · head_dim · L`` FLOPs of
attention); recomputing projects all ``L`` tokens and attends ``L`` queries over them
(``4 · n_heads · head_dim · L²``). Summed over a generation of ``L`` tokens that is
quadratic against cubic in ``L`` (:func:`attention_flops`).
"""
from __future__ import annotations

import math

import numpy as np

from labkit.training.decoder import Decoder, _heads, forward, rope
from labkit.validate import integer


class KVCache:
    """Keys and values of every token so far, per layer: arrays (n_kv_heads, tokens,
    head_dim) in ``dtype``. ``append`` adds a step's new tokens to one layer and returns
    that layer's whole cache; ``length`` is the number of tokens cached (their positions are
    0 … length−1); ``nbytes`` the bytes the cached keys and values hold:
    2 · n_kv_heads · head_dim · itemsize per token per layer (exercise 3.6's formula)."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, dtype="float64"):
        shape = (integer("n_kv_heads", n_kv_heads, low=1), 0, integer("head_dim", head_dim,
                                                                      low=1))
        n_layers = integer("n_layers", n_layers, low=1)
        self.keys = [np.empty(shape, dtype) for _ in range(n_layers)]
        self.values = [np.empty(shape, dtype) for _ in range(n_layers)]

    def append(self, layer: int, k: np.ndarray, v: np.ndarray):
        want = (self.keys[0].shape[0], self.keys[0].shape[2])
        if np.shape(k) != np.shape(v) or np.ndim(k) != 3 or (k.shape[0], k.shape[2]) != want:
            raise ValueError(f"k and v must both have shape ({want[0]}, new tokens, {want[1]}), "
                             f"got {np.shape(k)} and {np.shape(v)}")
        self.keys[layer] = np.concatenate((self.keys[layer], k), axis=1)
        self.values[layer] = np.concatenate((self.values[layer], v), axis=1)
        return self.keys[layer], self.values[layer]

    @property
    def length(self) -> int:
        return self.keys[0].shape[1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys + self.values)


def attend(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Attention of the ``n`` newest positions over all ``T`` cached ones.

    q (n_heads, n, d) holds the queries of positions T−n … T−1; K, V (n_kv_heads, T, d) the
    keys and values of positions 0 … T−1. Query head h reads key/value head h // (n_heads /
    n_kv_heads) (GQA; Hugging Face's ``repeat_kv``). Query i sees the keys at positions
    ≤ T−n+i (causal), softmax(q·kᵀ/√d) weights the values (Vaswani et al. 2017, eq. 1).
    Returns (n_heads, n, d).
    """
    n_heads, n, d = q.shape
    T = K.shape[1]
    if n > T or n_heads % K.shape[0]:
        raise ValueError(f"q must hold at most T={T} queries and a multiple of the "
                         f"{K.shape[0]} key/value heads; got q {q.shape}, K {K.shape}")
    group = n_heads // K.shape[0]
    qg = q.reshape(K.shape[0], group * n, d)                  # heads of a group side by side
    s = (qg @ K.transpose(0, 2, 1)).reshape(n_heads, n, T) / math.sqrt(d)
    s = np.where(np.arange(T)[None, :] <= np.arange(T - n, T)[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return (p.reshape(K.shape[0], group * n, T) @ V).reshape(n_heads, n, d)


def decode_step(model: Decoder, cache, tokens) -> np.ndarray:
    """Run ``tokens`` (the next n tokens, at positions cache.length …) through the model,
    appending their keys and values to ``cache``; return their logits (n, vocab)."""
    cfg = model.config
    h = model.embed(tokens)
    pos = cache.length + np.arange(h.shape[0])
    for layer in range(cfg.n_layers):
        q, k, v = model.project(layer, h)
        keys, values = cache.append(layer, rope(_heads(k, cfg.n_kv_heads), pos, cfg.rope_base),
                                    _heads(v, cfg.n_kv_heads))
        o = attend(rope(_heads(q, cfg.n_heads), pos, cfg.rope_base), keys, values)
        h = h + model.output(layer, o.transpose(1, 0, 2).reshape(h.shape[0], -1))
        h = h + model.mlp(layer, h)
    return model.logits(h)


def new_cache(model: Decoder) -> KVCache:
    """An empty :class:`KVCache` shaped for ``model``."""
    cfg = model.config
    return KVCache(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype)


def greedy_decode(model: Decoder, prompt, steps: int) -> list[int]:
    """``steps`` new tokens, each the argmax of the logits after the one before: the prompt
    goes through :func:`decode_step` once (prefill), then each new token alone."""
    steps = integer("steps", steps, low=0)
    cache = new_cache(model)
    out: list[int] = []
    logits = decode_step(model, cache, prompt)
    while len(out) < steps:
        out.append(int(np.argmax(logits[-1])))
        if len(out) < steps:
            logits = decode_step(model, cache, [out[-1]])
    return out


def recompute_greedy(model: Decoder, prompt, steps: int) -> list[int]:
    """Greedy decoding without a cache: :func:`forward` over the whole sequence at every
    step (the baseline the cache removes)."""
    tokens = [int(t) for t in prompt]
    for _ in range(steps):
        tokens.append(int(np.argmax(forward(model, tokens)[-1])))
    return tokens[len(prompt):]


def attention_flops(length: int, n_layers: int, n_heads: int, head_dim: int,
                    cached: bool) -> int:
    """FLOPs of attention's two products (q·Kᵀ and p·V, 2 per multiply-add, the whole
    n × T score matrix as :func:`attend` computes it) to generate a sequence of ``length``
    tokens one at a time. Step t (t = 1 … length) with a cache: one query over t keys,
    4·n_heads·head_dim·t per layer; without: t queries over t keys, 4·n_heads·head_dim·t².
    Summed: 2·H·d·L(L+1) (quadratic) against (2/3)·H·d·L(L+1)(2L+1) (cubic), × layers."""
    L = integer("length", length, low=1)
    per = 4 * integer("n_layers", n_layers, low=1) * integer("n_heads", n_heads, low=1) \
        * integer("head_dim", head_dim, low=1)
    if not isinstance(cached, (bool, np.bool_)):
        raise TypeError(f"cached must be True or False, got {cached!r}")
    return per * (L * (L + 1) // 2 if cached else L * (L + 1) * (2 * L + 1) // 6)
