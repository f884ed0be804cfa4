"""Chapter 03 checkers: right answers written here pass, wrong ones fail with the intended
hint, missing ones are reported; the KV-cached decoder lab (3.7-3.12) against the naive
version and the shortcuts issue 27 names."""
import numpy as np
import pytest

from labkit.check import evaluate, get
from check_basics import assert_fails, reference_and_missing_test
from mutants import mutant

EXERCISES = ["3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11",
             "3.12"]


def status(ex, answer):
    return evaluate(ex, answer, refuse=False)   # the checker's own hints


test_reference_passes_and_none_is_missing = reference_and_missing_test(EXERCISES)


# ---- 3.1-3.6 --------------------------------------------------------------------------------

def flops(b, k, n, need):
    return 2 * b * k * n, (4 if need else 2) * b * k * n


def saved(batch, sizes, item=4):
    return batch * item * int(np.sum(sizes))


def best(sweep, budget):
    fits = sorted((p.throughput, p.batch) for p in sweep.points if p.latency_s <= budget)
    return fits[-1][1] if fits else None


def bn(x, m, var, g, b, eps=1e-5):
    return (x - m) * (g / np.sqrt(var + eps)) + b


def drop(x, mask, p):
    if p < 0 or p >= 1:
        raise ValueError(f"p={p} is not in [0, 1)")
    return np.where(mask > 0, x / (1 - p), 0.0)


def kv(h, k, d, b=2):
    return 2 * k * d * b


RIGHT = {"3.1": flops, "3.2": saved, "3.3": best, "3.4": bn, "3.5": drop, "3.6": kv}


@pytest.mark.parametrize("ex", sorted(RIGHT))
def test_independent_right_answers_pass(ex):
    assert evaluate(ex, RIGHT[ex]).status == "pass", evaluate(ex, RIGHT[ex]).message


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_right_answers_pass_on_fresh_inputs(seed):
    for ex, fn in RIGHT.items():
        assert evaluate(ex, fn, seed=seed).status == "pass", (ex, seed)


def test_wrong_flops():
    v = evaluate("3.1", lambda b, k, n, need: (b * k * n, 2 * b * k * n))
    assert v.status == "fail" and "multiply-add" in v.message
    v = evaluate("3.1", lambda b, k, n, need: (2 * b * k * n, 4 * b * k * n))
    assert v.status == "fail" and "only dW" in v.message
    v = evaluate("3.1", mutant(flops, "(4 if need else 2)", "2"))
    assert v.status == "fail" and "two products" in v.message
    v = evaluate("3.1", lambda b, k, n, need: 2 * b * k * n)
    assert v.status == "fail" and "a pair" in v.message


def test_wrong_saved_bytes():
    v = evaluate("3.2", lambda b, sizes, item=4: item * b * sum(sizes[:-1]))
    assert v.status == "fail" and "log-softmax" in v.message
    v = evaluate("3.2", mutant(saved, "batch * item", "batch * 4"))
    assert v.status == "fail" and "itemsize" in v.message


def test_wrong_best_batch():
    v = evaluate("3.3", mutant(best, "(p.throughput, p.batch)", "(p.batch, p.batch)"))
    assert v.status == "fail" and "highest throughput" in v.message        # largest batch
    v = evaluate("3.3", mutant(best, "p.latency_s <= budget", "p.latency_s < budget"))
    assert v.status == "fail"                                             # equal is within
    v = evaluate("3.3", lambda s, b: max(p.batch for p in s.points if p.latency_s <= b))
    assert v.status in ("fail", "error")                                  # nothing fits
    v = evaluate("3.3", lambda s, b: s.points[0])
    assert v.status == "fail" and "BatchPoint" in v.message


def test_wrong_batchnorm_and_dropout():
    def train_mode(x, m, v, g, b, eps=1e-5):
        return g * (x - x.mean(0)) / np.sqrt(x.var(0) + eps) + b
    v = evaluate("3.4", train_mode)
    assert v.status == "fail" and "train mode" in v.message
    v = evaluate("3.4", mutant(bn, "var + eps", "var"))
    assert v.status == "fail" and "eps" in v.message                      # eps ignored
    v = evaluate("3.5", lambda x, mask, p: x * mask)
    assert v.status == "fail" and "1/(1-p)" in v.message
    with np.errstate(divide="ignore", invalid="ignore"):
        v = evaluate("3.5", lambda x, mask, p: x * mask / (1 - p))
    assert v.status == "fail" and "ValueError" in v.message
    with np.errstate(divide="ignore", invalid="ignore"):
        v = evaluate("3.5", mutant(drop, "p >= 1", "p > 1"))
    assert v.status == "fail" and "p=1.0" in v.message


