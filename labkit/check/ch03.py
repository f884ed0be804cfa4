"""Checks for chapter 03: training vs inference, and the KV-cached decoder lab (3.7-3.12)."""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close, expect_equal, expect_raises
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.training import decoder as dec
from labkit.training import decoder_traces as traces
from labkit.training import kv_cache
from labkit.training.inference import best_batch_on, kv_cache_bytes_per_token_per_layer
from labkit.training.inference import torch_kv_cache_bytes
from labkit.training.modes import batchnorm_eval, inverted_dropout


# ---- 3.1 FLOPs of a matrix product in each phase -------------------------------------------

def _matmul_step_flops(batch, k, n, input_requires_grad):
    fwd = 2 * batch * k * n
    return fwd, fwd * (2 if input_requires_grad else 1)


@exercise("3.1", "forward and backward FLOPs of y = x W", reference=_matmul_step_flops,
          binds="matmul_step_flops")
def _(answer, ref, rng):
    cases = [(64, 64, 256, False), (7, 13, 5, True), (1, 3, 1, True), (32, 100, 10, False)]
    cases += [(int(rng.integers(1, 129)), int(rng.integers(1, 300)), int(rng.integers(1, 300)),
               bool(rng.integers(2))) for _ in range(4)]
    for b, k, n, need in cases:
        got, want = answer(b, k, n, need), tuple(ref(b, k, n, need))
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"matmul_step_flops({b}, {k}, {n}, {need}) returned {got!r}: return "
                        f"a pair (forward, backward).")
        got = tuple(int(v) for v in got)
        if got[0] != want[0]:
            raise Wrong(f"forward FLOPs for ({b}x{k}) @ ({k}x{n}) = {got[0]}, expected "
                        f"{want[0]}: a multiply-add counts as 2 FLOPs.")
        if got[1] != want[1]:
            hint = ("when x needs no gradient only dW = x^T dY is computed" if not need else
                    "backward computes dW = x^T dY and dX = dY W^T: two products the size "
                    "of the forward one")
            raise Wrong(f"backward FLOPs (x requires grad: {need}) = {got[1]}, expected "
                        f"{want[1]}. Hint: {hint}.")


# ---- 3.2 activation memory ----------------------------------------------------------------

def _saved_activation_bytes(batch, sizes, itemsize=4):
    return int(itemsize * batch * sum(sizes))


@exercise("3.2", "bytes an MLP saves for backward", reference=_saved_activation_bytes,
          binds="saved_activation_bytes",
          answers=("labkit.training.phases:labkit_phase_costs",))
def _(answer, ref, rng):
    cases = [(64, (64, 256, 256, 10), 4), (3, (5, 7, 2), 4), (10, (8, 3), 4),
             (17, (4, 9, 11, 6, 3), 4)]
    cases += [(int(rng.integers(1, 200)),
               tuple(int(w) for w in rng.integers(1, 300, int(rng.integers(2, 6)))),
               int(rng.choice([2, 4, 8]))) for _ in range(3)]
    for batch, sizes, item in cases:
        got, want = int(answer(batch, sizes, item)), int(ref(batch, sizes, item))
        if got == want:
            continue
        if got == want // item * 4 and item != 4:
            raise Wrong(f"saved_activation_bytes({batch}, {sizes}, itemsize={item}) = {got}, "
                        f"expected {want}: use the itemsize argument (2 for float16/bfloat16, "
                        f"8 for float64).")
        per = want // (item * batch)
        raise Wrong(f"for batch {batch}, sizes {sizes}: {got} bytes, labkit's counter sees "
                    f"{want}. Hint: per sample {per} values are saved -- the input, each ReLU "
                    f"output (the next matmul reuses it) and the log-softmax output; "
                    f"pre-activations are not saved.")


# ---- 3.3 picking a batch size under a latency budget ----------------------------------------

def _best_batch(sweep, budget_s):
    ok = [p for p in sweep.points if p.latency_s <= budget_s]
    return max(ok, key=lambda p: p.throughput).batch if ok else None


