"""Stencils: each output reads a neighbourhood of the input (chapter 04), two rungs each.

* :func:`conv1d_naive`: a 1-D convolution reading every neighbour from global memory (an
  element is read ``2 * radius + 1`` times).
* :func:`conv1d_shared` adds tiling with a halo: a block loads its ``block`` elements and
  ``2 * radius`` halo elements into shared memory once and reads the neighbours there.
* :func:`blur_naive`, :func:`blur_shared`: the same two rungs in 2-D, a 3 x 3 mean filter
  (Kirk & Hwu, ch. 8 "Stencil"): up to 9 global reads per element, then about one.
"""
from __future__ import annotations

from functools import lru_cache

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels.library.sizes import _check_pow2, named


@lru_cache(maxsize=None)
def conv1d_shared(block: int = 32, radius: int = 2):
    """out[i] = sum_k w[k] * a[i + k - radius], zero outside a; tile + halo in shared memory.

    Each block loads its ``block`` elements and ``2 * radius`` halo elements once, so an
    element of ``a`` is read from global memory at most twice (once as halo).
    """
    _check_pow2(block, "block", 8)
    if not 0 <= radius <= block // 2:
        raise ValueError(f"radius must be in [0, {block // 2}], got {radius}")
    width = block + 2 * radius

    def factory(cuda):
        def kernel(a, w, out):
            tile = cuda.shared.array(width, cuda.float32)
            t = cuda.threadIdx.x
            i = cuda.blockIdx.x * block + t
            tile[t + radius] = a[i] if i < a.size else 0.0
            if t < radius:
                left = i - radius
                tile[t] = a[left] if left >= 0 else 0.0
                right = i + block
                tile[t + block + radius] = a[right] if right < a.size else 0.0
            cuda.syncthreads()
            if i < out.size:
                acc = 0.0
                for k in range(2 * radius + 1):
                    acc += w[k] * tile[t + k]
                out[i] = acc
        return kernel
    return named(factory, f"conv1d_shared_{block}_{radius}")


def conv1d_naive(cuda):
    """The same convolution reading every neighbour from global memory."""
    def kernel(a, w, out):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        radius = (w.size - 1) // 2
        if i < out.size:
            acc = 0.0
            for k in range(w.size):
                j = i + k - radius
                if 0 <= j < a.size:
                    acc += w[k] * a[j]
            out[i] = acc
    return kernel

def blur_naive(cuda):
    """out[r, c] = the mean of the 3 x 3 neighbourhood of img[r, c] (zero outside img),
    each neighbour read from global memory: every element read up to 9 times."""
    def kernel(img, out):
        c = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        r = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if r < out.shape[0] and c < out.shape[1]:
            acc = 0.0
            for dr in range(3):
                for dc in range(3):
                    rr = r + dr - 1
                    cc = c + dc - 1
                    if 0 <= rr < img.shape[0] and 0 <= cc < img.shape[1]:
                        acc += img[rr, cc]
            out[r, c] = acc / 9.0
    return kernel


@lru_cache(maxsize=None)
def blur_shared(bx: int = 16, by: int = 8):
    """The 3 x 3 mean filter of :func:`blur_naive` through a shared tile with a one-element
    halo (Kirk & Hwu, ch. 8 "Stencil", tiling with halo cells): a block of (bx, by)
    threads loads the (by + 2) x (bx + 2) tile around its outputs once — its threads walk
    the tile's elements in row-major order, so a warp loads consecutive columns — waits,
    then reads the 9 neighbours from shared memory. An element of ``img`` is read once by
    its own block and at most 3 more times as another block's halo (a corner: 4)."""
    _check_pow2(bx, "bx", 1, MAX_THREADS_PER_BLOCK)
    _check_pow2(by, "by", 1, MAX_THREADS_PER_BLOCK)
    if bx * by > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"bx * by = {bx * by} threads per block; at most "
                         f"{MAX_THREADS_PER_BLOCK}")
    width, height = bx + 2, by + 2

    def factory(cuda):
        def kernel(img, out):
            tile = cuda.shared.array((height, width), cuda.float32)
            tx = cuda.threadIdx.x
            ty = cuda.threadIdx.y
            r0 = cuda.blockIdx.y * by - 1          # the tile's first row and column
            c0 = cuda.blockIdx.x * bx - 1
            e = ty * bx + tx
            while e < height * width:
                rr = r0 + e // width
                cc = c0 + e % width
                inside = 0 <= rr < img.shape[0] and 0 <= cc < img.shape[1]
                tile[e // width, e % width] = img[rr, cc] if inside else 0.0
                e += bx * by
            cuda.syncthreads()
            r = r0 + 1 + ty
            c = c0 + 1 + tx
            if r < out.shape[0] and c < out.shape[1]:
                acc = 0.0
                for dr in range(3):
                    for dc in range(3):
                        acc += tile[ty + dr, tx + dc]
                out[r, c] = acc / 9.0
        return kernel
    return named(factory, f"blur_shared_{bx}_{by}")
