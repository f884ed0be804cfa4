"""Chapter 09's checkers accept the references and reject wrong or missing answers."""
import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch09
from labkit.parallel.compression import topk_compress
from labkit.parallel.dp_sim import make_buckets


@pytest.mark.parametrize("ex", ["9.1", "9.2", "9.3", "9.4", "9.5"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _rs_sum_shortcut(buffers):
    p = len(buffers)
    return np.array_split(np.sum(buffers, axis=0), p), []


def _rs_wrong_chunk(buffers):
    chunks, msgs = ch09.ring_reduce_scatter(buffers)
    p = len(buffers)
    return chunks, [(s, a, b, (a - s) % p) for s, a, b, _ in msgs]


def _rs_off_by_one(buffers):
    chunks, msgs = ch09.ring_reduce_scatter(buffers)
    return chunks[1:] + chunks[:1], msgs


@pytest.mark.parametrize("wrong, hint", [
    (_rs_sum_shortcut, "messages"), (_rs_wrong_chunk, "chunk"), (_rs_off_by_one, "rank 0"),
])
def test_9_1_rejects(wrong, hint):
    v = evaluate("9.1", wrong)
    assert v.status == FAIL and hint in v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, p, a, b: 2 * (p - 1) * a + 2 * (p - 1) * n * b, "n/p"),
    (lambda n, p, a, b: (p - 1) * a + (p - 1) / p * n * b, "reduce-scatter"),
    (lambda n, p, a, b: 2 * p * a + 2 * (p - 1) / p * n * b, "2(p-1)"),
])
def test_9_2_rejects(wrong, hint):
    v = evaluate("9.2", wrong)
    assert v.status == FAIL and hint in v.message


def test_9_3_rejects_intercept_and_accepts_plain_lstsq():
    def intercept(n, t, p):
        b, a = np.polyfit(n, t, 1)
        return a, b * p / (2 * (p - 1))

    def ok(n, t, p):
        b, a = np.polyfit(n, t, 1)
        return a / (2 * (p - 1)), b * p / (2 * (p - 1))
    assert evaluate("9.3", intercept).status == FAIL
    assert evaluate("9.3", ok).status == PASS
    assert evaluate("9.3", lambda n, t, p: (1e-5, 1e-9)).status == FAIL


def test_9_4_rejects():
    def strict(sizes, cap):   # closes only when a bucket would exceed the cap
        out, cur, s = [], [], 0
        for i, b in enumerate(sizes):
            if cur and s + b > cap:
                out.append(cur)
                cur, s = [], 0
            cur.append(i)
            s += b
        return out + [cur]
    assert evaluate("9.4", strict).status == FAIL
    assert evaluate("9.4", lambda s, c: [[i] for i in reversed(range(len(s)))]).status == FAIL
    assert evaluate("9.4", make_buckets).status == PASS


def test_9_5_rejects():
    no_memory = lambda g, m, k: topk_compress(g, np.zeros_like(g), k)  # noqa: E731
    assert "memory" in evaluate("9.5", no_memory).message
    def bad_mem(g, m, k):
        kept, _ = topk_compress(g, m, k)
        return kept, m
    assert evaluate("9.5", bad_mem).status == FAIL
    def flat(g, m, k):
        kept, mem = topk_compress(g, m, k)
        return kept.ravel(), mem
    assert "shape" in evaluate("9.5", flat).message
