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
# # 04 · GPU architecture and the CUDA programming model
#
# A GPU（图形处理器）is not a faster CPU. It is thousands of simple lanes that run the same
# instruction together, fed by a memory system that rewards some access patterns and punishes
# others. This chapter makes that visible. You write small CUDA kernels（核函数）in Python,
# run them under labkit's **tracer** — which records every memory access of every thread —
# and look at what the hardware would see: how threads map to data, which warps diverge,
# how many 32-byte memory transactions a warp needs, which shared-memory banks collide. The
# same kernels also run compiled by `numba.cuda` (on a real GPU, or Numba's CUDA simulator
# here).
#
# **Objectives.** After this chapter you can
#
# * explain why GPUs are built for throughput and CPUs for latency, with numbers;
# * index threads, blocks and grids in 1-D and 2-D, and guard the edges;
# * say what SIMT execution and warp divergence（分支发散）cost;
# * describe the memory hierarchy（内存层次结构）and write kernels whose global accesses are
#   coalesced（合并访问）and whose shared-memory accesses avoid bank conflicts（存储体冲突）;
# * compute occupancy（占用率）from per-SM limits;
# * say what Tensor Cores compute, in which precision, and what they require.
#
# **Guiding questions.** Why does a GPU need tens of thousands of threads in flight? Why can
# two kernels that do the same arithmetic differ in speed several-fold? What does a Tensor
# Core give up in precision, and why is that usually fine?

# %% id="cell-001"
import inspect

import numpy as np
import matplotlib.pyplot as plt

import labkit
from labkit.check import check, predict, reveal
from labkit.kernels import library as lib, ops, plots, widgets
from labkit.kernels.analysis import summarize, traffic, element_counts
from labkit.kernels.registry import KERNELS, REDUCTION, TRANSPOSE, variants
from labkit.kernels import occupancy as occ   # occ.occupancy is what exercise 4.6 builds
from labkit.kernels.occupancy import A100, GPUS, H100, V100
from labkit.kernels.roofline import PRESETS, hardware, ratios
from labkit.kernels.trace import READ, WRITE
from labkit.kernels.tracer import run_traced

rng = np.random.default_rng(0)
print("CUDA backend:", labkit.CUDA_BACKEND)

# %% [markdown] id="cell-002"
# ## 1. CPU vs GPU: latency machines and throughput machines
#
# A CPU core spends its transistors on making *one* thread fast: deep out-of-order pipelines,
# branch predictors, big caches. A GPU spends them on *many* simple lanes grouped into
# streaming multiprocessors（流式多处理器，SM）, and hides the latency of memory by switching
# between thousands of resident threads instead of waiting. The seed's headline count of
# an A100's CUDA cores is the product of two numbers in labkit's A100 model, SMs × FP32
# lanes per SM (`SMLimits.cuda_cores`):

# %% id="cell-003"
import os

for gpu in (A100, H100):
    print(f"{gpu.name:18s}: {gpu.sm_count} SMs x {gpu.fp32_lanes_per_sm} FP32 lanes = "
          f"{gpu.cuda_cores} CUDA cores; up to {gpu.max_resident_threads:,} resident threads")
print(f"this machine      : {os.cpu_count()} CPU cores")

# %% [markdown] id="cell-004"
# The other half of the story is memory bandwidth. Below, this machine is *measured*
# (a float32 matmul for FLOP/s, the STREAM triad for bandwidth — `labkit.perf`, as in chapter 01) and set against NVIDIA's data
# sheets. The ratio FLOP/s ÷ bytes/s is the *ridge point*: a kernel must do at least that
# many FLOPs per byte it moves to be limited by arithmetic rather than by memory. Chapter 05
# puts kernels on this roofline.
# Every machine below is compared at one precision, FP32 on the ordinary cores (the
# precision of this chapter's kernels); the Tensor Core rates of section 7 are another,
# much higher roof and are never mixed into this table.

# %% id="cell-005"
machine = hardware("this machine")
print("every row at FP32 (CUDA cores / CPU cores):")
for hw in [machine] + list(PRESETS.values()):
    print(f"{hw.name:26s} {hw.peak('fp32') / 1e12:7.2f} TFLOP/s  "
          f"{hw.bandwidth / 1e9:8.1f} GB/s  ridge {hw.ridge('fp32'):6.2f} FLOP/byte")
gap = ratios(PRESETS["H100"], machine, "fp32")
print(f"H100 FP32 peak / this machine: {gap['peak']:.0f}x; bandwidth: {gap['bandwidth']:.0f}x")

# %% [markdown] id="cell-006"
# ## 2. Threads, blocks and grids
#
# A kernel launch runs the kernel body on a **grid**（网格）of **blocks**（线程块）, each of
# `blockDim` threads. A thread knows `threadIdx` (its index in the block), `blockIdx` and
# `blockDim`, and computes which element it owns. Threads of a block can share fast on-chip
# memory and wait for each other (`syncthreads`); blocks cannot, so blocks may run in any
# order, on any SM.
#
# In labkit a kernel is a function of `cuda` returning the body (the GPU-Puzzles style), so
# the *same source* runs under the tracer and under `numba.cuda`:

# %% id="cell-007"
print(inspect.getsource(lib.vector_add))

