"""A small transformer decoder in numpy: the model of chapter 03's KV-cache lab.

The model is a pre-norm decoder in the shape of Llama (Touvron et al. 2023, §2.2:
RMSNorm before each block, rotary embeddings), with a ReLU MLP in place of SwiGLU: token
embedding; per layer RMSNorm → attention with rotary position embeddings (RoPE; Su et al.,
"RoFormer", 2021, §3.4) and grouped-query attention (GQA; Ainslie et al., EMNLP 2023, §2:
``n_heads`` query heads share ``n_kv_heads`` key/value heads) → residual, RMSNorm → MLP →
residual; a final RMSNorm and the unembedding. Weights are drawn from ``config.seed``.

labkit supplies the model (:class:`Decoder`: ``embed``, ``project``, ``output``, ``mlp``,
``logits``, each matrix product counted in :attr:`Decoder.work`), the rotary positions
(:func:`rope`, the reference of exercise 3.8) and the full recomputation :func:`forward`.
The KV cache and cached decoding are :mod:`labkit.training.kv_cache`; running an answer on
plain data, :mod:`labkit.training.decoder_traces`; measuring one (cache bytes, work, time
per token), :mod:`labkit.training.decoder_measure`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from labkit.validate import check_fields, checked, integer, number, one_of

DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class DecoderConfig:
    """The decoder's shape. ``head_dim = d_model // n_heads`` (even: RoPE rotates pairs)."""
    vocab: int = checked(96, integer, low=2, high=65536)
    d_model: int = checked(64, integer, low=2, high=4096)
    n_layers: int = checked(2, integer, low=1, high=64)
    n_heads: int = checked(4, integer, low=1, high=256)
    n_kv_heads: int = checked(2, integer, low=1, high=256)
    ffn: int = checked(128, integer, low=1, high=65536)
    rope_base: float = checked(10000.0, number, low=1, low_open=True)
    seed: int = checked(0, integer, low=0)
    dtype: str = checked("float64", one_of, options=DTYPES)

    def __post_init__(self):
        check_fields(self)                  # 7.0 -> 7: the int fields are ints after
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must be n_heads={self.n_heads} times an "
                             f"even head_dim")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads


@dataclass
class Work:
    """What the model's matrix products did: calls, token rows through them, FLOPs."""
    linear_calls: int = 0
    linear_rows: int = 0
    linear_flops: int = 0


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray     # (d_model,)
    wq: np.ndarray            # (d_model, n_heads · head_dim)
    wk: np.ndarray            # (d_model, n_kv_heads · head_dim)
    wv: np.ndarray            # (d_model, n_kv_heads · head_dim)
    wo: np.ndarray            # (n_heads · head_dim, d_model)
    mlp_norm: np.ndarray      # (d_model,)
    w_up: np.ndarray          # (d_model, ffn)
    w_down: np.ndarray        # (ffn, d_model)