def _drawn_sweep(rng) -> list[tuple[int, float]]:
    """Batch sizes 1..1024 in a shuffled order, latencies t0 + B t1 with noise; sometimes a
    slow large batch whose throughput is below a smaller one's."""
    batches = sorted(set(int(b) for b in 2 ** rng.integers(0, 11, int(rng.integers(3, 7)))))
    t0, t1 = float(rng.uniform(5e-5, 5e-4)), float(rng.uniform(1e-7, 1e-5))
    points = [(b, t0 + b * t1 * float(rng.uniform(0.8, 1.2))) for b in batches]
    if rng.random() < 0.5:
        b, t = points[-1]
        points[-1] = (b, t * b)                   # throughput falls below the one before
    return [points[i] for i in rng.permutation(len(points))]


@exercise("3.3", "the best batch size under a latency budget", reference=_best_batch,
          binds="best_batch")
def _(answer, ref, rng):
    cases = [
        ([(1, 1e-4), (8, 2e-4), (64, 9e-4), (512, 6e-3)], 1e-3),
        ([(1, 1e-4), (8, 2e-4), (64, 9e-4), (512, 6e-3)], 1e-2),
        ([(1, 1e-4), (8, 2e-4), (64, 9e-4)], 9e-4),                  # equal counts as within
        ([(4, 3e-3), (16, 4e-3)], 1e-3),                             # nothing fits
        ([(32, 5e-4), (2, 1e-4), (128, 1.9e-3)], 2e-3),              # unsorted input
        ([(16, 1e-4), (32, 9e-4)], 1e-3),                            # slower large batch
    ]
    for _ in range(3):
        points = _drawn_sweep(rng)
        lat = sorted(t for _, t in points)
        cases.append((points, lat[int(rng.integers(len(lat)))] * float(rng.choice([1, 1.5]))))
    for points, budget in cases:
        got = answer.derive(best_batch_on, points, budget)
        want = ref.derive(best_batch_on, points, budget)
        expect_equal(got, want, f"best_batch(budget={budget:g} s) on (batch, latency) "
                                f"{[(b, float(f'{t:.3g}')) for b, t in points]}",
                     hint="among points with latency_s <= budget pick the highest throughput "
                          "(not the largest batch); return None when no point fits")


# ---- 3.4 BatchNorm in eval mode --------------------------------------------------------------

@exercise("3.4", "BatchNorm in eval mode", reference=batchnorm_eval, binds="batchnorm_eval")
def _(answer, ref, rng):
    shapes = [(5, 3), (1, 7), (64, 16), (int(rng.integers(2, 40)), int(rng.integers(1, 20)))]
    for n, c in shapes:
        x = rng.normal(size=(n, c)) * 2 + 1
        mean, var = rng.normal(size=c), rng.uniform(0.2, 3, c)
        gamma, beta = rng.normal(size=c), rng.normal(size=c)
        eps = float(rng.choice([1e-5, 1e-3, 0.1]))
        got, want = answer(x, mean, var, gamma, beta, eps), ref(x, mean, var, gamma, beta, eps)
        if n > 1 and np.shape(got) == x.shape and np.allclose(
                got, gamma * (x - x.mean(0)) / np.sqrt(x.var(0) + eps) + beta):
            raise Wrong("you normalized with the batch's statistics -- that is train mode. "
                        "Eval mode uses running_mean and running_var.")
        expect_close(got, want, f"batchnorm_eval on a ({n}, {c}) batch with eps={eps:g}",
                     hint="gamma * (x - running_mean) / sqrt(running_var + eps) + beta")


# ---- 3.5 inverted dropout ---------------------------------------------------------------------

@exercise("3.5", "inverted dropout (train mode)", reference=inverted_dropout,
          binds="dropout_train")
def _(answer, ref, rng):
    for p in (0.1, 0.5, 0.8, 0.0, float(rng.uniform(0.05, 0.95))):
        shape = (int(rng.integers(1, 8)), int(rng.integers(1, 9)))
        x = rng.normal(size=shape)
        mask = (rng.random(shape) >= p).astype(float)
        got, want = answer(x, mask, p), ref(x, mask, p)
        if np.shape(got) == x.shape and not np.allclose(x * mask, want) and np.allclose(
                got, x * mask):
            raise Wrong("survivors must be scaled by 1/(1-p) so the expected value is "
                        "unchanged and eval mode can be the identity.")
        expect_close(got, want, f"dropout_train with p={p:g}", hint="x * keep_mask / (1 - p)")
    for bad in (1.0, 1.5, -0.1):
        expect_raises(lambda: answer(np.ones(2), np.ones(2), bad), ValueError,
                      f"dropout_train(..., p={bad})", hint="p must be in [0, 1): raise ValueError")


