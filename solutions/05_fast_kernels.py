# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (labkit)
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown] id="cell-000"
# # 05 · Writing fast kernels
#
# Chapter 04 showed what the hardware rewards: coalesced loads, conflict-free shared memory,
# converged warps. This chapter uses it on the two kernels that dominate deep learning —
# **reductions** (sums, norms, softmax) and **matrix multiplication** — taking each from a
# naive version to a fast one. Every step is *measured*: labkit's tracer counts each kernel's
# global, local and shared-memory traffic, those counts are checked against closed forms, and the
# arithmetic intensity they imply is placed on the roofline（屋顶线模型）of real GPUs and of
# this machine. The same ideas then run on CPU cores with `numba`.
#
# **Objectives.** After this chapter you can
#
# * write a shared-memory tree reduction without divergence or bank conflicts, and a block
#   scan (exercise 5.5); say what makes a reduction run at memory bandwidth;
# * explain why tiling（分块）cuts a matmul's global traffic by the tile size, write one, and
#   follow the ladder to 2-D register blocking;
# * fuse the passes of softmax with the online-softmax trick, one thread or one warp per row,
#   and fuse a whole attention layer with it (FlashAttention);
# * compute arithmetic intensity（算术强度）and tell memory-bound from compute-bound kernels;
# * predict a kernel's speed from a model of its memory levels, time a GPU correctly, and
#   measure the CPU analogue here.
#
# **Guiding questions.** A reduction does one addition per element loaded: can any
# reduction kernel be compute-bound? Why does a matmul get *faster per FLOP* as it grows?
# What does a kernel fusion（算子融合）save?

# %% id="cell-001"
import inspect

import numpy as np
import matplotlib.pyplot as plt

import labkit
from labkit.check import check, predict, reveal
from labkit.kernels import library as lib, ops, plots, widgets, models
from labkit.kernels.analysis import summarize, traffic, element_counts
from labkit.kernels.registry import KERNELS, MATMUL, REDUCTION
from labkit.kernels.roofline import PRECISIONS, PRESETS, bound
from labkit.kernels.trace import READ, WRITE
from labkit.kernels.tracer import run_traced

rng = np.random.default_rng(0)
print("CUDA backend:", labkit.CUDA_BACKEND)

# %% [markdown] id="cell-002"
# ## 1. Reduction: from atomics to a tree
#
# **Atomics.** The shortest sum kernel has every thread do `cuda.atomic.add(out, 0, a[i])`.
# It is correct, but all `n` atomics hit one address, and the hardware serializes them.
#
# **Shared-memory tree.** Each block loads its elements into shared memory and halves the
# number of active threads each step until one value is left: `log2(block)` steps, one
# partial sum per block, then the same kernel on the partials. M. Harris (*Optimizing Parallel
# Reduction in CUDA*, NVIDIA 2007) writes the tree three ways, then speeds it up further
# (first add during load, unrolling, several elements per thread); a fourth way, warp
# shuffles, came after his slides, with Kepler (CUDA 5, 2012; J. Luitjens, "Faster Parallel
# Reductions on Kepler", NVIDIA blog 2014):
#
# * *interleaved*: at step `s` thread `t` adds `buf[t + s]` if `t % (2s) == 0` — active lanes
#   are scattered over all warps (divergence);
# * *strided*: thread `t` works on index `2·s·t` — contiguous threads, but lanes read words
#   `2s` apart (bank conflicts);
# * *sequential*: at step `s = block/2, block/4, …` threads `t < s` add `buf[t + s]` —
#   contiguous threads, consecutive words;
# * *warp shuffles* (post-Harris): lanes exchange registers with `shfl_down_sync`, no
#   shared memory until one value per warp (the tracer runs it; on Numba's simulator, which
#   has no shuffles, labkit emulates them with block barriers).
#
# The tracer measures all of them on the same input:

# %% id="cell-003"
x = (rng.standard_normal(256) + 0.5).astype(np.float32)
summaries = {}
for variant in KERNELS[REDUCTION]:
    result = ops.reduce_sum(x, variant=variant, block=128)
    s = summaries[variant] = summarize(result.trace)
    print(f"{variant:12s} sum={float(result.value[0]):9.4f} (numpy {x.sum():9.4f})  "
          f"global reads {s.traffic.global_reads:4d}  atomics {s.traffic.global_atomics:4d}  "
          f"shared reads {s.traffic.shared_reads:4d}  conflicts {s.max_conflict_ways}-way  "
          f"SIMT efficiency {s.simt_efficiency:4.0%}")
fig = plots.plot_traffic({k: v for k, v in summaries.items() if k != "atomic"})
plt.show()

# %% [markdown] id="cell-004"
# The trace's counts are exactly the closed forms in `labkit.kernels.models` (the unit tests
# check this for many sizes):

# %% id="cell-005"
model = models.reduction_traffic(x.size, "shared", 128)
t = summaries["shared"].traffic
print("trace :", t.global_reads, t.global_writes, t.shared_reads, t.shared_writes)
print("model :", model.global_reads, model.global_writes, model.shared_reads,
      model.shared_writes)

# %% [markdown] id="cell-006"
# Predict first: of the interleaved, strided and sequential trees, which has the lowest
# SIMT efficiency (the most idle lanes per warp instruction)? Then pick a variant and watch
# which lanes of warp 0 are active at each memory instruction:

# %% id="pred-simt"
### BEGIN SOLUTION
guess = 'interleaved'
### END SOLUTION
predict("5.simt", guess, "the tree with the lowest SIMT efficiency", choices=['interleaved', 'strided', 'shared'])

# %% id="cell-007"
widgets.reduction_widget()

# %% id="reveal-simt"
trees = {v: summaries[v].simt_efficiency for v in ("interleaved", "strided", "shared")}
reveal("5.simt", min(trees, key=trees.get));

