"""Chapter 07's checkers accept the references and reject wrong or missing answers."""
import math

import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch07
from labkit.check.core import Wrong
from labkit.check.formula import check_formula
from labkit.dataload.model import steady_throughput


@pytest.mark.parametrize("ex", ["7.1", "7.2", "7.3", "7.4"])
def test_reference_passes_and_missing_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == PASS
    assert evaluate(ex, None).status == MISSING


@pytest.mark.parametrize("wrong, hint", [
    (lambda w, c: float(np.mean(np.asarray(w) / (np.asarray(w) + np.asarray(c)))), "per-step"),
    (lambda w, c: float(np.sum(w) / np.sum(c)), "wait / compute"),
    (lambda w, c: float(np.mean(w)), "Σ wait"),
])
def test_7_1_rejects(wrong, hint):
    v = evaluate("7.1", wrong)
    assert v.status == FAIL and hint in v.message


def _with_workers(rate):
    """A 7.2 answer right without workers and ``rate(L, C, W, cores)`` with them."""
    return lambda L, C, W, cores: 1 / (L + C) if W == 0 else rate(L, C, W, cores)


@pytest.mark.parametrize("wrong, hint", [
    (_with_workers(lambda L, C, W, cores: 1 / max(C, L / W)), "that leaves out the cores"),
    (lambda L, C, W, cores: 1 / (L + C), "slowest"),
    (lambda L, C, W, cores: 1 / max(C, L / W, (L + C) / cores), "1/(L + C)"),
    (_with_workers(lambda L, C, W, cores: 1 / max(C, L / W, L / cores)),
     "the cores bound leaves out the step"),
    (_with_workers(lambda L, C, W, cores: 1 / max(L / W, L / cores)),
     "the cores bound leaves out the step"),
    (_with_workers(lambda L, C, W, cores: 1 / max(L / W, (L + C) / cores)), "at most 1/C"),
    (lambda L, C, W, cores: L + C if W == 0 else max(C, L / W, (L + C) / cores),
     "seconds per batch"),
    (lambda L, C, W, cores: 0.9 / (L + C) if W == 0 else 1 / max(C, L / W, (L + C) / cores),
     "1 / max(C, L/W, (L+C)/cores)"),
])
def test_7_2_rejects(wrong, hint):
    v = evaluate("7.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message
    if "cores bound" in hint or "leaves out the cores" in hint:
        assert "cores / (L + C)" in v.message


@pytest.mark.parametrize("wrong", [lambda L, C, W, cores: 1 / max(C, L / W),
                                   lambda L, C, W, cores: 1 / max(C, L / W, L / cores)])
def test_7_2_hint_where_no_cores_and_a_loose_cores_bound_agree(wrong):
    # with W = cores, L/cores = L/W: either answer may be meant, so the hint covers both
    with pytest.raises(Wrong, match=r"missing or too loose.*cores / \(L \+ C\)"):
        check_formula(wrong, steady_throughput, [(0.032, 0.012, 2, 2)], rtol=1e-6,
                      call=lambda *case: f"steady_throughput{case}",
                      shortcuts=ch07._THROUGHPUT_SHORTCUTS, hint="")


def _interleaved(rec):
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(32, 32, 3)


def _chw(rec):
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(3, 32, 32)


def _label_included(rec):
    a = np.frombuffer(rec, np.uint8)
    return int(a[0]), a[:3072].reshape(3, 32, 32).transpose(1, 2, 0)


def _transposed(rec):      # planes read column-major
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(3, 32, 32).transpose(2, 1, 0)


@pytest.mark.parametrize("wrong, hint", [
    (_interleaved, "planes"), (_chw, "CHW"), (_label_included, "label byte"),
    (_transposed, "pixel values"),
])
def test_7_3_rejects(wrong, hint):
    v = evaluate("7.3", wrong)
    assert v.status == FAIL and hint in v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda L, C: L / C, "whole number"),
    (lambda L, C: math.floor(L / C), "round up"),
    (lambda L, C: round(L / C), "round up"),
    (lambda L, C: math.ceil(L / C) + 1, "need W/L ≥ 1/C"),
    (lambda L, C: math.ceil(C / L), "upside down"),
])
def test_7_4_rejects(wrong, hint):
    v = evaluate("7.4", wrong)
    assert v.status == FAIL and hint in v.message