# ---- 3.6 KV-cache sizing --------------------------------------------------------------------

def _kv_bytes_per_token_per_layer(n_heads, n_kv_heads, head_dim, dtype_bytes=2):
    """Reference 3.6: 2 · n_kv_heads · head_dim · dtype_bytes (a key and a value per KV head;
    the query heads do not count: queries are not cached)."""
    return kv_cache_bytes_per_token_per_layer(n_kv_heads, head_dim, dtype_bytes)


# (n_heads, n_kv_heads, head_dim, dtype_bytes): Llama-2-7B (MHA), Llama-2-70B (GQA, 8 KV
# heads), multi-query attention, fp32, and a small GQA shape measured in torch below
KV_CASES = [(32, 32, 128, 2), (64, 8, 128, 2), (16, 1, 64, 2), (12, 4, 64, 4), (8, 2, 16, 2)]


def _kv_cases(rng) -> list[tuple[int, int, int, int]]:
    out = list(KV_CASES)
    for _ in range(3):
        kv = int(rng.choice([1, 2, 4, 8]))
        out.append((kv * int(rng.choice([1, 2, 4, 8])), kv, int(rng.choice([32, 64, 96, 128])),
                    int(rng.choice([1, 2, 4]))))
    return out


@exercise("3.6", "KV-cache bytes per token per layer (with grouped-query attention)",
          reference=_kv_bytes_per_token_per_layer, binds="kv_bytes_per_token_per_layer",
          answers=("labkit.training.inference:kv_cache_bytes_per_token_per_layer",
                   "labkit.training.inference:kv_cache_bytes"))