@pytest.mark.parametrize("answer, hint", [
    (lambda h, k, d, b: k * d * b, "key AND a value"),                 # forgot the 2
    (lambda h, k, d, b: 2 * h * d * b, "grouped-query"),               # n_heads for GQA
    (lambda h, k, d, b: h * d * b, "key AND a value"),                 # both mistakes
    (lambda h, k, d, b: 2 * k * d * b * 8, "not bits"),                # bits, not bytes
    (lambda h, k, d, b: 2 * k * d * b * h, "multiply by the heads"),   # heads twice
    (lambda h, k, d, b: 2 * k * d, "multiply by dtype_bytes"),         # dropped dtype_bytes
])
def test_wrong_kv_cache(answer, hint):
    assert_fails("3.6", answer, hint)


def test_kv_cache_formula_matches_torch_and_the_models():
    from labkit.training.inference import (DECODERS, kv_cache_bytes,
                                           kv_cache_bytes_per_token_per_layer,
                                           torch_kv_cache_bytes)
    # Llama-2-7B: 2 * 32 * 128 * 2 B = 16 KiB per token per layer, 512 KiB per token
    assert kv_cache_bytes(DECODERS["Llama-2-7B"], 1) == 512 * 1024
    # Llama-2-70B (8 KV heads): 2 * 8 * 128 * 2 = 4 KiB per layer, 80 layers = 320 KiB
    assert kv_cache_bytes(DECODERS["Llama-2-70B"], 1) == 320 * 1024
    for n_heads, n_kv, d, layers, steps, batch in [(8, 2, 16, 2, 12, 1), (4, 4, 8, 3, 5, 2),
                                                   (6, 1, 8, 1, 7, 3)]:
        measured = torch_kv_cache_bytes(n_heads, n_kv, d, layers, steps, batch)
        assert measured == kv_cache_bytes_per_token_per_layer(n_kv, d, 2) * layers * steps * batch
    with pytest.raises(ValueError, match="n_kv_heads"):
        torch_kv_cache_bytes(n_heads=8, n_kv_heads=3)


