"""Chapter 09's exercises: data parallelism and collective communication."""
from __future__ import annotations

from collections import Counter

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.parallel.collectives import reduce_scatter
from labkit.parallel.compression import topk_compress
from labkit.parallel.cost import collective_time
from labkit.parallel.dp_sim import make_buckets
from labkit.parallel.launch import fit_alpha_beta


def ring_reduce_scatter(buffers):
    """Reference: (chunks, messages) of the ring reduce-scatter, messages as
    (step, sender, receiver, chunk index)."""
    run = reduce_scatter([np.asarray(b) for b in buffers], "ring")
    return list(run.outputs), [(m.step, m.sender, m.receiver, m.chunk[0]) for m in run.log]


def ring_allreduce_time(nbytes, world, alpha, beta):
    """Reference: ring all-reduce time 2(p-1)α + 2(p-1)/p·nβ."""
    return collective_time("all_reduce", "ring", nbytes, world, alpha=alpha, beta=beta)


def fit_ring_alpha_beta(nbytes, seconds, world):
    """Reference: (α, β) of the ring all-reduce fitted by least squares."""
    f = fit_alpha_beta(nbytes, seconds, world, "ring")
    return f.alpha, f.beta


def _rs_cases():
    rng = np.random.default_rng(9)
    for p, n in ((1, 3), (2, 5), (3, 7), (4, 4), (5, 13), (8, 19), (7, 7)):
        yield p, [rng.normal(size=n) * 10.0 ** rng.integers(-2, 3) for _ in range(p)]


@exercise("9.1", "ring reduce-scatter, step by step", reference=ring_reduce_scatter,
          binds="ring_reduce_scatter")
def _(answer):
    for p, bufs in _rs_cases():
        before = [b.copy() for b in bufs]
        got = answer([b.copy() for b in bufs])
        if not isinstance(got, tuple) or len(got) != 2:
            raise Wrong("return a pair (chunks, messages).")
        chunks, msgs = got
        want = np.array_split(np.sum(before, axis=0), p)
        if len(chunks) != p:
            raise Wrong(f"with {p} ranks you returned {len(chunks)} chunks; rank r keeps chunk r.")
        for r in range(p):
            expect_close(chunks[r], want[r], f"world={p}, size={bufs[0].size}: rank {r}'s chunk",
                         hint="rank r must end with chunk r of the sum (chunks as "
                              "np.array_split cuts them); in step s rank r sends chunk "
                              "(r - s - 1) mod p to rank r + 1, which adds it.")
        msgs = [tuple(int(v) for v in m) for m in msgs]
        if len(msgs) != p * (p - 1):
            raise Wrong(f"world={p}: you logged {len(msgs)} messages; a ring reduce-scatter "
                        f"sends p(p-1) = {p * (p - 1)} (p-1 steps, every rank sends once each).")
        for step, src, dst, c in msgs:
            if dst != (src + 1) % p:
                raise Wrong(f"world={p}: message {src} → {dst}; in a ring rank r only sends "
                            f"to (r + 1) mod p.")
            if not 0 <= step < p - 1:
                raise Wrong(f"world={p}: step {step} is outside 0..{p - 2}.")
        per_step = Counter((s, src) for s, src, _, _ in msgs)
        if any(v != 1 for v in per_step.values()):
            raise Wrong(f"world={p}: some rank sends twice in one step; each rank sends one "
                        f"chunk per step.")
        for step, src, _, c in msgs:
            if c != (src - step - 1) % p:
                raise Wrong(f"world={p}: in step {step} rank {src} sent chunk {c}; it should "
                            f"send chunk (r - s - 1) mod p = {(src - step - 1) % p} so that "
                            f"rank r ends with chunk r.")


@exercise("9.2", "ring all-reduce time (seed exercise 4)", reference=ring_allreduce_time,
          binds="ring_allreduce_time")
def _(answer):
    cases = [(4e8, 8, 5e-6, 1 / 150e9), (1e3, 8, 5e-6, 1 / 150e9), (1e6, 2, 2e-5, 1e-9),
             (12345.0, 3, 1e-4, 3e-10), (1e9, 64, 1e-5, 1 / 25e9), (1e6, 1, 1e-5, 1e-9)]
    for n, p, a, b in cases:
        got = answer(n, p, a, b)
        want = ring_allreduce_time(n, p, a, b)
        if p == 1:
            if not np.isclose(got, 0.0):
                raise Wrong(f"with world=1 nothing is sent: the time is 0, you gave {got}.")
            continue
        if np.isclose(got, want, rtol=1e-6, atol=0):
            continue
        if np.isclose(got, 2 * (p - 1) * a + 2 * (p - 1) * n * b):
            raise Wrong(f"ring_allreduce_time({n:g}, {p}, ...) = {got:.4g}: each message "
                        f"carries n/p bytes, not n.")
        if np.isclose(got, (p - 1) * a + (p - 1) / p * n * b):
            raise Wrong("that is only the reduce-scatter; the all-gather costs as much again.")
        expect_close(got, want, f"ring_allreduce_time({n:g}, {p}, {a:g}, {b:.3g})", rtol=1e-6,
                     atol=0, hint="T = 2(p-1)·α + 2(p-1)/p·n·β (Patarasuk and Yuan 2009).")