def _(answer, ref, rng):
    cases = _kv_cases(rng)
    got_all = [answer(*case) for case in cases]
    want_all = [ref(*case) for case in cases]
    # judged over all cases: with bf16 (2 bytes) "no dtype_bytes" and "no 2x" look the same
    if got_all != want_all and all(g * nb == w for g, w, (_, _, _, nb)
                                   in zip(got_all, want_all, cases)):
        raise Wrong("that counts elements, not bytes: multiply by dtype_bytes (2 for bf16, "
                    "4 for fp32).")
    for (n_heads, n_kv, d, nb), got, want in zip(cases, got_all, want_all):
        if got == want:
            continue
        where = f"kv_bytes_per_token_per_layer({n_heads}, {n_kv}, {d}, {nb}) = {got!r}, expected {want}"
        if got == want // 2:
            raise Wrong(f"{where}: the cache keeps a key AND a value vector per KV head (x 2).")
        if n_kv != n_heads and got in (want * n_heads // n_kv, want * n_heads // n_kv // 2):
            raise Wrong(f"{where}: with grouped-query attention only the {n_kv} key/value heads "
                        f"are cached; the {n_heads} query heads share them (queries are not "
                        f"cached).")
        if got == want * 8:
            raise Wrong(f"{where}: dtype_bytes is already in bytes (2 for bf16), not bits.")
        if got in (want * n_heads, want * n_kv):
            raise Wrong(f"{where}: head_dim is the size of one head; do not multiply by the "
                        f"heads twice.")
        raise Wrong(f"{where}.")
    # the formula against a real cache: a tiny GQA decoder in torch, drawn shape

    n_kv = int(rng.choice([1, 2, 4]))
    n_heads, layers, steps = n_kv * int(rng.choice([1, 2, 4])), int(rng.integers(1, 4)), \
        int(rng.integers(3, 16))
    measured = torch_kv_cache_bytes(n_heads=n_heads, n_kv_heads=n_kv, head_dim=16,
                                    layers=layers, steps=steps)
    expect_equal(answer(n_heads, n_kv, 16, 2) * layers * steps, measured,
                 f"your formula x {layers} layers x {steps} tokens vs the bytes torch's "
                 f"bf16 cache holds ({n_heads} heads, {n_kv} KV heads, head_dim 16)")


# ---- 3.7 the KV cache ---------------------------------------------------------------------

def _cache_shapes(rng) -> list[tuple[int, int, int, str]]:
    """(n_layers, n_kv_heads, head_dim, dtype): fixed ones, then one drawn."""
    return [(2, 2, 8, "float32"), (3, 1, 4, "float16"), (1, 4, 6, "float64"),
            (int(rng.integers(1, 5)), int(rng.choice([1, 2, 4])), int(rng.choice([4, 8, 16])),
             str(rng.choice(["float32", "float64"])))]


def _cache_steps(rng, n_layers, n_kv, hd, dtype) -> list:
    """A prompt of 2-7 tokens, single tokens, and one chunk of 2-4: per step per layer
    (k, v) of shape (n_kv, new, hd)."""
    chunks = [int(rng.integers(2, 8)), 1, 1, int(rng.integers(2, 5)), 1]
    return [[(rng.standard_normal((n_kv, c, hd)).astype(dtype),
              rng.standard_normal((n_kv, c, hd)).astype(dtype)) for _ in range(n_layers)]
            for c in chunks]


def _cache_mistake(got, want, step, layer, n_layers, chunk) -> str:
    K, W = np.asarray(got["keys"][layer]), np.asarray(want["keys"][layer])
    if K.shape == (W.shape[0], chunk, W.shape[2]) and step:
        return ("append returned only the new keys: keep every earlier token's, and return "
                "the layer's whole cache (concatenate along the tokens axis, axis 1)")
    if K.ndim == 3 and K.shape[1] == W.shape[1] * n_layers and n_layers > 1:
        return ("all layers share one array: each layer has a cache of its own "
                "(keys[layer], values[layer])")
    if K.ndim == 3 and K.shape[0] != W.shape[0] and K.shape[1] == W.shape[1] // (step + 1):
        return "tokens go on axis 1 of (n_kv_heads, tokens, head_dim), not axis 0"
    if K.shape == W.shape and K.dtype != W.dtype:
        return (f"your cache holds {K.dtype}, the keys arrive as {W.dtype}: create the empty "
                f"arrays with the dtype argument (np.zeros and np.empty default to float64)")
    return "append adds k, v of shape (n_kv_heads, new, head_dim) after the cached tokens"


@exercise("3.7", "a KV cache: append per step, per layer, per head", reference=kv_cache.KVCache,
          binds="KVCache", answers=("labkit.training.decoder_traces:_NoOffset",
                                    "labkit.training.decoder_traces:_NoHistory"))
def _(answer, ref, rng):
    for n_layers, n_kv, hd, dtype in _cache_shapes(rng):
        steps = _cache_steps(rng, n_layers, n_kv, hd, dtype)
        got = answer.derive(traces.cache_trace, n_layers, n_kv, hd, steps)
        want = ref.derive(traces.cache_trace, n_layers, n_kv, hd, steps)
        shape = f"KVCache({n_layers}, {n_kv}, {hd}, {dtype!r})"
        for s, (g, w) in enumerate(zip(got, want)):
            chunk = steps[s][0][0].shape[1]
            for layer in range(n_layers):
                for part in ("keys", "values"):
                    a, b = np.asarray(g[part][layer]), np.asarray(w[part][layer])
                    if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
                        raise Wrong(f"{shape}: after append {s + 1} (of {chunk} token(s)), layer "
                                    f"{layer}'s {part} are {a.dtype} {a.shape}, expected {b.dtype} "
                                    f"{b.shape} holding every token so far in order. Hint: "
                                    f"{_cache_mistake(g, w, s, layer, n_layers, chunk)}.")
            expect_equal(g["length"], w["length"], f"{shape}.length after {s + 1} appends per "
                         f"layer", hint="length is the number of tokens cached (their positions "
                         "are 0 ... length-1), not the number of append calls")
            if g["nbytes"] != w["nbytes"]:
                item = np.dtype(dtype).itemsize
                per = 2 * n_kv * hd * item * n_layers
                raise Wrong(f"{shape}.nbytes = {g['nbytes']} after {w['length']} tokens, expected "
                            f"{w['nbytes']}: the cache grows by 2 · n_kv_heads · head_dim · "
                            f"itemsize per token per layer (exercise 3.6's formula), here 2 · "
                            f"{n_kv} · {hd} · {item} · {n_layers} layers = {per} bytes per "
                            f"token. "
                            f"Count the bytes of the cached tokens' keys and values (not of a "
                            f"buffer reserved ahead).")
        for bad_k, bad_v, what in [((n_kv + 1, 2, hd), (n_kv + 1, 2, hd), "n_kv_heads + 1 heads"),
                                   ((n_kv, 2, hd + 2), (n_kv, 2, hd + 2), "a longer head_dim"),
                                   ((n_kv, 2, hd), (n_kv, 3, hd), "k and v of different lengths")]:
            raised = answer.derive(traces.cache_rejects, n_layers, n_kv, hd,
                                   np.zeros(bad_k, dtype), np.zeros(bad_v, dtype))
            expect_equal(raised, "ValueError", f"{shape}.append(0, k {bad_k}, v {bad_v}) "
                         f"({what}) raised",
                         hint="a cache of the wrong shape breaks attention much later; raise "
                              "ValueError naming the shapes expected and given")


# ---- 3.8 rotary positions -------------------------------------------------------------------

# (heads, tokens, head_dim, base, first position)
ROPE_CASES = [(1, 1, 2, 10000.0, 0), (2, 5, 8, 10000.0, 0), (4, 3, 16, 10000.0, 4000),
              (3, 4, 6, 500000.0, 17)]


def _rope_mistake(ref, got, x, pos, base) -> str:
    d = x.shape[-1]

    def near(y):
        return np.shape(y) == np.shape(got) and np.allclose(got, y, rtol=1e-7, atol=1e-9)

    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    neighbours = np.empty_like(x)
    neighbours[..., perm] = ref(x[..., perm], pos, base)
    if d > 2 and near(neighbours):
        return ("the pairs are (x_i, x_{i+d/2}), the two halves of the head (Hugging Face "
                "Llama's rotate_half), not neighbours (x_2i, x_2i+1)")
    if near(ref(x, -pos, base)):
        return "that rotates the other way: (x1 cos a - x2 sin a, x2 cos a + x1 sin a)"
    if len(pos) > 1 and near(ref(x, np.arange(len(pos)), base)):
        return ("use the positions you are given (they start where the cache ends), not "
                "0 ... n-1")
    if any(near(ref(x, pos, b)) for b in (base ** 0.5, base ** 2)):
        return "θ_i = base^(-i/half) = base^(-2i/head_dim) for i = 0 ... half-1"
    return "angle a = position · θ_i, θ_i = base^(-i/half); rotate each pair by a"


@exercise("3.8", "rotary position embedding at given positions", reference=dec.rope,
          binds="rope")
def _(answer, ref, rng):
    drawn = (int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.choice([4, 8, 16, 32])),
             float(rng.choice([10000.0, 500000.0])), int(rng.integers(0, 3000)))
    for heads, n, d, base, start in [*ROPE_CASES, drawn]:
        x = rng.standard_normal((heads, n, d))
        pos = start + np.arange(n)
        if n > 2:
            pos = np.sort(rng.choice(start + np.arange(4 * n), n, replace=False))
        got, want = answer(x, pos, base), ref(x, pos, base)
        what = f"rope(x {x.shape}, positions {pos.tolist()}, base={base:g})"
        if np.shape(got) != want.shape:
            raise Wrong(f"{what} has shape {np.shape(got)}, expected {want.shape}.")
        if not np.allclose(got, want, rtol=1e-7, atol=1e-9):
            raise Wrong(f"{what} is off by up to {np.max(np.abs(got - want)):.3g}. Hint: "
                        f"{_rope_mistake(ref, np.asarray(got), x, pos, base)}.")


