"""Every kernel family's variants in one table: ``KERNELS[family][variant]`` (issue 26).

An entry is a small frozen dataclass of its family: the library kernel it launches
(``factory``: a ``fn(cuda)``, or the factory of one, from :mod:`labkit.kernels.library`),
how it is launched (the block rule and the parameters it validates, the grid and block it
takes) and its closed forms (:mod:`labkit.kernels.closed_forms`: traffic, and for a matmul
rung the block tile, the warp-level work, the FMAs per phase), plus what the benchmarks read
(the matmul ladder's launch shape and registers, the shapes ``benchmarks/gpu_check.py``
checks, the reduction shape ``benchmarks/ptx_report.py`` compiles).

The ops (:mod:`labkit.kernels.ops`: ``reduce_sum``, ``matmul``, ``transpose``,
``softmax``, ``attention``), the models (:mod:`labkit.kernels.models`), the ladder's timing
(:mod:`labkit.kernels.timing`), ``ptx_report``, ``gpu_check``, the tracer tests and the
chapters' variant loops read this table; none of them lists variants. Adding a variant is
one entry here (and its kernel in ``library/``). :func:`lookup` is how a variant is chosen:
a ValueError names the parameter and lists the allowed keys.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels import closed_forms as cf
from labkit.kernels import library as lib
from labkit.kernels.launching import Launch, cdiv, fast_reduction_blocks, launch, result
from labkit.kernels.tracer import DEFAULT_BUDGET_S
from labkit.validate import integer, one_of, power_of_two

MATMUL, REDUCTION, TRANSPOSE, SOFTMAX, ATTENTION = (
    "matmul", "reduction", "transpose", "softmax", "attention")

Plan = tuple[Any, Any, Callable]      # (griddim, blockdim, kernel fn) of one launch


# ---- block rules: the parameters a launcher validates ------------------------------------

def any_block(value: Any) -> int:
    """A 1-D block of [1, MAX_THREADS_PER_BLOCK] threads."""
    return integer("block", value, low=1, high=MAX_THREADS_PER_BLOCK)


def pow2_block(low: int) -> Callable[[Any], int]:
    """The rule "a 1-D block, an integer >= ``low``, a power of two >= max(2, low)"."""
    def rule(value: Any) -> int:
        value = integer("block", value, low=low, high=MAX_THREADS_PER_BLOCK)
        return power_of_two("block", value, low=max(2, low), high=MAX_THREADS_PER_BLOCK)
    rule.__qualname__ = f"pow2_block({low})"
    return rule


# ---- matmul -------------------------------------------------------------------------------

_SQUARE_HIGH = int(MAX_THREADS_PER_BLOCK ** 0.5)


def _rows_on_x(factory, m: int, n: int, p: dict) -> Plan:
    """T x T blocks, threadIdx.x walking rows of c (tile a power of two in [1, 32])."""
    t = power_of_two("tile", p["tile"], low=1, high=_SQUARE_HIGH)
    return (cdiv(m, t), cdiv(n, t)), (t, t), factory


def _columns_on_x(factory, m: int, n: int, p: dict) -> Plan:
    """T x T blocks, threadIdx.x walking columns of c (tile a power of two in [1, 32])."""
    t = power_of_two("tile", p["tile"], low=1, high=_SQUARE_HIGH)
    return (cdiv(n, t), cdiv(m, t)), (t, t), factory


def _shared_tiles(factory, m: int, n: int, p: dict) -> Plan:
    """T x T blocks over T x T tiles of c, the kernel ``factory(T)`` (T in [2, 32])."""
    t = power_of_two("tile", p["tile"], low=2, high=_SQUARE_HIGH)
    return (cdiv(n, t), cdiv(m, t)), (t, t), factory(t)


def _register_rows(factory, m: int, n: int, p: dict) -> Plan:
    """(T, T / R) blocks over T x T tiles of c, each thread R outputs of a column."""
    tile = power_of_two("tile", p["tile"], low=2, high=64)
    rows = power_of_two("rows", p["rows"], low=1, high=tile)
    if tile * tile // rows > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"tile={tile}, rows={rows} needs tile * tile / rows = "
                         f"{tile * tile // rows} threads per block; at most "
                         f"{MAX_THREADS_PER_BLOCK}: raise rows or lower tile")
    return (cdiv(n, tile), cdiv(m, tile)), (tile, tile // rows), factory(tile, rows)


def _micro_tiles(factory, m: int, n: int, p: dict) -> Plan:
    """(bn / tn, bm / tm) blocks over bm x bn tiles of c (the factory checks the shapes)."""
    fn = factory(p["bm"], p["bn"], p["bk"], p["tm"], p["tn"])
    return ((cdiv(n, p["bn"]), cdiv(m, p["bm"])), (p["bn"] // p["tn"], p["bm"] // p["tm"]),
            fn)


@dataclass(frozen=True)
class MatmulKernel:
    """A rung of c = a @ b. Its shape ``p`` is ``{"tile", "rows"}`` or, when ``blocked``,
    the 2-D tile shapes (bm, bn, bk, tm, tn; default :data:`~closed_forms.BLOCKED_2D`)."""
    variant: str
    factory: Callable
    rule: Callable            # (factory, m, n, p) -> (grid, block, fn), validating p
    traffic: Callable         # (m, n, k, p) -> MatmulTraffic
    block_tile: Callable      # p -> (rows of c, columns of c, threads, shared bytes) a block
    issue: Callable           # (n, p) -> (warp FMAs, shared, L1 wavefronts, instructions)
    ffma_per_phase: Callable  # p -> FMAs one thread does per phase of k (None: no phases)
    ladder_shape: dict        # the ladder's launch shape (gpu_check times it, the model's)
    registers: int            # per thread at ladder_shape: ptxas 13.x, sm_90 (ptx_report)
    checked_shapes: tuple     # the shapes gpu_check's correctness pass runs on a GPU
    blocked: bool = False     # takes its shape as ``blocked`` (bm, bn, bk, tm, tn)

    def shape(self, tile: int = 8, rows: int = 2, blocked: dict | None = None) -> dict:
        """The shape ``p`` of ``ops.matmul``'s keywords."""
        return dict(cf.BLOCKED_2D, **(blocked or {})) if self.blocked else dict(
            tile=tile, rows=rows)

    def plan(self, m: int, n: int, p: dict) -> Plan:
        """(grid, block, kernel fn) of an (m, k) @ (k, n) product at shape ``p``."""
        return self.rule(self.factory, m, n, p)

    def keywords(self, p: dict) -> dict:
        """``ops.matmul`` / ``ops.matmul_launch`` keywords of shape ``p``."""
        return {"blocked": dict(p)} if self.blocked else dict(p)


