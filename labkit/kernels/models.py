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
from labkit.kernels.occupancy import occupancy
from labkit.validate import ceil_div as cdiv
from labkit.validate import integer, one_of

FLOAT_BYTES = 4



BLOCKED_2D = dict(bm=64, bn=64, bk=8, tm=4, tn=4)   # tile shapes of 'register2d' by default

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
    def global_reads(self) -> int:
        """Reads of a and b from global memory."""
        return self.a_reads + self.b_reads

    @property
    def global_accesses(self) -> int:
        return self.global_reads + self.c_writes


def matmul_traffic(m: int, n: int, k: int, variant: str, tile: int = 8,
                   rows: int = 2, blocked: dict | None = None) -> MatmulTraffic:
    """Closed forms for :func:`labkit.kernels.ops.matmul`.

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
    one_of("variant", variant, ("naive", "coalesced", "tiled", "register", "register2d"))
    if variant in ("naive", "coalesced"):
        return MatmulTraffic(m * n * k, m * n * k, m * n, n, m, 0, 0)
    if variant == "register2d":
        p = dict(BLOCKED_2D, **(blocked or {}))
        blocks = cdiv(m, p["bm"]) * cdiv(n, p["bn"])
        phases = cdiv(k, p["bk"])
        threads = blocks * (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
        return MatmulTraffic(m * k * cdiv(n, p["bn"]), k * n * cdiv(m, p["bm"]), m * n,
                             cdiv(n, p["bn"]), cdiv(m, p["bm"]),
                             threads * phases * p["bk"] * (p["tm"] + p["tn"]),
                             blocks * phases * p["bk"] * (p["bm"] + p["bn"]))
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


def fast_reduction_traffic(n: int, block: int, blocks: int) -> ReductionTraffic:
    """:func:`~labkit.kernels.library.reduce_fast` with ``blocks`` blocks of ``block``
    threads: n global reads, one atomic per block, one shared write and read per warp."""
    n, block, blocks = integer("n", n, low=1), integer("block", block, low=32), integer(
        "blocks", blocks, low=1)
    warps = block // 32
    return ReductionTraffic(n, 0, blocks, blocks * warps, blocks * warps)


def fast_reduction_shuffles(block: int, blocks: int) -> int:
    """Shuffles of reduce_fast: every thread 5 (log2 32) steps, then warp 0 another 5."""
    return blocks * 5 * (block + 32)


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
    p = _shape(variant, shape)
    if variant == "register2d":
        t = matmul_traffic(n, n, n, variant, blocked=p)
    else:
        t = matmul_traffic(n, n, n, variant, p["tile"], p.get("rows", 1))
    return KernelCost(kernel, 2.0 * n ** 3, t.global_accesses * b)


@dataclass(frozen=True)
class AttentionBytes:
    """Global bytes one head's attention requests (float32), and what of it is the N x N
    scores and probabilities."""
    n: int
    d: int
    variant: str
    total: int
    matrix: int        # bytes moved on s and p (standard only)
    scratch: int = 0   # bytes of global memory s and p occupy (standard: 2 x 4 N^2)


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
    one_of("variant", variant, ("standard", "flash"))
    b = FLOAT_BYTES
    if variant == "flash":
        return AttentionBytes(n, d, variant, b * (2 * n * d + 2 * n * d * cdiv(n, rows)), 0)
    scores = matmul_traffic(n, n, d, "tiled", tile)
    pv = matmul_traffic(n, d, n, "tiled", tile)
    softmax = 4 * n * n
    matrix = scores.c_writes + softmax + pv.a_reads
    total = scores.global_accesses + softmax + pv.global_accesses
    return AttentionBytes(n, d, variant, b * total, b * matrix, 2 * b * n * n)


# ---- from requests to time: DRAM with tile reuse, and a ladder model (issue 10, 15) -------

LADDER = ("naive", "coalesced", "tiled", "register", "register2d")
"""The matmul ladder of chapter 05 and the launch shapes the model and gpu_check use."""
LADDER_SHAPES = {
    "naive": dict(tile=16), "coalesced": dict(tile=16), "tiled": dict(tile=32),
    "register": dict(tile=64, rows=4),
    "register2d": dict(bm=128, bn=128, bk=8, tm=8, tn=8),
}
LADDER_REGISTERS = {"naive": 32, "coalesced": 32, "tiled": 32, "register": 54,
                    "register2d": 124}
"""Registers per thread for occupancy, at :data:`LADDER_SHAPES`: ptxas 13.x counts for
sm_90 (``ptxas -v``), from ``benchmarks/ptx_report.py``; another ptxas may differ."""


def _shape(variant: str, shape: dict | None) -> dict:
    one_of("variant", variant, LADDER)
    return dict(LADDER_SHAPES[variant], **(shape or {}))


def _block_tile(variant: str, p: dict) -> tuple[int, int, int, int]:
    """(rows of c per block, columns of c per block, threads per block, shared bytes)."""
    if variant == "register2d":
        threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
        return p["bm"], p["bn"], threads, 4 * p["bk"] * (p["bm"] + p["bn"] + 4)
    t = p["tile"]
    if variant == "register":
        return t, t, t * t // p["rows"], 2 * 4 * t * t
    return t, t, t * t, (2 * 4 * t * t if variant == "tiled" else 0)


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
    bm, bn, threads, smem = _block_tile(variant, p)
    sm = hardware.sm_limits(gpu)
    per_sm = occupancy(sm, threads, LADDER_REGISTERS[variant], smem).blocks_per_sm
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
    warp_steps = n * n * n / 32                            # warp-level (warp, k) steps
    if variant in ("naive", "coalesced"):
        t = p["tile"]
        lines = (min(t, 32) + 1) if variant == "naive" else (max(1, 32 // t) + 1)
        fma, shared, l1, instr = warp_steps, 0.0, warp_steps * lines, warp_steps * 3
    elif variant == "tiled":
        t = p["tile"]
        fma, shared, instr = warp_steps, 2 * warp_steps, 3 * warp_steps
        tile_loads = 2 * (n * n / 32) * (n / t)              # one warp load per thread, a and b
        l1, instr = tile_loads * max(1, 32 // t), instr + 2 * tile_loads
    elif variant == "register":
        t, r = p["tile"], p["rows"]
        steps = warp_steps / r
        fma, shared, instr = warp_steps, steps * (1 + r), steps * (1 + 2 * r)
        tile_loads = 2 * (n * n / 32) * (n / t)
        l1, instr = tile_loads * max(1, 32 // t), instr + 2 * tile_loads
    else:
        tm, tn = p["tm"], p["tn"]
        steps = warp_steps / (tm * tn)
        fma, shared = warp_steps, steps * (tm + tn)
        instr = steps * (tm * tn + tm + tn)
        tile_loads = (n * n / 32) * (n / p["bk"]) * p["bk"] * (p["bm"] + p["bn"]) / (
            p["bm"] * p["bn"])
        l1, instr = tile_loads * 4, instr + 2 * tile_loads  # a warp's a-tile load: 4 lines
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
