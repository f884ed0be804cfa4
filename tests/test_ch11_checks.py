"""Chapter 11's checkers accept the references and reject missing and plausible wrong answers."""
import math

import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch11
from labkit.cluster.stragglers import harmonic
from mutants import mutant


@pytest.mark.parametrize("ex", ["11.1", "11.2", "11.3", "11.4", "11.5"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _fits_now(now, free, running, head, g, est):
    return g <= free


@pytest.mark.parametrize("wrong, hint", [
    (_fits_now, "Fitting now is not enough"),
    (lambda *a: 1, "True or False"),
])
def test_11_1_rejects(wrong, hint):
    v = evaluate("11.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("old, new, hint", [
    pytest.param(" or job_gpus <= extra", "", "extra", id="extra-gpus-forgotten"),
    pytest.param("extra = avail - head_gpus", "extra = free_gpus - head_gpus", "extra",
                 id="extra-without-the-gpus-given-back"),
    pytest.param("for end, g in sorted(running):", "for end, g in running:", "shadow",
                 id="running-in-list-order"),
    pytest.param("now + job_estimate <= shadow", "now + job_estimate < shadow",
                 "no later than", id="strict-shadow"),
])
def test_11_1_rejects_the_reference_with_one_change(old, new, hint):
    v = evaluate("11.1", mutant(get("11.1").reference, old, new))
    assert v.status == FAIL and hint in v.message, v.message


def _daly_no_minus(c, m):
    return ch11.daly_interval(c, m) + c if c < 2 * m else m


@pytest.mark.parametrize("wrong, hint", [
    (lambda c, m: math.sqrt(2 * c * m), "Young"),
    (lambda c, m: math.sqrt(c * m), "factor 2"),
    (_daly_no_minus, "− C"),
    (lambda c, m: math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c,
     "simply M"),
])
def test_11_2_rejects(wrong, hint):
    v = evaluate("11.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda L, m: L / 2, "uniform"),
    (lambda L, m: m, "without the condition"),
    (lambda L, m: m - L / math.exp(L / m), "M − L"),
])
def test_11_3_rejects(wrong, hint):
    v = evaluate("11.3", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, b, p, s: b * (1 + (s - 1) * p), "one worker's mean"),
    (lambda n, b, p, s: b * (1 + (s - 1) * min(1.0, n * p)), "union bound"),
    (lambda n, b, p, s: b * s, "only when"),
    (lambda n, b, p, s: b * (1 + (s - 1) * (1 - (1 - p) ** (n - 1))), "E[step]"),
])
def test_11_4_rejects(wrong, hint):
    v = evaluate("11.4", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, b, base, d: base + d * harmonic(n), "slowest of N"),
    (lambda n, b, base, d: base + d * harmonic(n + b), "slowest of all"),
    (lambda n, b, base, d: base + d * (harmonic(n) - harmonic(b)), "H_m − H_(m−N)"),
    (lambda n, b, base, d: base + d * math.log(n + 1), "H_(N+b) − H_b"),
])
def test_11_5_rejects(wrong, hint):
    v = evaluate("11.5", wrong)
    assert v.status == FAIL and hint in v.message, v.message