# %% [markdown] id="cell-008"
# Let us run it under the tracer on 100 elements with blocks of 32 threads (4 blocks, 128
# threads: the last 28 threads have nothing to do — that is what the guard `if i < out.size`
# is for). The left picture colours each element of `out` by the **warp** that wrote it —
# a warp（线程束）is 32 consecutive threads of a block — the right one counts writes.

# %% id="cell-009"
a = rng.standard_normal(100).astype(np.float32)
b = rng.random(100).astype(np.float32)
result = ops.add(a, b, block=32)
print("matches numpy:", np.allclose(result.value, a + b))
t = traffic(result.trace)
print(f"global reads {t.global_reads}, global writes {t.global_writes}, "
      f"threads launched {result.trace.n_threads}")
fig = plots.plot_access_map(result.trace, "out", op=WRITE, by="warp")
plt.show()


# %% [markdown] id="cell-010"
# ### Exercise 4.1 — a map with a guard (roughly 3 lines)
#
# Write the body of `add_ten`: `out[i] = a[i] + 10` for every element, one thread per
# element. The check launches it with blocks of 32 threads on sizes 1 and 33 and on a size
# it draws afresh (never a multiple of 32), so some threads fall off the end; the tracer
# reports any out-of-bounds access.
#
# **How every kernel check of chapters 04 and 05 decides.** It traces your kernel and
# labkit's on the same inputs and compares what the *whole launch* did: the launch must
# run (no index out of bounds, no deadlock) and be free of shared-memory races (reported
# before the values, since a racy kernel can be right by luck); the values must match;
# then the work, measured on labkit's kernel: total memory traffic in 32-byte sectors
# (global and local memory) within 1.5× of labkit's, no thread making more than 4× the
# memory accesses of labkit's busiest thread, and per exercise the reads of each element,
# the atomics, the bank conflicts. So a kernel in which thread 0 loops over every element
# gets the right values and fails: a one-lane access costs a whole sector, and one thread
# does all the work. labkit's own kernels are refused as answers.

# %% id="cell-011"
def add_ten(cuda):
    def kernel(a, out):
        ### BEGIN SOLUTION
        i = cuda.grid(1)        # numba's blockIdx.x * blockDim.x + threadIdx.x
        if i < out.size:
            out[i] = a[i] + 10
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.1"} tags=["check"]
check("4.1", add_ten)

# %% [markdown] id="cell-013"
# Same source, two executors: here is your kernel compiled by `numba.cuda` (the simulator on
# a machine without a GPU) next to the tracer.

# %% id="cell-014"
x = rng.standard_normal(77).astype(np.float32)
by_tracer = ops.elementwise(add_ten, x, runner="trace").value
by_numba = ops.elementwise(add_ten, x, runner="numba").value
print("tracer == numba:", np.array_equal(by_tracer, by_numba),
      "| matches numpy:", np.allclose(by_numba, x + 10))


# %% [markdown] id="cell-015"
# ### 2-D grids
#
# For a matrix, a 2-D block of (16, 8) threads and a 2-D grid of blocks cover rows and
# columns. Which index does `threadIdx.x` walk? In CUDA, `x` varies fastest: threads
# `x = 0..15` of the same `y` are consecutive, and 32 consecutive threads form a warp. Numpy
# arrays are row-major, so consecutive *columns* are consecutive addresses. Section 5 shows
# why that matters.
#
# ### Exercise 4.2 — 2-D indexing (roughly 3 lines)
#
# Write `add_2d`: `out[r, c] = a[r, c] + b[r, c]`. The check launches it with blocks of
# (16, 8) threads and a grid of `(ceil(cols / 16), ceil(rows / 8))` blocks, on shapes that
# are not multiples of the block, and requires its memory traffic to stay within 1.5× of
# labkit's reference: let `threadIdx.x` walk the columns, so that a warp's access is
# coalesced.

# %% id="cell-016"
def add_2d(cuda):
    def kernel(a, b, out):
        ### BEGIN SOLUTION
        c, r = cuda.grid(2)     # (x, y) = (column, row): threadIdx.x walks the columns
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = a[r, c] + b[r, c]
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.2"} tags=["check"]
check("4.2", add_2d)


# %% [markdown] id="cell-018"
# ### Exercise 4.3 — broadcasting (roughly 3 lines)
#
# Numpy's `col[:, None] + row[None, :]` makes a matrix from a column and a row. Write
# `broadcast_add(cuda)` whose body `kernel(col, row, out)` computes `out[r, c] = col[r] +
# row[c]`, launched like exercise 4.2. Each thread may read one value of each vector.

# %% id="cell-019"
def broadcast_add(cuda):
    def kernel(col, row, out):
        ### BEGIN SOLUTION
        c, r = cuda.grid(2)
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = col[r] + row[c]
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.3"} tags=["check"]
check("4.3", broadcast_add)

# %% id="cell-021"
col = rng.standard_normal(13).astype(np.float32)
row = rng.standard_normal(21).astype(np.float32)
out = np.zeros((13, 21), np.float32)
trace = run_traced(broadcast_add, (2, 2), (16, 8), col, row, out)
print("matches numpy:", np.allclose(out, col[:, None] + row[None, :]))
print("reads of each row element:", element_counts(trace, "row").tolist())
fig = plots.plot_access_map(trace, "out", op=WRITE, by="block")
plt.show()

