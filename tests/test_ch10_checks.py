"""Chapter 10's checkers accept the references and reject missing and plausible wrong answers."""
import math

import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch10
from labkit.memory.estimator import activation_bytes_per_layer


@pytest.mark.parametrize("ex", ["10.1", "10.2", "10.3", "10.4", "10.5"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _gpipe(p, m, s):
    return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]


def _warm_off_by_one(p, m, s):          # p - s warm-up forwards instead of p - s - 1
    warm = min(p - s, m)
    out, f, b = [("F", j) for j in range(warm)], warm, 0
    while f < m:
        out += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    return out + [("B", j) for j in range(b, m)]


def _backward_first(p, m, s):           # steady state B then F
    out = ch10.one_f_one_b_order(p, m, s)
    return [("B", j) if k == "F" else ("F", j) for k, j in out]


@pytest.mark.parametrize("wrong, hint", [(_gpipe, "GPipe"), (_warm_off_by_one, "warm-up"),
                                         (_backward_first, "")])
def test_10_1_rejects(wrong, hint):
    v = evaluate("10.1", wrong)
    assert v.status == FAIL and hint in v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda p, m, v: (p - 1) / m, "without interleaving"),
    (lambda p, m, v: (p - 1) / (v * m + p - 1), "idle share"),
    (lambda p, m, v: (p - 1) / (m + p - 1), "idle share"),        # and no interleaving
    (lambda p, m, v: (p - 1) / (v * m) + 0.01, "bubble fraction"),
    (lambda p, m, v: p / (v * m), "bubble fraction"),
])
def test_10_2_rejects(wrong, hint):
    v = evaluate("10.2", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_2_accepts_the_closed_form():
    assert evaluate("10.2", lambda p, m, v: (p - 1) / (v * m)).status == PASS


def _rank0_only(x, w, tp):
    y, sent = ch10.row_parallel(x, w, tp)
    return np.split(x, tp, axis=1)[0] @ np.split(w, tp, axis=0)[0], sent


def _whole_tensor_bytes(x, w, tp):
    y, _ = ch10.row_parallel(x, w, tp)
    return y, y.nbytes


def _half_bytes(x, w, tp):
    y, _ = ch10.row_parallel(x, w, tp)
    return y, (tp - 1) / tp * y.nbytes


@pytest.mark.parametrize("wrong, hint", [(_rank0_only, "partial"), (_whole_tensor_bytes, "whole"),
                                         (_half_bytes, "reduce-scatter"),
                                         (lambda x, w, tp: x @ w, "pair")])
def test_10_3_rejects(wrong, hint):
    v = evaluate("10.3", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_3_accepts_the_closed_form_bytes():
    assert evaluate("10.3", lambda x, w, tp: (x @ w, 2 * (tp - 1) / tp * (x @ w).nbytes)).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (lambda psi, dp: 2 * psi + 14 * psi / dp, "ZeRO-2"),
    (lambda psi, dp: 4 * psi + 12 * psi / dp, "ZeRO-1"),
    (lambda psi, dp: 16 * psi, "plain data parallelism"),
    (lambda psi, dp: 12 * psi / dp, "16 bytes"),
    (lambda psi, dp: 16 * psi / (dp + 1), "ZeRO-3 bytes"),
])
def test_10_4_rejects(wrong, hint):
    v = evaluate("10.4", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_4_accepts_without_the_ceiling():
    assert evaluate("10.4", lambda psi, dp: 16 * psi / dp).status == PASS


def _parts(model, t, p, d, b):
    m = model.batch // (d * b)
    states = 16 * math.ceil(model.params / (t * p))
    stash = 2 * model.seq * b * model.hidden * math.ceil(model.layers / p)
    work = activation_bytes_per_layer(model.seq, b, model.hidden, model.heads, t)
    return m, states, stash, work


def _one_mb(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + stash + work


def _no_tp_split(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return 16 * model.params / p + min(p, m) * stash + work


def _no_working_layer(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + min(p, m) * stash


def _by_hand(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + min(p, m) * stash + work


@pytest.mark.parametrize("wrong, hint", [(_one_mb, "one micro-batch"), (_no_tp_split, "splits"),
                                         (_no_working_layer, "recomputed")])
def test_10_5_rejects(wrong, hint):
    v = evaluate("10.5", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_5_accepts_by_hand():
    assert evaluate("10.5", _by_hand).status == PASS