# ---- 3.9 attention over the cache ---------------------------------------------------------

# (n_heads, n_kv_heads, new queries n, cached tokens T, head_dim, scale of q and K)
ATTEND_CASES = [(4, 4, 1, 7, 8, 1.0), (4, 2, 1, 9, 8, 1.0), (8, 1, 1, 5, 4, 1.0),
                (4, 2, 6, 6, 8, 1.0), (4, 2, 3, 10, 8, 1.0), (6, 3, 2, 5, 4, 1.0),
                (2, 1, 4, 4, 16, 30.0)]


def _attend_cases(rng) -> list[tuple]:
    kv = int(rng.choice([1, 2, 4]))
    T = int(rng.integers(2, 24))
    return [*ATTEND_CASES, (kv * int(rng.choice([1, 2, 3])), kv, int(rng.integers(1, T + 1)), T,
                            int(rng.choice([4, 8, 16])), 1.0)]


def _attend_mistake(ref, got, q, K, V) -> str:
    n_heads, n, d = q.shape
    kv, T = K.shape[0], K.shape[1]
    if not np.all(np.isfinite(got)):
        return ("your output holds inf or NaN where the scores are large: subtract each row's "
                "maximum score before exp (softmax is unchanged by a shift)")

    def near(x):
        return np.shape(x) == np.shape(got) and np.allclose(got, x, rtol=1e-6, atol=1e-9)

    if n > 1 and near(np.concatenate([ref(q[:, i:i + 1], K, V) for i in range(n)], axis=1)):
        return ("every query sees every key: mask the future -- query i (position T-n+i) "
                "sees only the keys at positions <= T-n+i")
    if n < T and near(np.concatenate([ref(q[:, i:i + 1], K[:, :i + 1], V[:, :i + 1])
                                      for i in range(n)], axis=1)):
        return ("the n queries are the newest positions T-n ... T-1, not 0 ... n-1: query i "
                "sees the keys at positions <= T-n+i")
    if near(ref(q * np.sqrt(d), K, V)):
        return "scale the scores by 1/sqrt(head_dim) before the softmax"
    if kv not in (1, n_heads):
        tile = np.arange(n_heads) % kv
        if near(ref(q, K[tile], V[tile])):
            return (f"query head h reads key/value head h // {n_heads // kv} (consecutive "
                    f"query heads share one, as Hugging Face's repeat_kv repeats them), not "
                    f"h % {kv}")
    return "softmax(q Kᵀ / sqrt(d)) V per query head, with the causal mask"


