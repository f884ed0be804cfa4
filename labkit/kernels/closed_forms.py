"""Each kernel variant's closed forms: its traffic, and for a matmul rung its block tile, its
warp-level work per step of k and its FMAs per phase.

One function per variant (or per shape of kernel several variants share), on arguments
already validated; the registry (:mod:`labkit.kernels.registry`) names them in each entry,
and :mod:`labkit.kernels.models` validates its arguments, looks the entry up and evaluates
them (the formulas and their sources are in the docstrings there and here). A matmul's
``p`` is its launch shape: ``{"tile": T}``, ``{"tile": T, "rows": R}`` or the 2-D tile
shapes ``{"bm", "bn", "bk", "tm", "tn"}``.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.validate import ceil_div as cdiv, integer

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


@dataclass(frozen=True)
class ReductionTraffic:
    global_reads: int
    global_writes: int
    global_atomics: int
    shared_reads: int
    shared_writes: int


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


# ---- matmul: traffic ----------------------------------------------------------------------

def streamed_traffic(m: int, n: int, k: int, p: dict) -> MatmulTraffic:
    """naive / coalesced: every output reads a row of a and a column of b."""
    return MatmulTraffic(m * n * k, m * n * k, m * n, n, m, 0, 0)


def _tile_reads(m: int, n: int, k: int, tile: int, shared_r: int, shared_w: int
                ) -> MatmulTraffic:
    return MatmulTraffic(m * k * cdiv(n, tile), k * n * cdiv(m, tile), m * n,
                         cdiv(n, tile), cdiv(m, tile), shared_r, shared_w)


def tiled_traffic(m: int, n: int, k: int, p: dict) -> MatmulTraffic:
    """tiled (tile T): a read ceil(n/T) times, b ceil(m/T) times; every thread reads 2T
    shared words and writes 2 per phase."""
    tile = p["tile"]
    threads = cdiv(m, tile) * cdiv(n, tile) * tile * tile
    phases = cdiv(k, tile)
    return _tile_reads(m, n, k, tile, threads * phases * 2 * tile, threads * phases * 2)


def register_traffic(m: int, n: int, k: int, p: dict) -> MatmulTraffic:
    """register (T, R): the tiled kernel's global traffic; a thread reads T (1 + R) shared
    words per phase and writes 2R."""
    tile, rows = p["tile"], p["rows"]
    threads = cdiv(m, tile) * cdiv(n, tile) * tile * tile // rows
    phases = cdiv(k, tile)
    return _tile_reads(m, n, k, tile, threads * phases * tile * (1 + rows),
                       threads * phases * 2 * rows)


def blocked_traffic(m: int, n: int, k: int, p: dict) -> MatmulTraffic:
    """register2d (bm, bn, bk, tm, tn): a read ceil(n/bn) times, b ceil(m/bm) times; per
    phase each thread reads bk (tm + tn) shared words, the block writes bk (bm + bn)."""
    blocks = cdiv(m, p["bm"]) * cdiv(n, p["bn"])
    phases = cdiv(k, p["bk"])
    threads = blocks * (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return MatmulTraffic(m * k * cdiv(n, p["bn"]), k * n * cdiv(m, p["bm"]), m * n,
                         cdiv(n, p["bn"]), cdiv(m, p["bm"]),
                         threads * phases * p["bk"] * (p["tm"] + p["tn"]),
                         blocks * phases * p["bk"] * (p["bm"] + p["bn"]))


# ---- matmul: block tiles (rows of c, columns of c, threads, shared bytes per block) ------

def square_tile(p: dict) -> tuple[int, int, int, int]:
    """naive / coalesced: T x T threads, no shared memory."""
    t = p["tile"]
    return t, t, t * t, 0


def shared_tile(p: dict) -> tuple[int, int, int, int]:
    """tiled: T x T threads, a T x T tile of a and of b in shared memory."""
    t = p["tile"]
    return t, t, t * t, 2 * 4 * t * t


def register_tile(p: dict) -> tuple[int, int, int, int]:
    """register: T x T / R threads, the tiled kernel's shared tiles."""
    t = p["tile"]
    return t, t, t * t // p["rows"], 2 * 4 * t * t