# ---- reductions ---------------------------------------------------------------------------

def _no_shuffles(n: int, block: int, blocks: int | None) -> int:
    return 0


def _warp_shuffles(n: int, block: int, blocks: int | None) -> int:
    """First pass of reduce_warp: every thread log2(32) = 5 steps."""
    return cdiv(n, block) * block * 5


@dataclass(frozen=True)
class ReductionKernel:
    """A sum of a 1-D array: one launch, or a pass relaunched on its partial sums."""
    variant: str
    factory: Callable
    block: Callable                  # the block rule: value -> validated block
    traffic: Callable | None = None  # (n, block, blocks) -> ReductionTraffic of pass 1
    shuffles: Callable = _no_shuffles  # (n, block, blocks) -> warp shuffles of pass 1
    sized: bool = True               # the factory takes the block size (else: the kernel)
    relaunch: bool = False           # one partial per block, relaunched until one is left
    shared_tree: bool = False        # a shared-memory tree (cf.tree_traffic applies)
    takes_blocks: bool = False       # a grid-stride kernel: ``blocks`` blocks, one launch
    ptx_shape: dict | None = None    # factory keywords ptx_report compiles (gpu_check's)

    def kernel(self, block: int) -> Callable:
        return self.factory(block) if self.sized else self.factory

    def run(self, a: np.ndarray, block: int, blocks: int | None, runner: str,
            budget_s: float | None = DEFAULT_BUDGET_S) -> Launch:
        """sum(a) with ``block`` threads a block (validated); ``traces[0]`` is pass 1."""
        if self.takes_blocks:
            blocks = (fast_reduction_blocks(a.size, block, runner) if blocks is None
                      else integer("blocks", blocks, low=1))
        elif self.relaunch and blocks is not None:
            raise ValueError(f"blocks is only for {names(REDUCTION, takes_blocks=True)} "
                             f"(the tree variants launch one block per {block} elements), "
                             f"got blocks={blocks!r}")
        traces, current = [], a
        while True:
            grid = blocks if self.takes_blocks else cdiv(current.size, block)
            out = np.zeros(grid if self.relaunch else 1, dtype=np.float32)
            traces.append(launch(self.kernel(block), grid, block, current, out,
                                 runner=runner, budget_s=budget_s))
            if out.size == 1:
                return result(out, *traces)
            current = out


