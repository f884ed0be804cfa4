"""Chapter 07's exercises: data pipelines."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
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


@exercise("7.2", "throughput bound of a loader", reference=steady_throughput,
          binds="steady_throughput")
def _(answer):
    cases = [(0.032, 0.012, 0, 2), (0.032, 0.012, 1, 2), (0.032, 0.012, 2, 2),
             (0.032, 0.012, 4, 2), (0.032, 0.012, 4, 16), (0.004, 0.010, 3, 8),
             (0.050, 0.005, 8, 4), (0.020, 0.020, 1, 1), (0.010, 0.001, 16, 64)]
    for L, C, W, cores in cases:
        try:
            got = float(answer(L, C, W, cores))
        except ZeroDivisionError:
            raise Wrong(f"with workers=0 the training process loads the batch itself: "
                        f"1/(L + C); do not divide by W.") from None
        want = steady_throughput(L, C, W, cores)
        if np.isclose(got, want, rtol=1e-6):
            continue
        if W and np.isclose(got, 1 / max(C, L / W), rtol=1e-6):
            raise Wrong(f"L={L}, C={C}, workers={W}, cores={cores}: you gave {got:.4g} batches/s "
                        f"but only {cores} cores exist: all the CPU work, L + C per batch, "
                        f"shares them, so the rate is at most cores / (L + C).")
        if np.isclose(got, 1 / (L + C), rtol=1e-6):
            raise Wrong(f"workers={W}: with workers the loading overlaps the step; the slowest "
                        f"resource sets the rate, not the sum.")
        expect_close(got, want, f"steady_throughput({L}, {C}, {W}, {cores})", rtol=1e-6,
                     hint="1/(L+C) without workers, else 1 / max(C, L/W, (L+C)/cores).")


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


@exercise("7.4", "workers that keep the accelerator busy", reference=workers_needed,
          binds="workers_needed")
def _(answer):
    for L, C in ((0.032, 0.012), (0.030, 0.010), (0.005, 0.020), (0.1, 0.009), (0.021, 0.007),
                 (0.0101, 0.0050)):
        got = answer(L, C)
        want = workers_needed(L, C)
        if isinstance(got, float) and not float(got).is_integer():
            raise Wrong(f"workers_needed({L}, {C}) = {got}: a worker count is a whole number; "
                        f"round L/C up.")
        if got == math.floor(L / C) and got != want:
            raise Wrong(f"L={L}, C={C}: {got} workers deliver {got}/{L} = {got / L:.1f} batches/s, "
                        f"fewer than the {1 / C:.1f} the step consumes: round up, not down.")
        if got != want:
            raise Wrong(f"workers_needed({L}, {C}) = {got}, expected {want}: W workers deliver "
                        f"W/L batches per second; need W/L ≥ 1/C (and at least one worker).")
