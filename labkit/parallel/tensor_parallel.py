"""Tensor parallelism in numpy: Megatron's column/row-parallel layers, MLP and attention,
and sequence parallelism — sharded results equal the dense layer, and every byte that
moves between ranks goes through labkit's step-by-step collectives.

Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism" (2019), §3:

* MLP Y = GeLU(X A) B: split A by **columns** (A = [A_1 … A_t]) so each rank applies GeLU to
  its own X A_i with no communication; split B by **rows** so rank i computes
  GeLU(X A_i) B_i, a partial sum; one all-reduce (operator *g*) gives Y. In backward the
  column-parallel input gradient is a partial sum too: one all-reduce (operator *f*).
* Self-attention: Q, K, V column-parallel **by heads** (each rank owns a/t heads), output
  projection row-parallel: again one all-reduce forward, one backward.
* So a transformer layer costs two all-reduces of the b·s·h activation in forward and two
  in backward. A ring all-reduce sends 2(t-1)/t of the tensor per rank.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
§4.2.2: with **sequence parallelism** the layer-norm/dropout regions are split along the
sequence; *g* becomes an all-gather before the column-parallel layer and *ḡ* a
reduce-scatter after the row-parallel one — (t-1)/t each, the same bytes as one all-reduce.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.parallel.collectives import all_gather, all_reduce, reduce_scatter


def gelu(x: np.ndarray) -> np.ndarray:
    """tanh approximation of GeLU (Hendrycks and Gimpel 2016), as GPT-2 uses."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    c = np.sqrt(2 / np.pi)
    u = c * (x + 0.044715 * x ** 3)
    th = np.tanh(u)
    return 0.5 * (1 + th) + 0.5 * x * (1 - th ** 2) * c * (1 + 3 * 0.044715 * x ** 2)


@dataclass(frozen=True)
class Comm:
    """One collective of a tensor-parallel layer: which, where, and bytes sent per rank."""
    op: str
    where: str
    bytes_per_rank: tuple[int, ...]


@dataclass(frozen=True)
class TPResult:
    """Output of a sharded layer and the collectives it ran."""
    output: np.ndarray
    comms: tuple[Comm, ...]
    extra: dict

    def bytes_per_rank(self, rank: int = 0) -> int:
        return sum(c.bytes_per_rank[rank] for c in self.comms)


def _sent(run) -> tuple[int, ...]:
    out = [0] * run.world
    for m in run.log:
        out[m.sender] += m.nbytes
    return tuple(out)


def _all_reduce(parts, where):
    shape = parts[0].shape
    run = all_reduce([np.ascontiguousarray(p).ravel() for p in parts], "ring")
    return run.outputs[0].reshape(shape), Comm("all_reduce", where, _sent(run))


def _check_tp(tp, **dims):
    t = V.integer("tp", tp, low=1)
    for name, d in dims.items():
        V.divides("tp", t, name, d)
    return t


def split_columns(w: np.ndarray, tp: int) -> list[np.ndarray]:
    w = V.array("w", w, dtype=None)
    return np.split(w, _check_tp(tp, columns=w.shape[-1]), axis=-1)


def split_rows(w: np.ndarray, tp: int) -> list[np.ndarray]:
    w = V.array("w", w, dtype=None)
    return np.split(w, _check_tp(tp, rows=w.shape[0]), axis=0)


def column_parallel_linear(x, w, b=None, tp: int = 2) -> TPResult:
    """Y_i = X W_i + b_i on each rank (W split by columns): no communication in forward;
    ``output`` is the concatenation [Y_1 … Y_t] (what an all-gather would build)."""
    x = V.array("x", x, ndim=2)
    w = V.array("w", w, ndim=2, shape=(x.shape[1], None))
    t = _check_tp(tp, out_features=w.shape[1])
    bs = split_columns(np.zeros(w.shape[1]) if b is None else V.array("b", b, ndim=1), t)
    ys = [x @ wi + bi for wi, bi in zip(split_columns(w, t), bs)]
    return TPResult(np.concatenate(ys, axis=1), (), {"shards": ys})