def test_labkit_functions_that_compute_an_answer_are_refused():
    from labkit.training.inference import kv_cache_bytes_per_token_per_layer
    from labkit.training.phases import labkit_phase_costs

    v = evaluate("3.6", lambda h, k, d, b: kv_cache_bytes_per_token_per_layer(k, d, b))
    assert v.status == "fail" and "labkit" in v.message
    v = evaluate("3.2", lambda b, s, i=4: labkit_phase_costs(s, b).saved_bytes_train * i // 4)
    assert v.status == "fail" and "labkit" in v.message


# ---- 3.7 the cache ------------------------------------------------------------------------

class ConcatCache:
    """The simple cache: one array per layer, concatenated at every step."""

    def __init__(self, n_layers, n_kv_heads, head_dim, dtype="float64"):
        self.shape = (n_kv_heads, head_dim)
        self.kv = {i: (np.zeros((n_kv_heads, 0, head_dim), dtype),) * 2 for i in range(n_layers)}

    def append(self, layer, k, v):
        if k.shape != v.shape or (k.shape[0], k.shape[-1]) != self.shape:
            raise ValueError(f"bad k, v shapes {k.shape}, {v.shape}")
        old_k, old_v = self.kv[layer]
        self.kv[layer] = (np.concatenate([old_k, k], 1), np.concatenate([old_v, v], 1))
        return self.kv[layer]

    @property
    def length(self):
        return self.kv[0][0].shape[1]

    @property
    def nbytes(self):
        return sum(a.nbytes + b.nbytes for a, b in self.kv.values())


class GrowingCache(ConcatCache):
    """Room reserved ahead and doubled when full; views of the filled part are returned."""

    def __init__(self, n_layers, n_kv_heads, head_dim, dtype="float64"):
        super().__init__(n_layers, n_kv_heads, head_dim, dtype)
        self.buf = [np.empty((2, n_kv_heads, 4, head_dim), dtype) for _ in range(n_layers)]
        self.n = [0] * n_layers

    def append(self, layer, k, v):
        if k.shape != v.shape or (k.shape[0], k.shape[-1]) != self.shape:
            raise ValueError(f"bad k, v shapes {k.shape}, {v.shape}")
        end = self.n[layer] + k.shape[1]
        while end > self.buf[layer].shape[2]:
            b = self.buf[layer]
            self.buf[layer] = np.concatenate([b, np.empty_like(b)], axis=2)
        self.buf[layer][0, :, self.n[layer]:end] = k
        self.buf[layer][1, :, self.n[layer]:end] = v
        self.n[layer] = end
        return self.buf[layer][0, :, :end], self.buf[layer][1, :, :end]

    @property
    def length(self):
        return self.n[0]

    @property
    def nbytes(self):
        return sum(b[:, :, :n].nbytes for b, n in zip(self.buf, self.n))


class Overwrites(ConcatCache):
    def append(self, layer, k, v):
        super().append(layer, k, v)
        self.kv[layer] = (k, v)
        return k, v


class SharedAcrossLayers(ConcatCache):
    def append(self, layer, k, v):
        return super().append(0, k, v)


class Float64Cache(ConcatCache):
    def __init__(self, n_layers, n_kv_heads, head_dim, dtype="float64"):
        super().__init__(n_layers, n_kv_heads, head_dim)       # the dtype argument ignored


class CapacityBytes(GrowingCache):
    @property
    def nbytes(self):
        return sum(b.nbytes for b in self.buf)                  # the room, not the tokens


class CountsCalls(ConcatCache):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def append(self, layer, k, v):
        self.calls += 1
        return super().append(layer, k, v)

    @property
    def length(self):
        return self.calls


class NoValidation(ConcatCache):
    def append(self, layer, k, v):
        old_k, old_v = self.kv[layer]
        self.kv[layer] = (np.concatenate([old_k, k], 1), np.concatenate([old_v, v], 1))
        return self.kv[layer]


@pytest.mark.parametrize("cls", [ConcatCache, GrowingCache])
def test_caches_written_here_pass(cls):
    for seed in (None, 5):
        v = evaluate("3.7", cls, seed=seed)
        assert v.status == "pass", v.message


@pytest.mark.parametrize("cls, hint", [
    (Overwrites, "only the new keys"),
    (SharedAcrossLayers, "all layers share one array"),
    (Float64Cache, "np.zeros and np.empty default to float64"),
    (CapacityBytes, "not of a buffer reserved ahead"),
    (CountsCalls, "not the number of append calls"),
    (NoValidation, "raise ValueError"),
])
def test_wrong_caches(cls, hint):
    assert_fails("3.7", cls, hint, statuses=("fail", "error"))


def test_cache_bytes_grow_by_the_3_6_formula():
    from labkit.training.decoder import DecoderConfig
    from labkit.training.decoder_measure import cache_growth
    from labkit.training.kv_cache import KVCache
    from labkit.training.inference import kv_cache_bytes_per_token_per_layer

    for cfg in (DecoderConfig(), DecoderConfig(n_kv_heads=1, dtype="float32", n_layers=3)):
        grown = cache_growth(GrowingCache, cfg, tokens=5)
        per = kv_cache_bytes_per_token_per_layer(cfg.n_kv_heads, cfg.head_dim,
                                                 np.dtype(cfg.dtype).itemsize) * cfg.n_layers
        assert grown == tuple(per * t for t in range(1, 6)) == cache_growth(KVCache, cfg, 5)
    assert evaluate("3.7", get("3.7").reference).status == "fail"      # labkit's is refused


# ---- 3.8 rope -------------------------------------------------------------------------------

def rotary(x, positions, base=10000.0):
    d = x.shape[-1]
    i = np.arange(d // 2)
    a = np.asarray(positions, float)[:, None] / base ** (2 * i / d)
    c, s = np.cos(a), np.sin(a)
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def rotary_neighbours(x, positions, base=10000.0):
    d = x.shape[-1]
    a = np.asarray(positions, float)[:, None] / base ** (2 * np.arange(d // 2) / d)
    c, s = np.cos(a), np.sin(a)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * c - x2 * s, x1 * s + x2 * c
    return out


def test_rope_written_here_passes_and_agrees_with_the_rotation_property():
    assert evaluate("3.8", rotary).status == "pass"
    assert evaluate("3.8", rotary, seed=9).status == "pass"
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 1, 16))
    # q·k of rotated vectors depends on the offset only (Su et al. 2021, §3.4)
    s1 = (rotary(q, [7]) * rotary(k, [3])).sum()
    s2 = (rotary(q, [104]) * rotary(k, [100])).sum()
    assert s1 == pytest.approx(s2, rel=1e-9)


@pytest.mark.parametrize("answer, hint", [
    (rotary_neighbours, "not neighbours"),
    (lambda x, p, base=10000.0: rotary(x, -np.asarray(p), base), "the other way"),
    (lambda x, p, base=10000.0: rotary(x, np.arange(len(p)), base), "positions you are given"),
    (mutant(rotary, "2 * i / d", "i / d"), "base^(-2i/head_dim)"),
])
def test_wrong_rope(answer, hint):
    assert_fails("3.8", answer, hint)


# ---- 3.9 attend -----------------------------------------------------------------------------

def attention(q, K, V):
    H, n, d = q.shape
    kv, T = K.shape[:2]
    if n > T or H % kv:
        raise ValueError(f"q {q.shape} does not fit K {K.shape}")
    out = np.empty_like(q, dtype=float)
    for h in range(H):
        j = h * kv // H
        for i in range(n):
            seen = T - n + i + 1                   # query i sits at position T - n + i
            s = K[j, :seen] @ q[h, i] / np.sqrt(d)
            w = np.exp(s - s.max())
            out[h, i] = w @ V[j, :seen] / w.sum()
    return out


def test_attention_written_here_passes():
    assert evaluate("3.9", attention).status == "pass"
    assert evaluate("3.9", attention, seed=3).status == "pass"


def unstable(q, K, V):
    H, n, d = q.shape
    kv, T = K.shape[:2]
    if n > T or H % kv:
        raise ValueError("shapes")
    out = np.empty_like(q, dtype=float)
    for h in range(H):
        j = h * kv // H
        for i in range(n):
            w = np.exp(K[j, :T - n + i + 1] @ q[h, i] / np.sqrt(d))
            out[h, i] = w @ V[j, :T - n + i + 1] / w.sum()
    return out


@pytest.mark.parametrize("answer, hint", [
    (mutant(attention, "seen = T - n + i + 1", "seen = T"), "every query sees every key"),
    (mutant(attention, "seen = T - n + i + 1", "seen = i + 1"), "newest positions"),
    (mutant(attention, " / np.sqrt(d)", ""), "1/sqrt(head_dim)"),
    (mutant(attention, "j = h * kv // H", "j = h % kv"), "not h % "),
    (unstable, "subtract each row's maximum"),
    (mutant(attention, "if n > T or H % kv:", "if False:"), "raise ValueError"),
])
def test_wrong_attention(answer, hint):
    with np.errstate(over="ignore", invalid="ignore"):
        assert_fails("3.9", answer, hint, statuses=("fail", "error"))


# ---- 3.10 the decoding step ---------------------------------------------------------------

def step(model, cache, tokens):
    c = model.config
    n = len(tokens)
    pos = cache.length + np.arange(n)
    h = model.embed(tokens)
    for layer in range(c.n_layers):
        q, k, v = (a.reshape(n, -1, c.head_dim).transpose(1, 0, 2)
                   for a in model.project(layer, h))
        K, V = cache.append(layer, rotary(k, pos, c.rope_base), v)
        o = attention(rotary(q, pos, c.rope_base), K, V)
        h = h + model.output(layer, o.transpose(1, 0, 2).reshape(n, -1))
        h = h + model.mlp(layer, h)
    return model.logits(h)


def test_step_written_here_passes_and_matches_full_recomputation():
    from labkit.training.decoder import DecoderConfig
    from labkit.training.decoder_measure import incremental_vs_full

    assert evaluate("3.10", step).status == "pass"
    for cfg in (DecoderConfig(), DecoderConfig(n_kv_heads=1, n_layers=3, seed=4),
                DecoderConfig(n_kv_heads=4, dtype="float32")):
        tol = 1e-12 if cfg.dtype == "float64" else 1e-4
        assert incremental_vs_full(step, ConcatCache, cfg) < tol


@pytest.mark.parametrize("answer, hint", [
    (mutant(step, "pos = cache.length + np.arange(n)", "pos = np.arange(n)"),
     "positions cache.length"),                          # a cache that forgets positions
    (mutant(step, "o = attention(rotary(q, pos, c.rope_base), K, V)",
            "o = attention(rotary(q, pos, c.rope_base), rotary(k, pos, c.rope_base), v)"),
     "attend over the whole cache"),
    (mutant(step, "cache.append(layer, rotary(k, pos, c.rope_base), v)",
            "cache.append(layer, k, v)"), "rotate q and k"),
    (mutant(step, "h = h + model.mlp(layer, h)", "h = model.mlp(layer, h)"), "residuals"),
])
def test_wrong_steps(answer, hint):
    assert_fails("3.10", answer, hint)


# ---- 3.11 greedy decoding -----------------------------------------------------------------

def greedy(model, prompt, steps):
    if steps < 0:
        raise ValueError(f"steps={steps}")
    c = model.config
    cache = ConcatCache(c.n_layers, c.n_kv_heads, c.head_dim, c.dtype)
    out, logits = [], step(model, cache, prompt)
    for _ in range(steps):
        out.append(int(np.argmax(logits[-1])))
        if len(out) < steps:
            logits = step(model, cache, out[-1:])
    return out


def no_cache(model, prompt, steps):
    """The naive decoder: every step rebuilds the cache from the whole sequence."""
    if steps < 0:
        raise ValueError(f"steps={steps}")
    c = model.config
    seq = list(prompt)
    for _ in range(steps):
        logits = step(model, ConcatCache(c.n_layers, c.n_kv_heads, c.head_dim, c.dtype), seq)
        seq.append(int(np.argmax(logits[-1])))
    return seq[len(prompt):]


def with_forward(model, prompt, steps):
    from labkit.training.decoder import forward

    if steps < 0:
        raise ValueError("steps")
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(np.argmax(forward(model, seq)[-1])))
    return seq[len(prompt):]


def test_greedy_written_here_passes_and_the_naive_decoders_fail_the_work_count():
    assert evaluate("3.11", greedy).status == "pass"
    assert evaluate("3.11", greedy, seed=11).status == "pass"
    for naive in (no_cache, with_forward):
        v = evaluate("3.11", naive)
        assert v.status == "fail" and "Recomputing the whole sequence" in v.message, v.message
    from labkit.training.kv_cache import recompute_greedy
    v = evaluate("3.11", recompute_greedy)
    assert v.status == "fail" and "labkit" in v.message               # labkit's naive one


forgetful_step = mutant(step, "pos = cache.length + np.arange(n)", "pos = np.arange(n)")


def test_greedy_with_a_forgetful_step_fails_on_tokens():
    v = evaluate("3.11", mutant(greedy, "step(", "forgetful_step(", count=2))
    assert v.status == "fail" and "full recomputation gives" in v.message, v.message


@pytest.mark.parametrize("answer, hint", [
    (lambda m, p, s: list(p) + greedy(m, p, s), "new tokens only"),
    (mutant(greedy, "if steps < 0:", "if False:"), "steps < 0"),
])
def test_wrong_greedy(answer, hint):
    assert_fails("3.11", answer, hint, statuses=("fail", "error"))


def test_greedy_that_bypasses_the_counted_products_fails():
    def uncounted(model, prompt, steps):
        if steps < 0:
            raise ValueError("steps")
        out = with_forward(model, prompt, steps)
        model.work.linear_rows = 0                       # hide the work
        return out
    v = evaluate("3.11", uncounted)
    assert v.status == "fail" and "fewer" in v.message


# ---- 3.12 attention FLOPs -----------------------------------------------------------------

def flops_of(length, n_layers, n_heads, head_dim, cached):
    per_pair = 4 * head_dim * n_heads * n_layers
    return per_pair * sum(t if cached else t * t for t in range(1, length + 1))


def test_attention_flops_written_here_passes():
    assert evaluate("3.12", flops_of).status == "pass"
    assert evaluate("3.12", flops_of, seed=2).status == "pass"


@pytest.mark.parametrize("answer, hint", [
    (lambda L, l, h, d, c: flops_of(L, l, h, d, False), "that is recomputation"),
    (lambda L, l, h, d, c: flops_of(L, l, h, d, True), "Σ t², cubic"),
    (lambda L, l, h, d, c: flops_of(L, l, h, d, c) if c else 4 * l * h * d * sum(
        t * (t + 1) // 2 for t in range(1, L + 1)), "masked scores too"),
    (lambda L, l, h, d, c: flops_of(L, l, h, d, c) // 2, "two products"),
])
def test_wrong_attention_flops(answer, hint):
    assert_fails("3.12", answer, hint)
