"""Step-by-step ring all-reduce (16 ranks × 1M float32) vs numpy summing the 16 arrays.

Both do the same 15 M additions; the ring also copies chunks in its all-gather phase and
keeps a message log. Goal: within 3× (ratio >= 0.33).
"""
import numpy as np

from labkit.parallel.collectives import all_reduce
from labkit.perf import Row, time_call

RANKS, N = 16, 1 << 20


def rows():
    rng = np.random.default_rng(0)
    data = [(rng.random(N) * 1e-6).astype(np.float32) for _ in range(RANKS)]

    def numpy_sum():
        out = data[0].copy()
        for a in data[1:]:
            out += a
        return out

    want = numpy_sum()
    bufs = [d.copy() for d in data]
    all_reduce(bufs, "ring", inplace=True)
    assert all(np.allclose(b, want, rtol=1e-5) for b in bufs)
    ring = time_call(lambda: all_reduce(bufs, "ring", inplace=True), repeats=7, warmup=1)
    base = time_call(numpy_sum, repeats=7, warmup=1)
    return [Row("ring all-reduce, 16 ranks x 1M float32 (simulated)", ring.median,
                base.median, "numpy sum of 16 arrays", goal="within 3x (>= 0.33x)")]