# ---- transpose and softmax ----------------------------------------------------------------

@dataclass(frozen=True)
class TransposeKernel:
    """a.T in blocks of ``block`` threads, each covering ``covers`` (columns, rows) of a."""
    variant: str
    factory: Callable
    args: tuple | None = None        # the factory's arguments (None: it is the kernel)
    block: tuple = (32, 8)
    covers: tuple = (32, 32)

    def plan(self, rows: int, cols: int) -> Plan:
        fn = self.factory if self.args is None else self.factory(*self.args)
        return (cdiv(cols, self.covers[0]), cdiv(rows, self.covers[1])), self.block, fn


def _thread_per_row(factory, rows: int, block: int) -> Plan:
    return cdiv(rows, block), block, factory


def _block_per_row(factory, rows: int, block: int) -> Plan:
    return rows, block, factory(block)


def _warp_per_row(factory, rows: int, block: int) -> Plan:
    """Blocks of (32, block / 32) threads: block / 32 rows a block."""
    warps = block // 32
    return cdiv(rows, warps), (32, warps), factory(warps)


@dataclass(frozen=True)
class SoftmaxKernel:
    """Softmax of each row: a thread per row, a block per row, or a warp per row."""
    variant: str
    factory: Callable
    block: Callable                  # the block rule: value -> validated block (threads)
    rule: Callable = _thread_per_row  # (factory, rows, block) -> (grid, block, fn)
    reads: int = 2                   # global reads of each element of x (and 1 write)

    def plan(self, rows: int, block: int) -> Plan:
        return self.rule(self.factory, rows, block)


# ---- attention ----------------------------------------------------------------------------

