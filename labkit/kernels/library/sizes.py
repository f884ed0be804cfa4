"""What every kernel factory of the library shares: the check of its compile-time sizes
(powers of two in a range), :data:`GRID_MASK`, the mask that lets the compiler prove an
index built from the block index non-negative, :func:`named`, the name a factory made
for some sizes goes by, and :func:`device`, the decorator of a function a kernel body
calls.
"""
from __future__ import annotations

from typing import Callable

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.validate import power_of_two


GRID_MASK = 0x7FFFFFFF
"""``cuda.blockIdx.x & GRID_MASK`` (and ``gridDim``): numba reads the block index and the
grid size as signed 32-bit numbers, so an index built from them may be negative as far as
the compiler knows and pays numba's negative-index wrap-around (a compare and select and
64-bit arithmetic per access, see
:func:`~labkit.kernels.library.matmul.matmul_naive`). No grid reaches 2^31 blocks along
a dimension (CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability": at most 2^31 - 1 along x, 65535 along y and z), so the mask changes no value
and proves it >= 0."""


def _check_pow2(value: int, what: str, low: int = 1, high: int = MAX_THREADS_PER_BLOCK) -> None:
    power_of_two(what, value, low=low, high=high)
    if not (low <= value <= high and value & (value - 1) == 0):
        raise ValueError(f"{what} must be a power of two in [{low}, {high}], got {value}")


def named(factory: Callable, name: str) -> Callable:
    """``factory`` with ``name`` as its ``__name__`` and ``__qualname__`` (the family and its
    sizes: ``"reduce_shared_64"``), so that the factories a cached builder makes for other
    sizes are told apart in traces, reports and test ids; returns it."""
    factory.__name__ = factory.__qualname__ = name
    return factory


def device(cuda) -> Callable:
    """The decorator of a function that a kernel body calls (a *device function*):
    ``cuda.jit(device=True, inline="always")``. Give the function ``cuda`` (and the sizes
    it needs) in a closure, as a kernel gets them: ``tree = sequential_tree(cuda, block,
    max)`` in the factory, ``tree(buf, t)`` in the body.

    numba compiles a function that a kernel calls only as a device function;
    ``inline="always"`` inlines it in numba's IR, so the kernel compiles as if its body
    were written out where it is called (one PTX function, no call), and compiles to PTX
    without a GPU (numba-cuda compiles a device function it does not inline for the
    current device, which takes a driver). Under the tracer (``FakeCuda.jit``) and Numba's
    simulator it runs as the Python function, its accesses recorded at its own lines."""
    return cuda.jit(device=True, inline="always")