def row_parallel_linear(x, w, b=None, tp: int = 2) -> TPResult:
    """X split by columns, W by rows: partial sums X_i W_i, one all-reduce, then the bias
    once (adding it on every rank would add it t times)."""
    x = V.array("x", x, ndim=2)
    w = V.array("w", w, ndim=2, shape=(x.shape[1], None))
    t = _check_tp(tp, in_features=w.shape[0])
    parts = [xi @ wi for xi, wi in zip(split_columns(x, t), split_rows(w, t))]
    y, comm = _all_reduce(parts, "forward g (row-parallel output)")
    if b is not None:
        y = y + V.array("b", b, ndim=1)
    return TPResult(y, (comm,), {"partials": parts})


# ---- the Megatron MLP, forward and backward --------------------------------------------

def mlp_dense(x, w1, b1, w2, b2, dy=None) -> dict:
    """Dense reference Y = GeLU(X W1 + b1) W2 + b2 and, given dY, all gradients."""
    z = x @ w1 + b1
    h = gelu(z)
    y = h @ w2 + b2
    out = {"y": y}
    if dy is not None:
        dh = dy @ w2.T
        dz = dh * gelu_grad(z)
        out.update(dx=dz @ w1.T, dw1=x.T @ dz, db1=dz.sum(0), dw2=h.T @ dy, db2=dy.sum(0))
    return out


def megatron_mlp(x, w1, b1, w2, b2, tp: int = 2, dy=None) -> TPResult:
    """The Megatron MLP on ``tp`` ranks (Shoeybi et al. §3, Fig. 3a): W1 column-parallel,
    W2 row-parallel; forward all-reduce *g* of Y; with ``dy``, backward all-reduce *f* of dX.
    ``extra`` holds the gradients (dW1, dW2 reassembled from the shards)."""
    x = V.array("x", x, ndim=2)
    w1 = V.array("w1", w1, ndim=2, shape=(x.shape[1], None))
    w2 = V.array("w2", w2, ndim=2, shape=(w1.shape[1], x.shape[1]))
    b1 = V.array("b1", b1, ndim=1, shape=(w1.shape[1],))
    b2 = V.array("b2", b2, ndim=1, shape=(w2.shape[1],))
    t = _check_tp(tp, ffn_hidden=w1.shape[1])
    w1s, b1s, w2s = split_columns(w1, t), split_columns(b1, t), split_rows(w2, t)
    zs = [x @ a + c for a, c in zip(w1s, b1s)]            # f: identity in forward
    hs = [gelu(z) for z in zs]
    y, g = _all_reduce([h @ b for h, b in zip(hs, w2s)], "forward g (after W2)")
    y = y + b2
    comms, extra = [g], {}
    if dy is not None:
        dy = V.array("dy", dy, shape=y.shape)             # g backward: identity
        dzs = [(dy @ b.T) * gelu_grad(z) for b, z in zip(w2s, zs)]
        dx, f = _all_reduce([dz @ a.T for dz, a in zip(dzs, w1s)], "backward f (dX)")
        comms.append(f)
        extra = dict(dx=dx, dw1=np.concatenate([x.T @ dz for dz in dzs], axis=1),
                     db1=np.concatenate([dz.sum(0) for dz in dzs]),
                     dw2=np.concatenate([h.T @ dy for h in hs], axis=0), db2=dy.sum(0))
    return TPResult(y, tuple(comms), extra)


# ---- self-attention split by heads -------------------------------------------------------

def _softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def _heads_attention(x, wq, wk, wv, heads, causal=True):
    """Attention of ``heads`` heads whose projections are wq, wk, wv (h × heads·d)."""
    s = x.shape[0]
    d = wq.shape[1] // heads
    q, k, v = (np.reshape(x @ w, (s, heads, d)).transpose(1, 0, 2) for w in (wq, wk, wv))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        scores = scores + np.triu(np.full((s, s), -np.inf), 1)
    ctx = _softmax(scores) @ v                              # heads × s × d
    return ctx.transpose(1, 0, 2).reshape(s, heads * d)


def attention_dense(x, wq, wk, wv, wo, heads: int, causal: bool = True) -> np.ndarray:
    """Dense multi-head self-attention of one sequence x (s × h), no biases."""
    return _heads_attention(x, wq, wk, wv, heads, causal) @ wo


