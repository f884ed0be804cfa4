"""Launch-configuration arithmetic shared by chapter 00 and labkit.kernels."""
from __future__ import annotations

MAX_THREADS_PER_BLOCK = 1024  # every CUDA GPU since compute capability 2.0


def blocks_needed(n: int, threads_per_block: int) -> int:
    """Blocks of ``threads_per_block`` threads that cover ``n`` elements: ⌈n / t⌉.

    The last block may be partly idle, which is why kernels guard with ``if i < n``.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if int(threads_per_block) != threads_per_block or not 1 <= threads_per_block <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"threads_per_block must be an integer in [1, {MAX_THREADS_PER_BLOCK}], "
                         f"got {threads_per_block!r}")
    return (int(n) + int(threads_per_block) - 1) // int(threads_per_block)