# %% [markdown] id="cell-022"
# ## 3. SIMT and warp divergence
#
# A warp executes one instruction at a time for all its 32 lanes: single instruction,
# multiple threads（单指令多线程，SIMT）. When lanes of a warp take different branches of an
# `if`, the warp runs *both* paths, masking off the lanes not on the current one. The
# tracer groups each thread's accesses into the warp instructions the hardware would issue
# and records which lanes were active. In `branchy`, even lanes double and odd lanes add one:

# %% id="cell-023"
print(inspect.getsource(lib.branchy))
trace = ops.elementwise(lib.branchy, rng.standard_normal(64).astype(np.float32)).trace
print(f"SIMT efficiency (active lanes / lanes): {summarize(trace).simt_efficiency:.0%}")
fig = plots.plot_divergence(trace)
plt.show()

# %% [markdown] id="cell-024"
# Each branch's load and store ran with half of the warp idle. Divergence costs only *within*
# a warp: if the condition were `(i // 32) % 2 == 0`, whole warps would take one side and no
# lane would idle. Chapter 05's reductions show the same effect at scale.
#
# ## 4. The memory hierarchy
#
# From fastest and smallest to slowest and largest: **registers**（寄存器）(private to a
# thread), **shared memory**（共享内存）(on-chip, per block, software-managed, shares its
# storage with the L1 cache), the **L2 cache** (on-chip, shared by all SMs) and **global
# memory** in HBM（高带宽内存）(off-chip, all threads, the largest and slowest). The per-SM
# budgets are the ones the occupancy calculator of section 6 uses:

# %% id="cell-025"
for gpu in (A100, H100):
    print(f"{gpu.name:18s}: {gpu.registers_per_sm:,} 32-bit registers and "
          f"{gpu.shared_per_sm // 1024} KB shared memory per SM "
          f"(a block may use up to {gpu.max_shared_per_block // 1024} KB)")
for name in ("A100", "H100", "H200"):
    print(f"{PRESETS[name].name:18s}: HBM {PRESETS[name].bandwidth / 1e12:.2f} TB/s")

# %% [markdown] id="cell-026"
# ## 5. Coalescing: what a warp asks of global memory
#
# Global memory is read in 32-byte **sectors**. When the 32 lanes of a warp load 32
# consecutive `float32` values (128 bytes), the hardware fetches 4 sectors: the access is
# *coalesced*. When lanes are `stride` elements apart, each lane may need its own sector
# and the warp moves up to 8 times more bytes than it uses. Before you move the slider, predict: at stride 8, how many sectors do the warp's read of
# `a` and its write of `out` fetch together? Then move it; orange bands are the sectors
# fetched for one warp's load of `a[i * stride]`.

# %% id="pred-coalesce"
### BEGIN SOLUTION
guess = 36
### END SOLUTION
predict("4.coalesce", guess, "sectors for one warp's read of a and write of out at stride 8")

# %% id="cell-027"
widgets.coalescing_widget()

# %% id="reveal-coalesce"
stride8 = run_traced(lib.strided_copy, 1, 32, np.arange(32 * 64, dtype=np.float32),
                     np.zeros(32, np.float32), 8)
reveal("4.coalesce", summarize(stride8).sectors);

# %% [markdown] id="cell-028"
# The same holds for 2-D arrays: let `threadIdx.x` walk the rows instead of the columns
# (`add_2d_transposed`) and every lane of a warp touches a different row.

# %% id="cell-029"
m = rng.standard_normal((32, 32)).astype(np.float32)
for transposed in (False, True):
    s = summarize(ops.add_matrices(m, m, transposed=transposed, block=(32, 4)).trace)
    print(f"threadIdx.x walks {'rows   ' if transposed else 'columns'}: "
          f"{s.sectors_per_request:.0f} sectors per warp request, "
          f"coalescing efficiency {s.coalescing_efficiency:.0%}")

# %% [markdown] id="cell-030"
# ## Shared memory and bank conflicts
#
# Shared memory is split into 32 **banks** of 4-byte words; word `w` lives in bank
# `w mod 32`. A warp's access is served in one pass when its lanes hit different banks (or
# the very same word, which is broadcast); lanes hitting *different words of one bank* are
# served one after another — a *k*-way bank conflict. A warp reading word `t * stride`:
# stride 1 is conflict-free, stride 32 puts all 32 lanes in bank 0, and padding the stride
# to 33 removes the conflict again (the classic `[32][33]` tile trick).
#
# Predict first: at stride 16, how many ways does the conflict have?

# %% id="pred-banks"
### BEGIN SOLUTION
guess = 16
### END SOLUTION
predict("4.banks", guess, "bank-conflict ways of a warp reading shared word 16 t")

# %% id="cell-031"
widgets.bank_conflict_widget()

# %% id="reveal-banks"
stride16 = run_traced(lib.shared_stride(32, 16), 1, 32, np.arange(32, dtype=np.float32),
                      np.zeros(32, np.float32))
reveal("4.banks", summarize(stride16).max_conflict_ways);

# %% id="cell-032"
for stride in (1, 2, 32, 33):
    trace = run_traced(lib.shared_stride(32, stride), 1, 32,
                       np.arange(32, dtype=np.float32), np.zeros(32, np.float32))
    print(f"stride {stride:2d}: {summarize(trace).max_conflict_ways}-way")