@exercise("9.3", "fit α and β to all-reduce timings", reference=fit_ring_alpha_beta,
          binds="fit_ring_alpha_beta")
def _(answer):
    rng = np.random.default_rng(3)
    for p, alpha, beta in ((2, 3e-5, 1 / 2e9), (4, 8e-6, 1 / 20e9), (8, 1e-4, 1 / 1e9)):
        n = np.geomspace(1e3, 1e8, 9)
        t = np.array([ring_allreduce_time(x, p, alpha, beta) for x in n])
        for noise in (0.0, 0.02):
            tt = t * (1 + noise * rng.standard_normal(t.size))
            a, b = answer(n, tt, p)
            tol = 1e-6 if noise == 0 else 0.25
            if not np.isclose(a, alpha, rtol=tol):
                if np.isclose(a, 2 * (p - 1) * alpha, rtol=max(tol, 0.05)):
                    raise Wrong(f"α = {a:.3g} is the intercept itself; divide it by 2(p-1) = "
                                f"{2 * (p - 1)} to get the per-message latency.")
                raise Wrong(f"world={p}, noise={noise}: α = {a:.3g}, expected ≈ {alpha:.3g}. "
                            f"Fit t = A + B·n, then α = A / (2(p-1)).")
            if not np.isclose(b, beta, rtol=tol):
                raise Wrong(f"world={p}, noise={noise}: β = {b:.3g} s/B, expected ≈ "
                            f"{beta:.3g}. The slope B equals 2(p-1)/p · β.")


@exercise("9.4", "DDP gradient buckets", reference=make_buckets, binds="make_buckets")
def _(answer):
    cases = [([4, 4, 4, 4], 8), ([10, 1, 1, 1, 30, 2], 12), ([1, 2, 3], 100), ([50], 10),
             ([5, 5, 5], 5), ([3, 9, 2, 2, 2, 7, 1], 9), ([0, 0, 6], 4)]
    for sizes, cap in cases:
        got = [list(map(int, b)) for b in answer(list(sizes), cap)]
        want = make_buckets(sizes, cap)
        if got != want:
            flat = [i for b in got for i in b]
            if flat != list(range(len(sizes))):
                raise Wrong(f"make_buckets({sizes}, {cap}) = {got}: every gradient must be in "
                            f"exactly one bucket, in the order backward produces them.")
            raise Wrong(f"make_buckets({sizes}, {cap}) = {got}, expected {want}: close a "
                        f"bucket as soon as it holds >= cap bytes; the last one may be smaller.")


@exercise("9.5", "top-k with error feedback", reference=topk_compress, binds="topk_ef")
def _(answer):
    rng = np.random.default_rng(5)
    for shape, k in (((10,), 3), ((6, 7), 5), ((100,), 1), ((4, 4), 16), ((9,), 0)):
        g = rng.standard_normal(shape) * rng.uniform(0.1, 10, shape)
        mem = rng.standard_normal(shape) * 0.5
        kept, new_mem = answer(g.copy(), mem.copy(), k)
        want_kept, want_mem = topk_compress(g, mem, k)
        if np.shape(kept) != g.shape:
            raise Wrong(f"kept has shape {np.shape(kept)}; return it shaped like the gradient "
                        f"{g.shape}.")
        if np.count_nonzero(kept) != k:
            raise Wrong(f"k={k}: you kept {np.count_nonzero(kept)} entries.")
        if np.allclose(kept, topk_compress(g, np.zeros_like(g), k)[0]) and k and \
                not np.allclose(kept, want_kept):
            raise Wrong("you picked the top k of the gradient alone; add the memory (the "
                        "error left over from earlier steps) first.")
        expect_close(kept, want_kept, f"kept (shape {shape}, k={k})",
                     hint="keep the k entries of grad + memory with the largest |value|.")
        expect_close(new_mem, want_mem, f"new memory (shape {shape}, k={k})",
                     hint="the new memory is (grad + memory) minus what you sent.")