@exercise("3.9", "attention of the newest queries over the cache (causal, grouped-query)",
          reference=kv_cache.attend, binds="attend",
          answers=("labkit.training.decoder:_causal_attention",))
def _(answer, ref, rng):
    for n_heads, kv, n, T, d, scale in _attend_cases(rng):
        q = rng.standard_normal((n_heads, n, d)) * scale
        K = rng.standard_normal((kv, T, d)) * scale
        V = rng.standard_normal((kv, T, d))
        got, want = answer(q, K, V), ref(q, K, V)
        what = (f"attend(q {q.shape}, K {K.shape}, V {V.shape})" +
                (f" with scores of size ~{scale ** 2 * np.sqrt(d):.0f}" if scale > 1 else ""))
        if np.shape(got) != want.shape:
            raise Wrong(f"{what} has shape {np.shape(got)}, expected {want.shape}: "
                        f"(n_heads, new queries, head_dim).")
        if not np.allclose(got, want, rtol=1e-6, atol=1e-9):
            err = np.nanmax(np.abs(np.asarray(got, float) - want)) if np.isfinite(got).any() \
                else float("nan")
            raise Wrong(f"{what} is off by up to {err:.3g}. Hint: "
                        f"{_attend_mistake(ref, np.asarray(got, float), q, K, V)}.")
    d = int(rng.choice([4, 8]))
    for qs, ks in [((2, 5, d), (1, 4, d)), ((3, 1, d), (2, 6, d))]:
        q, K = rng.standard_normal(qs), rng.standard_normal(ks)
        expect_raises(lambda: answer(q, K, K), ValueError, f"attend(q {qs}, K {ks}, V {ks})",
                      hint="more queries than cached tokens, or query heads that are not a "
                           "multiple of the key/value heads, is a caller's mistake: raise "
                           "ValueError naming the shapes")