def megatron_attention(x, wq, wk, wv, wo, heads: int, tp: int = 2,
                       causal: bool = True) -> TPResult:
    """Self-attention on ``tp`` ranks (Shoeybi et al. §3, Fig. 3b): rank i owns heads
    i·a/t … (i+1)·a/t - 1 (columns of Wq, Wk, Wv) and the matching rows of Wo; one
    all-reduce of the output in forward."""
    x = V.array("x", x, ndim=2)
    h = x.shape[1]
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        V.array(name, w, ndim=2, shape=(h, h))
    a = V.integer("heads", heads, low=1)
    V.divides("heads", a, "hidden", h)
    t = _check_tp(tp, heads=a)
    parts = [_heads_attention(x, q, k, v, a // t, causal) @ o for q, k, v, o in
             zip(split_columns(wq, t), split_columns(wk, t), split_columns(wv, t),
                 split_rows(np.asarray(wo, float), t))]
    y, g = _all_reduce(parts, "forward g (after Wo)")
    return TPResult(y, (g,), {})


# ---- sequence parallelism ------------------------------------------------------------------

def layer_norm(x, gamma, beta, eps: float = 1e-5):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def ln_mlp_dense(x, gamma, beta, w1, b1, w2, b2) -> np.ndarray:
    """Dense reference: Y = MLP(LayerNorm(X))."""
    return mlp_dense(layer_norm(x, gamma, beta), w1, b1, w2, b2)["y"]


def sequence_parallel_mlp(x, gamma, beta, w1, b1, w2, b2, tp: int = 2) -> TPResult:
    """LayerNorm + MLP with sequence parallelism (Korthikanti et al. 2022 §4.2.2).

    Rank i holds rows i·s/t … of X and applies the layer norm to them alone; an all-gather
    (*g*) builds the full normalised X for the column-parallel W1; the row-parallel W2's
    partial sums are reduce-scattered (*ḡ*) so rank i ends with its own s/t rows of Y.
    ``output`` is those row blocks stacked (equal to the dense Y)."""
    x = V.array("x", x, ndim=2)
    s, h = x.shape
    t = _check_tp(tp, seq=s, ffn_hidden=np.shape(w1)[1])
    xs = np.split(x, t, axis=0)
    ln = [layer_norm(xi, gamma, beta) for xi in xs]          # local: s/t rows each
    ag = all_gather([a.ravel() for a in ln], "ring")
    full = ag.outputs[0].reshape(s, h)
    w1s, b1s, w2s = split_columns(np.asarray(w1, float), t), split_columns(
        np.asarray(b1, float), t), split_rows(np.asarray(w2, float), t)
    parts = [gelu(full @ a + c) @ b for a, c, b in zip(w1s, b1s, w2s)]
    rs = reduce_scatter([p.ravel() for p in parts], "ring")
    ys = [r.reshape(s // t, -1) + b2 for r in rs.outputs]
    comms = (Comm("all_gather", "forward g (before W1)", _sent(ag)),
             Comm("reduce_scatter", "forward ḡ (after W2)", _sent(rs)))
    return TPResult(np.concatenate(ys, axis=0), comms, {"row_blocks": ys})


def ring_allreduce_bytes(nbytes: int, tp: int) -> float:
    """Paper count for one ring all-reduce: 2(t-1)/t · n bytes sent per rank."""
    tp, nbytes = _check_tp(tp), V.nonnegative("nbytes", nbytes)
    return 2 * (tp - 1) / tp * nbytes


def layer_comm_bytes(seq: int, batch: int, hidden: int, tp: int, bytes_per_element: int = 2,
                     backward: bool = True, sequence_parallel: bool = False) -> float:
    """Bytes one rank sends per transformer layer per micro-batch (Shoeybi §3: 2 all-reduces
    forward + 2 backward of the s·b·h activation; Korthikanti §4.2.2: sequence parallelism
    replaces each by all-gather + reduce-scatter, (t-1)/t + (t-1)/t = the same volume)."""
    seq, batch = V.integer("seq", seq, low=1), V.integer("batch", batch, low=1)
    hidden = V.integer("hidden", hidden, low=1)
    bytes_per_element = V.integer("bytes_per_element", bytes_per_element, low=1)
    backward = V.boolean("backward", backward)
    V.boolean("sequence_parallel", sequence_parallel)
    n = seq * batch * hidden * bytes_per_element
    ops = 4 if backward else 2
    return ops * ring_allreduce_bytes(n, tp)


@dataclass(frozen=True)
class ShardCheck:
    """One sharded layer against its dense original: ``tp`` ranks, the largest absolute
    difference (``max_error``, over the output and, for the MLP, dX, dW1 and dW2), what
    rank 0 sent per collective (``comms``: (op, bytes)) and in all (``bytes_per_gpu``), and
    the paper's count (``formula_bytes``: ring all-reduces of 2(t-1)/t of the activation)."""
    layer: str
    tp: int
    max_error: float
    comms: tuple
    bytes_per_gpu: int
    formula_bytes: float


@dataclass(frozen=True)
class MegatronDemo:
    """Random small layers checked at several t (see :func:`megatron_demo`)."""
    seq: int
    hidden: int
    ffn: int
    activation_bytes: int          # one float64 s × h activation
    mlp: tuple
    attention: ShardCheck
    sequence_parallel: tuple


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def megatron_demo(tps=(1, 2, 4, 8), sp_tps=(2, 4, 8), *, seq: int = 8, hidden: int = 16,
                  ffn: int = 64, heads: int = 4, attention_tp: int = 4,
                  seed: int = 0) -> MegatronDemo:
    """Megatron's MLP (forward and backward) at each t in ``tps``, its attention at
    ``attention_tp``, and the sequence-parallel LayerNorm + MLP at each t in ``sp_tps``, on
    float64 layers drawn from ``seed``; each against the dense layer and the paper's byte
    count (Shoeybi et al. 2019 §3: 2 all-reduces per MLP, forward + backward; Korthikanti et
    al. 2022 §4.2.2: all-gather + reduce-scatter = one all-reduce's bytes)."""
    seq, hidden, ffn, heads = (V.integer(k, v, low=1) for k, v in
                               (("seq", seq), ("hidden", hidden), ("ffn", ffn), ("heads", heads)))
    rng = np.random.default_rng(V.integer("seed", seed, low=0))
    x = rng.normal(size=(seq, hidden))
    w1, b1 = rng.normal(size=(hidden, ffn)) / 4, rng.normal(size=ffn)
    w2, b2 = rng.normal(size=(ffn, hidden)) / 8, rng.normal(size=hidden)
    dy = rng.normal(size=(seq, hidden))
    act = seq * hidden * 8
    ref = mlp_dense(x, w1, b1, w2, b2, dy)
    mlp = []
    for t in tps:
        got = megatron_mlp(x, w1, b1, w2, b2, t, dy)
        err = max(_max_diff(got.output, ref["y"]),
                  *(_max_diff(got.extra[k], ref[k]) for k in ("dx", "dw1", "dw2")))
        mlp.append(ShardCheck("mlp", t, err, tuple((c.op, c.bytes_per_rank[0]) for c in got.comms),
                              got.bytes_per_rank(0), 2 * ring_allreduce_bytes(act, t)))
    wq, wk, wv, wo = (rng.normal(size=(hidden, hidden)) / 4 for _ in range(4))
    att = megatron_attention(x, wq, wk, wv, wo, heads=heads, tp=attention_tp)
    attention = ShardCheck("attention", attention_tp,
                           _max_diff(att.output, attention_dense(x, wq, wk, wv, wo, heads)),
                           tuple((c.op, c.bytes_per_rank[0]) for c in att.comms),
                           att.bytes_per_rank(0), ring_allreduce_bytes(act, attention_tp))
    gamma, beta = rng.normal(size=hidden), rng.normal(size=hidden)
    dense = ln_mlp_dense(x, gamma, beta, w1, b1, w2, b2)
    sp = []
    for t in sp_tps:
        got = sequence_parallel_mlp(x, gamma, beta, w1, b1, w2, b2, t)
        sp.append(ShardCheck("sequence_parallel_mlp", t, _max_diff(got.output, dense),
                             tuple((c.op, c.bytes_per_rank[0]) for c in got.comms),
                             got.bytes_per_rank(0), ring_allreduce_bytes(act, t)))
    return MegatronDemo(seq, hidden, ffn, act, tuple(mlp), attention, tuple(sp))