# %% [markdown] id="cell-033"
# ### Exercise 4.4 — a 1-D convolution through shared memory (roughly 13 lines)
#
# `out[i] = sum_k w[k] * a[i + k - RADIUS]` for `k = 0 .. 2*RADIUS`, with `a` taken as 0
# outside its bounds. Reading the `2*RADIUS + 1` neighbours straight from global memory reads
# each element of `a` five times. Instead, let each block of `BLOCK` threads load its
# `BLOCK` elements plus `RADIUS` halo elements on each side into
# `cuda.shared.array(HALO_TILE, cuda.float32)` (`HALO_TILE = BLOCK + 2 * RADIUS`: numba-cuda
# compiles a shared array only when its shape is a number or a name bound to one, not an
# expression written in the kernel) once, wait at `cuda.syncthreads()`,
# then compute from shared memory. Budget: each element of `a` read from global memory at
# most twice (once by its own block, once as a neighbour's halo). Forget the barrier and
# the check reports the race — which thread wrote which element of the tile at which line,
# and which thread read it — instead of whatever numbers the timing gave.

# %% id="cell-034"
from labkit.check.ch04 import BLOCK, RADIUS, HALO_TILE   # the sizes the check launches with
print("BLOCK =", BLOCK, " RADIUS =", RADIUS, " HALO_TILE = BLOCK + 2 * RADIUS =", HALO_TILE)

def conv1d_shared(cuda):
    def kernel(a, w, out):
        ### BEGIN SOLUTION
        tile = cuda.shared.array(HALO_TILE, cuda.float32)
        t = cuda.threadIdx.x
        start = cuda.blockIdx.x * BLOCK - RADIUS     # the element of a in tile[0]
        for e in range(t, HALO_TILE, BLOCK):         # the block's tile and halo, BLOCK at a time
            j = start + e
            tile[e] = a[j] if 0 <= j < a.size else 0.0
        cuda.syncthreads()
        acc = 0.0                                    # the halo is zero-padded: no guard here
        for k in range(2 * RADIUS + 1):
            acc += w[k] * tile[t + k]
        i = start + RADIUS + t
        if i < out.size:
            out[i] = acc
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.4"} tags=["check"]
check("4.4", conv1d_shared)

# %% id="cell-036"
x = rng.standard_normal(100).astype(np.float32)
w = np.array([0.1, 0.2, 0.4, 0.2, 0.1], np.float32)
mine = np.zeros_like(x)
shared_trace = run_traced(conv1d_shared, 4, BLOCK, x, w, mine)
naive = ops.conv1d(x, w, shared=False)
print("matches numpy:", np.allclose(mine, np.convolve(x, w[::-1], "same"), atol=1e-5))
print(f"global reads of a: shared {element_counts(shared_trace, 'a').sum()}, "
      f"naive {element_counts(naive.trace, 'a').sum()}")
fig = plots.plot_access_map(shared_trace, "a", op=READ, by="block")
plt.show()

# %% [markdown] id="ex-4-5-md"
# ### Exercise 4.5 — a transpose through padded shared memory (roughly 11 lines)
#
# `out = a.T` looks like pure copying, yet a direct kernel is slow: if a warp reads a row of
# `a` (coalesced), it writes a *column* of `out` — 32 different rows, 32 sectors. The cure
# combines this chapter's two lessons (M. Harris, "An Efficient Matrix Transpose in CUDA
# C/C++", NVIDIA blog, 2013). A block of `(TILE, ROWS)` = (32, 8) threads handles one
# 32 × 32 tile; each thread loops over `k = 0, ROWS, 2·ROWS, …`:
#
# 1. read the tile row by row, `a[r, c]` with `c` from `threadIdx.x` (coalesced), into a
#    shared array;
# 2. `cuda.syncthreads()`;
# 3. write row by row of the *output*: output row `blockIdx.x·TILE + threadIdx.y + k`,
#    output column `blockIdx.y·TILE + threadIdx.x`, reading the shared tile *by column*.
#
# Step 3's column read of a `[32][32]` float array puts every lane in the same bank (a
# 32-way conflict, section above). Pad the tile. The check launches on a grid of
# `(ceil(cols / TILE), ceil(rows / TILE))` blocks and wants the values, each element read
# and written once, total sectors within 1.5× of the reference's and no more bank-conflict
# replays (the extra passes a conflicting warp access needs) than the reference's — none.

# %% id="ex-4-5"
from labkit.check.ch04 import TILE, ROWS, TILE_PADDED
print("TILE =", TILE, " ROWS =", ROWS, " TILE_PADDED =", TILE_PADDED)

def transpose_tile(cuda):
    def kernel(a, out):
        ### BEGIN SOLUTION
        tile = cuda.shared.array((TILE, TILE_PADDED), cuda.float32)
        tx = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * TILE     # the tile's first row of a: first column of out
        col0 = cuda.blockIdx.x * TILE     # its first column of a: first row of out
        for y in range(cuda.threadIdx.y, TILE, ROWS):
            if row0 + y < a.shape[0] and col0 + tx < a.shape[1]:
                tile[y, tx] = a[row0 + y, col0 + tx]
        cuda.syncthreads()
        for y in range(cuda.threadIdx.y, TILE, ROWS):
            if col0 + y < out.shape[0] and row0 + tx < out.shape[1]:
                out[col0 + y, row0 + tx] = tile[tx, y]
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.5"} tags=["check"]
check("4.5", transpose_tile)

