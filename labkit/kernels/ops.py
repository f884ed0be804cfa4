"""Launch the library's kernels on numpy inputs, under the tracer or numba.

Each op takes numpy arrays, allocates the output, picks a grid that covers it and runs the
kernel with ``runner="trace"`` (labkit's tracer: returns the traces) or ``runner="numba"``
(``numba.cuda``: a real GPU or the simulator; no traces). Results are :class:`Launch`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels import library as lib, models
from labkit.kernels.analysis import summarize, total_sectors, warp_instructions
from labkit.kernels.closed_forms import BLOCKED_2D  # noqa: F401  (ops.BLOCKED_2D, as before)
from labkit.kernels.launching import (  # noqa: F401  (Launch, launch, cdiv: ops' own names)
    RUNNERS, Launch, block_pair as _block2, cdiv, f32 as _f32, fast_reduction_blocks, launch,
    one_block as _block, result as _result)
from labkit.kernels.registry import (ATTENTION, KERNELS, MATMUL, REDUCTION, SOFTMAX,
                                     TRANSPOSE, lookup, names)
from labkit.kernels.trace import GLOBAL, Trace
from labkit.kernels.tracer import DEFAULT_BUDGET_S, run_traced
from labkit.validate import boolean, function, integer, one_of, power_of_two


def elementwise(kernel_fn: Callable, *inputs: Any, runner: str = "trace",
                block: int = 32, budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
    """Launch a 1-D elementwise kernel ``kernel(*inputs, out)`` over out.size threads."""
    function("kernel_fn", kernel_fn)
    block = _block(block)
    if not inputs:
        raise ValueError("elementwise needs at least one input array")
    arrays = [_f32(x, f"input {k}", 1) for k, x in enumerate(inputs)]
    out = np.zeros_like(arrays[0])
    trace = launch(kernel_fn, cdiv(out.size, block), block, *arrays, out, runner=runner,
                   budget_s=budget_s)
    return _result(out, trace)


def add(a: Any, b: Any, *, runner: str = "trace", block: int = 32,
        budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
    """a + b with :func:`labkit.kernels.library.vector_add`."""
    a, b = _f32(a, "a", 1), _f32(b, "b", 1)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    return elementwise(lib.vector_add, a, b, runner=runner, block=block, budget_s=budget_s)


def add_matrices(a: Any, b: Any, *, transposed: bool = False, runner: str = "trace",
                 block: tuple[int, int] = (16, 8)) -> Launch:
    """a + b for 2-D arrays; ``transposed`` maps threadIdx.x to rows (uncoalesced)."""
    a, b, transposed = _f32(a, "a", 2), _f32(b, "b", 2), boolean("transposed", transposed)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    block = _block2(block)
    out = np.zeros_like(a)
    rows, cols = a.shape
    if transposed:
        grid = (cdiv(rows, block[0]), cdiv(cols, block[1]))
        fn = lib.add_2d_transposed
    else:
        grid = (cdiv(cols, block[0]), cdiv(rows, block[1]))
        fn = lib.add_2d
    return _result(out, launch(fn, grid, block, a, b, out, runner=runner))


def broadcast(col: Any, row: Any, *, runner: str = "trace",
              block: tuple[int, int] = (16, 8)) -> Launch:
    """col[:, None] + row[None, :] with :func:`labkit.kernels.library.broadcast_add`."""
    col, row = _f32(col, "col", 1), _f32(row, "row", 1)
    block = _block2(block)
    out = np.zeros((col.size, row.size), dtype=np.float32)
    grid = (cdiv(row.size, block[0]), cdiv(col.size, block[1]))
    return _result(out, launch(lib.broadcast_add, grid, block, col, row, out, runner=runner))


def conv1d(a: Any, w: Any, *, shared: bool = True, runner: str = "trace",
           block: int = 32) -> Launch:
    """'same' 1-D correlation out[i] = sum_k w[k] a[i + k - r] (numpy: np.convolve(a, w[::-1],
    'same') for odd len(w) = 2r + 1), zero padded."""
    a, w = _f32(a, "a", 1), _f32(w, "w", 1)
    block = power_of_two("block", block, low=8, high=MAX_THREADS_PER_BLOCK)
    if w.size > block + 1:
        raise ValueError(f"w has {w.size} taps; at most block + 1 = {block + 1}")
    if w.size % 2 == 0:
        raise ValueError(f"w must have odd length 2r+1, got {w.size}")
    out = np.zeros_like(a)
    fn = lib.conv1d_shared(block, (w.size - 1) // 2) if shared else lib.conv1d_naive
    return _result(out, launch(fn, cdiv(a.size, block), block, a, w, out, runner=runner))


REDUCTIONS = tuple(KERNELS[REDUCTION])      # the variants, from the registry


def reduce_sum(a: Any, *, variant: str = "shared", runner: str = "trace",
               block: int = 64, blocks: int | None = None,
               budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
    """sum(a) on the device with :data:`~labkit.kernels.registry.KERNELS` ``["reduction"]
    [variant]``. Tree variants write one partial per block and are relaunched on the
    partials until one value is left; ``traces[0]`` is the first pass.

    ``variant="fast"`` (:func:`~labkit.kernels.library.reduce_fast`) is one launch of
    ``blocks`` blocks (default: :func:`fast_reduction_blocks`) with a grid-stride loop and
    one atomic per block.
    """
    a = _f32(a, "a", 1)
    kernel = lookup(REDUCTION, variant)
    one_of("runner", runner, RUNNERS)
    return kernel.run(a, kernel.block(block), blocks, runner, budget_s)


def prefix_sum(a: Any, *, runner: str = "trace", block: int = 64) -> Launch:
    """Inclusive scan: block scans, a scan of the block totals, then add the offsets."""
    a = _f32(a, "a", 1)
    block = power_of_two("block", block, low=2, high=MAX_THREADS_PER_BLOCK)
    out = np.zeros_like(a)
    sums = np.zeros(cdiv(a.size, block), dtype=np.float32)
    traces = [launch(lib.scan_block(block), sums.size, block, a, out, sums, runner=runner)]
    if sums.size > 1:
        offsets = prefix_sum(sums, runner=runner, block=block)
        traces.extend(offsets.traces)
        traces.append(launch(lib.add_block_offsets, cdiv(a.size, block), block, out,
                             offsets.value, block, runner=runner))
    return _result(out, *traces)


MATMULS = tuple(KERNELS[MATMUL])            # the ladder's rungs, from the registry


def matmul_launch(variant: str, m: int, n: int, tile: int = 8, rows: int = 2,
                  blocked: dict | None = None):
    """(grid, block, kernel) of ``variant`` for an (m, k) @ (k, n) product, validated
    (the rule of its :data:`~labkit.kernels.registry.KERNELS` entry)."""
    kernel = lookup(MATMUL, variant)
    rows = power_of_two("rows", rows, low=1, high=64)
    if blocked is not None and not kernel.blocked:
        raise ValueError(f"blocked is only for {names(MATMUL, blocked=True)}")
    return kernel.plan(m, n, kernel.shape(tile, rows, blocked))


def matmul(a: Any, b: Any, *, variant: str = "tiled", runner: str = "trace",
           tile: int = 8, rows: int = 2, blocked: dict | None = None,
           budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
    """a @ b with one of the matmul kernels.

    naive / coalesced / tiled: tile x tile blocks (tile a power of two <= 32); register:
    (tile, tile / rows) blocks, each thread ``rows`` outputs; register2d: 2-D register
    blocking with the tile shapes ``blocked`` (keys bm, bn, bk, tm, tn; defaults
    :data:`BLOCKED_2D`); its shared reads are conflict-free while tm <= bn / tn, 2-way
    beyond (a thread's tm rows of a are adjacent words).
    """
    a, b = _f32(a, "a", 2), _f32(b, "b", 2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner sizes differ: a is {a.shape}, b is {b.shape}")
    one_of("runner", runner, RUNNERS)
    m, n = a.shape[0], b.shape[1]
    grid, blockdim, fn = matmul_launch(variant, m, n, tile, rows, blocked)
    c = np.zeros((m, n), dtype=np.float32)
    return _result(c, launch(fn, grid, blockdim, a, b, c, runner=runner, budget_s=budget_s))


def transpose(a: Any, *, variant: str = "padded", runner: str = "trace",
              budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
    """a.T with :func:`~labkit.kernels.library.transpose_naive` ('naive', blocks (32, 8))
    or :func:`~labkit.kernels.library.transpose_shared` ('shared': [32][32] tile;
    'padded': [32][33])."""
    a = _f32(a, "a", 2)
    kernel = lookup(TRANSPOSE, variant)
    out = np.zeros((a.shape[1], a.shape[0]), dtype=np.float32)
    grid, block, fn = kernel.plan(*a.shape)
    return _result(out, launch(fn, grid, block, a, out, runner=runner, budget_s=budget_s))


SOFTMAXES = tuple(KERNELS[SOFTMAX])          # the variants, from the registry


def softmax(x: Any, *, variant: str = "online", runner: str = "trace",
            block: int = 32) -> Launch:
    """Softmax of each row of x: a thread per row ('naive': three passes, 'online': two),
    a block of ``block`` threads per row ('block'), or a warp per row ('warp',
    :func:`~labkit.kernels.library.softmax_rows_warp`: blocks of (32, block / 32) threads,
    ``block`` a power of two >= 32)."""
    x = _f32(x, "x", 2)
    kernel = lookup(SOFTMAX, variant)
    block = kernel.block(block)
    out = np.zeros_like(x)
    grid, blockdim, fn = kernel.plan(x.shape[0], block)
    return _result(out, launch(fn, grid, blockdim, x, out, runner=runner))


# ---- attention ---------------------------------------------------------------------------

ATTENTIONS = tuple(KERNELS[ATTENTION])       # the variants, from the registry
ATTENTION_D = 8          # head dimension of the traced attention (a compile-time size)
ATTENTION_ROWS = 8       # query (and key) rows per tile of the fused kernel


def attention(q: Any, k: Any, v: Any, *, variant: str = "flash", runner: str = "trace",
              flash: Callable | None = None, rows: int = ATTENTION_ROWS) -> Launch:
    """softmax(q kᵀ / sqrt(d)) v for one head, q, k, v of shape (N, d) (torch's
    ``scaled_dot_product_attention`` without a mask).

    ``variant="standard"``: the standard implementation (FlashAttention's Algorithm 0):
    s = (q / sqrt(d)) kᵀ with :func:`~labkit.kernels.library.matmul_tiled` (8 x 8 tiles;
    q / sqrt(d) and kᵀ are prepared on the host, N d elements each, not traced), the
    softmax of each row of s with :func:`~labkit.kernels.library.softmax_rows_block`
    (32 threads per row, coalesced), o = p v with the tiled matmul again: three launches,
    the N x N matrices s and p written to and read from global memory. ``"flash"``: one
    launch of the fused kernel ``flash`` (a ``fn(cuda)`` for blocks of (d, rows) threads,
    one block per ``rows`` query rows; default
    :func:`~labkit.kernels.library.attention_flash`)."""
    q, k, v = _f32(q, "q", 2), _f32(k, "k", 2), _f32(v, "v", 2)
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"q, k and v must have one shape (N, d), got {q.shape}, {k.shape} "
                         f"and {v.shape}")
    kernel = lookup(ATTENTION, variant)
    one_of("runner", runner, RUNNERS)
    return kernel.run(q, k, v, runner, flash, rows)


@dataclass(frozen=True)
class AttentionTraffic:
    """Traced global-memory traffic of the standard and the fused attention at each
    sequence length in ``sizes`` (bytes of 32-byte sectors, summed over launches), and the
    closed forms (:func:`labkit.kernels.models.attention_traffic`) at ``model_sizes``."""
    sizes: tuple[int, ...]
    d: int
    rows: int
    standard_bytes: tuple[int, ...]
    flash_bytes: tuple[int, ...]
    matrix_bytes: tuple[int, ...]     # of the standard one's: traffic on s and p (N x N)
    model_sizes: tuple[int, ...]
    model_standard: tuple[int, ...]
    model_flash: tuple[int, ...]
    whose: str                        # whose fused kernel was traced

    @property
    def ratios(self) -> tuple[float, ...]:
        """standard / fused traced bytes at each size."""
        return tuple(s / f for s, f in zip(self.standard_bytes, self.flash_bytes))


def attention_traffic(sizes: Sequence[int] = (8, 16, 24, 32), *, d: int = ATTENTION_D,
                      rows: int = ATTENTION_ROWS, flash: Callable | None = None,
                      whose: str = "labkit's kernel", model_sizes: Sequence[int] = (
                          8, 32, 128, 512, 2048, 8192), seed: int = 0) -> AttentionTraffic:
    """Trace both attentions on random q, k, v of shape (N, d) for each N in ``sizes``
    (``flash``: the fused kernel to trace, default labkit's), check that their outputs
    agree, and count their global-memory sectors
    (:func:`labkit.kernels.analysis.total_sectors`); the closed forms at ``model_sizes``."""

    def lengths(name, value, high):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or not value:
            raise ValueError(f"{name} must be a non-empty list of sequence lengths, got "
                             f"{value!r}")
        return tuple(integer(f"{name}[i]", n, low=1, high=high) for n in value)

    sizes = lengths("sizes", sizes, 64)
    model_sizes = lengths("model_sizes", model_sizes, 1 << 20)
    d = power_of_two("d", d, low=1, high=64)
    rng = np.random.default_rng(seed)
    std, fused, matrix = [], [], []
    for n in sizes:
        q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
        a = attention(q, k, v, variant="standard")
        b = attention(q, k, v, variant="flash", flash=flash, rows=rows)
        if not np.allclose(a.value, b.value, rtol=1e-4, atol=1e-5):
            raise ValueError(f"the fused kernel's output differs from the standard one's at "
                             f"N = {n} (by up to {np.abs(a.value - b.value).max():.3g})")
        std.append(32 * sum(total_sectors(t) for t in a.traces))
        fused.append(32 * sum(total_sectors(t) for t in b.traces))
        matrix.append(32 * sum(_sectors_on(t, names, GLOBAL) for t, names in zip(
            a.traces, (("c",), ("x", "out"), ("a",)))))
    return AttentionTraffic(
        sizes, d, rows, tuple(std), tuple(fused), tuple(matrix), model_sizes,
        tuple(models.attention_traffic(n, d, "standard").total for n in model_sizes),
        tuple(models.attention_traffic(n, d, "flash", rows).total for n in model_sizes), whose)


def _sectors_on(trace: Trace, names: tuple[str, ...], space: int) -> int:
    """Sectors of the warp instructions on the arrays ``names`` of ``space``."""

    wi = warp_instructions(trace, space)
    ids = [k for k, a in enumerate(trace.arrays) if a.name in names and a.space == space]
    return int(wi.sectors[np.isin(wi.array, ids)].sum())


# ---- several kernels' work side by side ---------------------------------------------------

@dataclass(frozen=True)
class Work:
    """The work of one traced launch (whole launch), for tables that compare kernels."""
    name: str
    arrays: tuple[np.ndarray, ...]     # the array arguments after the launch
    total_sectors: int                 # global and local 32-byte sectors
    sectors_per_request: float         # global
    shared_reads: int
    busiest: int                       # memory accesses of the busiest thread
    simt: float                        # SIMT efficiency, shuffles counted
    global_atomics: int
    trace: Trace


def work_table(launches: dict, *args: Any) -> list[Work]:
    """Trace each ``name -> (kernel_fn, griddim, blockdim)`` of ``launches`` on fresh copies
    of ``args`` and return their :class:`Work`, in order."""

    if not isinstance(launches, dict) or not launches:
        raise ValueError("launches must map names to (kernel_fn, griddim, blockdim)")
    rows = []
    for name, spec in launches.items():
        if not (isinstance(spec, tuple) and len(spec) == 3 and callable(spec[0])):
            raise ValueError(f"launches[{name!r}] must be (kernel_fn, griddim, blockdim), "
                             f"got {spec!r}")
        fn, grid, block = spec
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        trace = run_traced(fn, grid, block, *copies)
        s = summarize(trace)
        rows.append(Work(name, tuple(a for a in copies if isinstance(a, np.ndarray)),
                         s.total_sectors, s.sectors_per_request, s.traffic.shared_reads,
                         s.busiest_thread_accesses, s.simt_efficiency,
                         s.traffic.global_atomics, trace))
    return rows


def format_work(rows: Sequence[Work], per: float | None = None, per_what: str = "") -> str:
    """A table of :func:`work_table`'s rows; ``per`` divides the shared reads (e.g. by the
    multiply-adds, ``per_what="per multiply-add"``)."""
    width = max(len(r.name) for r in rows)
    head = (f"{'kernel':{width}s}  sectors  sectors/request  busiest thread  "
            f"SIMT  atomics  shared reads" + (f" {per_what}" if per else ""))
    lines = [head]
    for r in rows:
        shared = f"{r.shared_reads / per:.3g}" if per else f"{r.shared_reads}"
        lines.append(f"{r.name:{width}s}  {r.total_sectors:7d}  {r.sectors_per_request:15.2f}"
                     f"  {r.busiest:14d}  {r.simt:4.0%}  {r.global_atomics:7d}  {shared}")
    return "\n".join(lines)