# ---- 3.10 the decoding step ----------------------------------------------------------------

def _drawn_config(rng, layers=(1, 4)) -> dict:
    kv = int(rng.choice([1, 2, 4]))
    return traces.config_dict(dec.DecoderConfig(
        vocab=int(rng.integers(40, 120)), d_model=64, n_layers=int(rng.integers(*layers)),
        n_heads=4, n_kv_heads=kv, ffn=int(rng.choice([64, 128])), seed=int(rng.integers(2**31))))


LOGITS_ATOL = 1e-5


@exercise("3.10", "the decoding step: new tokens through the layers, over the cache",
          reference=kv_cache.decode_step, binds="decode_step",
          answers=("labkit.training.decoder:forward",))
def _(answer, ref, rng):
    for _ in range(2):
        cfg = _drawn_config(rng)
        vocab = cfg["vocab"]
        chunks = [[int(t) for t in rng.integers(0, vocab, int(rng.integers(2, 8)))]]
        chunks += [[int(rng.integers(vocab))], [int(rng.integers(vocab))],
                   [int(t) for t in rng.integers(0, vocab, 3)], [int(rng.integers(vocab))]]
        got = answer.derive(traces.step_trace, cfg, chunks)
        want = ref.derive(traces.step_trace, cfg, chunks)
        for i, (g, w) in enumerate(zip(got["logits"], want["logits"])):
            what = (f"decode_step on call {i + 1} ({len(chunks[i])} token(s) after "
                    f"{sum(map(len, chunks[:i]))} cached; {cfg['n_layers']} layers, "
                    f"{cfg['n_kv_heads']} KV heads)")
            if np.shape(g) != w.shape:
                raise Wrong(f"{what} returned logits of shape {np.shape(g)}, expected "
                            f"{w.shape}: one row of vocab logits per new token.")
            if np.max(np.abs(g - w)) <= LOGITS_ATOL:
                continue
            raise Wrong(f"{what}: logits off by up to {np.max(np.abs(g - w)):.3g} (full "
                        f"recomputation agrees with labkit's to 1e-12). Hint: "
                        f"{_step_mistake(ref, cfg, chunks, got, i)}.")
        expect_equal(got["lengths"], want["lengths"], "cache.length after each call",
                     hint="append each layer's keys and values once per call")


def _step_mistake(ref, cfg, chunks, got, i) -> str:
    if i == 0:
        return ("the first call (an empty cache) is already off: split q into n_heads and "
                "k, v into n_kv_heads heads ((n, heads·head_dim) -> (heads, n, head_dim)), "
                "rotate q and k (not v) with rope at their positions, merge the heads back "
                "before model.output, and add both residuals")
    for variant, hint in [
            ("no-offset", "the new tokens sit at positions cache.length, cache.length+1, ...: "
                          "read cache.length before appending and rotate q and k there -- at "
                          "positions 0, 1, ... every call looks like the start of the text"),
            ("no-history", "attend over the whole cache: append returns every cached key "
                           "and value; attending over the new k, v alone forgets the past")]:
        alt = ref.derive(traces.step_trace, cfg, chunks, variant)["logits"][i]
        if np.shape(alt) == np.shape(got["logits"][i]) and \
                np.max(np.abs(alt - got["logits"][i])) <= LOGITS_ATOL:
            return hint
    return "compare each layer with model.project / rope / attend / model.output / model.mlp"


# ---- 3.11 greedy decoding -----------------------------------------------------------------

@exercise("3.11", "greedy decoding with the cache", reference=kv_cache.greedy_decode,
          binds="greedy_decode", answers=("labkit.training.kv_cache:recompute_greedy",))
