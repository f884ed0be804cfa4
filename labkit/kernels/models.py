"""Closed-form work and traffic of the library's kernels (tests check them against traces).

Counts are element accesses of float32 (4 bytes); "global bytes" is what the kernel
requests from global memory, ignoring caches, so ``flops / global_bytes`` is the kernel's
arithmetic intensity as written (Williams, Waterman & Patterson, "Roofline", CACM 2009).

Requests are not DRAM traffic: :func:`dram_bytes` models a matmul's DRAM bytes with tiles
reused through L2 within a wave of resident blocks, and :func:`predict_matmul` turns the
counts into a predicted time (FP32 units, issue, L1, shared memory, DRAM) for the
A100/H100/H200 of :mod:`labkit.hardware` — a prediction, which ``benchmarks/gpu_check.py``
measures on a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit import hardware
from labkit.kernels.closed_forms import (  # noqa: F401  (models' names since chapter 05)
    BLOCKED_2D, FLOAT_BYTES, AttentionBytes, MatmulTraffic, ReductionTraffic)
from labkit.kernels.occupancy import occupancy
from labkit.kernels.registry import ATTENTION, KERNELS, MATMUL, REDUCTION, lookup, variants
from labkit.validate import ceil_div as cdiv
from labkit.validate import integer, one_of


def matmul_traffic(m: int, n: int, k: int, variant: str, tile: int = 8,
                   rows: int = 2, blocked: dict | None = None) -> MatmulTraffic:
    """Closed forms for :func:`labkit.kernels.ops.matmul` (each variant's in its
    :data:`~labkit.kernels.registry.KERNELS` entry, :mod:`~labkit.kernels.closed_forms`).

    naive / coalesced: every output reads a row of a and a column of b: a and b are read
    m*n*k times each, each element of a n times. tiled (tile T): block (bi, bj) loads
    row-block bi of a and column-block bj of b once, so a is read m*k*ceil(n/T) times
    (each element ceil(n/T) times) and b k*n*ceil(m/T) times; every launched thread reads
    2T shared words per phase over ceil(k/T) phases. register (T, R): same global traffic,
    a thread reads T*(1+R) shared words per phase and writes 2R. register2d (bm, bn, bk, tm,
    tn): a read ceil(n/bn) times, b ceil(m/bm) times; per phase of bk each of the block's
    (bm/tm)(bn/tn) threads reads bk(tm+tn) shared words, and the block writes bk(bm+bn).
    """
    for name, v in (("m", m), ("n", n), ("k", k), ("tile", tile), ("rows", rows)):
        integer(name, v, low=1)
    kernel = lookup(MATMUL, variant)
    return kernel.traffic(m, n, k, kernel.shape(tile, rows, blocked))


def fast_reduction_traffic(n: int, block: int, blocks: int) -> ReductionTraffic:
    """:func:`~labkit.kernels.library.reduce_fast` with ``blocks`` blocks of ``block``
    threads: n global reads, one atomic per block, one shared write and read per warp."""
    n, block, blocks = integer("n", n, low=1), integer("block", block, low=32), integer(
        "blocks", blocks, low=1)
    return KERNELS[REDUCTION]["fast"].traffic(n, block, blocks)


def fast_reduction_shuffles(block: int, blocks: int) -> int:
    """Shuffles of reduce_fast: every thread 5 (log2 32) steps, then warp 0 another 5."""
    return KERNELS[REDUCTION]["fast"].shuffles(None, block, blocks)


def reduction_traffic(n: int, variant: str, block: int = 64) -> ReductionTraffic:
    """First pass of :func:`labkit.kernels.ops.reduce_sum` on n elements.

    atomic: n reads, n atomics. interleaved / strided / shared tree (block B, blocks = ceil(n/B)):
    per block B shared writes to fill, then B-1 adds (2 reads, 1 write each) and one read
    of the total: 2B-1 reads and 2B-1 writes; one global write per block.
    """
    if n < 1 or block < 1:
        raise ValueError(f"n and block must be >= 1, got n={n}, block={block}")
    modelled = tuple(v for v in variants(REDUCTION, takes_blocks=False)
                     if KERNELS[REDUCTION][v].traffic is not None)
    if variant not in modelled:
        raise ValueError(f"variant must be {', '.join(modelled[:-1])} or {modelled[-1]}, "
                         f"got {variant!r}")
    return KERNELS[REDUCTION][variant].traffic(n, block)


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
                    "matmul tiled 16", "matmul tiled 32", "matmul register 64x64",
                    "matmul register2d 128x128")
_ROOFLINE_MATMULS = {"matmul naive": ("naive", dict(tile=16)),
                     "matmul tiled 16": ("tiled", dict(tile=16)),
                     "matmul tiled 32": ("tiled", dict(tile=32)),
                     "matmul register 64x64": ("register", dict(tile=64, rows=4)),
                     "matmul register2d 128x128": ("register2d", None)}


def kernel_cost(kernel: str, n: int, gpu: str | None = None) -> KernelCost:
    """Cost of ``kernel`` (one of ROOFLINE_KERNELS) at size n (n x n matrices, n elements,
    or an n x n softmax).

    ``gpu=None``: bytes are the kernel's global *requests* (the closed forms above, no
    cache) — a pessimistic count that makes every FP32 matmul look memory-bound. With a
    GPU key (A100, H100, H200) a matmul's bytes are its modelled DRAM traffic
    (:func:`dram_bytes`: tiles reused through L2 within a wave); the other kernels read
    each element once either way.
    """
    n = integer("n", n, low=1)
    b = FLOAT_BYTES
    if kernel == "vector add":
        return KernelCost(kernel, n, 3 * n * b)
    if kernel == "reduction (tree)":
        t = reduction_traffic(n, "shared", 256)
        return KernelCost(kernel, n - 1 if n > 1 else 1, (t.global_reads + t.global_writes) * b)
    if kernel == "softmax (online)":
        # per element: online pass (max, 2 exp, mul-add ~ 5 flops), write pass (exp, div)
        return KernelCost(kernel, 7 * n * n, 3 * n * n * b)
    if kernel not in _ROOFLINE_MATMULS:
        raise ValueError(f"kernel must be one of {ROOFLINE_KERNELS}, got {kernel!r}")
    variant, shape = _ROOFLINE_MATMULS[kernel]
    if gpu is not None:
        return KernelCost(kernel, 2.0 * n ** 3, dram_bytes(n, n, n, variant, gpu, shape))
    t = KERNELS[MATMUL][variant].traffic(n, n, n, _shape(variant, shape))
    return KernelCost(kernel, 2.0 * n ** 3, t.global_accesses * b)


def attention_traffic(n: int, d: int, variant: str, rows: int = 8,
                      tile: int = 8) -> AttentionBytes:
    """Closed forms for :func:`labkit.kernels.ops.attention` (q, k, v of shape (n, d)).

    standard (FlashAttention's Algorithm 0, three launches): s = q kᵀ by the tiled matmul
    (:func:`matmul_traffic` with m = n = N, k = d: q and kᵀ read N d ceil(N / tile) times
    each, s written N² times); the row softmax with a block per row reads s 3 N² times
    and writes p N² times; o = p v by the tiled matmul reads p N² ceil(d / tile) times, v
    N d ceil(N / tile) times, writes N d. The N x N part: N² + 3 N² + N² + N² ceil(d /
    tile). flash (one launch, blocks of ``rows`` query rows, key tiles of ``rows``): q read
    and o written N d times, k and v read N d ceil(N / rows) times each. The traced
    sectors equal these bytes / 32 when N, d and the tiles are multiples of 8 (every
    warp access then covers whole sectors)."""
    for name, v in (("n", n), ("d", d), ("rows", rows), ("tile", tile)):
        integer(name, v, low=1)
    return lookup(ATTENTION, variant).traffic(n, d, variant, rows, tile)


# ---- from requests to time: DRAM with tile reuse, and a ladder model (issue 10, 15) -------

LADDER = variants(MATMUL)
"""The matmul ladder of chapter 05 and the launch shapes the model and gpu_check use
(each rung's :data:`~labkit.kernels.registry.KERNELS` entry)."""
LADDER_SHAPES = {v: dict(KERNELS[MATMUL][v].ladder_shape) for v in LADDER}
LADDER_REGISTERS = {v: KERNELS[MATMUL][v].registers for v in LADDER}
"""Registers per thread for occupancy, at :data:`LADDER_SHAPES`: ptxas 13.x counts for
sm_90 (``ptxas -v``), from ``benchmarks/ptx_report.py``; another ptxas may differ."""


def _shape(variant: str, shape: dict | None) -> dict:
    one_of("variant", variant, LADDER)
    return dict(LADDER_SHAPES[variant], **(shape or {}))


def dram_bytes(m: int, n: int, k: int, variant: str, gpu: str = "H100",
               shape: dict | None = None) -> float:
    """DRAM bytes of an (m, k) @ (k, n) FP32 matmul with caches, by a *wave* model.

    The kernel's global requests (``matmul_traffic``) are not DRAM traffic: L1 and L2
    catch repeats. Model: the blocks resident at once (a wave: SMs x blocks per SM, from
    :func:`labkit.kernels.occupancy.occupancy`) start together in raster order
    (blockIdx.x fastest) and walk k in step, so each k-slice of the a row-panels and b
    column-panels the wave touches comes from DRAM once and is then served by L2 to every
    block of the wave that needs it; nothing survives from one wave to the next; c is
    written once. With R block-rows and C block-columns in a wave of (bm x bn) tiles:
    DRAM = waves x 4 k (R bm + C bn) + 4 m n, never less than the compulsory 4 (mk + kn + mn).

    Left out: reuse across waves (L2 is 40-50 MB; rasterization orders such as CUTLASS's
    swizzle exploit it), blocks drifting out of step, L2 capacity misses when the slices
    of a wave exceed L2, and write-allocate traffic.
    """
    p = _shape(variant, shape)
    kernel = KERNELS[MATMUL][variant]
    bm, bn, threads, smem = kernel.block_tile(p)
    sm = hardware.sm_limits(gpu)
    per_sm = occupancy(sm, threads, kernel.registers, smem).blocks_per_sm
    wave = max(1, per_sm) * sm.sm_count
    gx, gy = cdiv(n, bn), cdiv(m, bm)
    blocks = gx * gy
    total = 0.0
    for start in range(0, blocks, wave):
        ids = range(start, min(blocks, start + wave))
        rows = len({b // gx for b in ids})
        cols = len({b % gx for b in ids})
        total += 4.0 * k * (min(rows * bm, m) + min(cols * bn, n))
    total += 4.0 * m * n
    return max(total, 4.0 * (m * k + k * n + m * n))


@dataclass(frozen=True)
class LadderPrediction:
    """The model's time for one matmul on one GPU: the slowest of five resources.

    ``times`` maps each resource to the seconds it alone would take: FP32 FMA units,
    instruction issue, L1 (global-load wavefronts), shared memory (wavefronts) and DRAM.
    It is a *prediction* (an upper bound on speed), not a measurement.
    """
    variant: str
    gpu: str
    flops: float
    times: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.times.values())

    @property
    def limiter(self) -> str:
        return max(self.times, key=self.times.get)

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12


def predict_matmul(n: int, variant: str, gpu: str = "H100",
                   shape: dict | None = None) -> LadderPrediction:
    """Predicted time of an n x n x n FP32 matmul with one of the ladder's kernels.

    Per SM and clock (clock = FP32 peak / (SMs x lanes x 2), see
    :func:`labkit.hardware.fp32_clock_hz`): 4 warp instructions issued (one per
    sub-partition), ``lanes / 32`` warp FMAs, one shared-memory wavefront (32 banks x 4 B;
    a warp request with k-way bank conflicts takes k) and one L1 wavefront (one 128-byte
    line per request: an uncoalesced warp load touching L lines takes L). Counting, per warp
    and per step of k (warp FMAs = m n k / 32):

    * naive (T x T blocks, threadIdx.x on rows): 1 FMA; a-loads touch min(T, 32) lines,
      b one line; 3 instructions.
    * coalesced: 1 FMA; a 32/T lines, b one; 3 instructions.
    * tiled T: 1 FMA and 2 shared wavefronts (a broadcast, a row of b); 3 instructions.
    * register (T, R): R FMAs, 1 + R shared wavefronts, 1 + 2R instructions.
    * register2d (bm, bn, bk, tm, tn): tm tn FMAs, tm + tn shared wavefronts,
      tm tn + tm + tn instructions.

    Tile loads add their global (L1) wavefronts and instructions; DRAM bytes come from
    :func:`dram_bytes`. Left out: memory latency (occupancy and instruction-level
    parallelism hide it only in part), address arithmetic and loop overhead, the
    compiler's register allocation (spills), clocks below boost, and cuBLAS's further
    tricks (double buffering, vector loads, swizzles) — so real kernels land below.
    """
    n = integer("n", n, low=1)
    p = _shape(variant, shape)
    g, sm = hardware.gpu(gpu), hardware.sm_limits(gpu)
    clock = hardware.fp32_clock_hz(gpu)
    per_clock = sm.sm_count * clock                        # SM-clocks per second
    flops = 2.0 * n ** 3
    fma, shared, l1, instr = KERNELS[MATMUL][variant].issue(n, p)
    times = {
        "FP32 units": fma / (per_clock * sm.fp32_lanes_per_sm / 32),
        "issue": instr / (per_clock * sm.sub_partitions),
        "L1": l1 / per_clock,
        "shared memory": shared / per_clock,
        "DRAM": dram_bytes(n, n, n, variant, gpu, shape) / g.hbm_bandwidth,
    }
    return LadderPrediction(variant, gpu, flops, times)


LADDER_GPUS = ("A100", "H100", "H200")
"""The GPUs whose ladder predictions are shown beside a measurement (``gpu_check.py``'s
"model" column, chapter 05's ladder plot); on another GPU, or without one, the chapter
shows an H100's."""


def predict_ladder(n: int, gpu: str | None = None) -> list[LadderPrediction]:
    """:func:`predict_matmul` of every rung of :data:`LADDER` at n^3 on ``gpu`` when it is
    one of :data:`LADDER_GPUS`, else on an H100 (the prediction's ``gpu`` says which)."""
    gpu = gpu if gpu in LADDER_GPUS else "H100"
    return [predict_matmul(n, v, gpu) for v in LADDER]


def predicted_speedup(n: int, faster: str, slower: str, gpu: str = "H100") -> float:
    """Model speed-up of rung ``faster`` over rung ``slower`` at n^3 on ``gpu``: the ratio
    of their :func:`predict_matmul` times (= of their TFLOP/s)."""
    return predict_matmul(n, slower, gpu).seconds / predict_matmul(n, faster, gpu).seconds


def predict_reduction(n: int, gpu: str = "H100") -> float:
    """Predicted seconds of a sum of n float32 at the DRAM roof: 4 n bytes / HBM bandwidth
    (a reduction does one add per 4 bytes: far left of every ridge)."""
    return 4.0 * integer("n", n, low=1) / hardware.gpu(gpu).hbm_bandwidth
