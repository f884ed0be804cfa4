"""Chapter 05's exercises: a reduction, a tiled matmul, online softmax, arithmetic intensity.

Kernels run under labkit's tracer on seeded, non-uniform inputs (sizes not multiples of
the block), are compared with numpy, and must keep to a memory budget from the trace.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.check.ch04 import _budget, _rng, _run
from labkit.check.core import Wrong, exercise, expect_close
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.kernels import library as lib
from labkit.kernels.analysis import element_counts, summarize
from labkit.kernels.models import matmul_traffic
from labkit.validate import ceil_div as cdiv

BLOCK = 64
TILE = 8
LEVELS = int(math.log2(BLOCK))


def _block_inputs(sizes, seed0: int, shift: float):
    """The inputs of the one-block-per-BLOCK-elements kernels (5.1, 5.5): per size n, a
    seeded float32 array ``a`` (mean ``shift``), its number of blocks, and ``a`` padded
    with zeros to whole blocks, shaped (blocks, BLOCK) — what the threads past the end see."""
    for seed, n in enumerate(sizes):
        a = (_rng(seed0 + seed).standard_normal(n) + shift).astype(np.float32)
        blocks = cdiv(n, BLOCK)
        padded = np.zeros((blocks, BLOCK), dtype=np.float32)
        padded.flat[:n] = a
        yield a, blocks, padded


def _expect_log_steps(trace, summary, reference_trace, blocks: int, *, algorithm: str,
                      steps: str, serial: str, reference: str, divergent: str) -> None:
    """Raise Wrong unless a right-valued block kernel works in parallel like its reference:
    every thread passes log2(BLOCK) barriers after the load (one thread looping over the
    block passes one), and its SIMT efficiency reaches the reference's (a loop in thread 0
    behind log2(BLOCK) barriers does not). ``steps`` names what the barriers separate in
    the ``algorithm``; ``serial`` and ``divergent`` are the two hints."""
    levels = trace.syncs / (blocks * BLOCK) - 1      # barriers per thread after the load
    # Warp shuffles finish the last 32 values without barriers (Harris's last step,
    # lib.reduce_fast): then fewer barriers are right, and SIMT efficiency still judges.
    if levels < LEVELS and trace.shuffles == 0:
        raise Wrong(f"right values, but each thread passed {max(levels, 0):.0f} {steps} behind "
                    f"cuda.syncthreads() (a {algorithm} of {BLOCK} values needs log2({BLOCK}) "
                    f"= {LEVELS}): {serial}")
    ref = summarize(reference_trace)
    if summary.simt_efficiency < ref.simt_efficiency - 1e-9:
        raise Wrong(f"right values, but SIMT efficiency is {summary.simt_efficiency:.0%} "
                    f"({reference} reaches {ref.simt_efficiency:.0%}): {divergent}")


@exercise("5.1", "a shared-memory tree reduction", reference=lib.reduce_shared(BLOCK),
          binds="reduce_block")
def _(answer):
    for a, blocks, padded in _block_inputs((1, 63, 200), seed0=30, shift=0.5):
        n = a.size
        out = np.zeros(blocks, dtype=np.float32)
        trace = _run(answer, blocks, BLOCK, a, out)
        expect_close(out, padded.sum(axis=1), f"partial sums for n={n}", rtol=1e-4, atol=1e-4,
                     hint="out[blockIdx.x] is the sum of that block's elements; threads "
                     "past the end contribute 0; call cuda.syncthreads() after each step")
        summary = _budget(trace, "Load each element once; halve the number of active "
                          "threads each step with `if t < s: buf[t] += buf[t + s]` so lanes "
                          "read consecutive words.", max_global_reads=n,
                          max_global_writes=blocks, max_conflict_ways=1,
                          max_shared_reads=blocks * 2 * BLOCK)
        _expect_log_steps(
            trace, summary, _run(lib.reduce_shared(BLOCK), blocks, BLOCK, a,
                                 np.zeros(blocks, dtype=np.float32)), blocks,
            algorithm="tree", steps="tree levels",
            serial="halve the active threads each step and synchronise after every step — "
                   "one thread adding in a loop is a serial sum.",
            reference="the sequential tree",
            divergent="the active lanes are scattered over the warps (divergence). Keep them "
                      "contiguous with `if t < s:` and s = BLOCK/2, BLOCK/4, ...")


@exercise("5.2", "a shared-memory tiled matmul", reference=lib.matmul_tiled(TILE),
          binds="matmul_tiled")
def _(answer):
    for seed, (m, k, n) in enumerate([(9, 11, 13), (17, 8, 5)]):
        rng = _rng(seed + 40)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.zeros((m, n), dtype=np.float32)
        trace = _run(answer, (cdiv(n, TILE), cdiv(m, TILE)), (TILE, TILE), a, b, c)
        expect_close(c, a @ b, f"c for a {a.shape} @ b {b.shape}", rtol=1e-4, atol=1e-4,
                     hint="threadIdx.x is the column j, threadIdx.y the row i; load zeros "
                     "outside a and b; syncthreads after loading and after using a tile")
        model = matmul_traffic(m, n, k, "tiled", TILE)
        _budget(trace, f"Each element of a may be read at most ceil(n / TILE) = "
                f"{model.max_reads_a} times: load tiles into shared memory and read the "
                "inner products from there.",
                max_reads_per_element={"a": model.max_reads_a, "b": model.max_reads_b})


def softmax_reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@exercise("5.3", "online softmax, one thread per row", reference=lib.softmax_rows_online,
          binds="softmax_online")
def _(answer):
    for seed, (rows, cols) in enumerate([(5, 9), (33, 20)]):
        x = (_rng(seed + 50).standard_normal((rows, cols)) * 4).astype(np.float32)
        x[0, -1] = 60.0  # a late maximum: the running sum must be rescaled
        out = np.zeros_like(x)
        trace = _run(answer, cdiv(rows, 32), 32, x, out)
        expect_close(out, softmax_reference(x), f"softmax for shape {x.shape}",
                     rtol=1e-4, atol=1e-6,
                     hint="when the max grows from m to m', multiply the running sum by "
                     "exp(m - m'); subtract the final max before exp in the second pass")
        worst = int(element_counts(trace, "x").max())
        if worst > 2:
            raise Wrong(f"right values, but an element of x was read {worst} times (budget "
                        "2): compute the max and the sum in one pass.")
        _budget(trace, "Every global read and write counts, out included: keep the running "
                "max and sum in registers (one pass reading x), then one pass that reads x "
                "and writes out once.", max_global_reads=2 * x.size,
                max_global_writes=x.size)


def tiled_intensity(n: int, tile: int) -> float:
    """FLOP per byte of global traffic of the tiled matmul of two n x n float32 matrices:
    2 n^3 / (4 (2 n^2 ceil(n / tile) + n^2))."""
    t = math.ceil(n / tile)
    return 2 * n ** 3 / (4 * (2 * n * n * t + n * n))


formula_exercise(
    "5.4", "arithmetic intensity of the tiled matmul", tiled_intensity,
    cases=[(1024, 16), (1024, 32), (100, 16), (7, 8), (4096, 64)],
    call=lambda n, tile: f"tiled_intensity({n}, {tile})", rtol=1e-6, atol=1e-8,
    shortcuts=[
        (scaled(tiled_intensity, 4, rtol=1e-6),
         "count bytes, not elements (float32 is 4 bytes)."),
        (equals(lambda n, tile: 2 * n ** 3 / (4 * (2 * n ** 3 + n * n)), rtol=1e-6),
         "that is the naive kernel's: with tiles each element of a and b is read "
         "ceil(n / tile) times.")],
    hint="count the FLOPs of the product, then the tiled kernel's global loads (how many "
         "times is each element of a and of b loaded, also when tile does not divide n?) and "
         "its stores, 4 bytes each.")


# ---- 5.5 a block scan --------------------------------------------------------------------

@exercise("5.5", "an inclusive block scan (Hillis-Steele)", reference=lib.scan_block(BLOCK),
          binds="scan_block")
def _(answer):
    for a, blocks, padded in _block_inputs((150, 64, 1), seed0=70, shift=0.25):
        n = a.size
        out = np.zeros_like(a)
        sums = np.zeros(blocks, dtype=np.float32)
        trace = _run(answer, blocks, BLOCK, a, out, sums)
        want = np.cumsum(padded, axis=1)
        if np.allclose(out, (want - padded).reshape(-1)[:n], atol=1e-4):
            raise Wrong("out is the exclusive scan (out[i] leaves a[i] out): the inclusive "
                        "scan adds a[i] too.")
        expect_close(out, want.reshape(-1)[:n], f"out for n={n}", rtol=1e-4, atol=1e-4,
                     hint="step d (1, 2, 4, ...) adds the value d places to the left when "
                     "t >= d; read from one buffer and write the other, syncthreads, swap")
        expect_close(sums, want[:, -1], f"sums for n={n}", rtol=1e-4, atol=1e-4,
                     hint="the last thread of each block writes the block's total to "
                     "sums[blockIdx.x]")
        summary = _budget(trace, "Load each element once and write out once.",
                          max_global_reads=n, max_global_writes=n + blocks)
        _expect_log_steps(
            trace, summary, _run(lib.scan_block(BLOCK), blocks, BLOCK, a, np.zeros_like(a),
                                 np.zeros(blocks, dtype=np.float32)), blocks,
            algorithm="scan", steps="steps",
            serial="every thread adds in every step — one thread looping over the block is a "
                   "serial scan.",
            reference="the reference",
            divergent="most lanes sit idle while a few work.")