# %% [markdown] id="cell-008"
# ### Exercise 5.1 — a block reduction (roughly 17 lines)
#
# Write `reduce_block`: each block of `BLOCK` threads loads its elements into
# `cuda.shared.array(BLOCK, cuda.float32)` (0 past the end of `a`), reduces them with the
# *sequential* tree, and thread 0 writes the block's sum to `out[blockIdx.x]`. Budget: each
# element of `a` read once, one write per block, no bank conflicts, at most `2·BLOCK` shared
# reads per block.
#
# The check also wants the idea, not only the number (the rules of chapter 04's exercise
# 4.1: races first, then values, then the whole launch's work against labkit's tree): no
# thread doing more than 4× the memory accesses of the tree's busiest thread, SIMT
# efficiency (shuffles counted) no lower than the sequential tree's, and `log2(BLOCK)`
# barriers passed by the busiest thread unless you finish with warp shuffles. One thread
# adding the block in a loop, or the divergent `t % (2s)` tree, gets the sum right and
# fails; a tree whose idle threads `return` early, or one that finishes the last 32 values
# with `shfl_down_sync`, passes. Harris's "unroll the last warp" without `cuda.syncwarp()`
# between its steps is reported as a race: since Volta a warp's lanes need not run in
# lockstep.

# %% id="cell-009"
from labkit.check.ch05 import BLOCK, TILE   # the sizes the checks launch with
print("BLOCK =", BLOCK, " TILE =", TILE)