@dataclass
class Decoder:
    """The weights and the work meter. Its methods are the parts of a layer that are not
    the lab's: each takes and returns arrays whose first axis is the tokens."""
    config: DecoderConfig
    embedding: np.ndarray         # (vocab, d_model)
    layers: tuple
    final_norm: np.ndarray        # (d_model,)
    unembedding: np.ndarray       # (d_model, vocab)
    work: Work = field(default_factory=Work)

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        rows = int(np.prod(x.shape[:-1]))
        self.work.linear_calls += 1
        self.work.linear_rows += rows
        self.work.linear_flops += 2 * rows * w.shape[0] * w.shape[1]
        return x @ w

    def _layer(self, layer) -> LayerWeights:
        layer = integer("layer", layer, low=0, high=self.config.n_layers - 1)
        return self.layers[layer]

    def embed(self, tokens) -> np.ndarray:
        """(n,) token ids -> (n, d_model) embeddings."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.size == 0 or tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens must be a non-empty 1-D sequence of token ids, got "
                             f"{tokens!r}")
        if tokens.min() < 0 or tokens.max() >= self.config.vocab:
            raise ValueError(f"tokens must be in [0, {self.config.vocab}), got {tokens!r}")
        return self.embedding[tokens]

    def project(self, layer: int, h: np.ndarray):
        """RMSNorm, then the query, key and value projections of ``h`` (n, d_model):
        ``(q, k, v)`` of shapes (n, n_heads·head_dim), (n, n_kv_heads·head_dim) ×2."""
        w = self._layer(layer)
        x = rms_norm(h, w.attn_norm)
        return self._matmul(x, w.wq), self._matmul(x, w.wk), self._matmul(x, w.wv)

    def output(self, layer: int, o: np.ndarray) -> np.ndarray:
        """The output projection of the heads' outputs ``o`` (n, n_heads·head_dim) -> (n,
        d_model): what the attention adds to the residual stream."""
        return self._matmul(o, self._layer(layer).wo)

    def mlp(self, layer: int, h: np.ndarray) -> np.ndarray:
        """RMSNorm, then the MLP (ReLU) of ``h`` (n, d_model): what it adds to the residual."""
        w = self._layer(layer)
        return self._matmul(np.maximum(self._matmul(rms_norm(h, w.mlp_norm), w.w_up), 0),
                            w.w_down)

    def logits(self, h: np.ndarray) -> np.ndarray:
        """Final RMSNorm and unembedding: (n, d_model) -> (n, vocab)."""
        return self._matmul(rms_norm(h, self.final_norm), self.unembedding)


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) · gain over the last axis (Zhang & Sennrich 2019, eq. 4)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def init_decoder(config: DecoderConfig | None = None) -> Decoder:
    """A decoder with weights drawn from ``config.seed`` (normal, scaled by 1/√fan-in;
    norm gains near 1), in ``config.dtype``."""
    config = DecoderConfig() if config is None else config
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
    rng = np.random.default_rng(config.seed)
    dt = np.dtype(config.dtype)
    d, hd, f = config.d_model, config.head_dim, config.ffn

    def w(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(rows)).astype(dt)

    def gain():
        return (1 + 0.1 * rng.standard_normal(d)).astype(dt)

    layers = tuple(LayerWeights(gain(), w(d, config.n_heads * hd, 2.0),
                                w(d, config.n_kv_heads * hd, 2.0), w(d, config.n_kv_heads * hd),
                                w(config.n_heads * hd, d), gain(), w(d, f), w(f, d))
                   for _ in range(config.n_layers))
    return Decoder(config, rng.standard_normal((config.vocab, d)).astype(dt), layers, gain(),
                   w(d, config.vocab, 2.0))


def rope(x: np.ndarray, positions, base: float = 10000.0) -> np.ndarray:
    """Rotary position embedding of ``x`` (heads, n, head_dim) at ``positions`` (n,).

    Pairs (x_i, x_{i+d/2}) rotate by the angle p·θ_i, θ_i = base^(−2i/d) (Su et al. 2021,
    §3.4.2, in the half-split layout of Hugging Face's ``apply_rotary_pos_emb``): the
    score q·k of two rotated vectors depends on their positions only through the offset.
    """
    x = np.asarray(x)
    positions = np.asarray(positions)
    if x.ndim != 3 or x.shape[-1] % 2:
        raise ValueError(f"x must have shape (heads, n, even head_dim), got {x.shape}")
    if positions.shape != (x.shape[1],):
        raise ValueError(f"positions must have shape ({x.shape[1]},), one per token, got "
                         f"{positions.shape}")
    half = x.shape[-1] // 2
    theta = base ** (-np.arange(half) / half)
    angle = positions[:, None] * theta[None, :]
    cos, sin = np.cos(angle).astype(x.dtype), np.sin(angle).astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(n, heads·head_dim) -> (heads, n, head_dim)."""
    n = x.shape[0]
    return x.reshape(n, n_heads, -1).transpose(1, 0, 2)


def _causal_attention(q, k, v, group):
    """Dense causal attention of ``T`` queries over the same ``T`` positions (what
    :func:`forward` computes): q (n_heads, T, d), k and v (n_kv_heads, T, d)."""
    T, d = q.shape[1], q.shape[2]
    kk, vv = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    s = np.einsum("htd,hsd->hts", q, kk) / math.sqrt(d)
    s = s + np.triu(np.full((T, T), -np.inf), 1)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("hts,hsd->htd", p / p.sum(axis=-1, keepdims=True), vv)


def forward(model: Decoder, tokens) -> np.ndarray:
    """Full recomputation: the logits (T, vocab) of every position of ``tokens``, with no
    cache (every layer projects all T tokens and attends T queries over them)."""
    cfg = model.config
    h = model.embed(tokens)
    pos = np.arange(h.shape[0])
    for layer in range(cfg.n_layers):
        q, k, v = model.project(layer, h)
        q = rope(_heads(q, cfg.n_heads), pos, cfg.rope_base)
        k = rope(_heads(k, cfg.n_kv_heads), pos, cfg.rope_base)
        o = _causal_attention(q, k, _heads(v, cfg.n_kv_heads), cfg.group)
        h = h + model.output(layer, o.transpose(1, 0, 2).reshape(h.shape[0], -1))
        h = h + model.mlp(layer, h)
    return model.logits(h)
