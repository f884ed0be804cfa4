"""The tracer's accounting on launches drawn by Hypothesis: a 2-D map kernel reading a flat
buffer with random strides and offset, on random shapes, block sizes (warps cut short
included) and element sizes. Accesses counted = elements touched (per element, per array);
32-byte sectors are those of an independent count of each warp instruction's addresses
(arrays 256-byte aligned, ``labkit.kernels.analysis``), hence at least its bytes / 32."""
import numpy as np
from hypothesis import given, settings, strategies as st

from labkit.kernels.analysis import element_counts, total_sectors, traffic, warp_instructions
from labkit.kernels.trace import READ, WRITE
from labkit.kernels.tracer import run_traced
from labkit.validate import ceil_div

WARP, SECTOR = 32, 32


def strided_map(cuda):
    """out[r, c] = 2 x[r * row_stride + c * col_stride + offset]; one thread per output."""
    def kernel(x, out, row_stride, col_stride, offset):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = 2 * x[r * row_stride + c * col_stride + offset]
    return kernel


@st.composite
def launches(draw):
    rows, cols = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    bx, by = draw(st.integers(1, 48)), draw(st.integers(1, 4))
    row_stride, col_stride = draw(st.integers(0, 50)), draw(st.integers(0, 5))
    offset = draw(st.integers(0, 9))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return rows, cols, bx, by, row_stride, col_stride, offset, dtype


def threads(rows, cols, bx, by):
    """(block, warp, r, c) of every thread that passes the guard, in CUDA's numbering:
    blocks x fastest, threads x fastest within a block, 32 consecutive threads a warp."""
    gx, gy = ceil_div(cols, bx), ceil_div(rows, by)
    bi_y, bi_x, ty, tx = np.meshgrid(np.arange(gy), np.arange(gx), np.arange(by),
                                     np.arange(bx), indexing="ij")
    r, c = bi_y * by + ty, bi_x * bx + tx
    inside = (r < rows) & (c < cols)
    block, warp = (bi_y * gx + bi_x)[inside], ((ty * bx + tx) // WARP)[inside]
    return (gx, gy), block, warp, r[inside], c[inside]


def sectors(block, warp, byte):
    """Distinct 32-byte sectors per warp instruction, summed (one instruction per warp)."""
    return len({(b, w, a // SECTOR) for b, w, a in zip(block, warp, byte)})


@settings(max_examples=60, deadline=None)
@given(case=launches())
def test_accesses_are_the_elements_touched_and_sectors_cover_the_bytes(case):
    rows, cols, bx, by, rs, cs, offset, dtype = case
    size = (rows - 1) * rs + (cols - 1) * cs + offset + 1
    x = np.random.default_rng(rows * 100 + cols).normal(size=size).astype(dtype)
    out = np.full((rows, cols), np.nan, dtype=dtype)
    grid, block, warp, r, c = threads(rows, cols, bx, by)
    trace = run_traced(strided_map, grid, (bx, by), x, out, rs, cs, offset)
    read = r * rs + c * cs + offset
    np.testing.assert_array_equal(out, 2 * x[(np.arange(rows)[:, None] * rs
                                              + np.arange(cols) * cs + offset)])
    # accesses: one read of x and one write of out per output element, each where it is
    t = traffic(trace)
    assert (t.global_reads, t.global_writes) == (rows * cols, rows * cols)
    assert t.global_bytes == 2 * rows * cols * x.itemsize
    np.testing.assert_array_equal(element_counts(trace, "x", READ),
                                  np.bincount(read, minlength=size))
    np.testing.assert_array_equal(element_counts(trace, "out", WRITE), np.ones((rows, cols)))
    assert element_counts(trace, "out", READ).sum() == 0
    # sectors: the distinct 32-byte sectors of each warp instruction's addresses
    item = x.itemsize
    want_x = sectors(block, warp, read * item)
    want_out = sectors(block, warp, (r * cols + c) * item)
    assert total_sectors(trace) == want_x + want_out
    wi = warp_instructions(trace)
    assert len(wi) == 2 * len(set(zip(block, warp)))
    assert int(wi.active.sum()) == 2 * rows * cols
    per_warp_bytes = {}
    for b, w, a in zip(block, warp, read * item):
        per_warp_bytes.setdefault((b, w), set()).add(a)
    assert want_x >= sum(ceil_div(len(s) * item, SECTOR) for s in per_warp_bytes.values())
    assert total_sectors(trace) >= ceil_div(len(set(read)) * item + rows * cols * item, SECTOR)