def _(answer, ref, rng):
    cfg = _drawn_config(rng, layers=(1, 3))
    per_token = traces.rows_per_token(cfg)
    for length, steps in [(int(rng.integers(1, 4)), 1), (int(rng.integers(3, 9)), 12),
                          (int(rng.integers(1, 12)), int(rng.integers(5, 20)))]:
        prompt = [int(t) for t in rng.integers(0, cfg["vocab"], length)]
        got = answer.derive(traces.generation_trace, cfg, prompt, steps)
        want = ref.derive(traces.generation_trace, cfg, prompt, steps)
        what = f"greedy_decode(model, prompt of {length} tokens, steps={steps})"
        if len(got["tokens"]) != steps:
            raise Wrong(f"{what} returned {len(got['tokens'])} tokens: return the {steps} new "
                        f"tokens only (not the prompt).")
        if got["tokens"] != want["tokens"]:
            j = next(k for k, (a, b) in enumerate(zip(got["tokens"], want["tokens"])) if a != b)
            raise Wrong(f"{what} = {got['tokens']}, full recomputation gives {want['tokens']} "
                        f"(first difference at new token {j + 1}). Hint: prefill the prompt in "
                        f"one decode_step, then feed each chosen token (argmax of the last row "
                        f"of logits) back in on the same cache.")
        floor = (length + steps - 1) * (per_token - 1) + steps   # layers, one logits row each
        if got["rows"] < floor:
            raise Wrong(f"{what}: the model's products saw only {got['rows']} token rows, fewer "
                        f"than the {floor} any decoder needs -- compute through model.project, "
                        f"model.output, model.mlp and model.logits, whose work is counted.")
        budget = want["rows"] + per_token
        if got["rows"] > budget:
            raise Wrong(f"{what}: {got['rows']} token rows through the model's matrix products "
                        f"(the cached decoder: {want['rows']}, each token once through every "
                        f"layer). Recomputing the whole sequence at every step redoes all the "
                        f"work the cache holds: per step linear in the length instead of "
                        f"constant, so the projections grow quadratically and attention cubically "
                        f"over a generation. Keep one cache for the whole generation.")
    expect_raises(lambda: answer.derive(traces.generation_trace, cfg, [1, 2], -1), ValueError,
                  "greedy_decode(model, [1, 2], steps=-1)", hint="raise ValueError for steps < 0")


# ---- 3.12 attention work over a generation ---------------------------------------------------

def _causal_pairs_flops(length, n_layers, n_heads, head_dim, cached):
    per = 4 * n_layers * n_heads * head_dim
    if cached:
        return per * length * (length + 1) // 2
    return per * sum(t * (t + 1) // 2 for t in range(1, length + 1))


formula_exercise(
    "3.12", "attention FLOPs of a generation, with and without the cache",
    kv_cache.attention_flops,
    cases=[(1, 1, 1, 1, True), (1, 1, 1, 1, False), (512, 2, 4, 16, True),
           (512, 2, 4, 16, False), (4096, 80, 64, 128, True), (4096, 80, 64, 128, False),
           (7, 3, 6, 8, False)],
    call=lambda L, layers, h, d, cached: (f"attention_flops(length={L}, n_layers={layers}, "
                                          f"n_heads={h}, head_dim={d}, cached={cached})"),
    shortcuts=[
        (lambda got, L, layers, h, d, cached: cached and got == kv_cache.attention_flops(
            L, layers, h, d, False),
         "that is recomputation: with the cache step t runs one query against t keys, so the "
         "steps sum to L(L+1)/2 query-key pairs, not Σ t²."),
        (lambda got, L, layers, h, d, cached: not cached and got == kv_cache.attention_flops(
            L, layers, h, d, True),
         "without a cache step t recomputes all t queries against t keys: Σ t², cubic in L."),
        (equals(_causal_pairs_flops),
         "count the masked scores too: attend computes the whole n x T score matrix (and p·V "
         "over it), then sets the future to -inf -- recomputing step t costs t² pairs."),
        (scaled(kv_cache.attention_flops, 0.5, 2.0),
         "two products per query-key pair (q·kᵀ and p·v), each a multiply-add of head_dim "
         "terms = 2·head_dim FLOPs: 4·head_dim per pair, per head, per layer."),
    ],
    hint="per layer per head 4·head_dim FLOPs per query-key pair; step t has t pairs with the "
         "cache (Σ = L(L+1)/2) and t² without (Σ = L(L+1)(2L+1)/6).",
    draw=lambda rng: (int(rng.integers(1, 3000)), int(rng.integers(1, 40)),
                      int(rng.choice([1, 4, 8, 32])), int(rng.choice([16, 64, 128])),
                      bool(rng.integers(2))))