# %% id="transpose-compare"
m = rng.standard_normal((64, 64)).astype(np.float32)
for variant in KERNELS[TRANSPOSE]:
    s = summarize(ops.transpose(m, variant=variant).trace)
    print(f"{variant:7s}: {s.sectors_per_request:5.2f} sectors per warp request, "
          f"{s.max_conflict_ways:2d}-way bank conflicts")

# %% [markdown] id="hist-md"
# ### Atomics, and a histogram privatized in shared memory
#
# When threads update one location together, `cuda.atomic.add(array, index, value)` makes
# each read-modify-write indivisible, and the hardware applies the updates to one address
# one after another. A histogram of skewed data sends most updates to a few bins: with one
# global atomic per element, every update of a popular bin waits for the one before it.
# **Privatization** (Kirk & Hwu, *Programming Massively Parallel Processors*, 4th ed.,
# ch. 9) gives each block its own copy of the bins in shared memory: the block's threads
# update that copy with shared-memory atomics, on chip, and the block then adds its copy
# into the global bins with one atomic per bin. Atomics do not race with atomics; they do
# race with the plain write that zeroes the copy and the plain read that copies it out,
# which is what the two barriers are for.
#
# ### Exercise 4.7 — a privatized histogram (roughly 11 lines)
#
# Write `histogram(cuda)`: `kernel(a, counts)` adds to `counts[b]` the number of elements
# of `a` (int32 values in `[0, BINS)`) equal to `b`; `counts` starts at 0. The check
# launches `HIST_BLOCKS` blocks of `HIST_BLOCK` threads on a few hundred elements — fewer
# threads than elements — so let each thread start at its global index and step by
# `cuda.gridDim.x * cuda.blockDim.x` (a *grid-stride loop*, which lets the grid be sized
# for the GPU rather than for the data). Zero the shared bins, `syncthreads`, count,
# `syncthreads`, then one `cuda.atomic.add` per bin into `counts`. Budget: no more global
# atomics than labkit's kernel makes (one per bin and block), each element read once.

# %% id="ex-4-7"
from labkit.check.ch04 import BINS, HIST_BLOCK, HIST_BLOCKS
print("BINS =", BINS, " HIST_BLOCK =", HIST_BLOCK, " HIST_BLOCKS =", HIST_BLOCKS)

def histogram(cuda):
    def kernel(a, counts):
        ### BEGIN SOLUTION
        hist = cuda.shared.array(BINS, cuda.int32)
        t = cuda.threadIdx.x
        for b in range(t, BINS, cuda.blockDim.x):    # any block size covers the bins
            hist[b] = 0
        cuda.syncthreads()
        step = cuda.gridDim.x * cuda.blockDim.x
        for i in range(cuda.grid(1), a.size, step):
            cuda.atomic.add(hist, a[i], 1)
        cuda.syncthreads()
        for b in range(t, BINS, cuda.blockDim.x):
            cuda.atomic.add(counts, b, hist[b])
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.7"} tags=["check"]
check("4.7", histogram)

# %% [markdown] id="hist-use-md"
# Your kernel (or labkit's, if yours has not passed) against one global atomic per element,
# on 1,000 skewed values. Predict first: how many global atomics does the privatized
# histogram make?

# %% id="pred-hist"
### BEGIN SOLUTION
guess = 48
### END SOLUTION
predict("4.hist", guess, "global atomics of the privatized histogram: 3 blocks, 16 bins")

# %% id="hist-use"
from labkit.check.ch04 import skewed_values, whose

values = skewed_values(rng, 1000, BINS)
rows = ops.work_table({"one global atomic per element": (lib.histogram_global, HIST_BLOCKS,
                                                         HIST_BLOCK),
                       "privatized, " + whose(histogram, "4.7"): (histogram, HIST_BLOCKS,
                                                                  HIST_BLOCK)},
                      values, np.zeros(BINS, np.int32))
print(ops.format_work(rows))
print("counts match np.bincount:", all(np.array_equal(r.arrays[1], np.bincount(
    values, minlength=BINS)) for r in rows))
reveal("4.hist", rows[1].global_atomics);

# %% [markdown] id="blur-md"
# ### Exercise 4.8 — a 3 × 3 blur through a shared tile with a halo (roughly 17 lines)
#
# Exercise 4.4 in two dimensions (Kirk & Hwu, ch. 8, tiling with halo cells): `out[r, c]`
# is the mean of the 3 × 3 neighbourhood of `img[r, c]`, neighbours outside the image
# counting 0 (so a corner sums 4 values and still divides by 9). A block of `(BX, BY)`
# threads computes a `BY × BX` tile of `out` and needs the `(BY + 2) × (BX + 2)` tile of
# `img` around it, whose element `(0, 0)` is the image's `(blockIdx.y · BY − 1,
# blockIdx.x · BX − 1)`. Load that tile into `cuda.shared.array((HALO_ROWS, HALO_COLS),
# cuda.float32)` (the constants `BY + 2` and `BX + 2`) once. It has more elements than the block has threads, so let thread
# `e = ty · BX + tx` load the tile's elements `e, e + BX · BY, …` in row-major order
# (consecutive lanes, consecutive columns: coalesced), storing 0 outside the image; wait
# at `cuda.syncthreads()`; then add the nine neighbours from shared memory. Budget: no
# element of `img` read more often than labkit's kernel reads it (once by its own block,
# up to three more times as other blocks' halo), total sectors within 1.5× of labkit's.

