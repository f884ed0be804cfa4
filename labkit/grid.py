"""Grid arithmetic: how many blocks a kernel launch needs (chapter 00 and labkit.kernels).

Not to be confused with :mod:`labkit.parallel.launch`, which starts processes.
"""
from __future__ import annotations

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.validate import ceil_div, integer

__all__ = ["MAX_THREADS_PER_BLOCK", "blocks_needed"]


def blocks_needed(n: int, threads_per_block: int) -> int:
    """Blocks of ``threads_per_block`` threads that cover ``n`` elements: ⌈n / t⌉.

    The last block may be partly idle, which is why kernels guard with ``if i < n``
    (CUDA C++ Programming Guide, "Thread Hierarchy": at most 1024 threads per block).
    """
    n = integer("n", n, low=1)
    t = integer("threads_per_block", threads_per_block, low=1, high=MAX_THREADS_PER_BLOCK)
    return ceil_div(n, t)
