"""Launch the library's kernels on numpy inputs, under the tracer or numba.

Each op takes numpy arrays, allocates the output, picks a grid that covers it and runs the
kernel with ``runner="trace"`` (labkit's tracer: returns the traces) or ``runner="numba"``
(``numba.cuda``: a real GPU or the simulator; no traces). Results are :class:`Launch`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit.kernels import library as lib
from labkit.kernels.tracer import Trace, run_traced

RUNNERS = ("trace", "numba")


@dataclass(frozen=True)
class Launch:
    """The value an op computed and the trace of every kernel launch it made (tracer only)."""
    value: np.ndarray
    traces: tuple[Trace, ...] = ()

    @property
    def trace(self) -> Trace:
        """The trace of the first (main) launch."""
        if not self.traces:
            raise ValueError("no trace: run with runner='trace'")
        return self.traces[0]


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive ints: the number of blocks that cover a elements."""
    return -(-a // b)


def launch(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any,
           runner: str = "trace") -> Trace | None:
    """Run one kernel with the chosen runner; return its trace (tracer) or None (numba)."""
    if runner == "trace":
        return run_traced(kernel_fn, griddim, blockdim, *args)
    if runner == "numba":
        from labkit.kernels.numba_run import run_numba
        run_numba(kernel_fn, griddim, blockdim, *args)
        return None
    raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")


def _f32(x: Any, what: str, ndim: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{what} must be {ndim}-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{what} must not be empty")
    return arr


def _result(value: np.ndarray, *traces: Trace | None) -> Launch:
    return Launch(value, tuple(t for t in traces if t is not None))


def elementwise(kernel_fn: Callable, *inputs: Any, runner: str = "trace",
                block: int = 32) -> Launch:
    """Launch a 1-D elementwise kernel ``kernel(*inputs, out)`` over out.size threads."""
    arrays = [_f32(x, f"input {k}", 1) for k, x in enumerate(inputs)]
    out = np.zeros_like(arrays[0])
    trace = launch(kernel_fn, cdiv(out.size, block), block, *arrays, out, runner=runner)
    return _result(out, trace)


def add(a: Any, b: Any, *, runner: str = "trace", block: int = 32) -> Launch:
    """a + b with :func:`labkit.kernels.library.vector_add`."""
    a, b = _f32(a, "a", 1), _f32(b, "b", 1)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    return elementwise(lib.vector_add, a, b, runner=runner, block=block)


def add_matrices(a: Any, b: Any, *, transposed: bool = False, runner: str = "trace",
                 block: tuple[int, int] = (16, 8)) -> Launch:
    """a + b for 2-D arrays; ``transposed`` maps threadIdx.x to rows (uncoalesced)."""
    a, b = _f32(a, "a", 2), _f32(b, "b", 2)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
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
    out = np.zeros((col.size, row.size), dtype=np.float32)
    grid = (cdiv(row.size, block[0]), cdiv(col.size, block[1]))
    return _result(out, launch(lib.broadcast_add, grid, block, col, row, out, runner=runner))


def conv1d(a: Any, w: Any, *, shared: bool = True, runner: str = "trace",
           block: int = 32) -> Launch:
    """'same' 1-D correlation out[i] = sum_k w[k] a[i + k - r] (numpy: np.convolve(a, w[::-1],
    'same') for odd len(w) = 2r + 1), zero padded."""
    a, w = _f32(a, "a", 1), _f32(w, "w", 1)
    if w.size % 2 == 0:
        raise ValueError(f"w must have odd length 2r+1, got {w.size}")
    out = np.zeros_like(a)
    fn = lib.conv1d_shared(block, (w.size - 1) // 2) if shared else lib.conv1d_naive
    return _result(out, launch(fn, cdiv(a.size, block), block, a, w, out, runner=runner))


REDUCTIONS = ("atomic", "interleaved", "strided", "shared", "warp")


def reduce_sum(a: Any, *, variant: str = "shared", runner: str = "trace",
               block: int = 64) -> Launch:
    """sum(a) on the device. Tree variants write one partial per block and are relaunched
    on the partials until one value is left; ``traces[0]`` is the first pass."""
    a = _f32(a, "a", 1)
    if variant not in REDUCTIONS:
        raise ValueError(f"variant must be one of {REDUCTIONS}, got {variant!r}")
    if variant == "atomic":
        out = np.zeros(1, dtype=np.float32)
        return _result(out, launch(lib.reduce_atomic, cdiv(a.size, block), block, a, out,
                                   runner=runner))
    if variant == "warp" and runner == "numba":
        from labkit._device import on_simulator
        if on_simulator():
            raise ValueError("variant='warp' needs warp shuffles, which Numba's CUDA "
                             "simulator lacks: use runner='trace' or a real GPU")
    factory = {"interleaved": lib.reduce_interleaved, "strided": lib.reduce_strided,
               "shared": lib.reduce_shared,
               "warp": lib.reduce_warp}[variant]
    traces = []
    current = a
    while True:
        partial = np.zeros(cdiv(current.size, block), dtype=np.float32)
        traces.append(launch(factory(block), partial.size, block, current, partial,
                             runner=runner))
        if partial.size == 1:
            return _result(partial, *traces)
        current = partial


def prefix_sum(a: Any, *, runner: str = "trace", block: int = 64) -> Launch:
    """Inclusive scan: block scans, a scan of the block totals, then add the offsets."""
    a = _f32(a, "a", 1)
    out = np.zeros_like(a)
    sums = np.zeros(cdiv(a.size, block), dtype=np.float32)
    traces = [launch(lib.scan_block(block), sums.size, block, a, out, sums, runner=runner)]
    if sums.size > 1:
        offsets = prefix_sum(sums, runner=runner, block=block)
        traces.extend(offsets.traces)
        traces.append(launch(lib.add_block_offsets, cdiv(a.size, block), block, out,
                             offsets.value, block, runner=runner))
    return _result(out, *traces)


MATMULS = ("naive", "coalesced", "tiled", "register")


def matmul(a: Any, b: Any, *, variant: str = "tiled", runner: str = "trace",
           tile: int = 8, rows: int = 2) -> Launch:
    """a @ b with one of the matmul kernels (tile x tile blocks; ``rows`` for 'register')."""
    a, b = _f32(a, "a", 2), _f32(b, "b", 2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner sizes differ: a is {a.shape}, b is {b.shape}")
    if variant not in MATMULS:
        raise ValueError(f"variant must be one of {MATMULS}, got {variant!r}")
    m, n = a.shape[0], b.shape[1]
    c = np.zeros((m, n), dtype=np.float32)
    if variant == "naive":
        grid, blockdim, fn = (cdiv(m, tile), cdiv(n, tile)), (tile, tile), lib.matmul_naive
    elif variant == "coalesced":
        grid, blockdim, fn = (cdiv(n, tile), cdiv(m, tile)), (tile, tile), lib.matmul_coalesced
    elif variant == "tiled":
        grid, blockdim, fn = (cdiv(n, tile), cdiv(m, tile)), (tile, tile), lib.matmul_tiled(tile)
    else:
        grid = (cdiv(n, tile), cdiv(m, tile))
        blockdim, fn = (tile, tile // rows), lib.matmul_register_blocked(tile, rows)
    return _result(c, launch(fn, grid, blockdim, a, b, c, runner=runner))


SOFTMAXES = ("naive", "online", "block")


def softmax(x: Any, *, variant: str = "online", runner: str = "trace",
            block: int = 32) -> Launch:
    """Softmax of each row of x."""
    x = _f32(x, "x", 2)
    if variant not in SOFTMAXES:
        raise ValueError(f"variant must be one of {SOFTMAXES}, got {variant!r}")
    out = np.zeros_like(x)
    if variant == "block":
        return _result(out, launch(lib.softmax_rows_block(block), x.shape[0], block, x, out,
                                   runner=runner))
    fn = lib.softmax_rows_naive if variant == "naive" else lib.softmax_rows_online
    return _result(out, launch(fn, cdiv(x.shape[0], block), block, x, out, runner=runner))