# %% id="ex-4-8"
from labkit.check.ch04 import BX, BY, HALO_ROWS, HALO_COLS
print("BX =", BX, " BY =", BY, " HALO_ROWS =", HALO_ROWS, " HALO_COLS =", HALO_COLS)

def blur(cuda):
    def kernel(img, out):
        ### BEGIN SOLUTION
        tile = cuda.shared.array((HALO_ROWS, HALO_COLS), cuda.float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        top = cuda.blockIdx.y * BY - 1      # img's row and column of tile[0, 0]
        left = cuda.blockIdx.x * BX - 1
        for e in range(ty * BX + tx, HALO_ROWS * HALO_COLS, BX * BY):
            y, x = e // HALO_COLS, e % HALO_COLS
            inside = 0 <= top + y < img.shape[0] and 0 <= left + x < img.shape[1]
            tile[y, x] = img[top + y, left + x] if inside else 0.0
        cuda.syncthreads()
        r = top + 1 + ty
        c = left + 1 + tx
        if r < out.shape[0] and c < out.shape[1]:
            acc = 0.0
            for dr in range(3):             # tile row ty + dr: columns tx .. tx + 2
                acc += tile[ty + dr, tx] + tile[ty + dr, tx + 1] + tile[ty + dr, tx + 2]
            out[r, c] = acc / 9.0
        ### END SOLUTION
    return kernel


# %% labkit={"exercise": "4.8"} tags=["check"]
check("4.8", blur)

# %% [markdown] id="blur-use-md"
# Your blur against the one that reads every neighbour from global memory, on a 24 × 40
# image (3 × 3 blocks). Predict first: with the shared tile, how many times is the most-read
# element of `img` read from global memory?

# %% id="pred-blur"
### BEGIN SOLUTION
guess = 4
### END SOLUTION
predict("4.blur", guess, "global reads of the most-read img element, tiled blur")

# %% id="blur-use"
image = rng.gamma(2.0, size=(24, 40)).astype(np.float32)
rows = ops.work_table({"neighbours from global memory": (lib.blur_naive, (3, 3), (BX, BY)),
                       "shared tile, " + whose(blur, "4.8"): (blur, (3, 3), (BX, BY))},
                      image, np.zeros_like(image))
print(ops.format_work(rows))
fig = plots.plot_element_reads({"global": rows[0].trace, "shared tile": rows[1].trace}, "img")
plt.show()
reveal("4.blur", int(element_counts(rows[1].trace, "img").max()));

# %% [markdown] id="cell-037"
# ## 6. Occupancy
#
# An SM keeps many blocks resident at once and switches between their warps to hide memory
# latency. How many fit is the minimum over four limits: resident warps, resident blocks,
# registers (allocated per warp in fixed units) and shared memory (plus a little the runtime
# reserves per block). **Occupancy** is resident warps ÷ the maximum. The limits:

# %% id="cell-038"
for gpu in (A100, H100):
    print(f"{gpu.name}: {gpu.max_warps_per_sm} warps, {gpu.max_blocks_per_sm} blocks, "
          f"{gpu.registers_per_sm:,} registers (unit {gpu.register_unit} per warp), "
          f"{gpu.shared_per_sm // 1024} KB shared (+{gpu.reserved_shared_per_block} B "
          f"reserved per block, granularity {gpu.shared_unit} B) per SM")

# %% [markdown] id="cell-039"
# The CUDA C++ Best Practices Guide ("Calculating Occupancy") works an example on a device of
# **compute capability 7.0** (a V100): with 37 registers per thread, 128-thread blocks give
# 75 % occupancy (12 resident blocks) but 320-thread blocks only 63 % (4 blocks), because
# registers are allocated per warp in units of 256. labkit reproduces it on the V100's limits
# (the A100 and H100 happen to give the same numbers here):

# %% id="cell-040"
for threads in (128, 320):
    o = occ.occupancy("V100", threads, 37)
    print(f"V100, {threads} threads x 37 registers: {o.blocks_per_sm} blocks per SM, "
          f"occupancy {o.occupancy:.1%}, limited by {o.limiter}")


# %% [markdown] id="ex-4-6-md"
# ### Exercise 4.6 — predict blocks per SM (roughly 8 lines)
#
# Write `blocks_per_sm(threads_per_block, registers_per_thread, shared_bytes)` for an A100
# from the limits printed above: the minimum over resident warps, resident blocks,
# registers and shared memory. The two traps are the ones that make the Guide's example
# interesting: registers are handed to a *warp* in units of 256 and each of the 4
# sub-partitions holds whole warps; and every block costs the runtime's reserved shared
# memory on top of its own, rounded up to the allocation unit. The check compares with
# labkit's calculator on eleven launches.

# %% id="ex-4-6"
def blocks_per_sm(threads_per_block, registers_per_thread, shared_bytes):
    ### BEGIN SOLUTION
    from labkit.validate import ceil_div
    sm = A100
    warps = ceil_div(threads_per_block, 32)
    per_warp = ceil_div(registers_per_thread * 32, sm.register_unit) * sm.register_unit
    by_regs = (sm.registers_per_sm // sm.sub_partitions // per_warp) * sm.sub_partitions // warps
    smem = ceil_div(shared_bytes + sm.reserved_shared_per_block, sm.shared_unit) * sm.shared_unit
    return min(sm.max_warps_per_sm // warps, sm.max_blocks_per_sm, by_regs,
               sm.shared_per_sm // smem)
    ### END SOLUTION


# %% labkit={"exercise": "4.6"} tags=["check"]
check("4.6", blocks_per_sm)

# %% [markdown] id="occ-widget-md"
# Now the whole landscape. Predict first: how many blocks of 256 threads using 64 registers
# each fit on an A100 SM? Then move the sliders; the resource that binds is drawn red.

# %% id="pred-occ"
### BEGIN SOLUTION
guess = 4
### END SOLUTION
predict("4.occ", guess, "A100 blocks per SM at 256 threads x 64 registers")

# %% id="cell-041" tags=["browser-test"]
widgets.occupancy_widget()

# %% id="reveal-occ"
reveal("4.occ", occ.occupancy("A100", 256, 64).blocks_per_sm);

# %% [markdown] id="cell-042"
# High occupancy is a means, not a goal: a kernel that keeps enough loads in flight per
# thread (chapter 05's register blocking) can be fast at 25 % occupancy. But a kernel at
# one block per SM has nothing to switch to while it waits for memory.
#
# ## 7. Tensor Cores
#
# A Tensor Core（张量核心）is a matrix-multiply-accumulate unit: per instruction a warp
# computes `D = A × B + C` on small tiles (on Volta, 4×4×4 per core per clock; later
# generations use larger shapes). Inputs are low precision (FP16, BF16, TF32, FP8 on
# Hopper), products are exact and the sum is kept in FP32. labkit emulates that in numpy:
# round the inputs, multiply exactly, accumulate in FP32 — versus accumulating in FP16.
# Predict first: as K, the length of each dot product, grows, whose error grows — FP32
# accumulation's or FP16 accumulation's? Then move the slider.

# %% id="pred-tc"
### BEGIN SOLUTION
guess = 'fp16'
### END SOLUTION
predict("4.tc", guess, "which accumulator's error grows with K", choices=['fp32', 'fp16'])

# %% id="cell-043"
widgets.tensorcore_widget()

# %% id="reveal-tc"
from labkit.kernels.tensorcore import error_vs_k
errs = error_vs_k([16, 4096])
for label, g in errs.growth.items():
    print(f"{label:40s} error x{g:.2g} from K=16 to K=4096")
reveal("4.tc", errs.fastest_growing);

# %% [markdown] id="cell-044"
# With FP32 accumulation the error stays at the input rounding (about the unit roundoff of
# FP16 or BF16) however long the sum; with FP16 accumulation it grows with K, because each
# addition rounds to 11 bits. BF16 has FP32's exponent range (no overflow, no loss scaling)
# but fewer mantissa bits than FP16, so its rounding error is larger. To use Tensor Cores a
# kernel needs inputs in a supported type. Shapes are no longer a condition: since cuBLAS 11.0
# (and cuDNN 7.6.3) the libraries use Tensor Cores for any matrix size; dimensions that are
# multiples of 16 bytes (8 FP16 values; 128 bytes on A100) only make them *faster*
# (NVIDIA, *Matrix Multiplication Background User's Guide*, "Tensor Core Requirements").
#
# ## Programmer's view: pitfalls
#
# * **A missing guard** writes past the end of an array. On a GPU that corrupts memory
#   silently or crashes later; the tracer raises `OutOfBounds` naming the thread.
# * **`threadIdx.x` on the slow index** makes every warp access uncoalesced: same result,
#   several times the memory traffic.
# * **A missing `syncthreads`** between writing and reading shared memory is a race, and so
#   is warp-synchronous code without `cuda.syncwarp()`: since Volta a warp's lanes are
#   scheduled independently, and the CUDA C++ Programming Guide (Compute Capability 7.x,
#   Independent Thread Scheduling) asks for `__syncwarp()` "between steps where data is
#   exchanged between threads via global or shared memory". labkit's tracer reports every
#   such race deterministically (`labkit.kernels.analysis.races(trace)`: the element, both
#   threads, what each did and both source lines), instead of leaving it to surface as
#   wrong numbers now and then. A barrier inside a branch that some threads skip can hang
#   or is undefined; the tracer raises `Deadlock` naming the barriers.
# * **Reading shared or local memory before writing it** reads whatever the memory held:
#   CUDA does not initialise it (the *CUDA C++ Programming Guide* does not even let a
#   `__shared__` variable's declaration give it a value). Lanes past the end
#   of the data must store their padding (a 0 for a sum) themselves; the tracer starts
#   shared and local arrays at NaN (floats) or a large integer, so a kernel that forgets
#   gives a visibly wrong answer.
# * **Shared arrays with a power-of-two row length** read by column give 32-way conflicts:
#   pad the row (`[32][33]`).
# * **Tiny launches** (a few blocks) leave most SMs idle: an H100 needs thousands of warps.
#
# ## Summary
#
# * A GPU trades single-thread speed for many simple lanes and high bandwidth; the ridge
#   point says how much work per byte a kernel needs to use them.
# * Threads → warps (32) → blocks → grid; index with `blockIdx * blockDim + threadIdx` and
#   guard the edges.
# * A warp runs one instruction for all lanes; divergent branches run one after another.
# * Consecutive lanes should touch consecutive addresses (coalescing) and different
#   shared-memory banks.
# * Occupancy is the minimum over warps, blocks, registers and shared memory per SM.
# * Tensor Cores multiply low-precision inputs exactly and accumulate in FP32.
#
# ## Exercises

# %% [markdown] id="seed-ex3"
# **1 (seed exercise 3).** Describe the GPU memory hierarchy and explain the characteristics
# and uses of each kind of memory.
#
# ### BEGIN SOLUTION
# *Registers*: private to a thread, fastest (no visible latency), 64 K 32-bit registers per
# SM (section 4); hold a thread's scalars and register-blocked accumulators. Using more per
# thread lowers occupancy (section 6); too many spill to local memory. *Local memory*:
# per-thread, but physically in device memory (cached in L1/L2); where spills, large
# per-thread arrays and arrays indexed at run time go — as slow as global memory, and
# coalesced only because consecutive 32-bit words of it belong to consecutive threads
# (CUDA C++ Programming Guide, "Device Memory Accesses", Local Memory). labkit's tracer
# counts it as memory traffic in that layout, except arrays indexed only by compile-time
# constants, which the compiler keeps in registers. *Shared memory*: on-chip, per block, tens to hundreds of KB per SM
# (section 4), carved out of the same storage as L1; latency tens of cycles, 32 banks;
# software-managed cache for tiles reused by a block (tiled matmul, stencils, reductions),
# and the only way threads of a block exchange data. *L1 / L2 caches*: hardware-managed; L1
# per SM, L2 shared by all SMs (tens of MB) and the point of coherence for
# atomics. *Global memory (HBM)*: off-chip, all threads and the host, tens of GB, TB/s of
# bandwidth (section 4) but hundreds of cycles latency; accessed in 32-byte sectors, so accesses must be coalesced.
# *Constant memory*: small, read-only, cached and broadcast when all lanes read the same
# address (kernel parameters, small tables). The rule: keep data as close to the ALUs as
# possible and reuse it there before going back to HBM.
# ### END SOLUTION

# %% [markdown] id="seed-ex6"
# **2 (seed exercise 6).** Explain how Tensor Cores work and what conditions must be met to
# use them.
#
# ### BEGIN SOLUTION
# A Tensor Core executes a small matrix multiply-accumulate `D = A·B + C` per instruction,
# cooperatively for a warp (Volta: a 4×4×4 FMA per core per clock; Ampere and Hopper larger
# tiles, and Hopper's `wgmma` works on a warpgroup of 4 warps). It reaches its throughput by
# doing many multiplications per instruction in low precision: A and B are FP16, BF16, TF32,
# INT8 or (Hopper) FP8; the products are exact and are accumulated in FP32 (or FP16/INT32).
# Conditions: (1) a supported input type — FP32 data must be converted (mixed precision,
# `torch.autocast`) or use TF32 mode; (2) shapes are *not* a condition any more: before
# cuBLAS 11.0 / cuDNN 7.6.3 the dimensions had to be multiples of 8 (FP16) or 16 (INT8);
# since then Tensor Cores run any shape, and aligned dimensions (multiples of 16 bytes, 128
# bytes on A100) only run faster (NVIDIA, *Matrix Multiplication Background User's Guide*); (3) aligned memory and suitable layouts (the libraries handle this; a
# hand-written kernel uses `wmma`/`mma` instructions and stages tiles through shared memory);
# (4) enough work to fill the units — tiny or memory-bound operations gain nothing. The
# numerics are those of the emulation above: the error is set by the input rounding and stays
# flat in K thanks to FP32 accumulation; FP16 inputs need loss scaling in training because of
# their narrow exponent range, BF16 does not.
# ### END SOLUTION

# %% [markdown] id="ex-trees"
# **3.** Chapter 05 writes the tree reduction three ways: *interleaved* (`if t % (2s) == 0:
# buf[t] += buf[t + s]`), *strided* (thread `t` adds `buf[2st + s]` into `buf[2st]`) and
# *sequential* (`if t < s: buf[t] += buf[t + s]`, `s` halving). Before reading chapter 05,
# predict from sections 3 and 5 which of the three diverge and which cause bank conflicts,
# then check with the cell below.
#
# ### BEGIN SOLUTION
# *Interleaved* diverges: the active lanes `t = 0, 2s, 4s, …` are scattered over every warp,
# so each warp runs with a sparse mask (SIMT efficiency about 25 % at 256 threads). It has
# **no** bank conflicts: a warp's active lanes read words `2s` apart, but only `32 / 2s` of
# them are active, so they land in different banks. *Strided* keeps the active threads
# contiguous (no divergence) but its lanes read words `2s` apart *all* active together:
# `2s`-way conflicts, up to 8-way at 256 threads. *Sequential* is contiguous in both
# threads and words: no divergence beyond the last warp, no conflicts. So the well-posed
# answer is: interleaved diverges, strided conflicts, sequential does neither.
# ### END SOLUTION

# %% id="ex-trees-measure"
x = rng.standard_normal(256).astype(np.float32)
for variant in variants(REDUCTION, shared_tree=True):     # the three shared-memory trees
    s = summarize(ops.reduce_sum(x, variant=variant, block=256).trace)
    print(f"{variant:11s}: {s.max_conflict_ways}-way bank conflicts, "
          f"SIMT efficiency {s.simt_efficiency:.0%}")
