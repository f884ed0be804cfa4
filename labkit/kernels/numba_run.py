"""Run a kernel written as ``fn(cuda)`` with ``numba.cuda`` (a real GPU or the CUDA simulator).

``run_numba(kernel_fn, griddim, blockdim, *args)`` compiles ``kernel_fn(numba.cuda)`` with
``numba.cuda.jit`` (once per ``kernel_fn``), copies numpy arguments to the device, launches
``griddim`` blocks of ``blockdim`` threads and copies every array argument back into the
host array in place. Scalars are passed as they are.

A kernel factory may state options for ``numba.cuda.jit`` as an attribute,
``kernel_fn.jit_options`` (a dict: ``{"max_registers": 128}``, which caps registers per
thread when the PTX is assembled; ``{"launch_bounds": (256, 2)}``, numba-cuda 0.14 and
later, NVIDIA/numba-cuda#272). On a GPU :func:`compiled` passes them on; the simulator's
``jit`` takes neither option, so it runs the kernel without them.

numba is imported here, lazily, so ``import labkit.kernels`` stays cheap; ``import labkit``
first, so that the simulator is selected on a machine without a GPU.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from labkit._device import on_simulator
from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.validate import dims, function

_COMPILED: dict[Callable, Any] = {}
_LOCK = threading.Lock()


def _dims(value: Any, what: str) -> tuple[int, ...]:
    return dims(what, value)


class _SimulatorCuda:
    """What ``kernel_fn`` receives as ``cuda`` on the simulator.

    The simulator swaps ``numba.cuda`` for its per-launch fake module only in a kernel's
    *globals*; our kernels get ``cuda`` as a closure variable, so this proxy forwards each
    attribute to the active fake module (threadIdx, shared, syncthreads...) and falls back
    to ``numba.cuda`` outside a launch and for names the fake lacks (float32, int32...).
    """

    def shfl_down_sync(self, mask: int, value: Any, delta: int) -> Any:
        return _sim_shuffle(value, lambda lane: lane + delta)

    def shfl_up_sync(self, mask: int, value: Any, delta: int) -> Any:
        return _sim_shuffle(value, lambda lane: lane - delta)

    def shfl_xor_sync(self, mask: int, value: Any, lane_mask: int) -> Any:
        return _sim_shuffle(value, lambda lane: lane ^ lane_mask)

    def shfl_sync(self, mask: int, value: Any, src_lane: int) -> Any:
        return _sim_shuffle(value, lambda lane: src_lane)

    def __getattr__(self, name: str) -> Any:
        from numba import cuda  # deferred: numba
        from numba.cuda.simulator import kernel as sim_kernel

        context = sim_kernel._kernel_context
        if context is not None and hasattr(context, name):
            return getattr(context, name)
        return getattr(cuda, name)


def _sim_shuffle(value: Any, source: Callable[[int], int]) -> Any:
    """A warp shuffle on Numba's simulator, which has none: every thread posts its value,
    waits at the block's barrier, reads its source lane, waits again.

    The simulator's barrier is per block, so every thread of the block that is still
    running must call the shuffle together (true of labkit's reductions: all threads
    shuffle, or only warp 0 after the others have exited). The source lane's value is
    read if it exists in the same warp, else the thread keeps its own (as on a GPU).
    """
    me = threading.current_thread()
    manager = me._manager
    posted = manager.__dict__.setdefault("_labkit_shuffle", {})
    tid = me.thread_id
    posted[tid] = value
    me.syncthreads()
    src = source(tid % 32)
    other = tid - tid % 32 + src
    out = posted.get(other, value) if 0 <= src < 32 else value
    me.syncthreads()
    return out


def compiled(kernel_fn: Callable) -> Any:
    """``numba.cuda.jit(kernel_fn(numba.cuda))``, compiled once per ``kernel_fn``, with
    ``kernel_fn.jit_options`` where the factory states them (not on the simulator)."""
    from numba import cuda  # deferred: numba

    with _LOCK:
        if kernel_fn not in _COMPILED:
            simulator = on_simulator()
            module = _SimulatorCuda() if simulator else cuda
            options = {} if simulator else getattr(kernel_fn, "jit_options", {})
            _COMPILED[kernel_fn] = cuda.jit(kernel_fn(module), **options)
        return _COMPILED[kernel_fn]


def run_numba(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any) -> None:
    """Launch ``kernel_fn(numba.cuda)`` on ``griddim`` x ``blockdim`` threads.

    Array arguments are numpy arrays; they are copied to the device and, after the kernel
    has finished, every one of them is copied back into the same host array (in place).
    """
    from numba import cuda  # deferred: numba

    function("kernel_fn", kernel_fn)
    grid, block = _dims(griddim, "griddim"), _dims(blockdim, "blockdim")
    if int(np.prod(block)) > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"blockdim has {int(np.prod(block))} threads; a block holds at "
                         f"most {MAX_THREADS_PER_BLOCK}")
    kernel = compiled(kernel_fn)
    device_args = []
    copies = []
    for arg in args:
        if isinstance(arg, np.ndarray):
            if not arg.flags.c_contiguous:
                raise ValueError("array arguments must be C-contiguous numpy arrays")
            dev = cuda.to_device(arg)
            device_args.append(dev)
            copies.append((dev, arg))
        else:
            device_args.append(arg)
    kernel[grid if len(grid) > 1 else grid[0], block if len(block) > 1 else block[0]](
        *device_args)
    cuda.synchronize()
    for dev, host in copies:
        dev.copy_to_host(host)
