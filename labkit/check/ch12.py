"""Chapter 12's exercises: percentiles, MFU, a speedup with its interval, int8 size."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.hardware import GPUS
from labkit.perf.deploy import fp32_linear_bytes, int8_linear_bytes
from labkit.perf.metrics import mfu
from labkit.perf.stats import percentile, speedup_ci


def speedup_with_ci(baseline, candidate, level=0.95, resamples=2000, seed=0):
    """Reference: (speedup, low, high): median(baseline)/median(candidate), bootstrap."""
    ci = speedup_ci(baseline, candidate, level=level, resamples=resamples, seed=seed)
    return ci.estimate, ci.low, ci.high


def _samples():
    rng = np.random.default_rng(12)
    yield np.array([3.0, 1.0, 2.0])
    yield np.array([5.0])
    yield np.array([1.0, 10.0])
    for n in (7, 20, 101, 1000):
        x = rng.lognormal(-7, 0.3, n)
        x[rng.random(n) < 0.05] *= 5
        yield x


@exercise("12.1", "a percentile from samples", reference=percentile, binds="percentile")
def _(answer):
    for x in _samples():
        for q in (0, 50, 95, 99, 100, 37.5):
            got = answer(x.copy(), q)
            want = float(np.percentile(x, q))
            if np.isclose(got, want, rtol=1e-9, atol=0):
                continue
            s = np.sort(x)
            if x.size > 1 and np.isclose(got, np.percentile(x, q, method="lower"), rtol=1e-9,
                                         atol=0) or np.isclose(
                    got, s[min(int(np.ceil(q / 100 * x.size)) - 1, x.size - 1)] if q > 0
                    else s[0], rtol=1e-9, atol=0):
                raise Wrong(f"n={x.size}, q={q}: {got:.6g} is a sample itself; interpolate "
                            f"between the two samples around position (n-1)·q/100.")
            if x.size > 1 and np.isclose(got, np.interp(q / 100 * x.size - 0.5,
                                                        np.arange(x.size), s), rtol=1e-9, atol=0):
                raise Wrong(f"n={x.size}, q={q}: the position is (n-1)·q/100, not n·q/100.")
            if not np.isclose(got, want, rtol=1e-9, atol=0) and np.isclose(
                    got, _unsorted(x, q), rtol=1e-9, atol=0):
                raise Wrong("sort the samples first: percentiles are positions in the "
                            "sorted order.")
            raise Wrong(f"percentile(n={x.size}, q={q}) = {got:.6g}, expected {want:.6g} "
                        f"(linear interpolation at position (n-1)·q/100 of the sorted samples).")


def _unsorted(x, q):
    h = (x.size - 1) * q / 100
    lo = int(np.floor(h))
    hi = min(lo + 1, x.size - 1)
    return x[lo] + (h - lo) * (x[hi] - x[lo])


formula_exercise(
    "12.2", "MFU of a run", mfu,
    cases=[(19072.0, 50000.0, 1.5e11, True), (19072.0, 50000.0, 1.5e11, False),
           (2 * 7e9, 3000.0, 8 * GPUS["H100"].peak("bf16"), True), (1e6, 1.0, 1e12, True)],
    call=lambda f, s, peak, tr: f"mfu({f:g}, {s:g}, {peak:.3g}, training={tr})",
    shortcuts=[
        (lambda got, f, s, peak, tr: tr and math.isclose(got, f * s / peak, rel_tol=1e-9),
         "a training step runs forward and backward: model FLOPs are 3 × the forward FLOPs "
         "(backward ≈ 2 × forward)."),
        (scaled(mfu, 100),
         "return a fraction (0.42), not a percentage (42)."),
        (lambda got, f, s, peak, tr: not tr and math.isclose(got, 3 * f * s / peak,
                                                             rel_tol=1e-9),
         "inference runs the forward pass only: no factor 3."),
        (lambda got, f, s, peak, tr: tr and math.isclose(got, 2 * f * s / peak, rel_tol=1e-9),
         "backward ≈ 2 × forward comes on top of the forward itself: a training step is "
         "3 × the forward FLOPs."),
        (scaled(mfu, 2),
         "forward_flops_per_sample is in FLOPs already (2 per multiply-add): do not double "
         "it; PaLM's 6N per token is 3 × the forward's 2N.")],
    hint="MFU = (3 if training else 1) × forward FLOPs per sample × samples/s / peak "
         "(Chowdhery et al., PaLM, 2022, appendix B).")


@exercise("12.3", "a speedup with its confidence interval", reference=speedup_with_ci,
          binds="speedup_with_ci")
def _(answer):
    rng = np.random.default_rng(3)
    for n_a, n_b, ratio in ((40, 40, 2.0), (25, 60, 1.1), (60, 30, 0.8)):
        a = rng.lognormal(np.log(1e-3), 0.1, n_a)
        a[:3] *= 6                                   # a few runs hit by a neighbour
        b = rng.lognormal(np.log(1e-3 / ratio), 0.1, n_b)
        got = answer(a.copy(), b.copy())
        if not isinstance(got, tuple) or len(got) != 3:
            raise Wrong("return a triple (speedup, low, high).")
        s, lo, hi = (float(t) for t in got)
        want = speedup_with_ci(a, b, resamples=4000)
        if np.isclose(s, np.median(b) / np.median(a), rtol=1e-9, atol=0):
            raise Wrong("speedup = median(baseline) / median(candidate): above 1 means the "
                        "candidate is faster.")
        if np.isclose(s, a.mean() / b.mean(), rtol=1e-9, atol=0):
            raise Wrong("the mean is dragged by the slow outliers; use the medians.")
        if not np.isclose(s, want[0], rtol=1e-9, atol=0):
            raise Wrong(f"speedup {s:.4g}, expected median(a)/median(b) = {want[0]:.4g}.")
        if not lo <= s <= hi:
            raise Wrong(f"the interval [{lo:.4g}, {hi:.4g}] must contain the estimate {s:.4g}.")
        width = want[2] - want[1]
        if hi - lo < 0.5 * width:
            raise Wrong(f"interval [{lo:.4g}, {hi:.4g}] is too narrow (expected about "
                        f"[{want[1]:.4g}, {want[2]:.4g}]): resample both sets with "
                        f"replacement, take the 2.5th and 97.5th percentiles of the ratios.")
        if abs(lo - want[1]) > 0.25 * width + 1e-12 or abs(hi - want[2]) > 0.25 * width + 1e-12:
            raise Wrong(f"interval [{lo:.4g}, {hi:.4g}], expected about [{want[1]:.4g}, "
                        f"{want[2]:.4g}]: bootstrap the ratio of medians, both sets "
                        f"resampled independently.")
    # the level is an argument, not a constant: a 50 % interval is about half as wide
    _, lo, hi = (float(t) for t in answer(a.copy(), b.copy(), level=0.5))
    want = speedup_with_ci(a, b, level=0.5, resamples=4000)
    width = want[2] - want[1]
    if abs(lo - want[1]) > 0.25 * width + 1e-12 or abs(hi - want[2]) > 0.25 * width + 1e-12:
        raise Wrong(f"with level=0.5 the interval is [{lo:.4g}, {hi:.4g}], expected about "
                    f"[{want[1]:.4g}, {want[2]:.4g}]: take the (1-level)/2 and (1+level)/2 "
                    f"quantiles of the resampled ratios.")


def _weights_biases(layers):
    """(weights, biases) of Linear layers given as (in_features, out_features)."""
    return sum(i * o for i, o in layers), sum(o for _, o in layers)


def _int8_shortcut(wrong):
    """The test "the answer is ``wrong(weights, biases, layer count)``"."""
    return equals(lambda layers: wrong(*_weights_biases(layers), len(layers)))


formula_exercise(
    "12.4", "size of an int8 model", int8_linear_bytes, binds="int8_bytes",
    cases=[([(64, 128), (128, 10)],), ([(10, 50), (50, 1)],),
           ([(784, 512), (512, 512), (512, 10)],), ([(1, 1)],)],
    call=lambda layers: f"int8_bytes({layers})", rtol=0,
    shortcuts=[
        (_int8_shortcut(lambda w, b, n: w + b + 8 * n),
         "dynamic quantization keeps the biases in fp32: 4 bytes each."),
        (_int8_shortcut(lambda w, b, n: w + 4 * b),
         "each quantized weight tensor also stores its scale (fp32) and zero point (int32): "
         "8 bytes per layer."),
        (equals(fp32_linear_bytes),
         "that is the fp32 model, 4 bytes per weight; an int8 weight takes 1."),
        (_int8_shortcut(lambda w, b, n: w + b),
         "only the weights become int8; biases stay fp32, and each layer adds a scale and a "
         "zero point.")],
    hint="1 byte per int8 weight, 4 per fp32 bias, and 8 per layer for the weight's scale "
         "and zero point.")
