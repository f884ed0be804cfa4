"""labkit.training.decoder: the decoder against PyTorch, the cached step against full
recomputation, the work counts against their closed forms (chapter 03's lab)."""
import matplotlib
import numpy as np
import pytest

from labkit.training import decoder_measure as measure
from labkit.training import decoder_traces as traces
from labkit.training.decoder import DecoderConfig, forward, init_decoder, rope
from labkit.training.kv_cache import (KVCache, attend, attention_flops, decode_step,
                                      greedy_decode, new_cache, recompute_greedy)

matplotlib.use("Agg")

CONFIGS = [DecoderConfig(), DecoderConfig(n_kv_heads=1, n_layers=3, seed=5),
           DecoderConfig(n_kv_heads=4, d_model=32, ffn=48, vocab=30, seed=2),
           DecoderConfig(dtype="float32", seed=7)]


def torch_forward(model, tokens):
    """The same decoder written with torch's own pieces: F.rms_norm, Hugging Face's
    rotate_half RoPE, F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)."""
    import torch
    import torch.nn.functional as F

    c = model.config

    def t(a):
        return torch.from_numpy(np.asarray(a, np.float64))

    T, half = len(tokens), c.head_dim // 2
    inv = c.rope_base ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)

    def rotate(x):
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def heads(x, n):
        return x.view(T, n, c.head_dim).transpose(0, 1)

    h = t(model.embedding)[torch.tensor(tokens)]
    for w in model.layers:
        x = F.rms_norm(h, (c.d_model,), t(w.attn_norm), eps=1e-6)
        q, k, v = heads(x @ t(w.wq), c.n_heads), heads(x @ t(w.wk), c.n_kv_heads), \
            heads(x @ t(w.wv), c.n_kv_heads)
        o = F.scaled_dot_product_attention(rotate(q)[None], rotate(k)[None], v[None],
                                           is_causal=True, enable_gqa=True)[0]
        h = h + o.transpose(0, 1).reshape(T, -1) @ t(w.wo)
        h = h + torch.relu(F.rms_norm(h, (c.d_model,), t(w.mlp_norm), eps=1e-6)
                           @ t(w.w_up)) @ t(w.w_down)
    return (F.rms_norm(h, (c.d_model,), t(model.final_norm), eps=1e-6)
            @ t(model.unembedding)).numpy()


@pytest.mark.parametrize("cfg", CONFIGS[:3])
def test_forward_is_torch_sdpa_with_gqa_and_rope(cfg):
    model = init_decoder(cfg)
    tokens = list(np.random.default_rng(1).integers(0, cfg.vocab, 13))
    np.testing.assert_allclose(forward(model, tokens), torch_forward(model, tokens),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("chunks", [(1,) * 9, (6, 1, 1, 1), (3, 4, 2), (9,)])
def test_cached_steps_equal_full_recomputation(cfg, chunks):
    model = init_decoder(cfg)
    tokens = np.random.default_rng(3).integers(0, cfg.vocab, sum(chunks))
    cache = new_cache(model)
    ends = np.cumsum(chunks)
    got = np.concatenate([decode_step(model, cache, tokens[e - c:e]) for c, e in
                          zip(chunks, ends)])
    tol = 1e-12 if cfg.dtype == "float64" else 2e-5
    np.testing.assert_allclose(got, forward(model, tokens), atol=tol, rtol=tol)
    assert cache.length == sum(chunks) and got.dtype == np.dtype(cfg.dtype)
    assert measure.incremental_vs_full(decode_step, KVCache, cfg, chunks) < tol


@pytest.mark.parametrize("cfg", CONFIGS[:3])
def test_greedy_tokens_and_work_are_the_closed_forms(cfg):
    rng = np.random.default_rng(4)
    per = traces.rows_per_token(cfg)
    assert per == 6 * cfg.n_layers + 1
    for P, steps in [(1, 1), (5, 10), (2, 17)]:
        prompt = list(rng.integers(0, cfg.vocab, P))
        cached = traces.generation_trace(greedy_decode, traces.config_dict(cfg), prompt, steps)
        full = traces.generation_trace(recompute_greedy, traces.config_dict(cfg), prompt, steps)
        assert cached["tokens"] == full["tokens"] and len(cached["tokens"]) == steps
        assert cached["rows"] == (P + steps - 1) * per                 # each token once
        assert full["rows"] == sum(range(P, P + steps)) * per          # the prefix each step
        assert cached["calls"] == (1 + 6 * cfg.n_layers) * steps
    model = init_decoder(cfg)
    assert greedy_decode(model, [1], 0) == []
    with pytest.raises(ValueError, match="steps"):
        greedy_decode(model, [1], -1)


def test_generated_tokens_depend_on_the_context():
    """Random weights still make a decoder whose argmax follows its context: greedy output
    is not one repeated token, and a forgotten position changes it."""
    cfg = DecoderConfig()
    model = init_decoder(cfg)
    out = greedy_decode(model, [5, 9, 2, 7], 20)
    assert len(set(out)) >= 8
    no_offset = traces.step_trace(decode_step, traces.config_dict(cfg), [[5, 9, 2], [7], [1]],
                               "no-offset")
    right = traces.step_trace(decode_step, traces.config_dict(cfg), [[5, 9, 2], [7], [1]])
    np.testing.assert_array_equal(no_offset["logits"][0], right["logits"][0])
    assert np.abs(no_offset["logits"][1] - right["logits"][1]).max() > 0.1
    assert right["lengths"] == [3, 4, 5] and right["rows"] == [3 * 13, 13, 13]


@pytest.mark.parametrize("L", [1, 2, 9, 40])
def test_attention_flops_are_what_the_cache_shapes_imply(L):
    cfg = DecoderConfig(n_layers=3, seed=1)
    model = init_decoder(cfg)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab, L)
    counting = measure._CountingCache(new_cache(model), cfg)
    for t in range(L):
        decode_step(model, counting, tokens[t:t + 1])
    args = (L, cfg.n_layers, cfg.n_heads, cfg.head_dim)
    assert counting.flops == attention_flops(*args, True) == 4 * 3 * 4 * 16 * L * (L + 1) // 2
    recompute = 0
    for t in range(1, L + 1):
        fresh = measure._CountingCache(new_cache(model), cfg)
        decode_step(model, fresh, tokens[:t])
        recompute += fresh.flops
    assert recompute == attention_flops(*args, False)
    assert attention_flops(*args, False) * 3 == attention_flops(*args, True) * (2 * L + 1)
    with pytest.raises(TypeError, match="cached"):
        attention_flops(L, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="length"):
        attention_flops(0, 1, 1, 1, True)


