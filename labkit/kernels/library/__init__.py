"""The kernels of chapters 4 and 5, each written once as ``fn(cuda)`` returning the body.

The same body runs under labkit's tracer and under ``numba.cuda``; only the subset of
Python that numba compiles for the GPU is used. Kernels with a compile-time size (a shared
array, a tile) come from a factory such as ``matmul_tiled(tile)``, cached so that the same
parameters give the same ``fn`` (and one compilation in :func:`run_numba`).

Every kernel guards its indices, so sizes need not be multiples of the block.

One module per kernel family: :mod:`~labkit.kernels.library.elementwise`,
:mod:`~labkit.kernels.library.stencil`, :mod:`~labkit.kernels.library.histogram`,
:mod:`~labkit.kernels.library.reductions`, :mod:`~labkit.kernels.library.scan`,
:mod:`~labkit.kernels.library.matmul`, :mod:`~labkit.kernels.library.transpose`,
:mod:`~labkit.kernels.library.softmax`, :mod:`~labkit.kernels.library.attention`; what
they share in :mod:`~labkit.kernels.library.sizes`. This package gathers their kernels.
"""
from __future__ import annotations

from labkit.kernels.library.sizes import GRID_MASK
from labkit.kernels.library.elementwise import (vector_add, add_ten, strided_copy, add_2d,
                                                add_2d_transposed, broadcast_add, branchy,
                                                shared_stride)
from labkit.kernels.library.stencil import (conv1d_shared, conv1d_naive, blur_naive,
                                            blur_shared)
from labkit.kernels.library.histogram import histogram_global, histogram_shared
from labkit.kernels.library.reductions import (reduce_atomic, reduce_interleaved,
                                               reduce_strided, reduce_shared, reduce_warp,
                                               reduce_fast)
from labkit.kernels.library.scan import add_block_offsets, scan_block
from labkit.kernels.library.matmul import (matmul_naive, matmul_coalesced, matmul_tiled,
                                           matmul_register_blocked, REGISTER_BUDGET_2D,
                                           register_limit, matmul_2d_blocked)
from labkit.kernels.library.transpose import transpose_naive, transpose_shared
from labkit.kernels.library.softmax import (softmax_rows_naive, softmax_rows_online,
                                            softmax_rows_block, softmax_rows_warp)
from labkit.kernels.library.attention import attention_flash

__all__ = [
    "GRID_MASK", "vector_add", "add_ten", "strided_copy", "add_2d", "add_2d_transposed",
    "broadcast_add", "branchy", "shared_stride", "conv1d_shared", "conv1d_naive",
    "blur_naive", "blur_shared", "histogram_global", "histogram_shared", "reduce_atomic",
    "reduce_interleaved", "reduce_strided", "reduce_shared", "reduce_warp", "reduce_fast",
    "scan_block", "add_block_offsets", "matmul_naive", "matmul_coalesced", "matmul_tiled",
    "matmul_register_blocked", "REGISTER_BUDGET_2D", "register_limit", "matmul_2d_blocked",
    "transpose_naive", "transpose_shared", "softmax_rows_naive", "softmax_rows_online",
    "softmax_rows_block", "softmax_rows_warp", "attention_flash",
]
