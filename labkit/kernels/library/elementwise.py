"""Elementwise kernels, one thread per output element (chapter 04's first launches).

* :func:`vector_add`, :func:`add_ten`: a zip and a map. The thread's element is
  ``blockIdx.x * blockDim.x + threadIdx.x``, guarded so that sizes need not be multiples
  of the block.
* :func:`strided_copy`: the same copy with consecutive threads reading ``stride`` elements
  apart: coalescing, a warp's access spread over more 32-byte sectors.
* :func:`add_2d`, :func:`add_2d_transposed`: a 2-D grid; ``threadIdx.x`` walking columns
  (coalesced in row-major order) against walking rows (each warp access strides a row).
* :func:`broadcast_add`: numpy's broadcasting as indexing.
* :func:`branchy`: divergence: even and odd lanes branch apart and a warp runs both paths.
* :func:`shared_stride`: shared-memory bank conflicts, lanes ``stride`` words apart.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.kernels.library.sizes import _check_pow2, named


def vector_add(cuda):
    """out[i] = a[i] + b[i] for i < out.size; one thread per element."""
    def kernel(a, b, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            out[i] = a[i] + b[i]
    return kernel


def add_ten(cuda):
    """out[i] = a[i] + 10 (a map with a bounds guard)."""
    def kernel(a, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            out[i] = a[i] + 10
    return kernel


def strided_copy(cuda):
    """out[i] = a[i * stride]: consecutive threads read addresses ``stride`` apart."""
    def kernel(a, out, stride):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size and i * stride < a.size:
            out[i] = a[i * stride]
    return kernel


def add_2d(cuda):
    """out[r, c] = a[r, c] + b[r, c]; threadIdx.x walks columns (coalesced in row-major)."""
    def kernel(a, b, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = a[r, c] + b[r, c]
    return kernel


def add_2d_transposed(cuda):
    """The same sum with threadIdx.x walking rows: each warp access strides a whole row."""
    def kernel(a, b, out):
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        c = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = a[r, c] + b[r, c]
    return kernel


def broadcast_add(cuda):
    """out[r, c] = col[r] + row[c]  (numpy: ``col[:, None] + row[None, :]``)."""
    def kernel(col, row, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = col[r] + row[c]
    return kernel


def branchy(cuda):
    """Even and odd lanes take different branches: a warp runs both paths, half idle."""
    def kernel(a, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < out.size:
            if i % 2 == 0:
                out[i] = a[i] * 2
            else:
                out[i] = a[i] + 1
    return kernel


@lru_cache(maxsize=None)
def shared_stride(block: int = 32, stride: int = 1):
    """Each thread reads shared word ``(tid * stride) % (block * stride)``: bank conflicts.

    With 32 banks of 4 bytes, bank = word mod 32: stride 1 touches 32 banks (no conflict),
    stride 32 puts all 32 lanes of a warp in bank 0 (a 32-way conflict).
    """
    _check_pow2(block, "block", 32)
    if not 1 <= stride <= 64:
        raise ValueError(f"stride must be in [1, 64], got {stride}")
    size = block * stride

    def factory(cuda):
        def kernel(a, out):
            buf = cuda.shared.array(size, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * cuda.blockDim.x + t
            if i < a.size:
                buf[t * stride] = a[i]
            cuda.syncthreads()
            if i < out.size:
                out[i] = buf[t * stride]
        return kernel
    return named(factory, f"shared_stride_{block}_{stride}")