def test_rope_rotates_pairs_of_halves_and_keeps_relative_scores():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 8))
    pos = np.array([0, 1, 7, 100, 4000])
    y = rope(x, pos)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_array_equal(y[:, 0], x[:, 0])                   # position 0: identity
    a = 7 * 10000.0 ** (-1 / 4)                                        # pair i = 1 of 4
    np.testing.assert_allclose(y[0, 2, [1, 5]], [x[0, 2, 1] * np.cos(a) - x[0, 2, 5] * np.sin(a),
                                                  x[0, 2, 5] * np.cos(a) + x[0, 2, 1] * np.sin(a)])
    q, k = rng.standard_normal((2, 1, 1, 8))
    s = [(rope(q, [p + 3]) * rope(k, [p])).sum() for p in (0, 50, 999)]
    np.testing.assert_allclose(s, s[0], rtol=1e-10)
    assert rope(x.astype(np.float32), pos).dtype == np.float32
    with pytest.raises(ValueError, match="positions"):
        rope(x, pos[:3])
    with pytest.raises(ValueError, match="even head_dim"):
        rope(x[..., :7], pos)


def test_attend_matches_torch_sdpa_for_decode_prefill_and_chunks():
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(2)
    for H, kv, n, T in [(4, 2, 1, 9), (4, 2, 9, 9), (6, 3, 4, 10), (8, 1, 2, 5)]:
        q = rng.standard_normal((H, n, 8))
        K, V = rng.standard_normal((2, kv, T, 8))
        mask = torch.from_numpy(np.arange(T)[None, :] <= np.arange(T - n, T)[:, None])
        want = F.scaled_dot_product_attention(*(torch.from_numpy(a)[None] for a in (q, K, V)),
                                              attn_mask=mask, enable_gqa=True)[0].numpy()
        np.testing.assert_allclose(attend(q, K, V), want, rtol=1e-10, atol=1e-12)
    big = 40 * rng.standard_normal((2, 1, 3, 16))                       # scores ~ 1e4
    assert np.isfinite(attend(big[0], big[1][:1], big[1][:1])).all()
    with pytest.raises(ValueError, match="at most"):
        attend(np.zeros((2, 5, 4)), np.zeros((1, 4, 4)), np.zeros((1, 4, 4)))
    with pytest.raises(ValueError, match="multiple"):
        attend(np.zeros((3, 1, 4)), np.zeros((2, 4, 4)), np.zeros((2, 4, 4)))


def test_kv_cache_grows_by_the_3_6_formula_and_rejects_wrong_shapes():
    from labkit.training.inference import kv_cache_bytes_per_token_per_layer

    cache = KVCache(3, 2, 8, "float32")
    per = kv_cache_bytes_per_token_per_layer(2, 8, 4) * 3
    for t in (4, 1, 2):
        for layer in range(3):
            K, V = cache.append(layer, *np.ones((2, 2, t, 8), np.float32))
        assert K.dtype == np.float32 and cache.nbytes == per * cache.length
    assert cache.length == 7 and K.shape == (2, 7, 8)
    assert measure.cache_growth(KVCache, DecoderConfig(), 3) == (1024, 2048, 3072)
    for k, v in [((3, 1, 8), (3, 1, 8)), ((2, 1, 6), (2, 1, 6)), ((2, 1, 8), (2, 2, 8))]:
        assert traces.cache_rejects(KVCache, 1, 2, 8, np.zeros(k), np.zeros(v)) == "ValueError"
    assert traces.cache_rejects(KVCache, 1, 2, 8, np.zeros((2, 1, 8)), np.zeros((2, 1, 8))) == \
        "nothing"
    with pytest.raises(ValueError, match="n_kv_heads"):
        KVCache(1, 0, 8)


