"""Launching one kernel with a runner, and the checks every launcher shares.

``launch(kernel_fn, griddim, blockdim, *args, runner=...)`` runs ``fn(cuda)`` under labkit's
tracer (``runner="trace"``: returns its trace) or ``numba.cuda`` (``runner="numba"``: a real
GPU or the simulator); a launcher's result is a :class:`Launch`. The registry's launch rules
(:mod:`labkit.kernels.registry`) and the ops (:mod:`labkit.kernels.ops`, which re-exports
these names) are built on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit._device import on_simulator
from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels.numba_run import run_numba
from labkit.kernels.trace import Trace
from labkit.kernels.tracer import DEFAULT_BUDGET_S, run_traced
from labkit.validate import array, ceil_div, integer, one_of

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


cdiv = ceil_div   # ⌈a / b⌉: the blocks that cover a elements (labkit.validate.ceil_div)


def one_block(value: Any, name: str = "block") -> int:
    """A 1-D block size: an int in [1, MAX_THREADS_PER_BLOCK]."""
    return integer(name, value, low=1, high=MAX_THREADS_PER_BLOCK)


def block_pair(value: Any, name: str = "block") -> tuple[int, int]:
    """A 2-D block (x, y) of at most MAX_THREADS_PER_BLOCK threads."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a pair (x, y) of ints, got {value!r}")
    if len(value) != 2:
        raise ValueError(f"{name} must be a pair (x, y) of ints, got {value!r}")
    x = integer(f"{name}[0]", value[0], low=1, high=MAX_THREADS_PER_BLOCK)
    y = integer(f"{name}[1]", value[1], low=1, high=MAX_THREADS_PER_BLOCK)
    if x * y > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"{name}={value!r} has {x * y} threads; a block holds at most "
                         f"{MAX_THREADS_PER_BLOCK}")
    return x, y


def launch(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any,
           runner: str = "trace", budget_s: float | None = DEFAULT_BUDGET_S) -> Trace | None:
    """Run one kernel with the chosen runner; return its trace (tracer) or None (numba).

    ``budget_s`` is accepted for old callers and ignored: the tracer's limits count work
    (threads, elements, accesses; :func:`labkit.kernels.tracer.run_traced`), not seconds.
    """
    one_of("runner", runner, RUNNERS)
    if runner == "trace":
        return run_traced(kernel_fn, griddim, blockdim, *args, budget_s=budget_s)
    run_numba(kernel_fn, griddim, blockdim, *args)
    return None


def f32(x: Any, what: str, ndim: int | None = None) -> np.ndarray:
    """``x`` as a C-contiguous float32 array (of ``ndim`` dimensions), named ``what``."""
    return np.ascontiguousarray(array(what, x, ndim=ndim, dtype=np.float32))


def result(value: np.ndarray, *traces: Trace | None) -> Launch:
    """A :class:`Launch` of ``value`` and the traces of the launches that made one."""
    return Launch(value, tuple(t for t in traces if t is not None))


def fast_reduction_blocks(n: int, block: int = 256, runner: str = "trace",
                          per_sm: int = 4, per_thread: int = 8) -> int:
    """Blocks for :func:`~labkit.kernels.library.reduce_fast`: ``per_sm`` blocks on each SM
    of the current GPU (``runner="numba"`` on a real GPU), never more than it takes to give
    every thread ``per_thread`` elements; under the tracer and the simulator only the
    second rule applies (they have no SMs to fill)."""
    n, block, runner = integer("n", n, low=1), one_block(block), one_of("runner", runner, RUNNERS)
    enough = max(1, ceil_div(n, block * integer("per_thread", per_thread, low=1)))
    if runner == "numba":
        if not on_simulator():
            from numba import cuda  # deferred: numba (a real GPU's SM count)
            sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
            return min(enough, sms * integer("per_sm", per_sm, low=1))
    return enough