def _flash(kernel: "AttentionKernel", q, k, v, runner, flash, rows) -> Launch:
    n, d = q.shape
    rows = power_of_two("rows", rows, low=1, high=MAX_THREADS_PER_BLOCK // d)
    fn = kernel.factory(d, rows) if flash is None else flash
    o = np.zeros_like(q)
    return result(o, launch(fn, cdiv(n, rows), (d, rows), q, k, v, o, runner=runner))


def _standard(kernel: "AttentionKernel", q, k, v, runner, flash, rows) -> Launch:
    if flash is not None:
        raise ValueError(f"flash is only for {names(ATTENTION, fused=True)}")
    n, d = q.shape
    scores, softmax, pv = (KERNELS[f][v] for f, v in kernel.steps)
    s = np.zeros((n, n), dtype=np.float32)
    qs = np.ascontiguousarray(q / np.float32(np.sqrt(d)))
    kt = np.ascontiguousarray(k.T)
    traces = [_launch(scores.plan(n, n, {"tile": 8}), qs, kt, s, runner=runner)]
    p = np.zeros_like(s)
    traces.append(_launch(softmax.plan(n, 32), s, p, runner=runner))
    o = np.zeros_like(q)
    traces.append(_launch(pv.plan(n, d, {"tile": 8}), p, v, o, runner=runner))
    return result(o, *traces)


def _launch(plan: Plan, *args: Any, runner: str):
    grid, block, fn = plan
    return launch(fn, grid, block, *args, runner=runner)


@dataclass(frozen=True)
class AttentionKernel:
    """softmax(q kᵀ / sqrt(d)) v for one head: a fused kernel, or ``steps`` of other
    entries (family, variant) launched one after another."""
    variant: str
    factory: Callable | None
    launcher: Callable               # (kernel, q, k, v, runner, flash, rows) -> Launch
    traffic: Callable                # (n, d, variant, rows, tile) -> AttentionBytes
    fused: bool = False              # one launch; takes ``flash`` and ``rows``
    steps: tuple = field(default=())

    def run(self, q, k, v, runner: str, flash: Callable | None, rows: int) -> Launch:
        return self.launcher(self, q, k, v, runner, flash, rows)


# ---- the table ----------------------------------------------------------------------------

_TILE16, _TILE32 = dict(tile=16), dict(tile=32)
_REG32, _REG64 = dict(tile=32, rows=4), dict(tile=64, rows=4)
_BLOCKED128 = dict(bm=128, bn=128, bk=8, tm=8, tn=8)

KERNELS: dict[str, dict[str, Any]] = {
    MATMUL: {
        "naive": MatmulKernel("naive", lib.matmul_naive, _rows_on_x, cf.streamed_traffic,
                              cf.square_tile, cf.naive_issue, cf.no_phases, _TILE16, 32,
                              (_TILE16,)),
        "coalesced": MatmulKernel("coalesced", lib.matmul_coalesced, _columns_on_x,
                                  cf.streamed_traffic, cf.square_tile, cf.coalesced_issue,
                                  cf.no_phases, _TILE16, 32, (_TILE16,)),
        "tiled": MatmulKernel("tiled", lib.matmul_tiled, _shared_tiles, cf.tiled_traffic,
                              cf.shared_tile, cf.tiled_issue, cf.tiled_phase, _TILE32, 32,
                              (_TILE16, _TILE32)),
        "register": MatmulKernel("register", lib.matmul_register_blocked, _register_rows,
                                 cf.register_traffic, cf.register_tile, cf.register_issue,
                                 cf.register_phase, _REG64, 54, (_REG32, _REG64)),
        "register2d": MatmulKernel("register2d", lib.matmul_2d_blocked, _micro_tiles,
                                   cf.blocked_traffic, cf.blocked_tile, cf.blocked_issue,
                                   cf.blocked_phase, _BLOCKED128, 124, (_BLOCKED128,),
                                   blocked=True),
    },
    REDUCTION: {
        "atomic": ReductionKernel("atomic", lib.reduce_atomic, any_block, cf.atomic_traffic,
                                  sized=False),
        "interleaved": ReductionKernel("interleaved", lib.reduce_interleaved, pow2_block(1),
                                       cf.tree_traffic, relaunch=True, shared_tree=True),
        "strided": ReductionKernel("strided", lib.reduce_strided, pow2_block(1),
                                   cf.tree_traffic, relaunch=True, shared_tree=True),
        "shared": ReductionKernel("shared", lib.reduce_shared, pow2_block(1),
                                  cf.tree_traffic, relaunch=True, shared_tree=True,
                                  ptx_shape=dict(block=256)),
        "warp": ReductionKernel("warp", lib.reduce_warp, pow2_block(32),
                                shuffles=_warp_shuffles, relaunch=True,
                                ptx_shape=dict(block=256)),
        "fast": ReductionKernel("fast", lib.reduce_fast, pow2_block(32),
                                cf.grid_stride_traffic, cf.grid_stride_shuffles,
                                takes_blocks=True, ptx_shape=dict(block=256, unroll=4)),
    },
    TRANSPOSE: {
        "naive": TransposeKernel("naive", lib.transpose_naive, covers=(32, 8)),
        "shared": TransposeKernel("shared", lib.transpose_shared, (32, 8, 0)),
        "padded": TransposeKernel("padded", lib.transpose_shared, (32, 8, 1)),
    },
    SOFTMAX: {
        "naive": SoftmaxKernel("naive", lib.softmax_rows_naive, any_block, reads=3),
        "online": SoftmaxKernel("online", lib.softmax_rows_online, any_block),
        "block": SoftmaxKernel("block", lib.softmax_rows_block, pow2_block(2),
                               _block_per_row, reads=3),
        "warp": SoftmaxKernel("warp", lib.softmax_rows_warp, pow2_block(32), _warp_per_row),
    },
    ATTENTION: {
        "standard": AttentionKernel("standard", None, _standard, cf.standard_attention_bytes,
                                    steps=((MATMUL, "tiled"), (SOFTMAX, "block"),
                                           (MATMUL, "tiled"))),
        "flash": AttentionKernel("flash", lib.attention_flash, _flash,
                                 cf.flash_attention_bytes, fused=True),
    },
}
"""family -> variant -> entry, in the order the chapters and tables show them."""


def lookup(family: str, variant: Any) -> Any:
    """The entry ``KERNELS[family][variant]``; a ValueError names ``family`` or ``variant``
    and lists the allowed keys."""
    one_of("family", family, KERNELS)
    one_of("variant", variant, KERNELS[family])
    return KERNELS[family][variant]


def variants(family: str, **where: Any) -> tuple[str, ...]:
    """The variants of ``family`` (in order) whose entries have the fields ``where`` says:
    ``variants(REDUCTION, shared_tree=True)``."""
    one_of("family", family, KERNELS)
    return tuple(v for v, e in KERNELS[family].items()
                 if all(getattr(e, k) == want for k, want in where.items()))


def names(family: str, **where: Any) -> str:
    """``variant='fast'`` (or ``variant='a' or variant='b'``) for an error message."""
    return " or ".join(f"variant={v!r}" for v in variants(family, **where))

