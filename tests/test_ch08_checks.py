"""Chapter 08's checkers accept the references and reject wrong or missing answers."""
import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch08  # noqa: F401
from labkit.compress.model import magnitude_mask


@pytest.mark.parametrize("ex", ["8.1", "8.2", "8.3", "8.4", "8.5"])
def test_reference_passes_and_missing_is_missing(ex):
    assert evaluate(ex, get(ex).reference).status == PASS
    assert evaluate(ex, None).status == MISSING


def _no_zero(x, b):
    s = (x.max() - x.min()) / (2 ** b - 1)
    return s, int(round(-x.min() / s))


def _pow2(x, b):
    lo, hi = min(x.min(), 0), max(x.max(), 0)
    s = (hi - lo) / 2 ** b
    return s, int(round(-lo / s))


def _unrounded(x, b):
    lo, hi = min(x.min(), 0), max(x.max(), 0)
    s = (hi - lo) / (2 ** b - 1)
    return s, -lo / s


@pytest.mark.parametrize("wrong, hint", [(_no_zero, "include 0"), (_pow2, "2^b - 1"),
                                         (_unrounded, "integer")])
def test_8_1_rejects(wrong, hint):
    v = evaluate("8.1", wrong)
    assert v.status == FAIL and hint in v.message


def _per_tensor(w, b):
    s = np.abs(w).max() / (2 ** (b - 1) - 1)
    return np.round(w / s), np.full(w.shape[0], s)


def _cols(w, b):
    s = np.abs(w).max(axis=0) / (2 ** (b - 1) - 1)
    return np.round(w / s), s


def _pow2_scale(w, b):
    s = np.abs(w).max(axis=1) / 2 ** (b - 1)
    return np.clip(np.round(w / s[:, None]), -(2 ** (b - 1) - 1), 2 ** (b - 1) - 1), s


def _no_clip(w, b):
    s = np.abs(w).max(axis=1) / 2 ** (b - 1)
    return np.round(w / s[:, None]), s


@pytest.mark.parametrize("wrong, hint", [(_per_tensor, "per-tensor"), (_cols, "wrong axis"),
                                         (_pow2_scale, "2^(b-1) - 1"), (_no_clip, "clip")])
def test_8_2_rejects(wrong, hint):
    v = evaluate("8.2", wrong)
    assert v.status == FAIL and hint in v.message


def _no_skip(s, inf, g, gi):
    return (s / 2, 0, False) if inf else ch08.loss_scale_step(s, inf, g, gi)


def _keep_count(s, inf, g, gi):
    return (s / 2, g, True) if inf else ch08.loss_scale_step(s, inf, g, gi)


def _off_by_one(s, inf, g, gi):
    if inf:
        return s / 2, 0, True
    return (s * 2, 0, False) if g >= gi else (s, g + 1, False)


def _grow_on_overflow(s, inf, g, gi):
    return (s * 2, 0, True) if inf else ch08.loss_scale_step(s, inf, g, gi)


@pytest.mark.parametrize("wrong, hint", [(_no_skip, "skip"), (_keep_count, "resets"),
                                         (_off_by_one, "count this good step first"),
                                         (_grow_on_overflow, "halve")])
def test_8_3_rejects(wrong, hint):
    v = evaluate("8.3", wrong)
    assert v.status == FAIL and hint in v.message


def _prune_strongest(w, sp):
    k = int(round(sp * w.shape[0]))
    keep = np.ones(w.shape[0], bool)
    keep[np.argsort(np.linalg.norm(w, axis=1))[::-1][:k]] = False
    return np.repeat(keep[:, None], w.shape[1], 1)


def _floor_count(w, sp):
    k = int(sp * w.shape[0])
    keep = np.ones(w.shape[0], bool)
    keep[np.argsort(np.linalg.norm(w, axis=1))[:k]] = False
    return np.repeat(keep[:, None], w.shape[1], 1)


def _min_entry(w, sp):     # rank rows by their smallest |entry|
    k = int(round(sp * w.shape[0]))
    keep = np.ones(w.shape[0], bool)
    keep[np.argsort(np.abs(w).min(axis=1))[:k]] = False
    return np.repeat(keep[:, None], w.shape[1], 1)


def _row_norm(order):       # rank rows by another norm (L1 or L-infinity)
    def mask(w, sp):
        k = int(round(sp * w.shape[0]))
        keep = np.ones(w.shape[0], bool)
        keep[np.argsort(np.linalg.norm(w, ord=order, axis=1), kind="stable")[:k]] = False
        return np.repeat(keep[:, None], w.shape[1], 1)
    return mask


@pytest.mark.parametrize("wrong, hint", [(magnitude_mask, "single weights"),
                                         (_prune_strongest, "smallest L2"),
                                         (_floor_count, "round"), (_min_entry, "smallest L2"),
                                         (_row_norm(np.inf), "smallest L2"),
                                         (_row_norm(1), "smallest L2")])
def test_8_4_rejects(wrong, hint):
    v = evaluate("8.4", wrong)
    assert v.status == FAIL and hint in v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda k, m, n, f: (k * k * m, k * k * m * f * f), "pointwise"),
    (lambda k, m, n, f: (k * k * m * n + m * n, k * k * m * n * f * f + m * n * f * f), "one input"),
    (lambda k, m, n, f: (k * k * m + m * n, k * k * m + m * n), "all D_F²"),
    (lambda k, m, n, f: (k * k * m * n, k * k * m * n * f * f), "expected"),
])
def test_8_5_rejects(wrong, hint):
    v = evaluate("8.5", wrong)
    assert v.status == FAIL and hint in v.message