def reduce_block(cuda):
    def kernel(a, out):
        ### BEGIN SOLUTION
        buf = cuda.shared.array(BLOCK, cuda.float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        buf[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
        half = BLOCK // 2
        while half >= 32:           # the sequential tree in shared memory, down to 32 values
            if t < half:
                buf[t] += buf[t + half]
            cuda.syncthreads()
            half //= 2
        if t < 32:                  # then warp 0 adds those 32 with shuffles, no barrier
            v = buf[t]
            for offset in (16, 8, 4, 2, 1):
                v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            if t == 0:
                out[cuda.blockIdx.x] = v
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.1"} tags=["check"]
check("5.1", reduce_block)

# %% id="cell-011"
partial = np.zeros(4, np.float32)
y = rng.random(200).astype(np.float32)
run_traced(reduce_block, 4, BLOCK, y, partial)
print("block sums:", partial.round(3), " total", partial.sum().round(3),
      " numpy", y.sum().round(3))

# %% [markdown] id="fast-red-md"
# ### A reduction built for bandwidth
#
# A reduction does one addition per 4-byte load, 0.25 FLOP/byte: on an H200 (67 TFLOP/s FP32,
# 4.8 TB/s; ridge `hardware.gpu("H200").ridge()` = 14 FLOP/byte) it is memory-bound by a
# factor of about 56, so "fast" means *moving bytes at HBM speed*. The tree
# above is far from it on a GPU: one block per 64 elements, most threads idle after the
# first step, a second launch for the partials. `lib.reduce_fast` applies Harris's later
# steps and warp shuffles:
#
# * a **grid-stride loop**: a grid of a few blocks per SM (sized from the device's SM count)
#   walks the whole array, each thread summing hundreds of elements in registers, with
#   several independent accumulators so several loads are in flight per thread;
# * consecutive threads read consecutive elements (coalesced, each element read once);
# * **warp shuffles** add 32 lanes' values without shared memory, then one shared word per
#   warp, then warp 0 adds those;
# * **one atomic per block** instead of a second pass.
#
# Its trace equals the closed form (`models.fast_reduction_traffic`: `n` reads, one atomic
# per block, `block/32` shared words per block):

# %% id="fast-red"
from labkit import hardware

y = rng.standard_normal(3000).astype(np.float32)
fast = ops.reduce_sum(y, variant="fast", block=64, blocks=4)
t = traffic(fast.trace)
want = models.fast_reduction_traffic(y.size, 64, 4)
print(f"sum {fast.value[0]:.4f} (numpy {y.sum():.4f}); reads {t.global_reads} (model "
      f"{want.global_reads}), atomics {t.global_atomics} (model {want.global_atomics}), shared "
      f"writes {t.shared_writes} (model {want.shared_writes})")
print(f"coalescing efficiency {summarize(fast.trace).coalescing_efficiency:.0%}; "
      f"on an H200 the model's bound for 2^28 floats: "
      f"{models.predict_reduction(2 ** 28, 'H200') * 1e3:.3f} ms at "
      f"{hardware.gpu('H200').hbm_bandwidth / 1e12:.1f} TB/s")

# %% [markdown] id="cell-012"
# ## 2. Prefix sum (scan)
#
# An inclusive scan（前缀和）`out[i] = a[0] + … + a[i]` looks sequential but is not. The
# Hillis–Steele block scan doubles the distance each step: after step `d` every element holds
# the sum of the `2^d` elements ending at it. A multi-block scan scans each block, scans the
# block totals, then adds each block's offset. It does `n·log2(block)` additions instead of
# `n`: parallel algorithms often buy depth with extra work (Hillis & Steele, "Data Parallel
# Algorithms", CACM 1986).

# %% id="cell-013"
z = rng.standard_normal(300).astype(np.float32)
scan = ops.prefix_sum(z, block=64)
print("matches np.cumsum:", np.allclose(scan.value, np.cumsum(z), atol=1e-4))
first = traffic(scan.traces[0])
print(f"{len(scan.traces)} launches; block-scan pass: {first.shared_reads} shared reads "
      f"for {z.size} elements")


# %% [markdown] id="ex-5-5-md"
# ### Exercise 5.5 — an inclusive block scan (roughly 16 lines)
#
# Write `scan_block`: block `b` scans its `BLOCK` elements of `a` into `out` (0 past the end
# of `a`) and writes its total to `sums[b]`. Use the step-doubling idea above in shared
# memory. Two things make it correct on real hardware: in a step every thread must read the
# *old* values before anyone overwrites them, and every step ends at a barrier (without
# either, the check reports the race). The check wants the values, each element of `a` read
# once, `log2(BLOCK)` synchronised steps and SIMT efficiency (shuffles counted) no lower than
# the reference's.

# %% id="ex-5-5"
def scan_block(cuda):
    def kernel(a, out, sums):
        ### BEGIN SOLUTION
        buf = cuda.shared.array(BLOCK, cuda.float32)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        buf[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
        d = 1
        while d < BLOCK:
            left = buf[t - d] if t >= d else 0.0   # every thread reads the old value ...
            cuda.syncthreads()
            buf[t] += left                         # ... before any thread overwrites it
            cuda.syncthreads()
            d *= 2
        if i < out.size:
            out[i] = buf[t]
        if t == BLOCK - 1:
            sums[cuda.blockIdx.x] = buf[t]
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.5"} tags=["check"]
check("5.5", scan_block)

# %% [markdown] id="cell-014"
# ## 3. Matrix multiplication: naive → coalesced → tiled → register-blocked → 2-D blocked
#
# `c = a @ b` with `a` of shape (m, k) and `b` of shape (k, n) does `2·m·n·k` FLOPs. The
# *naive* kernel gives each thread one `c[i, j]` and reads a row of `a` and a column of `b`
# from global memory: every element of `a` is read `n` times. Mapping `threadIdx.x` to the
# column `j` (*coalesced*) fixes the access pattern but not the count. The *tiled* kernel
# (Kirk & Hwu, *Programming Massively Parallel Processors*, ch. 5) lets a block of
# `T × T` threads load a `T × T` tile of `a` and of `b` into shared memory per phase and
# compute from there: each element of `a` is now read `ceil(n / T)` times. *Register
# blocking* makes each thread compute several outputs, reusing a value of `b` from a
# register and cutting shared-memory reads per output.
# *2-D register blocking* (the structure of CUTLASS and of S. Boehm's "How to Optimize a
# CUDA Matmul Kernel", 2022) gives each thread a small tile of `c` — `tm × tn` outputs held
# in registers — so per step of `k` it loads `tm + tn` values from shared memory and does
# `tm·tn` multiply-adds; its shared tiles are stored so that loads coalesce and, while
# `tm ≤ bn / tn`, reads hit distinct banks (`lib.matmul_2d_blocked`).

# %% id="cell-015"
a = rng.standard_normal((24, 19)).astype(np.float32)
b = rng.standard_normal((19, 20)).astype(np.float32)
mm = {}
small_2d = dict(bm=16, bn=16, bk=8, tm=2, tn=2)     # register2d at this size: 64 threads
for variant, rung in KERNELS[MATMUL].items():
    blocked = small_2d if rung.blocked else None        # register2d takes its tile shapes
    result = ops.matmul(a, b, variant=variant, tile=8, rows=2, blocked=blocked)
    mm[variant] = summarize(result.trace)
    t = mm[variant].traffic
    model = models.matmul_traffic(24, 20, 19, variant, 8, 2, blocked=blocked)
    print(f"{variant:9s} ok={np.allclose(result.value, a @ b, atol=1e-4)}  global reads "
          f"{t.global_reads:5d} (model {model.global_reads:5d})  "
          f"max reads of one a element {element_counts(result.trace, 'a').max():2d}  "
          f"shared reads {t.shared_reads:5d}  sectors/request {mm[variant].sectors_per_request:5.2f}")
fig = plots.plot_traffic(mm)
plt.show()

# %% [markdown] id="cell-016"
# Here is how often each element of `a` was loaded by the naive and the tiled kernel:

# %% id="cell-017"
traces = {v: ops.matmul(a, b, variant=v, tile=8).trace for v in ("coalesced", "tiled")}
fig = plots.plot_element_reads(traces, "a")
plt.show()


# %% [markdown] id="cell-018"
# ### Exercise 5.2 — a tiled matmul (roughly 16 lines)
#
# Write `matmul_tiled` for blocks of `TILE × TILE` threads: `threadIdx.x` is the column `j`
# and `threadIdx.y` the row `i` within the block's tile of `c`. In each phase `p`, load
# `a[i, p·TILE + tx]` and `b[p·TILE + ty, j]` into two shared tiles (0 outside the
# matrices), `syncthreads`, accumulate `TILE` products from shared memory, `syncthreads`
# again. Write `c[i, j]` only inside `c`. Budget: each element of `a` read at most
# `ceil(n / TILE)` times, of `b` at most `ceil(m / TILE)` times, total sectors within 1.25×
# of labkit's tiled kernel's (local memory counts: a copy of `a` in `cuda.local.array` is
# device memory) and no bank-conflict replays. A tile whose `threadIdx.x` walks the rows
# gets the values right and fails twice: 8 sectors per warp request instead of 4, and
# two-way bank conflicts on its tile reads.

# %% id="cell-019"
def matmul_tiled(cuda):
    def kernel(a, b, c):
        ### BEGIN SOLUTION
        sa = cuda.shared.array((TILE, TILE), cuda.float32)
        sb = cuda.shared.array((TILE, TILE), cuda.float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        j = cuda.blockIdx.x * TILE + tx
        i = cuda.blockIdx.y * TILE + ty
        acc = 0.0
        for p in range((a.shape[1] + TILE - 1) // TILE):
            ka = p * TILE + tx
            kb = p * TILE + ty
            sa[ty, tx] = a[i, ka] if i < a.shape[0] and ka < a.shape[1] else 0.0
            sb[ty, tx] = b[kb, j] if kb < b.shape[0] and j < b.shape[1] else 0.0
            cuda.syncthreads()
            for k in range(TILE):
                acc += sa[ty, k] * sb[k, tx]
            cuda.syncthreads()
        if i < c.shape[0] and j < c.shape[1]:
            c[i, j] = acc
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.2"} tags=["check"]
check("5.2", matmul_tiled)

# %% id="cell-021"
c_mine = np.zeros((24, 20), np.float32)
grid = (ops.cdiv(20, TILE), ops.cdiv(24, TILE))
run_traced(matmul_tiled, grid, (TILE, TILE), a, b, c_mine)
c_numba = np.zeros_like(c_mine)
ops.launch(matmul_tiled, grid, (TILE, TILE), a, b, c_numba, runner="numba")
print("tracer matches numpy:", np.allclose(c_mine, a @ b, atol=1e-4),
      "| numba.cuda matches:", np.allclose(c_numba, a @ b, atol=1e-4))

# %% [markdown] id="ex-5-6-md"
# ### Exercise 5.6 — the lab: a register-blocked matmul (roughly 26 lines)
#
# The tiled kernel reads two shared words per multiply-add, and shared memory serves one
# 128-byte wavefront per clock while an SM issues four warp FMAs: shared memory, not
# arithmetic, bounds it. **Register blocking** gives each thread several outputs that
# reuse one loaded value. A block of `(REG_TILE, REG_TILE / REG_ROWS)` = (16, 4) threads
# computes a 16 × 16 tile of `c`; thread `(tx, ty)` computes the `REG_ROWS` = 4 outputs
# `c[i0 + ty·REG_ROWS + r, j0 + tx]`, `r = 0 … 3`, accumulated in
# `acc = cuda.local.array(REG_ROWS, cuda.float32)`. Per phase of `k` each thread loads 4
# elements of each tile — rows `ty, ty + 4, ty + 8, ty + 12` of the tile, column `tx`:
# consecutive lanes, consecutive addresses — `syncthreads`; then for each `k` it reads
# `sb[k, tx]` **once** into a register and does 4 multiply-adds with `sa[ty·4 + r, k]`:
# 5 shared reads for 4 FMAs instead of 8; `syncthreads` again. Index `acc` only with the
# counter of `for r in range(REG_ROWS)`: the compiler unrolls that loop and keeps `acc` in
# registers (with a runtime index — a `while` loop over `r` — it would be local memory,
# which is device memory, and the tracer counts it as traffic). The check: `c` against
# numpy, each element of `a` and `b` loaded once per block tile, total sectors within
# 1.25× of labkit's, and no more than 10 % more shared reads than labkit's kernel (so the
# value of `b` has to come from a register).

# %% id="ex-5-6"
from labkit.check.ch05 import REG_TILE, REG_ROWS
print("REG_TILE =", REG_TILE, " REG_ROWS =", REG_ROWS)

def matmul_register(cuda):
    def kernel(a, b, c):
        ### BEGIN SOLUTION
        sa = cuda.shared.array((REG_TILE, REG_TILE), cuda.float32)
        sb = cuda.shared.array((REG_TILE, REG_TILE), cuda.float32)
        acc = cuda.local.array(REG_ROWS, cuda.float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        i0 = cuda.blockIdx.y * REG_TILE
        j = cuda.blockIdx.x * REG_TILE + tx
        height = REG_TILE // REG_ROWS
        for r in range(REG_ROWS):
            acc[r] = 0.0
        for k0 in range(0, a.shape[1], REG_TILE):
            for r in range(REG_ROWS):
                li = ty + r * height
                ia = i0 + li
                ka = k0 + tx
                kb = k0 + li
                sa[li, tx] = a[ia, ka] if ia < a.shape[0] and ka < a.shape[1] else 0.0
                sb[li, tx] = b[kb, j] if kb < b.shape[0] and j < b.shape[1] else 0.0
            cuda.syncthreads()
            for k in range(REG_TILE):
                bv = sb[k, tx]
                for r in range(REG_ROWS):
                    acc[r] += sa[ty * REG_ROWS + r, k] * bv
            cuda.syncthreads()
        for r in range(REG_ROWS):
            i = i0 + ty * REG_ROWS + r
            if i < c.shape[0] and j < c.shape[1]:
                c[i, j] = acc[r]
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.6"} tags=["check"]
check("5.6", matmul_register)

# %% [markdown] id="register-use-md"
# Your two matmuls side by side on a 32 × 32 product (sizes that are multiples of both
# tiles, so every multiply-add is a real one). Predict first: how many shared-memory reads
# per multiply-add does the register-blocked kernel make (the tiled one: 2)?

# %% id="pred-reuse"
### BEGIN SOLUTION
guess = 1.25
### END SOLUTION
predict("5.reuse", guess, "shared reads per multiply-add of the (16, 4) register-blocked matmul")

# %% id="register-use"
from labkit.check.ch05 import whose
from labkit.kernels.registers import registers

a32 = rng.standard_normal((32, 32)).astype(np.float32)
b32 = rng.standard_normal((32, 32)).astype(np.float32)
reg_launch = ((2, 2), (REG_TILE, REG_TILE // REG_ROWS))
rows = ops.work_table({"tiled, " + whose(matmul_tiled, "5.2"): (matmul_tiled, (4, 4),
                                                                (TILE, TILE)),
                       "register-blocked, " + whose(matmul_register, "5.6"): (
                           matmul_register, *reg_launch)},
                      a32, b32, np.zeros((32, 32), np.float32))
print(ops.format_work(rows, per=32 ** 3, per_what="per multiply-add"))
print("both match numpy:", all(np.allclose(r.arrays[2], a32 @ b32, atol=1e-4) for r in rows))
print("registers:", registers(matmul_register, *reg_launch, a32, b32,
                              np.zeros((32, 32), np.float32)))
reveal("5.reuse", rows[1].shared_reads / 32 ** 3);

# %% [markdown] id="ladder-md"
# ### The ladder on real GPUs: a model, then a measurement
#
# Traffic counts are not time. A simple model turns them into time: per SM and clock a GPU
# issues 4 warp instructions, does `lanes/32` warp FMAs, serves one shared-memory
# *wavefront* (32 banks × 4 bytes) and one L1 wavefront (one 128-byte line), and HBM
# delivers its data-sheet bandwidth; a kernel takes as long as its busiest resource
# (`models.predict_matmul`, formulas and counts in its docstring). DRAM bytes come from a
# *wave* model: the blocks resident together share the tiles they load through L2
# (`models.dram_bytes`). The model leaves out latency, address arithmetic, spills, clocks
# below boost — so it is an **upper bound**, and it is a **prediction**, not a measurement.
# Predict first: on an H100 at n = 4096, how many times faster than the tiled kernel does
# the model put the 2-D register-blocked one?

# %% id="pred-ladder"
### BEGIN SOLUTION
guess = 4.0
### END SOLUTION
predict("5.ladder", guess, "model speed-up of 2-D register blocking over tiled 32, H100, n=4096")

# %% id="ladder-widget"
widgets.ladder_widget()

# %% id="reveal-ladder"
reveal("5.ladder", models.predicted_speedup(4096, "register2d", "tiled", "H100"));

# %% [markdown] id="timing-md"
# **How to time a GPU.** A kernel launch returns *before* the kernel has run, the first
# launch of a kernel compiles it, and copying inputs over PCIe can take longer than the
# kernel. So: keep the data on the device; launch once to warm up (compilation, caches,
# clocks); record a CUDA **event** before and after the repeated launches on the GPU's
# stream and read the time between them (`labkit.kernels.timing.time_events`); never time
# the wall clock around a launch without synchronising, nor with the copies inside
# (CUDA C++ Best Practices Guide, "Using CUDA GPU Timers"). `benchmarks/gpu_check.py` prints
# the three wrong numbers beside the right one. On a GPU the cell below measures the ladder
# that way and draws it beside the prediction; without one it says so and keeps the
# prediction, labelled as such.

# %% id="ladder-measure"
from labkit.kernels import timing
from labkit.show import show

preds = models.predict_ladder(2048, timing.gpu_key())   # the GPU here, else an H100
if timing.on_gpu():
    measured = timing.measure_ladder(2048)
    print("MEASURED with CUDA events, n=2048:",
          ", ".join(f"{v} {tf:.1f} TFLOP/s" for v, tf in measured.items()))
    show(plots.plot_ladder(preds, measured))
else:
    print("no GPU here: the bars are the model's PREDICTION for an H100, not a measurement "
          "(benchmarks/gpu_check.py measures them on a GPU)")
    show(plots.plot_ladder(preds))

# %% [markdown] id="cell-022"
# ## 4. Softmax in fewer passes
#
# Row softmax `exp(x - max) / sum(exp(x - max))` read naively takes three passes over each
# row: the max, the sum, the output. The **online softmax** (Milakov & Gimelshein, 2018)
# keeps a running max `m` and a running sum `d`; when a new value raises the max from `m`
# to `m'`, the sum so far is rescaled by `exp(m - m')`. Max and sum then take one pass —
# the same trick FlashAttention uses to fuse attention.
#
# ### Exercise 5.3 — online softmax, one thread per row (roughly 13 lines)
#
# Thread `r` handles row `r` (guard `r < x.shape[0]`). Budget: each element of `x` read at
# most twice, and every access counts: no thread making more than 1.5× the memory accesses
# of labkit's busiest thread, so a three-pass softmax over a copy of the row in
# `cuda.local.array` (local memory) fails, and so does thread 0 doing every row.

# %% id="cell-023"
import math

def softmax_online(cuda):
    def kernel(x, out):
        ### BEGIN SOLUTION
        r = cuda.grid(1)
        if r < x.shape[0]:
            m = x[r, 0]             # the running max, and d = sum of exp(x - m) so far
            d = 1.0
            for c in range(1, x.shape[1]):
                v = x[r, c]
                if v > m:           # a new max: rescale the sum once, one exp per element
                    d = d * math.exp(m - v) + 1.0
                    m = v
                else:
                    d += math.exp(v - m)
            for c in range(x.shape[1]):
                out[r, c] = math.exp(x[r, c] - m) / d
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.3"} tags=["check"]
check("5.3", softmax_online)

# %% id="cell-025"
s = (rng.standard_normal((6, 40)) * 3).astype(np.float32)
for name, fn in (("three-pass", lib.softmax_rows_naive), ("online", softmax_online)):
    out = np.zeros_like(s)
    trace = run_traced(fn, 1, 32, s, out)
    print(f"{name:10s}: {traffic(trace).global_reads} global reads for {s.size} elements; "
          f"rows sum to 1: {np.allclose(out.sum(axis=1), 1, atol=1e-5)}")

# %% [markdown] id="ex-5-7-md"
# ### Exercise 5.7 — the lab: online softmax with one warp per row (roughly 20 lines)
#
# One thread per row (exercise 5.3) makes every warp access touch 32 different rows: up to
# 32 sectors per request where 4 would do. Give each row a **warp** instead: lane `L` takes
# the columns `L, L + 32, …`, so a warp reads 32 consecutive columns at a time (coalesced),
# and keeps its own running `(m, d)` online as in 5.3. Then the 32 lanes combine their
# states: two partial states `(m, d)` and `(m', d')` merge into `(M, d·e^(m−M) + d'·e^(m'−M))`
# with `M = max(m, m')` — the rescaling of 5.3, for two partial sums instead of one new
# element. A warp shuffle moves registers between the lanes of a warp with no shared memory
# and no barrier: `cuda.shfl_xor_sync(0xFFFFFFFF, value, offset)` returns the `value` of lane
# `lane ^ offset`; after offsets 16, 8, 4, 2, 1 (a butterfly) every lane holds the row's
# `m` and `d`. Then each lane writes `out[r, c] = e^(x[r, c] − m) / d` for its columns.
# Launch: blocks of `(32, WARPS)` threads, row `r = blockIdx.x · WARPS + threadIdx.y`;
# guard `r < x.shape[0]` (the whole warp leaves together). The check: values, each element
# of `x` read at most twice, total sectors within 1.25× of labkit's, no lane making more
# than 1.5× the accesses of labkit's busiest, and the lanes combined with shuffles.

# %% id="ex-5-7"
from labkit.check.ch05 import WARPS
print("WARPS =", WARPS)

def softmax_warp(cuda):
    def kernel(x, out):
        ### BEGIN SOLUTION
        lane = cuda.threadIdx.x
        r = cuda.blockIdx.x * WARPS + cuda.threadIdx.y
        if r < x.shape[0]:
            m = -math.inf           # this lane's running max and sum, as in 5.3
            d = 0.0
            for c in range(lane, x.shape[1], 32):
                v = x[r, c]
                m_new = max(m, v)
                d = d * math.exp(m - m_new) + math.exp(v - m_new)
                m = m_new
            for offset in (16, 8, 4, 2, 1):     # butterfly: every lane gets the row's m, d
                m_other = cuda.shfl_xor_sync(0xFFFFFFFF, m, offset)
                d_other = cuda.shfl_xor_sync(0xFFFFFFFF, d, offset)
                if m_other > m:     # rescale the state with the smaller max (5.3)
                    d = d * math.exp(m - m_other) + d_other
                    m = m_other
                else:
                    d += d_other * math.exp(m_other - m)
            for c in range(lane, x.shape[1], 32):
                out[r, c] = math.exp(x[r, c] - m) / d
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.7"} tags=["check"]
check("5.7", softmax_warp)

# %% [markdown] id="softmax-use-md"
# Your two softmax kernels on the same 24 × 96 matrix. Predict first: how many times more
# memory sectors does one thread per row move than one warp per row?

# %% id="pred-warp"
### BEGIN SOLUTION
guess = 8.0
### END SOLUTION
predict("5.warp", guess, "sectors of one thread per row / one warp per row, 24 x 96")

# %% id="softmax-use"
x96 = (rng.standard_normal((24, 96)) * 3).astype(np.float32)
rows = ops.work_table({"thread per row, " + whose(softmax_online, "5.3"): (
                           softmax_online, 1, 32),
                       "warp per row, " + whose(softmax_warp, "5.7"): (
                           softmax_warp, ops.cdiv(24, WARPS), (32, WARPS))},
                      x96, np.zeros_like(x96))
print(ops.format_work(rows))
print("both rows sum to 1:", all(np.allclose(r.arrays[1].sum(axis=1), 1, atol=1e-5)
                                 for r in rows))
reveal("5.warp", rows[0].total_sectors / rows[1].total_sectors);

# %% [markdown] id="flash-md"
# ## 4b. Attention without the N × N matrix: FlashAttention
#
# Attention `o = softmax(q kᵀ / √d) v` (one head; `q`, `k`, `v` of shape N × d) is, written
# the standard way — FlashAttention's "Algorithm 0" — three kernels: `s = q kᵀ / √d`
# (N × N, written to global memory), `p = softmax(s)` (read `s`, write `p`: N × N again),
# `o = p v` (read `p`). The N × N matrices are the traffic, and memory: 4N² bytes each per
# head, 256 MB each at N = 8192. **FlashAttention** (T. Dao, D. Fu, S. Ermon, A. Rudra,
# C. Ré, NeurIPS 2022, Algorithm 1) never writes them. It tiles `q`, `k` and `v`, computes
# one tile of scores in shared memory, and folds it into the output with the online
# softmax of section 4: per query row a running max `m` and sum `l`, and a running output
# that is rescaled by `e^(m − m')` whenever the max grows. Their Theorem 2: the standard
# algorithm makes Θ(N d + N²) accesses to HBM, FlashAttention Θ(N² d² / M) for an on-chip
# memory of M elements.
#
# ### Exercise 5.8 — the lab: a fused attention forward (roughly 41 lines)
#
# One head, `d = HEAD_DIM` = 8; blocks of `(HEAD_DIM, ATT_ROWS)` = (8, 8) threads, one block
# per 8 query rows; thread `(x, y)` owns the output element `o[i, x]` of row
# `i = blockIdx.x · ATT_ROWS + y`. A scaffold:
#
# 1. load the query tile, `sq[y, x] = q[i, x]` (0 past N); `m = −∞`, `l = 0`, `acc = 0`;
# 2. for each key tile `j0 = 0, 8, 16, …`: load `sk[y, x] = k[j0 + y, x]` and
#    `sv[y, x] = v[j0 + y, x]` (0 past N), `syncthreads`;
# 3. thread `(x, y)` computes the score `s[y, x] = sq[y, :] · sk[x, :] / √d` into a shared
#    `(ATT_ROWS, ATT_ROWS)` tile (−∞ for a key past N), `syncthreads`;
# 4. `m' = max(m, max_c s[y, c])`; multiply `l` and `acc` by `e^(m − m')`; add
#    `p = e^(s[y, c] − m')` to `l` and `p · sv[c, x]` to `acc` for every `c`; `m = m'`;
#    `syncthreads` before the next tile overwrites `sk`, `sv` and `s`;
# 5. `o[i, x] = acc / l` (inside `o`).
#
# Algorithm 1 of the paper loops over key tiles outside and query tiles inside, writing
# `O` back to HBM after every key tile; this is FlashAttention-2's order (T. Dao, 2023):
# one block per query tile, the output in registers until the end, divided by `l` once.
# (Padding `sk` to `(ATT_ROWS, HEAD_PAD)`, `HEAD_PAD = HEAD_DIM + 1`, makes the lanes
# reading `sk[x, :]` hit different banks.) The check compares `o` with torch's `scaled_dot_product_attention`
# (float32 tolerance), wants no race, no element of `q`, `k` or `v` read more often than
# labkit's kernel reads it (`k` and `v` once per query tile), and total sectors within 1.5×
# of labkit's: a row of scores kept in `cuda.local.array` is local memory, and counts.

# %% id="ex-5-8"
from labkit.check.ch05 import HEAD_DIM, ATT_ROWS, HEAD_PAD
print("HEAD_DIM =", HEAD_DIM, " ATT_ROWS =", ATT_ROWS, " HEAD_PAD =", HEAD_PAD)

def attention_flash(cuda):
    def kernel(q, k, v, o):
        ### BEGIN SOLUTION
        sq = cuda.shared.array((ATT_ROWS, HEAD_DIM), cuda.float32)
        sk = cuda.shared.array((ATT_ROWS, HEAD_PAD), cuda.float32)
        sv = cuda.shared.array((ATT_ROWS, HEAD_DIM), cuda.float32)
        s = cuda.shared.array((ATT_ROWS, ATT_ROWS), cuda.float32)
        x = cuda.threadIdx.x
        y = cuda.threadIdx.y
        n = q.shape[0]
        i = cuda.blockIdx.x * ATT_ROWS + y
        sq[y, x] = q[i, x] if i < n else 0.0
        m = -math.inf
        l = 0.0
        acc = 0.0
        for j0 in range(0, n, ATT_ROWS):
            j = j0 + y
            sk[y, x] = k[j, x] if j < n else 0.0
            sv[y, x] = v[j, x] if j < n else 0.0
            cuda.syncthreads()
            if j0 + x < n:
                dot = 0.0
                for e in range(HEAD_DIM):
                    dot += sq[y, e] * sk[x, e]
                s[y, x] = dot / math.sqrt(HEAD_DIM)
            else:
                s[y, x] = -math.inf
            cuda.syncthreads()
            m_tile = m              # the row's max so far, this tile included
            for c in range(ATT_ROWS):
                m_tile = max(m_tile, s[y, c])
            l_tile = 0.0            # the tile's sum of p and of p * v, at max m_tile
            pv = 0.0
            for c in range(ATT_ROWS):
                p = math.exp(s[y, c] - m_tile)
                l_tile += p
                pv += p * sv[c, x]
            alpha = math.exp(m - m_tile)    # what the old statistics are rescaled by
            l = alpha * l + l_tile
            acc = alpha * acc + pv
            m = m_tile
            cuda.syncthreads()
        if i < n:
            o[i, x] = acc / l
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "5.8"} tags=["check"]
check("5.8", attention_flash)

# %% [markdown] id="flash-use-md"
# Your kernel against the standard three launches, traced at N = 8 … 32 and checked against
# each other, with the closed forms (`models.attention_traffic`) carried to N = 8192.
# Predict first: at N = 32, how many times more global-memory bytes does the standard
# attention move than the fused one?

# %% id="pred-flash"
### BEGIN SOLUTION
guess = 4.0
### END SOLUTION
predict("5.flash", guess, "standard / fused global bytes at N = 32, d = 8")

# %% id="flash-use"
flash_traffic = ops.attention_traffic(flash=attention_flash, whose=whose(attention_flash, "5.8"))
for n, std, fused, nn in zip(flash_traffic.sizes, flash_traffic.standard_bytes,
                             flash_traffic.flash_bytes, flash_traffic.matrix_bytes):
    print(f"N = {n:2d}: standard {std:6d} B (of it {nn:6d} on the N x N s and p), "
          f"fused {fused:6d} B: {std / fused:.1f}x")
big = {v: models.attention_traffic(8192, HEAD_DIM, v) for v in ("standard", "flash")}
print(f"N = 8192 by the closed forms: standard {big['standard'].total / 1e9:.2f} GB, fused "
      f"{big['flash'].total / 1e9:.2f} GB; global memory for s and p: "
      f"{big['standard'].scratch / 1e6:.0f} MB against {big['flash'].scratch} B")
fig = plots.plot_attention_traffic(flash_traffic)
plt.show()
reveal("5.flash", flash_traffic.ratios[-1]);


# %% [markdown] id="cell-026"
# ## 5. Arithmetic intensity and the roofline
#
# A kernel's **arithmetic intensity** is FLOPs ÷ bytes moved to and from global memory.
# The roofline model (Williams, Waterman & Patterson, 2009) says a kernel can reach at most
# `min(peak FLOP/s, intensity × bandwidth)`. Using the traffic above (4-byte floats): a
# vector add does 1 FLOP per 12 bytes, a reduction 1 per 4; the naive matmul reads 2
# floats per multiply-add, so its intensity is about 1/4 however large the matrices; the
# tiled one reads each input `n / T` times instead of `n`, so its intensity grows with the
# tile `T`.
#
# ### Exercise 5.4 — intensity of the tiled matmul
#
# Write `tiled_intensity(n, tile)`: the FLOPs of an `n × n` by `n × n` float32 matmul
# divided by the bytes the tiled kernel of exercise 5.2 requests from global memory. Derive
# the byte count from the kernel (and check it against the trace in section 3): how many
# times is each element of `a` and of `b` loaded when `n` is not a multiple of `tile`, and
# how many stores does it make?

# %% id="cell-027"
def tiled_intensity(n, tile):
    ### BEGIN SOLUTION
    reads = 2 * n * n * math.ceil(n / tile)
    writes = n * n
    return 2 * n ** 3 / (4 * (reads + writes))
    ### END SOLUTION


# %% labkit={"exercise": "5.4"} tags=["check"]
check("5.4", tiled_intensity)

# %% id="cell-029"
h100 = PRESETS["H100"]
print(f"{h100.name}, FP32: ridge {h100.ridge('fp32'):.1f} FLOP/byte")
for tile in (8, 16, 32, 64):
    ai = tiled_intensity(4096, tile)
    print(f"tile {tile:2d}: {ai:6.2f} FLOP per *requested* byte -> {bound(h100, ai)}")
dram = models.kernel_cost("matmul tiled 32", 4096, "H100")
print(f"tile 32 with tiles reused through L2 (wave model): {dram.intensity:6.2f} FLOP per DRAM "
      f"byte -> {bound(h100, dram.intensity)}")

# %% [markdown] id="cell-030"
# Counting every request as a DRAM byte makes every FP32 matmul memory-bound; caches make
# that too pessimistic. The widget therefore uses modelled DRAM bytes on the data-sheet GPUs
# (`models.dram_bytes`) and requested bytes on this machine, and compares every machine at
# one precision. Predict first: at n = 4096, is the tiled-32 matmul memory- or compute-bound
# on an H100 at FP32 by the DRAM model?

# %% id="pred-roof"
### BEGIN SOLUTION
guess = 'compute-bound'
### END SOLUTION
predict("5.roof", guess, "tiled 32, n=4096, H100 FP32, DRAM model", choices=['memory-bound', 'compute-bound'])

# %% id="cell-031" tags=["browser-test"]
widgets.roofline_widget()

# %% id="reveal-roof"
reveal("5.roof", bound(h100, dram.intensity));

# %% [markdown] id="cell-032"
# ## 6. What changes on a real GPU
#
# The simulator gives correct results and exact access counts, but no time. On a GPU:
#
# * **Caches.** The tracer counts *requests*; L1/L2 absorb repeated loads. The wave model of
#   section 3 captures the first-order effect (tiles shared within a wave through L2) and
#   leaves out reuse across waves, blocks drifting out of step and capacity misses.
# * **On-chip bandwidth.** By DRAM bytes alone the naive and tiled kernels look alike — same
#   block tiles, same panels from HBM. What separates them is L1 wavefronts (uncoalesced
#   loads) and shared-memory wavefronts, which is why the ladder model has those levels.
# * **Latency hiding.** Speed depends on keeping enough loads in flight: occupancy (chapter
#   04), instruction-level parallelism, and asynchronous copies (`cp.async`, Hopper's TMA).
# * **Tensor Cores.** cuBLAS's matmuls in BF16/TF32 reach the Tensor Core roof, an order of
#   magnitude above the FP32 roof where our kernels live; compare at one precision.
# * **Launch overhead** of a few microseconds makes tiny kernels pointless: fuse them.
#
# `benchmarks/gpu_check.py` measures the ladder against `torch.matmul` (FP32, TF32 off) and
# the reductions against peak bandwidth when a GPU is present.

# %% id="cell-033"
if labkit.CUDA_BACKEND == "gpu":
    print("see the ladder cell of section 3 (CUDA events) and benchmarks/gpu_check.py")
else:
    print("no GPU here: the simulator runs kernels correctly but says nothing about speed; "
          "see benchmarks/gpu_check.py")

# %% [markdown] id="cell-034"
# ## 7. The CPU analogue, measured here
#
# The same ideas work on CPU cores. `labkit.kernels.cpu` compiles with
# `numba.njit(parallel=True)`: a blocked matmul (rows split over cores like thread blocks, a
# `k` block kept in cache like a shared tile, the inner loop over contiguous `j` vectorized
# like a coalesced warp) and a fused elementwise chain (bias, ReLU, scale, residual in one
# pass instead of five numpy passes with temporaries). Timings vary from run to run; the
# first call includes compilation, so we warm up first.

# %% id="cell-035"
from labkit.kernels import cpu

big_a = rng.standard_normal((384, 384)).astype(np.float32)
mm = cpu.compare_matmul(big_a, big_a, repeats=5)
print("blocked matmul matches numpy:", mm.agrees)
print(f"matmul 384^3: numba blocked {mm.gflops:.1f} GFLOP/s, "
      f"numpy (BLAS) {mm.baseline_gflops:.1f} GFLOP/s")

v = rng.standard_normal(2_000_000).astype(np.float32)
res = rng.standard_normal(v.size).astype(np.float32)
ep = cpu.compare_epilogue(v, res, repeats=5)
print("fused chain matches numpy:", ep.agrees)
print(f"bias+ReLU+scale+residual on {v.size:,} floats: fused {ep.ours.median * 1e3:.2f} ms, "
      f"numpy unfused {ep.baseline.median * 1e3:.2f} ms ({ep.ratio:.1f}x)")

# %% [markdown] id="cell-036"
# ## Programmer's view: pitfalls
#
# * **Forgetting the second `syncthreads`** in a tiled loop lets fast threads overwrite a
#   tile others are still reading — wrong results that depend on timing. The tracer reports
#   it as a race whatever the timing (`labkit.kernels.analysis.races`, with the store and
#   the read that collide: for a 19 × 23 @ 23 × 13 product in 8 × 8 tiles, 1,536 races —
#   every element of `sa` and `sb`, at both phase boundaries of each of the 6 blocks).
# * **Tree reductions with `t % (2s)`** diverge; with index `2·s·t` they conflict. Use
#   sequential addressing, then warp shuffles for the last 32 values.
# * **Atomics on one address** serialize; reduce per block first.
# * **float32 sums** of many values lose digits; long reductions sum in pairs (the tree does
#   that) or in higher precision.
# * **Counting FLOPs is not timing.** The roofline bounds what a kernel *can* reach; measure
#   on the real device (`benchmarks/gpu_check.py`) before believing it.
# * **Index arithmetic the compiler cannot remove.** numba wraps negative indices like
#   Python (`a[-1]` is the last element): for a signed index it emits a compare, an add and
#   a select (`fix_index` in numba-cuda's `cpython/slicing.py`), always on, unless the
#   optimizer proves the index ≥ 0 (numba's maintainers in numba/numba issue 1533, who note
#   that it sometimes can, e.g. for a `range()` counter). In the ladder's kernels, compiled
#   by numba-cuda 0.30, indices computed from `cuda.threadIdx` (a signed int32 to numba) and
#   from the `range()` counters of the k loops kept the check, so every access paid the
#   compare, the select and 64-bit address arithmetic. The tiled and
#   register-blocked matmuls and `reduce_fast` mask the thread index
#   (`cuda.threadIdx.x & (tile - 1)`, a no-op for their launch shape) and the block index
#   (`cuda.blockIdx.x & GRID_MASK`, a no-op because no grid reaches 2³¹ blocks) and count
#   their loops over k with `while` (a constant `range(tile)` is unrolled away), which cuts
#   the integer instructions of their inner loops by about half or more; the naive and
#   coalesced baselines count k with `while` too but mask neither index. Run
#   `benchmarks/ptx_report.py` with a CUDA toolchain to see the counts.
#
# ## Summary
#
# * Reductions are memory-bound: a good one reads each element once, converges its warps and
#   avoids bank conflicts; the rest is bookkeeping.
# * Tiling cuts a matmul's global reads by the tile size; 2-D register blocking cuts its
#   shared-memory reads per multiply-add from 2 to `(tm + tn) / (tm·tn)`, the step that
#   moves it from shared-memory-bound towards the FP32 roof.
# * A reduction is fast when it moves bytes at HBM speed: grid-stride loop, many elements per
#   thread, shuffles, one atomic per block.
# * Time GPUs with CUDA events after a warm-up, on device-resident data.
# * Online softmax fuses passes by rescaling a running sum; one warp per row makes its reads
#   coalesced, and shuffles combine the lanes' partial sums.
# * FlashAttention fuses a whole attention layer the same way: tiles of q kᵀ in shared
#   memory, the online softmax, p v, and no N × N matrix in global memory.
# * Arithmetic intensity against the ridge point says which roof limits a kernel.
# * The same blocking and fusion pay on CPUs.
#
# ## Exercises
#
# **1.** The sequential tree leaves half of its threads idle after the first step. Change
# `reduce_block` so each thread first adds two elements while loading (Harris's "first add
# during load"). What happens to the number of blocks and to the trace's global reads?
#
# ### BEGIN SOLUTION
# Each block now covers `2·BLOCK` elements, so half as many blocks are launched; global
# reads stay `n` (each element is still loaded once) but shared writes and the tree's
# shared reads halve, and no thread is idle in the first step.
# ### END SOLUTION
#
# **2.** Using the roofline widget (H100, FP32, DRAM bytes from the wave model), find the
# smallest power-of-two `n` at which the tiled-32 matmul becomes compute-bound. Then explain
# why the ladder model still puts it far below the FP32 peak, and why the DRAM roofline
# cannot tell the naive kernel from the tiled one.
#
# ### BEGIN SOLUTION
# While all blocks fit in one wave every input comes from HBM once: `4·3n²` bytes for
# `2n³` FLOPs, intensity `n/6`; it passes the H100's FP32 ridge (67 / 3.35 = 20 FLOP/byte)
# between `n = 96` and `n = 128`, so **`n = 128`** (`2^7`, intensity 21.3). (From `n = 8192`
# a wave no longer spans two block rows, the `b` panels are re-read every wave and the
# intensity falls back below the ridge: `models.kernel_cost("matmul tiled 32", 8192, "H100")`
# gives 16.3 FLOP/byte — why real GEMMs raster blocks in swizzled orders.)
# Compute-bound by DRAM is not fast: the tiled kernel does two shared-memory loads per
# multiply-add, and an SM serves one shared wavefront per clock but four warp FMAs, so it
# runs at most at 1/8 of the FP32 peak (the ladder model's "shared memory" limiter:
# `models.predict_matmul(4096, "tiled", "H100").tflops` = 8.4 TFLOP/s). The naive kernel
# uses the same block tiles, so the same panels
# come from HBM — same DRAM intensity — but its uncoalesced loads take 17 L1 wavefronts per
# warp multiply-add: it is limited by on-chip bandwidth, which the DRAM roofline leaves out.
# ### END SOLUTION
