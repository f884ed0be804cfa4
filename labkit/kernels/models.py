"""Closed-form work and traffic of the library's kernels (tests check them against traces).

Counts are element accesses of float32 (4 bytes); "global bytes" is what the kernel
requests from global memory, ignoring caches, so ``flops / global_bytes`` is the kernel's
arithmetic intensity as written (Williams, Waterman & Patterson, "Roofline", CACM 2009).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.kernels.ops import cdiv

FLOAT_BYTES = 4


@dataclass(frozen=True)
class MatmulTraffic:
    """Element accesses of c = a @ b with a (m, k), b (k, n) for one kernel variant."""
    a_reads: int
    b_reads: int
    c_writes: int
    max_reads_a: int        # most reads of any one element of a
    max_reads_b: int
    shared_reads: int
    shared_writes: int

    @property
    def global_accesses(self) -> int:
        return self.a_reads + self.b_reads + self.c_writes


def matmul_traffic(m: int, n: int, k: int, variant: str, tile: int = 8,
                   rows: int = 2) -> MatmulTraffic:
    """Closed forms for :func:`labkit.kernels.ops.matmul`.

    naive / coalesced: every output reads a row of a and a column of b: a and b are read
    m*n*k times each, each element of a n times. tiled (tile T): block (bi, bj) loads
    row-block bi of a and column-block bj of b once, so a is read m*k*ceil(n/T) times
    (each element ceil(n/T) times) and b k*n*ceil(m/T) times; every launched thread reads
    2T shared words per phase over ceil(k/T) phases. register (T, R): same global traffic,
    a thread reads T*(1+R) shared words per phase and writes 2R.
    """
    for name, v in (("m", m), ("n", n), ("k", k), ("tile", tile), ("rows", rows)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if variant in ("naive", "coalesced"):
        return MatmulTraffic(m * n * k, m * n * k, m * n, n, m, 0, 0)
    if variant not in ("tiled", "register"):
        raise ValueError(f"variant must be naive, coalesced, tiled or register, got {variant!r}")
    blocks = cdiv(m, tile) * cdiv(n, tile)
    phases = cdiv(k, tile)
    if variant == "tiled":
        threads = blocks * tile * tile
        shared_r, shared_w = threads * phases * 2 * tile, threads * phases * 2
    else:
        threads = blocks * tile * tile // rows
        shared_r, shared_w = threads * phases * tile * (1 + rows), threads * phases * 2 * rows
    return MatmulTraffic(m * k * cdiv(n, tile), k * n * cdiv(m, tile), m * n,
                         cdiv(n, tile), cdiv(m, tile), shared_r, shared_w)


@dataclass(frozen=True)
class ReductionTraffic:
    global_reads: int
    global_writes: int
    global_atomics: int
    shared_reads: int
    shared_writes: int


def reduction_traffic(n: int, variant: str, block: int = 64) -> ReductionTraffic:
    """First pass of :func:`labkit.kernels.ops.reduce_sum` on n elements.

    atomic: n reads, n atomics. interleaved / strided / shared tree (block B, blocks = ceil(n/B)):
    per block B shared writes to fill, then B-1 adds (2 reads, 1 write each) and one read
    of the total: 2B-1 reads and 2B-1 writes; one global write per block.
    """
    if n < 1 or block < 1:
        raise ValueError(f"n and block must be >= 1, got n={n}, block={block}")
    if variant == "atomic":
        return ReductionTraffic(n, 0, n, 0, 0)
    if variant not in ("shared", "interleaved", "strided"):
        raise ValueError(f"variant must be atomic, interleaved, strided or shared, got "
                         f"{variant!r}")
    blocks = cdiv(n, block)
    return ReductionTraffic(n, blocks, 0, blocks * (2 * block - 1), blocks * (2 * block - 1))


@dataclass(frozen=True)
class KernelCost:
    """Work and global-memory bytes of one kernel at one size (for the roofline)."""
    name: str
    flops: float
    global_bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte of global traffic."""
        return self.flops / self.global_bytes


ROOFLINE_KERNELS = ("vector add", "reduction (tree)", "softmax (online)", "matmul naive",
                    "matmul tiled 16", "matmul tiled 32", "matmul register 64x64")


def kernel_cost(kernel: str, n: int) -> KernelCost:
    """Cost of ``kernel`` (one of ROOFLINE_KERNELS) at size n (n x n matrices, n elements,
    or an n x n softmax), from the closed forms above."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    b = FLOAT_BYTES
    if kernel == "vector add":
        return KernelCost(kernel, n, 3 * n * b)
    if kernel == "reduction (tree)":
        t = reduction_traffic(n, "shared", 256)
        return KernelCost(kernel, n - 1, (t.global_reads + t.global_writes) * b)
    if kernel == "softmax (online)":
        # per element: online pass (max, 2 exp, mul-add ~ 5 flops), write pass (exp, div)
        return KernelCost(kernel, 7 * n * n, 3 * n * n * b)
    variants = {"matmul naive": ("naive", 16, 1), "matmul tiled 16": ("tiled", 16, 1),
                "matmul tiled 32": ("tiled", 32, 1),
                "matmul register 64x64": ("register", 64, 4)}
    if kernel not in variants:
        raise ValueError(f"kernel must be one of {ROOFLINE_KERNELS}, got {kernel!r}")
    variant, tile, rows = variants[kernel]
    t = matmul_traffic(n, n, n, variant, tile, rows)
    return KernelCost(kernel, 2.0 * n ** 3, t.global_accesses * b)
