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
# # 00 · Start here
#
# Welcome to **Deep Learning Systems: from algorithms to hardware** (深度学习系统).
# A deep-learning model is only the top of a tall stack: a framework turns your Python into a
# computation graph（计算图）, a runtime schedules kernels（核函数）onto a GPU, an allocator
# hands out memory, and collectives move gradients between machines. In this course you build
# small, honest versions of each layer, take them apart, and measure them.
#
# **How the notebooks work**
#
# * Read, run each cell (`Shift+Enter`), and move the widgets: every number and figure is
#   computed by the course package `labkit` on this machine — none is typed in.
# * Exercises have a cell for your code and a *check cell* right below it. The check prints a
#   verdict with a hint. If your answer is not right yet, the notebook carries on with labkit's
#   reference, so you can always run to the end.
# * Your instructor grades the finished notebooks with the same checks (see the end of this
#   notebook).
#
# ### Objectives
# 1. Know what the course covers and where each topic lives.
# 2. See what this machine is: versions, CPU cores and the CUDA device (a real GPU, or Numba's
#    CUDA simulator（模拟器）).
# 3. Use a widget, launch a first CUDA kernel, pass a first check.

# %% id="cell-001"
import numpy as np
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

import labkit
from labkit.check import check, evaluate, predict, reveal
from labkit.course import chapter_map, seed_coverage_map
from labkit.env import report

# %% [markdown] id="cell-002"
# ## The chapter map
#
# Each chapter is a notebook. Those still in preparation are listed without a link.

# %% id="cell-003"
display(Markdown(chapter_map()))

# %% [markdown] id="seed-map-md"
# ### Where the source material is taught
#
# The course is built from three source documents (the *seeds*, in Chinese): the first chapter
# of a book on deep-learning systems (seed 000, with ten exercises, two experiments and three
# code examples), a survey of system-level optimizations (seed 002) and a framework guide
# (seed 004). The table says which notebook cell teaches each of their items; it is generated
# from `labkit.course.SEED_COVERAGE`, which a test keeps pointing at real cells.

# %% id="seed-map"
display(Markdown(seed_coverage_map()))

# %% [markdown] id="cell-004"
# ## Your machine
#
# One call reports the software versions and the device. Without a GPU, labkit selects Numba's
# CUDA simulator before numba is imported, so every kernel in this course still runs — on the
# CPU, one operating-system thread per GPU thread, and therefore slowly. On a real GPU the same
# notebooks use the GPU and larger sizes.

# %% id="cell-005"
env = report()
env

# %% id="cell-006"
print("CUDA backend:", labkit.CUDA_BACKEND)
print("CPU cores   :", env.cpu_count)

# %% [markdown] id="cell-007"
# ## A first widget: Amdahl's law
#
# Systems work is mostly about *where time goes*. Amdahl's law（阿姆达尔定律）says that if a
# fraction $p$ of a job can be spread over $n$ workers and the rest cannot, the speedup is
#
# $$S(n) = \frac{1}{(1-p) + p/n}, \qquad \lim_{n\to\infty} S(n) = \frac{1}{1-p}.$$
#
# Predict first: with $p = 0.95$, what speedup can infinitely many workers reach? Then move
# the slider and watch the ceiling: even a small serial share caps what a thousand workers can
# do (the cell after the widget prints a few cases). This is why later chapters chase the
# serial parts — data loading, synchronization, communication.

# %% id="amdahl-predict"
### BEGIN SOLUTION
guess = 20
### END SOLUTION
predict("0.amdahl", guess, "the speedup ceiling for p = 0.95 as n grows without bound")

# %% id="cell-008" tags=["browser-test"]
from labkit.perf import widgets as perf_widgets

perf_widgets.amdahl_widget(parallel_fraction=0.95, max_workers=1024)

# %% id="cell-009"
from labkit.perf import amdahl_curve, amdahl_speedup

for p in (0.5, 0.9, 0.95, 0.99):
    curve = amdahl_curve(p, 1024)
    print(f"p = {p:4.2f}: S(8) = {amdahl_speedup(p, 8):5.2f}, "
          f"S(1024) = {curve.speedup[-1]:6.2f}, ceiling = {curve.ceiling:6.1f}")
reveal("0.amdahl", round(float(amdahl_speedup(0.95, 10**9)), 2))

