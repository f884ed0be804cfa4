"""Chapter 03 checkers: right answers pass, wrong ones fail with the intended hint."""
import numpy as np
import pytest

from labkit.check import evaluate, get


@pytest.mark.parametrize("ex", ["3.1", "3.2", "3.3", "3.4", "3.5", "3.6"])
def test_reference_passes_and_none_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == "pass"
    assert evaluate(ex, None).status == "missing"


def test_wrong_flops():
    v = evaluate("3.1", lambda b, k, n, need: (b * k * n, 2 * b * k * n))
    assert v.status == "fail" and "multiply-add" in v.message
    v = evaluate("3.1", lambda b, k, n, need: (2 * b * k * n, 4 * b * k * n))
    assert v.status == "fail" and "only dW" in v.message


def test_wrong_saved_bytes():
    v = evaluate("3.2", lambda b, sizes, item=4: item * b * sum(sizes[:-1]))
    assert v.status == "fail" and "log-softmax" in v.message
    v = evaluate("3.2", lambda b, sizes, item=4: 4 * b * sum(sizes))
    assert v.status == "fail" and "itemsize" in v.message


def test_wrong_best_batch():
    def largest_fitting(sweep, budget):
        ok = [p.batch for p in sweep.points if p.latency_s < budget]
        return max(ok) if ok else None
    assert evaluate("3.3", largest_fitting).status == "fail"
    v = evaluate("3.3", lambda s, b: max(p.batch for p in s.points if p.latency_s <= b))
    assert v.status in ("fail", "error")


def test_wrong_batchnorm_and_dropout():
    def train_mode(x, m, v, g, b, eps=1e-5):
        return g * (x - x.mean(0)) / np.sqrt(x.var(0) + eps) + b
    v = evaluate("3.4", train_mode)
    assert v.status == "fail" and "train mode" in v.message
    v = evaluate("3.4", lambda x, m, var, g, b, eps=1e-5: g * (x - m) / np.sqrt(var) + b)
    assert v.status == "fail"
    v = evaluate("3.5", lambda x, mask, p: x * mask)
    assert v.status == "fail" and "1/(1-p)" in v.message
    with np.errstate(divide="ignore", invalid="ignore"):
        v = evaluate("3.5", lambda x, mask, p: x * mask / (1 - p))
    assert v.status == "fail" and "ValueError" in v.message


@pytest.mark.parametrize("answer, hint", [
    (lambda h, k, d, b: k * d * b, "key AND a value"),                 # forgot the 2
    (lambda h, k, d, b: 2 * h * d * b, "grouped-query"),               # n_heads for GQA
    (lambda h, k, d, b: h * d * b, "key AND a value"),                 # both mistakes
    (lambda h, k, d, b: 2 * k * d * b * 8, "not bits"),                # bits, not bytes
    (lambda h, k, d, b: 2 * k * d * b * h, "multiply by the heads"),   # heads twice
    (lambda h, k, d, b: 2 * k * d, "multiply by dtype_bytes"),         # dropped dtype_bytes
])
def test_wrong_kv_cache(answer, hint):
    v = evaluate("3.6", answer)
    assert v.status == "fail" and hint in v.message, v.message


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
