"""Matrix transpose (chapter 04: shared memory, coalescing and padding).

* :func:`transpose_naive`: reads coalesced, writes strided by whole rows.
* :func:`transpose_shared` adds a shared tile: read rows of ``a`` and write rows of the
  output, both coalesced, transposing in shared memory; ``pad=1`` makes the tile's column
  reads free of bank conflicts (``pad=0``: 32-way).
"""
from __future__ import annotations

from functools import lru_cache

from labkit.kernels.library.sizes import _check_pow2, named


def transpose_naive(cuda):
    """out[c, r] = a[r, c]: reads coalesced (threadIdx.x walks c), writes strided by rows."""
    def kernel(a, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < a.shape[0] and c < a.shape[1]:
            out[c, r] = a[r, c]
    return kernel


@lru_cache(maxsize=None)
def transpose_shared(tile: int = 32, rows: int = 8, pad: int = 1):
    """Transpose through a shared tile (M. Harris, "An Efficient Matrix Transpose in CUDA
    C/C++", NVIDIA developer blog, 2013): a block of (tile, rows) threads reads a tile x tile
    tile of ``a`` row by row (coalesced; each thread tile / rows elements), then writes rows
    of the *output* (coalesced), reading the shared tile by column. With ``pad=0`` the
    column read of a ``[32][32]`` float array puts all 32 lanes in one bank (32-way
    conflict); ``pad=1`` makes rows 33 words long, so lane k reads bank (33 k + c) mod 32 =
    (k + c) mod 32: conflict-free.
    """
    _check_pow2(tile, "tile", 2, 32)
    _check_pow2(rows, "rows", 1, tile)
    if pad not in (0, 1):
        raise ValueError(f"pad must be 0 or 1, got {pad}")
    width = tile + pad

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array((tile, width), cuda.float32)
            tx = cuda.threadIdx.x
            ty = cuda.threadIdx.y
            c = cuda.blockIdx.x * tile + tx
            for k in range(0, tile, rows):
                r = cuda.blockIdx.y * tile + ty + k
                if r < a.shape[0] and c < a.shape[1]:
                    buf[ty + k, tx] = a[r, c]
            cuda.syncthreads()
            oc = cuda.blockIdx.y * tile + tx           # output column = input row
            for k in range(0, tile, rows):
                orow = cuda.blockIdx.x * tile + ty + k   # output row = input column
                if orow < out.shape[0] and oc < out.shape[1]:
                    out[orow, oc] = buf[tx, ty + k]
        return kernel
    return named(factory, f"transpose_shared_{tile}_{rows}_{pad}")