def blocked_tile(p: dict) -> tuple[int, int, int, int]:
    """register2d: (bm / tm)(bn / tn) threads, bk x (bm + bn + 4) shared words."""
    threads = (p["bm"] // p["tm"]) * (p["bn"] // p["tn"])
    return p["bm"], p["bn"], threads, 4 * p["bk"] * (p["bm"] + p["bn"] + 4)


# ---- matmul: warp-level work of an n^3 product (labkit.kernels.models.predict_matmul) -----

def naive_issue(n: int, p: dict) -> tuple[float, float, float, float]:
    """(warp FMAs, shared wavefronts, L1 wavefronts, warp instructions). naive (T x T
    blocks, threadIdx.x on rows): per warp and step of k 1 FMA; a-loads touch min(T, 32)
    lines, b one line; 3 instructions."""
    warp_steps = n * n * n / 32
    lines = min(p["tile"], 32) + 1
    return warp_steps, 0.0, warp_steps * lines, warp_steps * 3


def coalesced_issue(n: int, p: dict) -> tuple[float, float, float, float]:
    """coalesced: 1 FMA; a 32/T lines, b one; 3 instructions."""
    warp_steps = n * n * n / 32
    lines = max(1, 32 // p["tile"]) + 1
    return warp_steps, 0.0, warp_steps * lines, warp_steps * 3


def _tile_loads(n: int, t: int) -> float:
    return 2 * (n * n / 32) * (n / t)              # one warp load per thread, a and b


def tiled_issue(n: int, p: dict) -> tuple[float, float, float, float]:
    """tiled T: 1 FMA and 2 shared wavefronts (a broadcast, a row of b); 3 instructions;
    plus the tile loads."""
    warp_steps = n * n * n / 32
    t = p["tile"]
    fma, shared, instr = warp_steps, 2 * warp_steps, 3 * warp_steps
    tile_loads = _tile_loads(n, t)
    return fma, shared, tile_loads * max(1, 32 // t), instr + 2 * tile_loads


def register_issue(n: int, p: dict) -> tuple[float, float, float, float]:
    """register (T, R): R FMAs, 1 + R shared wavefronts, 1 + 2R instructions; plus the
    tile loads."""
    warp_steps = n * n * n / 32
    t, r = p["tile"], p["rows"]
    steps = warp_steps / r
    fma, shared, instr = warp_steps, steps * (1 + r), steps * (1 + 2 * r)
    tile_loads = _tile_loads(n, t)
    return fma, shared, tile_loads * max(1, 32 // t), instr + 2 * tile_loads


def blocked_issue(n: int, p: dict) -> tuple[float, float, float, float]:
    """register2d (bm, bn, bk, tm, tn): tm tn FMAs, tm + tn shared wavefronts, tm tn + tm +
    tn instructions; plus the tile loads (a warp's a-tile load: 4 lines)."""
    warp_steps = n * n * n / 32
    tm, tn = p["tm"], p["tn"]
    steps = warp_steps / (tm * tn)
    fma, shared = warp_steps, steps * (tm + tn)
    instr = steps * (tm * tn + tm + tn)
    tile_loads = (n * n / 32) * (n / p["bk"]) * p["bk"] * (p["bm"] + p["bn"]) / (
        p["bm"] * p["bn"])
    return fma, shared, tile_loads * 4, instr + 2 * tile_loads


# ---- matmul: FMAs one thread does per phase of k (benchmarks/ptx_report.py) --------------

def no_phases(p: dict) -> None:
    """naive / coalesced: no phases."""
    return None


def tiled_phase(p: dict) -> int:
    return p["tile"]


def register_phase(p: dict) -> int:
    return p["tile"] * p["rows"]


def blocked_phase(p: dict) -> int:
    return p["bk"] * p["tm"] * p["tn"]


# ---- reductions: the first pass on n elements in blocks of ``block`` ---------------------

def atomic_traffic(n: int, block: int, blocks: int | None = None) -> ReductionTraffic:
    """atomic: n reads, n atomics."""
    return ReductionTraffic(n, 0, n, 0, 0)


def tree_traffic(n: int, block: int, blocks: int | None = None) -> ReductionTraffic:
    """interleaved / strided / shared tree (blocks = ceil(n/B)): per block B shared writes
    to fill, then B-1 adds (2 reads, 1 write each) and one read of the total: 2B-1 reads
    and 2B-1 writes; one global write per block."""
    n, block = integer("n", n, low=1), integer("block", block, low=1)
    blocks = cdiv(n, block)
    return ReductionTraffic(n, blocks, 0, blocks * (2 * block - 1), blocks * (2 * block - 1))


def grid_stride_traffic(n: int, block: int, blocks: int) -> ReductionTraffic:
    """reduce_fast with ``blocks`` blocks: n global reads, one atomic per block, one shared
    write and read per warp."""
    warps = block // 32
    return ReductionTraffic(n, 0, blocks, blocks * warps, blocks * warps)


def grid_stride_shuffles(n: int | None, block: int, blocks: int) -> int:
    """Shuffles of reduce_fast (whatever n): every thread 5 (log2 32) steps, then warp 0
    another 5."""
    return blocks * 5 * (block + 32)


# ---- attention: one head, q, k, v of shape (n, d) -----------------------------------------

def standard_attention_bytes(n: int, d: int, variant: str, rows: int,
                             tile: int) -> AttentionBytes:
    """Three launches: s = q kᵀ and o = p v by the tiled matmul, the row softmax between
    (a block per row: s read 3 N² times, p written N² times)."""
    scores = tiled_traffic(n, n, d, {"tile": tile})
    pv = tiled_traffic(n, d, n, {"tile": tile})
    softmax = 4 * n * n
    matrix = scores.c_writes + softmax + pv.a_reads
    total = scores.global_accesses + softmax + pv.global_accesses
    b = FLOAT_BYTES
    return AttentionBytes(n, d, variant, b * total, b * matrix, 2 * b * n * n)


def flash_attention_bytes(n: int, d: int, variant: str, rows: int,
                          tile: int) -> AttentionBytes:
    """One fused launch: q read and o written N d times, k and v read N d ceil(N / rows)
    times each."""
    return AttentionBytes(n, d, variant,
                          FLOAT_BYTES * (2 * n * d + 2 * n * d * cdiv(n, rows)), 0)
