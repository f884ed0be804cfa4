"""Chapter 07's exercises: data pipelines."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.check.formula import check_formula, equals, formula_exercise
from labkit.dataload.cifar import decode_record
from labkit.dataload.model import steady_throughput, wait_fraction, workers_needed


def _wait_cases():
    rng = np.random.default_rng(7)
    # uneven steps: a slow first batch (worker start-up) and a mix of short and long waits
    yield np.array([0.9, 0.01, 0.0, 0.02, 0.0]), np.array([0.01, 0.05, 0.05, 0.05, 0.05])
    yield np.array([0.0, 0.0]), np.array([0.1, 0.2])
    for _ in range(3):
        n = int(rng.integers(3, 30))
        yield rng.exponential(0.02, n) * (rng.random(n) < 0.6), rng.uniform(0.005, 0.05, n)


@exercise("7.1", "share of time waiting for data", reference=wait_fraction, binds="wait_fraction")
def _(answer):
    for w, c in _wait_cases():
        got = answer(w.copy(), c.copy())
        want = wait_fraction(w, c)
        if np.isclose(got, np.mean(w / (w + c))) and not np.isclose(got, want):
            raise Wrong("you averaged the per-step shares; a long stall in one step weighs more "
                        "than a short one: divide the total wait by the total time.")
        if np.isclose(got, w.sum() / c.sum()) and not np.isclose(got, want):
            raise Wrong("that is wait / compute; the share is wait / (wait + compute).")
        expect_close(got, want, f"wait_fraction for {len(w)} steps",
                     hint="Σ wait / (Σ wait + Σ compute).")


# (L, C, workers, cores). (4, 2) comes before (2, 2): there L/cores = L/W, so an answer
# without the cores bound and one whose cores bound leaves out the step agree; on (4, 2)
# they differ and each gets the hint that is true of it.
_THROUGHPUT_CASES = [(0.032, 0.012, 0, 2), (0.032, 0.012, 1, 2), (0.032, 0.012, 4, 2),
                     (0.032, 0.012, 2, 2), (0.032, 0.012, 4, 16), (0.004, 0.010, 3, 8),
                     (0.050, 0.005, 8, 4), (0.020, 0.020, 1, 1), (0.010, 0.001, 16, 64)]


def _rate_is(bound):
    """The test "with workers, the answer is 1 / max(bounds(L, C, W, cores))"."""
    def test(got, L, C, W, cores):
        return W > 0 and math.isclose(got, 1 / max(bound(L, C, W, cores)), rel_tol=1e-6)
    return test


_no_cores = _rate_is(lambda L, C, W, cores: (C, L / W))
_cores_without_step = [_rate_is(lambda L, C, W, cores: (C, L / W, L / cores)),
                       _rate_is(lambda L, C, W, cores: (L / W, L / cores))]


def _cores_share_load_only(got, *case):
    return any(test(got, *case) for test in _cores_without_step)


_THROUGHPUT_SHORTCUTS = [      # the step bound first: an answer without it may also match
    # the cores bound without the step where that bound binds, e.g. 1/max(L/W, L/cores)
    (_rate_is(lambda L, C, W, cores: (L / W, (L + C) / cores)),
     "the training step itself takes C: however many workers load, the rate is at most 1/C."),
    (lambda got, *case: _no_cores(got, *case) and not _cores_share_load_only(got, *case),
     "that leaves out the cores: all the CPU work, L + C per batch, shares them, so the "
     "rate is at most cores / (L + C)."),
    (lambda got, *case: _cores_share_load_only(got, *case) and not _no_cores(got, *case),
     "the cores bound leaves out the step: the training step (C) runs on the CPU too, so "
     "the cores share L + C per batch and the rate is at most cores / (L + C), not "
     "cores / L."),
    # only a single-case check_formula test reaches this today: guards a reordering of the cases
    (lambda got, *case: _no_cores(got, *case) or _cores_share_load_only(got, *case),
     "the cores bound is missing or too loose: all the CPU work, loading (L) and the step "
     "(C), shares the cores, so the rate is at most cores / (L + C)."),
    (equals(lambda L, C, W, cores: 1 / (L + C), rtol=1e-6),
     "with workers the loading overlaps the step; the slowest resource sets the rate, not "
     "the sum."),
    (equals(lambda L, C, W, cores: 1 / steady_throughput(L, C, W, cores), rtol=1e-6),
     "that is seconds per batch; return batches per second.")]


@exercise("7.2", "throughput bound of a loader", reference=steady_throughput,
          binds="steady_throughput")
def _(answer):
    try:
        check_formula(answer, steady_throughput, _THROUGHPUT_CASES, rtol=1e-6,
                      call=lambda L, C, W, cores: f"steady_throughput(L={L}, C={C}, "
                                                  f"workers={W}, cores={cores})",
                      shortcuts=_THROUGHPUT_SHORTCUTS,
                      hint="1/(L+C) without workers, else 1 / max(C, L/W, (L+C)/cores).")
    except ZeroDivisionError:     # only workers=0 divides by zero
        raise Wrong("with workers=0 the training process loads the batch itself: 1/(L + C); "
                    "do not divide by W.") from None


def _record(rng, label_bytes=1):
    img = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=label_bytes).astype(np.uint8)
    rec = labels.tobytes() + img.transpose(2, 0, 1).tobytes()
    return rec, int(labels[-1]), img


@exercise("7.3", "decode a CIFAR-10 binary record", reference=decode_record, binds="decode_record")
def _(answer):
    rng = np.random.default_rng(10)
    for k in range(4):
        rec, label, img = _record(rng)
        if k == 0:    # a recognisable image: red ramp along rows, green along columns
            img = np.zeros((32, 32, 3), np.uint8)
            img[..., 0] = np.arange(32)[:, None] * 8
            img[..., 1] = np.arange(32)[None, :] * 8
            img[..., 2] = 200
            rec = bytes([7]) + img.transpose(2, 0, 1).tobytes()
            label = 7
        got = answer(rec)
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("return a pair (label, image).")
        lab, im = got
        im = np.asarray(im)
        if int(lab) != label:
            raise Wrong(f"label {lab}, expected {label}: the label is the record's first byte.")
        if im.shape == (3, 32, 32):
            raise Wrong("that is CHW; return the image as (32, 32, 3), height × width × channel.")
        if im.shape != (32, 32, 3):
            raise Wrong(f"image shape {im.shape}; expected (32, 32, 3). The 3072 pixel bytes "
                        f"follow the label byte.")
        if np.array_equal(im, np.frombuffer(rec[1:], np.uint8).reshape(32, 32, 3)) \
                and not np.array_equal(im, img):
            raise Wrong("the pixels are not interleaved RGBRGB…: the record holds 1024 red bytes, "
                        "then 1024 green, then 1024 blue (planes), each 32×32 row-major.")
        if not np.array_equal(im, img):
            raise Wrong("pixel values differ: skip exactly one label byte, read three 32×32 "
                        "planes (R, G, B), then move the channel axis last.")


formula_exercise(
    "7.4", "workers that keep the accelerator busy", workers_needed,
    cases=[(0.032, 0.012), (0.030, 0.010), (0.005, 0.020), (0.1, 0.009), (0.021, 0.007),
           (0.0101, 0.0050)],
    call=lambda L, C: f"workers_needed(L={L}, C={C})",
    shortcuts=[
        (lambda got, L, C: not got.is_integer(),
         "a worker count is a whole number; round L/C up."),
        (equals(lambda L, C: math.floor(L / C)),
         "W workers deliver W/L batches per second, fewer than the 1/C the step consumes: "
         "round up, not down."),
        (equals(lambda L, C: math.ceil(C / L)),
         "that is C/L upside down: W workers deliver W/L batches per second and the step "
         "consumes 1/C, so W ≥ L/C.")],
    hint="W workers deliver W/L batches per second; need W/L ≥ 1/C (and at least one worker).")