# %% [markdown] id="gustafson-md"
# **Amdahl assumes a fixed job.** Amdahl's law is *strong scaling*: the same problem, split
# over more workers. Data-parallel training is usually run the other way: each GPU keeps its
# own batch, so $n$ GPUs process $n$ times the samples per step in about the same time — the
# job grows with the machine. That is *weak scaling*, and its law is Gustafson's (J. L.
# Gustafson, "Reevaluating Amdahl's law", *Communications of the ACM* 31(5), 1988): if a
# fraction $s$ of the time *on the $n$-worker machine* is serial, the scaled speedup is
#
# $$S_{\text{scaled}}(n) = s + (1 - s)\,n,$$
#
# which keeps growing with $n$ instead of stopping at $1/s$. Chapter 09 measures exactly this:
# throughput of data-parallel training against the number of workers, with the per-worker batch
# fixed; what eats the speedup there is the communication that grows with the model, not a
# fixed serial share. Amdahl's ceiling returns when the *global* batch is fixed and split ever
# thinner (strong scaling), and when, as in chapter 09, the gradient exchange does not shrink as
# workers are added.

# %% id="gustafson"
from labkit.perf import gustafson_speedup

for s in (0.05, 0.01):
    print(f"serial share {s:.2f}: Amdahl S(1024) = {amdahl_speedup(1 - s, 1024):6.1f}   "
          f"Gustafson S_scaled(1024) = {gustafson_speedup(s, 1024):7.1f}")

# %% [markdown] id="cell-010"
# ## A first CUDA kernel
#
# A GPU runs one function, the *kernel*, on many threads at once. Threads are grouped in
# *blocks*（线程块）and blocks in a *grid*（网格）. Each thread computes its global index from
# its block's index and its own index inside the block, and handles one element. Here is the
# whole of a vector addition. In labkit a kernel is written as a function of `cuda` that
# returns the kernel body, so the same source runs under labkit's tracer (chapter 04) and
# compiled by `numba.cuda`:

# %% id="cell-011"
import inspect
from labkit.kernels import run_numba, vector_add

print(inspect.getsource(vector_add))


# %% [markdown] id="cell-012"
# ### Exercise 0.1 — how many blocks?
#
# To launch the kernel on `n` elements with `threads_per_block` threads in each block we need
# enough blocks to give every element a thread. Write `blocks_needed(n, threads_per_block)`;
# it must return an `int`. (That is why the kernel has `if i < out.size`: the last block
# may have threads with nothing to do.)

# %% id="cell-013"
def blocks_needed(n, threads_per_block):
    ### BEGIN SOLUTION
    return (n + threads_per_block - 1) // threads_per_block
    ### END SOLUTION


# %% labkit={"exercise": "0.1"} tags=["check"]
check("0.1", blocks_needed)

# %% [markdown] id="cell-015"
# Now launch it. `run_numba` compiles the kernel with `numba.cuda.jit`, copies the
# arrays to the device, launches `blocks × threads` threads, and copies the result back.

# %% id="cell-016"
rng = np.random.default_rng(0)
n, threads = 300, 128
a = rng.standard_normal(n).astype(np.float32)
b = rng.standard_normal(n).astype(np.float32)
out = np.zeros(n, dtype=np.float32)

blocks = blocks_needed(n, threads)
run_numba(vector_add, blocks, threads, a, b, out)
print(f"launched {blocks} blocks x {threads} threads = {blocks * threads} threads "
      f"for {n} elements on: {env.device}")
print("matches numpy:", np.array_equal(out, a + b))

# %% [markdown] id="cell-017"
# ## How checks and grading work
#
# A check cell calls `check("0.1", answer)`. You can also ask for a verdict without printing
# it — here is what a classic off-by-one answer gets:

# %% id="cell-018"
rounded_down = lambda n, t: n // t
verdict = evaluate("0.1", rounded_down)
print(verdict.status, "-", verdict.message)

# %% [markdown] id="cell-019"
# While you learn, checks never stop the notebook. Your instructor grades with
#
# ```bash
# make grade SUBMISSIONS=submissions     # or: labkit-grade submissions --out grades
# ```
#
# which, for each learner's notebook, restores the original check cells (editing a check cannot
# make it pass), runs the notebook in its own process with a time limit and `LABKIT_GRADE=1`
# (now a wrong or missing answer makes its check cell fail), and writes a table of
# learners × exercises to `grades/grades.csv` and `grades/grades.md`.
#
# ## Summary
#
# * The course walks the stack from autograd to clusters; every number comes from `labkit`.
# * Amdahl's law bounds strong scaling (a fixed job); data parallelism with a fixed per-GPU
#   batch is weak scaling, described by Gustafson's law.
# * This machine's device is reported above; without a GPU, kernels run on Numba's simulator.
# * A kernel runs on a grid of blocks of threads: ⌈n / t⌉ blocks cover n elements, and a guard
#   keeps the spare threads of the last block idle.
# * Checks help while you learn and grade when you are done.
#
# Next: chapter 01 follows one training step down the stack, from your Python to the
# hardware, and measures what each layer adds.