def test_decode_timing_counts_exactly_and_plots():
    from labkit.training.plots import plot_decode_timing

    cfg = DecoderConfig(n_layers=1, vocab=20)
    r = measure.decode_timing(config=cfg, lengths=(4, 8), repeats=1)
    H, d = cfg.n_heads, cfg.head_dim
    assert r.cached_flops == (4 * H * d * 5, 4 * H * d * 9)          # one query over L+1 keys
    assert r.recompute_flops == (4 * H * d * 25, 4 * H * d * 81)     # L+1 queries over L+1
    assert r.cache_bytes == (4 * 2 * 2 * 16 * 8, 8 * 2 * 2 * 16 * 8)
    assert all(t > 0 for t in r.cached_s + r.recompute_s) and len(r.speedups) == 2
    lines = measure.format_decode_timing(r).splitlines()
    assert len(lines) == 2 and lines[0].startswith("context    4: cached ")
    assert "attention FLOPs      1,280 vs        6,400; cache     2.0 KiB" in lines[0]
    plot_decode_timing(r)
    matplotlib.pyplot.close("all")
    with pytest.raises(ValueError, match="lengths"):
        measure.decode_timing(lengths=())
    with pytest.raises(ValueError, match="lengths"):
        measure.decode_timing(lengths=(0,))
    with pytest.raises(TypeError, match="callable"):
        measure.decode_timing(step_fn=3)


def test_the_notebook_reports():
    cfg = DecoderConfig()
    text = measure.format_cache_growth(measure.cache_growth(KVCache, cfg, 2),
                                   lambda h, k, d, b: 2 * k * d * b, cfg)
    assert text == ("cache bytes after each token: [1024, 2048]; growth per token: 1024 bytes\n"
                    "3.6's formula x 2 layers predicts 1024 bytes per token (float64: 8 bytes "
                    "a value)")
    work = measure.format_generation_work(greedy_decode, cfg, prompt_len=4, steps=6).splitlines()
    assert work[2].endswith("(the same tokens)")
    assert work[3].startswith(f"token rows through the model's products: yours {9 * 13:,}, "
                              f"recomputation {sum(range(4, 10)) * 13:,}")
    totals = measure.format_attention_totals(attention_flops, (2, 4), cfg).splitlines()
    assert totals[0] == ("    2 tokens: attention FLOPs with the cache 1.536e+03, recomputing "
                         "2.560e+03 (x2)")


def test_config_and_model_reject_bad_input():
    with pytest.raises(ValueError, match="n_kv_heads"):
        DecoderConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="even head_dim"):
        DecoderConfig(d_model=12, n_heads=4)
    with pytest.raises(ValueError, match="dtype"):
        DecoderConfig(dtype="float16")
    with pytest.raises(TypeError, match="DecoderConfig"):
        init_decoder({"vocab": 3})
    model = init_decoder(DecoderConfig(vocab=10))
    for bad in ([], [10], [-1], [[1, 2]], [1.5]):
        with pytest.raises(ValueError, match="tokens"):
            model.embed(bad)
    with pytest.raises(ValueError, match="layer"):
        model.project(2, np.zeros((1, 64)))
    with pytest.raises(ValueError, match="variant"):
        traces.step_trace(decode_step, traces.config_dict(model.config), [[1]], "sideways")


@pytest.mark.parametrize("name", ["vocab", "d_model", "n_layers", "n_heads", "n_kv_heads",
                                  "ffn", "seed", "rope_base"])
@pytest.mark.parametrize("bad", [None, "abc", True, float("nan"), -1, 2.5])
def test_config_names_the_bad_field(name, bad):
    if name == "rope_base" and bad == 2.5:
        return                                            # a real base > 1 is fine
    with pytest.raises((TypeError, ValueError), match=name):
        DecoderConfig(**{name: bad})


@pytest.mark.parametrize("kwargs, name", [({"length": 2.5}, "length"),
                                          ({"n_layers": 0}, "n_layers"),
                                          ({"n_heads": "4"}, "n_heads"),
                                          ({"head_dim": True}, "head_dim")])
def test_attention_flops_names_the_bad_argument(kwargs, name):
    args = dict(length=8, n_layers=2, n_heads=4, head_dim=16, cached=True) | kwargs
    with pytest.raises((TypeError, ValueError), match=name):
        attention_flops(**args)


def test_decode_timing_and_reports_name_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        measure.decode_timing(lengths=(4,), repeats=0)
    with pytest.raises(ValueError, match="tokens"):
        measure.cache_growth(KVCache, tokens=0)
    with pytest.raises(ValueError, match="chunks"):
        measure.incremental_vs_full(decode_step, KVCache, chunks=(2, 0))
    with pytest.raises(TypeError, match="config"):
        traces.generation_trace(greedy_decode, 3, [1], 1)
