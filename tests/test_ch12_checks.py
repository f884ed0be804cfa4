"""Chapter 12's checkers accept the references and reject wrong or missing answers."""
import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch12


@pytest.mark.parametrize("ex", ["12.1", "12.2", "12.3", "12.4"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _nearest(x, q):
    s = np.sort(x)
    return float(s[int(round((len(s) - 1) * q / 100))])


def _n_not_n_minus_1(x, q):
    s = np.sort(x)
    return float(np.interp(q / 100 * len(s) - 0.5, np.arange(len(s)), s))


def _unsorted(x, q):
    return ch12._unsorted(np.asarray(x), q)


@pytest.mark.parametrize("wrong, hint", [
    (_nearest, "interpolate"), (_n_not_n_minus_1, "(n-1)"), (_unsorted, "sort"),
    (lambda x, q: float(np.mean(x)), "expected"),
])
def test_12_1_rejects(wrong, hint):
    v = evaluate("12.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda f, s, p, t: f * s / p, "3 ×"),
    (lambda f, s, p, t: 100 * (3 if t else 1) * f * s / p, "fraction"),
    (lambda f, s, p, t: 3 * f * s / p, "forward pass only"),
    (lambda f, s, p, t: (2 if t else 1) * f * s / p, "on top of the forward"),
    (lambda f, s, p, t: (6 if t else 2) * f * s / p, "do not double"),
    (lambda f, s, p, t: (3 if t else 1) * f * s / p / 8, "PaLM"),     # peak of one GPU of 8
])
def test_12_2_rejects(wrong, hint):
    v = evaluate("12.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def _inverted(a, b, **k):
    s, lo, hi = ch12.speedup_with_ci(b, a)
    return s, lo, hi


def _means(a, b, **k):
    s = a.mean() / b.mean()
    return s, s * 0.9, s * 1.1


def _zero_width(a, b, **k):
    s = np.median(a) / np.median(b)
    return s, s, s


def _min_max(a, b, **k):
    s = np.median(a) / np.median(b)
    return s, a.min() / b.max(), a.max() / b.min()


@pytest.mark.parametrize("wrong, hint", [
    (_inverted, "above 1"), (_means, "medians"), (_zero_width, "too narrow"),
    (_min_max, "expected about"),
])
def test_12_3_rejects(wrong, hint):
    v = evaluate("12.3", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_12_3_accepts_another_seed_and_a_t_free_bootstrap():
    assert evaluate("12.3", lambda a, b, level=0.95: ch12.speedup_with_ci(
        a, b, level=level, seed=7)).status == PASS


def test_12_3_rejects_a_level_typed_in():
    """A bootstrap that hard-codes the 95 % (or 90 %) percentiles ignores ``level``."""
    for fixed in (0.95, 0.90):
        v = evaluate("12.3", lambda a, b, level=0.95, f=fixed: ch12.speedup_with_ci(
            a, b, level=f, seed=7))
        assert v.status == FAIL and "level=0.5" in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda L: sum(i * o + o + 8 for i, o in L), "biases in fp32"),
    (lambda L: sum(i * o + 4 * o for i, o in L), "scale"),
    (lambda L: sum(i * o + o for i, o in L), "only the weights"),
    (lambda L: sum(4 * (i * o + o) for i, o in L), "fp32 model"),
    (lambda L: sum(i * o + 4 * o + 4 for i, o in L), "8 per layer"),      # scale only
])
def test_12_4_rejects(wrong, hint):
    v = evaluate("12.4", wrong)
    assert v.status == FAIL and hint in v.message, v.message
