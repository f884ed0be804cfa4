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
# # Chapter 01 — The deep learning systems stack
#
# A training step is one line of Python, `loss.backward()`, and a few hundred operations on
# silicon. This chapter follows one step of the seed's `SimpleNet` from your Python down to
# the hardware and measures what each layer of the stack adds — with code you write: the
# rules that charge a profiler's rows to the layers, the reader of this process's memory,
# the busy time of the kernels, and the model of a host issuing work to an asynchronous
# GPU — then places the step on the roofline of this machine and of three data-center GPUs.
#
# **Objectives.** After this chapter you can
#
# * name the six layers of the deep learning stack — 深度学习技术栈（Deep Learning Stack）— and
#   say which one a `torch.profiler` row belongs to and which one its time is charged to;
# * count the FLOPs of a training step and compare them with the time the step takes;
# * measure a machine's roofline — 屋顶线模型（Roofline Model）— and decide whether a kernel is
#   memory-bound or compute-bound;
# * explain with Little's law why GPUs keep tens of thousands of threads in flight;
# * run seed experiment 1 (CPU vs GPU training) honestly: measure what is here, predict what
#   is not, label which is which, and tell utilisation (busy time) from MFU.
#
# **Guiding questions** (seed 000, §1.3). What transformations does a training step go
# through from user code to hardware, and which component does each? Why did GPUs become
# the accelerator of deep learning? What share of a step is arithmetic at all?

# %% id="cell-001"
import re

import numpy as np
import torch
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from labkit.check import check, predict, reveal
from labkit.hardware import GPUS, datasheet, measure_machine
from labkit.perf import stack, widgets
from labkit.perf.ops import count_ops
from labkit.perf.stack import ALLOC_OPS, COMPUTE_OPS, CONV_OPS, MATMUL_OPS

# %% [markdown] id="cell-002"
# ## 1. Six layers
#
# | layer | here (CPU) | on a GPU | what it adds |
# |---|---|---|---|
# | application — 应用层 | your script | your script | the model, the loss, the loop |
# | framework — 框架（Framework） | PyTorch: `nn.Module`, the ATen dispatcher, autograd | same | operators — 算子（Operator）— and the computation graph — 计算图（Computation Graph）— autograd records for backward |
# | compiler / graph — 编译器（Compiler） | absent in eager mode | absent in eager mode | `torch.compile`, XLA, TVM: capture the graph, fuse operators (chapters 02, 08, 12) |
# | runtime — 运行时（Runtime） | the CPU allocator, thread pool | CUDA runtime: launches, copies, streams, the caching allocator | scheduling and memory |
# | kernel libraries — 内核库（Kernel Library） | oneDNN, MKL/OpenBLAS, ATen's CPU kernels | cuBLAS, cuDNN, ATen's CUDA kernels, Triton | the arithmetic, tuned per chip |
# | hardware — 硬件 | CPU cores, caches, DRAM | SMs, Tensor Cores, HBM | peak FLOP/s and bytes/s |
#
# The seed lists a hardware-abstraction layer (CUDA driver, ROCm) between runtime and
# hardware; in a profile its calls show up with the runtime's, so we count them there.
#
# ### Seed example 1: look at the computation graph
#
# The seed's `SimpleNet` (`labkit.perf.stack.simple_net` is exactly it) and its autograd
# graph. `grad_fn` is the node autograd recorded for backward.

# %% id="seed-ex1"
model = stack.simple_net(seed=0)
x = torch.randn(5, 10, requires_grad=True, generator=torch.Generator().manual_seed(0))
output = model(x)
loss = output.sum()
print("output's gradient function:", type(output.grad_fn).__name__)
print("loss's gradient function:  ", type(loss.grad_fn).__name__)
loss.backward()
print("input gradient shape:", tuple(x.grad.shape))
print("fc1 weight gradient shape:", tuple(model.fc1.weight.grad.shape))

# %% [markdown] id="cell-004"
# ## 2. One training step, followed down the stack
#
# `stack.simplenet_step` is seed example 1 plus an SGD update: zero the gradients, forward,
# `output.sum()`, backward, step, with `record_function` ranges naming the phases.
# `stack.profile_step` runs it under `torch.profiler`, keeps 10 steps after two warm-up steps
# inside the profiler, and gives each step's rows as a tree. Each row has a *self* time —
# its time less its children's — and you will charge those to the layers.
#
# We pin PyTorch to one thread here: on 2 cores shared with other jobs, a second intra-op
# thread waiting for a busy core makes tiny matmuls 20× slower (chapter 12 measures that
# noise).
#
# **Predict first.** What share of the step's time is arithmetic (the kernel libraries row)?

# %% id="cell-005"
### BEGIN SOLUTION
guess = 0.2
### END SOLUTION
predict("1.kernel_share", guess, "share of a SimpleNet step spent in kernel libraries (0-1)")

# %% id="cell-006"
torch.set_num_threads(1)
step = stack.simplenet_step(stack.simple_net(seed=0), batch=5)
prof = stack.profile_step(step, steps=10, unprofiled=False)
print("one step, Python call → ATen ops (first three levels):")
print(prof.tree)


# %% [markdown] id="cell-012"
# ### Exercise 1.1 — which layer does a profiler row belong to?
#
# The tree labels each row with its layer. On a GPU the same step's trace has rows from
# every layer. Write `which_layer(name)` returning one of `"application"`, `"framework"`,
# `"compiler/graph"`, `"runtime"`, `"kernel libraries"` by these rules (first match wins):
#
# 1. a region run by torch.compile (`Torch-Compiled Region…`, `CompiledFunction`,
#    names containing `TorchDynamo` or `Inductor`) → compiler/graph;
# 2. CUDA runtime or driver API calls — names starting `cuda` or `cu` followed by a capital
#    letter (`cudaLaunchKernel`, `cuLaunchKernel`) → runtime;
# 3. work on the device: kernel names (`ampere_sgemm_…`, `sm90_…`, `void …`, `triton_…`,
#    `cutlass…`) and copies (`Memcpy HtoD …`) → kernel libraries;
# 4. ATen operators (`aten::…`), autograd (`autograd::…`, `torch::autograd…`,
#    `…Backward0`), optimizers (`Optimizer.…`) → framework;
# 5. anything else (your `record_function` ranges) → application.

# %% id="cell-013"
def which_layer(name):
    ### BEGIN SOLUTION
    if re.search(r"Torch-Compiled Region|CompiledFunction|TorchDynamo|Inductor", name):
        return "compiler/graph"
    if re.match(r"(cuda|cu)[A-Z]", name):
        return "runtime"
    if re.match(r"(void |Memcpy|ampere_|sm\d+_|triton_|cutlass)", name):
        return "kernel libraries"
    if re.match(r"(aten::|autograd::|torch::autograd|Optimizer\.)", name) or \
            re.match(r"\w+Backward\d*$", name):
        return "framework"
    return "application"
    ### END SOLUTION


# %% labkit={"exercise": "1.1"} tags=["check"]
check("1.1", which_layer)


# %% [markdown] id="charge-md"
# ### Exercise 1.2 — who spends a row's self time
#
# A row's name says which layer *issued* it; its self time says who *spent* it, and the two
# differ in two places. An allocation operator (`ALLOC_OPS`: `aten::empty`, …) is the
# runtime's work. And on a CPU an ATen compute operator (`COMPUTE_OPS`: `aten::addmm`,
# `aten::relu`, …) runs its kernel — oneDNN, MKL, ATen's CPU loops — inside its own body,
# with no row of its own, so its self time is the kernel libraries'; on a GPU the kernel is
# a separate row on the device and the operator stays framework. That is why the tree above
# shows `aten::addmm  [framework → kernel libraries]`.
#
# Write `charge_of(name, on_cpu)`: `which_layer(name)`, then those two rules.

# %% id="lab-charge-of"
def charge_of(name, on_cpu=True):
    ### BEGIN SOLUTION
    layer = which_layer(name)
    if layer != "framework":            # the two rules are about framework operators only
        return layer
    if name in ALLOC_OPS:
        return "runtime"
    if on_cpu and name in COMPUTE_OPS:
        return "kernel libraries"
    return layer
    ### END SOLUTION


# %% labkit={"exercise": "1.2"} tags=["check"]
check("1.2", charge_of)


# %% [markdown] id="charge-layers-md"
# ### Exercise 1.3 — charge a step's rows to the layers
#
# Write `charge_layers(rows, on_cpu)`: `rows` are one step's rows as plain trees —
# `{"name", "self_s", "start_s", "end_s", "children": [...]}` — and the result a dict of
# layer → seconds: every row's `self_s`, in the whole tree, charged to
# `charge_of(name, on_cpu)`. Never add a row's whole time (`end_s − start_s`): it holds its
# children's, which you charge when you reach them. `profile_step` then charges each
# profiled step with your function.

# %% id="lab-charge"
def charge_layers(rows, on_cpu=True):
    ### BEGIN SOLUTION
    out = {}
    todo = list(rows)
    while todo:
        row = todo.pop()
        layer = charge_of(row["name"], on_cpu)
        out[layer] = out.get(layer, 0.0) + row["self_s"]
        todo.extend(row["children"])
    return out
    ### END SOLUTION


# %% labkit={"exercise": "1.3"} tags=["check"]
check("1.3", charge_layers)

# %% [markdown] id="table-md"
# Now the step, charged by your function. Time outside every row is Python between
# operators: the application's. The profiler records every row it shows, and that costs
# time too — it lands mostly *between* rows, in the application's share. So `profile_step`
# also times the step without the profiler (labkit's `benchmark`, the harness you write in
# chapter 12) and shows the difference as its own row: it is part of the rows above it, not
# added to them.

# %% id="cell-007"
# NBVAL_IGNORE_OUTPUT
prof = stack.profile_step(step, steps=10, charge=charge_layers)
counts = count_ops(step)
roof_here = measure_machine(threads=1)
rows = stack.layer_table(prof, counts.flops, roof_here.peak)
display(Markdown(stack.format_layer_table(rows)))
print(f"profiled step {prof.wall_s / prof.steps * 1e6:.0f} µs, the same step unprofiled "
      f"{prof.plain_s * 1e6:.0f} µs (medians)")
reveal("1.kernel_share", round(stack.layer_share(rows, "kernel libraries"), 2))


# %% [markdown] id="cell-008"
# Read the table from the top. The step does about 17.7 thousand FLOPs — 16,500 in matmuls —
# which this machine's measured peak would finish in well under a microsecond (the hardware
# row). The step takes hundreds of microseconds. Almost all of it is the framework and
# Python: dispatching a dozen ATen operators, recording and walking the autograd graph, the
# optimizer's loop over parameters — and, while we look, the profiler itself, a large
# fraction of a step this small. On a GPU this gets worse, not better: every operator also
# costs a kernel launch (a `cudaLaunchKernel` row in the runtime layer) of a few
# microseconds, while the arithmetic shrinks further. Profiled on an H200 in this project,
# the same step issued 14 `cudaLaunchKernel` calls costing about 150 µs of host time per step
# (runtime), the kernels ran for about 200 µs of device time (kernel libraries), and the step
# took about 1.4 ms — the rest was Python and the framework, as here. A model this small is
# *overhead-bound*: neither FLOPs nor bytes decide its speed, the stack does. Batching more
# samples per step, fusing operators (a compiler's job) and CUDA graphs are the cures, in
# later chapters.
#
# ### Exercise 1.4 — the FLOPs of a training step
#
# Write `step_flops(batch, d_in, hidden, d_out, input_requires_grad)`: the matmul FLOPs of
# one training step of `Linear(d_in, hidden) → ReLU → Linear(hidden, d_out)` as PyTorch's flop
# counter counts them (2·m·n·k per matmul; bias adds and ReLU not counted). Backward needs,
# per layer, the gradient of the weights and the gradient of the layer's input — except the
# first layer's input gradient, which is computed only if the input requires grad.

# %% id="cell-009"
def step_flops(batch, d_in, hidden, d_out, input_requires_grad):
    ### BEGIN SOLUTION
    l1 = 2 * batch * d_in * hidden
    l2 = 2 * batch * hidden * d_out
    return 3 * l1 + 3 * l2 - (0 if input_requires_grad else l1)
    ### END SOLUTION


# %% labkit={"exercise": "1.4"} tags=["check"]
check("1.4", step_flops)

# %% id="cell-011"
print("step_flops(5, 10, 50, 1, True):", step_flops(5, 10, 50, 1, True),
      "| counted by the dispatcher:", counts.matmul_flops)


# %% [markdown] id="cell-015"
# ## 3. Seed examples 2 and 3 on the devices there are
#
# Seed example 2 asks the CUDA caching allocator how much memory it holds. Without a GPU
# there is no caching allocator to ask (chapter 06 simulates one): PyTorch's CPU allocator
# takes memory from the C library, which takes it from the kernel. What the kernel gives is
# visible in `/proc/self/status` (Linux; proc_pid_status(5)): `VmRSS` is the resident set —
# the pages of this process in memory now — and `VmHWM` its peak, each as `Name:  value kB`.
#
# ### Exercise 1.5 — read this process's memory
#
# Write `status_bytes(text)`: from the text of a `/proc/<pid>/status` file, a dict of every
# `Name:  value kB` line's name to its size in bytes (Linux's kB are 1024 bytes: the kernel
# shifts page counts by PAGE_SHIFT − 10, `fs/proc/task_mmu.c`). Skip lines of other forms
# (`Threads:  3`, `Name:  python`).

# %% id="lab-status"
def status_bytes(text):
    ### BEGIN SOLUTION
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[name.strip()] = int(parts[0]) * 1024
    return out
    ### END SOLUTION


# %% labkit={"exercise": "1.5"} tags=["check"]
check("1.5", status_bytes)

# %% [markdown] id="seed-ex2-md"
# Seed example 2 on this machine, with your reader: the process's memory now, then through
# one Adam training step of a 3072-wide MLP, phase by phase, beside what each phase's new
# tensors take. Each weight matrix is 36 MiB, above glibc's largest mmap threshold (32 MiB,
# mallopt(3)), so the C library maps it straight from the kernel and gives it back when it
# is freed: the resident set follows the tensors.

# %% id="seed-ex2"
# NBVAL_IGNORE_OUTPUT
print(stack.memory_report(parse=status_bytes))
display(Markdown(stack.format_memory_phases(stack.memory_through_step(parse=status_bytes))))

# %% [markdown] id="cell-017"
# The parameters, the gradients (one per parameter, made by backward) and Adam's two state
# tensors per parameter (made by its first step) appear in the resident set as the
# tensors are made, and `zero_grad()` (which sets the gradients to None) hands theirs back.
# The forward pass grows it by more than the activations autograd saves: the temporaries
# of each operator and the C library's own bookkeeping, which keeps small blocks for reuse
# (the same idea as the CUDA caching allocator's, chapter 06). The resident set is the
# kernel's view: it counts what the process touched, not what tensors hold — which is why
# the seed asks the GPU's caching allocator instead, and why chapter 06 simulates one.
#
# Seed example 3 wraps a model in `nn.DataParallel`. `stack.seed_example3` runs the seed's
# loop on the devices there are. With no GPU `DataParallel` has no device ids and simply
# calls the wrapped module: the loop trains, on one CPU, with no parallelism at all
# (`stack.seed_example3` uses `.to(device)` where the seed calls `.cuda()`, which fails
# without a GPU). On k
# GPUs, every step `DataParallel` scatters the batch from GPU 0, **replicates the model to
# every GPU again**, runs the replicas in Python threads (which share the GIL), gathers
# the outputs on GPU 0 and reduces the gradients there. PyTorch's documentation says to "use nn.parallel.DistributedDataParallel
# instead of multiprocessing or nn.DataParallel" (CUDA semantics, best practices) and that DDP
# "is proven to be significantly faster than torch.nn.DataParallel for single-node multi-GPU
# data parallel training" (the `DistributedDataParallel` page): one
# process per GPU, no replication per step, no GIL, and gradients all-reduced in buckets that
# overlap with backward (Li et al., "PyTorch Distributed", VLDB 2020). Chapter 09
# ([09_data_parallel.ipynb](09_data_parallel.ipynb)) builds the all-reduce and measures DP
# against DDP (seed experiment 2).

# %% id="seed-ex3"
losses, device_ids = stack.seed_example3(epochs=3, seed=0)
print("DataParallel device ids:", device_ids or "none (CPU: the module is called directly)")
for epoch, l in enumerate(losses, 1):
    print(f"Epoch {epoch}, loss {l:.4f}")

# %% [markdown] id="cell-019"
# ## 4. The roofline of this machine
#
# A kernel that does F FLOPs and moves Q bytes between memory and the chip has arithmetic
# intensity — 算术强度（Arithmetic Intensity）— I = F / Q and runs at most at
# min(peak, I × bandwidth) (Williams, Waterman & Patterson, *CACM* 2009). `measure_machine()`
# measures both roofs here: the peak as the best float32 FLOP/s of a 1024×1024 matmul on the
# threads it is given — one here, the thread count of every measurement in this chapter, and
# the name says so — the bandwidth as the STREAM triad on 64 MiB arrays (McCalpin 1995). The
# GPUs come from their data sheets (`labkit.hardware`). The numbers here move with the load
# on the machine.

# %% id="cell-020"
# NBVAL_IGNORE_OUTPUT
roofs = [roof_here] + [datasheet(k, "fp32") for k in ("A100", "H100", "H200")]
print(stack.format_rooflines(roofs))


# %% [markdown] id="cell-021"
# ### Exercise 1.6 — the ridge point
#
# Write `ridge_point(peak, bandwidth)`: the intensity in FLOP/byte where the memory roof meets
# the compute roof.

# %% id="cell-022"
def ridge_point(peak, bandwidth):
    ### BEGIN SOLUTION
    return peak / bandwidth
    ### END SOLUTION


# %% labkit={"exercise": "1.6"} tags=["check"]
check("1.6", ridge_point)

# %% [markdown] id="cell-024"
# **Predict.** The SimpleNet step moves about 24.5 kB and does about 17.7 kFLOP. On the
# H100's fp32 roofline, is it memory-bound or compute-bound? Then move the batch slider: does
# a batch of 4096 cross the ridge?

# %% id="cell-025"
### BEGIN SOLUTION
guess = "memory-bound"
### END SOLUTION
predict("1.simplenet_bound", guess, "SimpleNet step on the H100 (fp32)",
        choices=["memory-bound", "compute-bound"])

# %% id="cell-026" tags=["browser-test"]
widgets.roofline_widget(roof_here)

# %% id="cell-027"
c5 = stack.simplenet_counts(5)
reveal("1.simplenet_bound", datasheet("H100").bound(c5.intensity))


# %% [markdown] id="cell-028"
# The intensity of this step stays near 1 FLOP/byte whatever the batch: each weight is used
# once per sample, each activation once per layer, and with 10, 50 and 1 features nothing is
# reused long enough. It is memory-bound everywhere — and, as section 2 showed, overhead-bound
# before that. Wide layers (chapter 05's matmuls) climb to the right.
#
# ### Exercise 1.7 — a roofline bound
#
# Write `roofline_bound(peak, bandwidth, flops, nbytes)` returning
# `(least time in seconds, "memory-bound" or "compute-bound")`.

# %% id="cell-029"
def roofline_bound(peak, bandwidth, flops, nbytes):
    ### BEGIN SOLUTION
    t = max(flops / peak, nbytes / bandwidth)
    kind = "memory-bound" if flops / nbytes < peak / bandwidth else "compute-bound"
    return t, kind
    ### END SOLUTION


# %% labkit={"exercise": "1.7"} tags=["check"]
check("1.7", roofline_bound)

# %% [markdown] id="cell-031"
# ## 5. Little's law and latency hiding
#
# Little's law (Little, *Operations Research* 1961): the number of requests in a system
# equals their arrival rate times the time each spends there, L = λ·W. For memory: to keep
# a bandwidth of B bytes/s when every load takes a latency of W seconds, **W × B bytes must
# be on their way at every moment** — 延迟隐藏（Latency Hiding）is the art of having them on
# their way. An H100 SXM streams 3.35 TB/s from HBM (`GPUS["H100"].hbm_bandwidth`); a load
# that misses the caches takes on the order of 500 ns on Hopper (hundreds of cycles; Luo et
# al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", arXiv:2402.13499,
# measure the latency of each level). A CPU core waits for one load with the whole core; a
# GPU instead switches between warps every cycle, so it needs *independent* loads in flight:

# %% id="cell-032"
latency = 500e-9          # seconds: the order of an HBM load on Hopper (see the text)
print(stack.format_in_flight(stack.in_flight(latency, "H100", bytes_per_load=4)))


# %% [markdown] id="cell-033"
# About 1.7 MB must be in flight: some 419,000 four-byte loads, 3,200 per SM — more than the
# 2,048 threads an H100 SM can hold (CUDA C++ Programming Guide, compute capability 9.0
# limits). So a kernel needs *both* tens of thousands of threads resident (occupancy) *and*
# several independent loads per thread, or 16-byte vector loads: that is why chapter 04
# cares about occupancy and chapter 05 about wide loads. A CPU core with ~100 ns DRAM latency
# and ~20 GB/s needs only 2 kB in flight — a few dozen cache lines, which its out-of-order
# window and prefetchers provide.
#
# ### Exercise 1.8 — loads in flight
#
# Write `loads_in_flight(latency_s, bandwidth, bytes_per_load)`.

# %% id="cell-034"
def loads_in_flight(latency_s, bandwidth, bytes_per_load):
    ### BEGIN SOLUTION
    return latency_s * bandwidth / bytes_per_load
    ### END SOLUTION


# %% labkit={"exercise": "1.8"} tags=["check"]
check("1.8", loads_in_flight)


# %% [markdown] id="cell-036"
# ## 6. Seed experiment 1: CPU vs GPU training
#
# The seed asks for ResNet-18 on CIFAR-10, expects the GPU to be 10–50× faster, and asks
# three questions: is the GPU's utilisation — GPU 利用率 — near 100 %? What share of the time
# is the host→device copy? How does the batch size change things? We train a small CNN
# (`labkit.torch_models.small_cnn`: two conv layers, 3×32×32 inputs, 10 classes) on
# CIFAR-shaped synthetic data (`stack.cifar_like`: no download) at three batch sizes.
#
# **Two utilisations.** What `nvidia-smi` reports as GPU utilisation is *busy time*: "percent
# of time over the past sample period during which one or more kernels was executing on the
# GPU" (`nvidia-smi --help-query-gpu`, utilization.gpu). It says nothing about how much of
# the chip a kernel uses: one tiny kernel running all the time reads 100 %. **MFU** — model
# FLOPs utilisation — is the FLOP/s the model's arithmetic achieves over the peak (chapter
# 12). The table gives both.
#
# ### Exercise 1.9 — busy time
#
# Write `busy_time(intervals)`: the seconds covered by at least one of the `(start, end)`
# intervals — kernels that overlap, or rows nested in other rows, count once; gaps between
# them are idle. The intervals may come in any order.

# %% id="lab-busy"
def busy_time(intervals):
    ### BEGIN SOLUTION
    merged = []                       # disjoint [start, end] runs, in order
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)     # overlaps the last run: extend it
        else:
            merged.append([s, e])
    return sum((e - s for s, e in merged), 0.0)
    ### END SOLUTION


# %% labkit={"exercise": "1.9"} tags=["check"]
check("1.9", busy_time)


# %% [markdown] id="intervals-md"
# ### Exercise 1.10 — when did the kernels run?
#
# On a CPU the arithmetic runs inside the rows whose self time is the kernel libraries'.
# Write `kernel_intervals(rows, on_cpu)`: the `(start_s, end_s)` of every such row
# (`charge_of(name, on_cpu) == "kernel libraries"`), in the whole tree. Your `busy_time` of
# them is the CPU's busy time in the experiment below; on a GPU the profile's kernels give it.

# %% id="lab-intervals"
def kernel_intervals(rows, on_cpu=True):
    ### BEGIN SOLUTION
    out = []
    for row in rows:
        if charge_of(row["name"], on_cpu) == "kernel libraries":
            out.append((row["start_s"], row["end_s"]))
        out += kernel_intervals(row["children"], on_cpu)     # the rows inside this one
    return out
    ### END SOLUTION


# %% labkit={"exercise": "1.10"} tags=["check"]
check("1.10", kernel_intervals)


# %% [markdown] id="precision-md"
# ### Exercise 1.11 — the peak an op is held to
#
# MFU divides by a peak, and on a GPU the right peak depends on the op. On Ampere and later
# GPUs PyTorch runs fp32 convolutions on TF32 Tensor Cores by default
# (`torch.backends.cudnn.allow_tf32`, True by default), while fp32 matmuls stay FP32 unless
# `torch.backends.cuda.matmul.allow_tf32` is set (False by default since PyTorch 1.12);
# elementwise ops run at FP32 on the CUDA cores (PyTorch docs, "CUDA semantics:
# TensorFloat-32 (TF32) on Ampere (and later) devices"). A GPU without TF32 (a V100) lists no
# `"tf32"` peak. Write `op_precision(name, peaks, cudnn_tf32, matmul_tf32)` for an ATen op
# name without its `aten::` (`"convolution"`, `"mm"`, `"relu"`), the GPU's data-sheet
# `peaks` (precision → FLOP/s, e.g. `dict(GPUS["A100"].flops)`) and torch's two flags:
# `"tf32"` or `"fp32"`. Convolutions are `CONV_OPS`, matmuls `MATMUL_OPS`.

# %% id="lab-precision"
def op_precision(name, peaks, cudnn_tf32=True, matmul_tf32=False):
    ### BEGIN SOLUTION
    if "tf32" not in peaks:
        return "fp32"
    if name in CONV_OPS and cudnn_tf32:
        return "tf32"
    if name in MATMUL_OPS and matmul_tf32:
        return "tf32"
    return "fp32"
    ### END SOLUTION


# %% labkit={"exercise": "1.11"} tags=["check"]
check("1.11", op_precision)


# %% [markdown] id="pipeline-md"
# **A GPU that is not here.** Without a GPU the GPU rows are *predicted*, and the prediction
# must not be a roofline bound dressed as a result: on a GPU the host issues operators one
# after another — framework, Python, a launch each — while the device runs them in order,
# and for a small model the host is the bottleneck. The model: operator i costs the host
# `host_s[i]` and the device `device_s[i]` (its roofline time on the data sheet), and starts
# on the device once the host has issued it and the device has finished operator i − 1
# (PyTorch docs, "CUDA semantics: asynchronous execution").
#
# ### Exercise 1.12 — a step whose host and device overlap
#
# Write `pipeline_step(host_s, device_s)`: the step's seconds, when both are done.

# %% id="lab-pipeline"
def pipeline_step(host_s, device_s):
    ### BEGIN SOLUTION
    host_done = device_done = 0.0
    for h, d in zip(host_s, device_s):
        host_done += h
        device_done = max(device_done, host_done) + d
    return max(host_done, device_done)
    ### END SOLUTION


# %% labkit={"exercise": "1.12"} tags=["check"]
check("1.12", pipeline_step)


# %% [markdown] id="calibrate-md"
# ### Exercise 1.13 — calibrate the host time per operator
#
# The host's time per operator is not on any data sheet: measure it. An H200 ran this
# chapter's CNN step at batch 8 in this project (`stack.H200_MEASURED`), where its device is
# nearly idle and the step is host overhead. Write `calibrate_host(device_s, target_s)`:
# the host time h per operator for which `pipeline_step([h] * n, device_s)` (yours) equals
# `target_s`. The step grows with h, so bisect on [0, target_s]: sixty halvings reach float
# precision. The prediction below uses your h for every batch.

# %% id="lab-calibrate"
def calibrate_host(device_s, target_s):
    ### BEGIN SOLUTION
    lo, hi = 0.0, target_s
    for _ in range(60):
        mid = (lo + hi) / 2
        if pipeline_step([mid] * len(device_s), device_s) < target_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
    ### END SOLUTION


# %% labkit={"exercise": "1.13"} tags=["check"]
check("1.13", calibrate_host)

# %% [markdown] id="exp1-md"
# **The experiment.** The CPU rows are **measured** here with labkit's `benchmark` (a median
# step and its 95 % bootstrap interval), on one thread — stated in the table — and their MFU
# is against this machine's matmul peak measured on the same one thread. Their busy share is
# your `busy_time` of your `kernel_intervals`. The GPU rows are **measured** when a GPU is
# present (busy time from its kernels in the profile). Here there is none, so they are
# **predicted** for the H200 with your `pipeline_step`: each operator's device time its
# roofline time on the H200's data sheet at the peak your `op_precision` gives it (TF32 for
# the convolutions, not FP32), its host time your `calibrate_host` on the H200's measured
# step at batch 8.
#
# **Predict.** At batch 128, how many times faster than this CPU is the (predicted or
# measured) GPU step?

# %% id="cell-037"
### BEGIN SOLUTION
guess = 30
### END SOLUTION
predict("1.gpu_speedup", guess, "GPU / CPU samples per second at batch 128")

# %% id="seed-exp1"
# NBVAL_IGNORE_OUTPUT
exp1 = stack.seed_experiment1((8, 32, 128), threads=1, cpu_peak=roof_here.peak,
                              busy=busy_time, intervals=kernel_intervals,
                              precision=op_precision, pipeline=pipeline_step,
                              calibrate=calibrate_host)
cpu_runs = exp1.cpu
display(Markdown(stack.format_cnn_runs(exp1.cpu + exp1.gpu, exp1.gpu_label)))
reveal("1.gpu_speedup", round(exp1.speedup))

# %% [markdown] id="cell-039"
# **What a real GPU did.** The same experiment ran on an NVIDIA H200 in this project
# (`python benchmarks/bench_perf.py --gpu`, torch 2.11, 2026-11-30) — measured, next to the
# machine's own 16-core CPU, and beside what the calibrated model and the roofline alone
# predict for the H200:

# %% id="h200-table"
display(Markdown(stack.format_h200()))

# %% [markdown] id="cell-039b"
# Read it with the seed's three questions. **Is utilisation near 100 %?** Far from it, in
# both senses: the predicted device is busy at most a few per cent of the step, and busy time
# is not MFU — the CPU rows above are busy most of the step at a small fraction of the peak.
# Each of the step's 21 forward and backward operators (plus the optimizer's) costs a launch
# and host-side framework work, while its kernel runs for a few microseconds. **What share is
# the host→device copy?** 5–7 % on the H200 with pinned memory (`bench_perf.py` measured it):
# not the bottleneck here, but it grows as the compute shrinks (chapter 07 overlaps it).
# **Batch size?** Throughput grows almost linearly with the batch on the GPU — the per-step
# host overhead is fixed, the device work nearly free — while the CPU saturates at batch 128.
# The seed's "10–50×" appears only at batch 512 and above; for a small model at small batches
# a GPU barely beats a good CPU. The roofline alone predicts over two million samples per
# second at every batch — hundreds of times the measurement at batch 8 — because it counts
# no host time; the model calibrated at batch 8 stays within 6 % of the measurements at 32
# and 128 and overestimates batch 512 by about a quarter, where device time starts to matter
# and the data sheet's roofline is optimistic.
#
# **Predict, then move the sliders.** With 5 µs of host time per operator, at which batch
# size does the predicted GPU throughput first reach half of the roofline's (no host time)?

# %% id="cell-040"
### BEGIN SOLUTION
guess = 256
### END SOLUTION
predict("1.launch_batch", guess, "batch where host time costs half the throughput")

# %% id="cell-041"
widgets.cnn_batch_widget(cpu_runs)

# %% id="cell-042"
reveal("1.launch_batch", stack.host_half_batch(5e-6))

# %% [markdown] id="cell-043"
# ## 7. The programmer's view: pitfalls
#
# * **Timing an asynchronous device with a host clock.** A CUDA kernel launch returns before
#   the kernel runs; without `torch.cuda.synchronize()` (or CUDA events) you time the launch.
#   Chapter 12 has you write a `benchmark` that does it right.
# * **Reading `self` and `total` time wrong.** A row's total includes its children. Summing
#   totals counts the same microsecond several times; charge self times, as your
#   `charge_layers` does.
# * **Forgetting the profiler.** It costs time in every row it records; measure the step
#   without it, as `profile_step` does.
# * **Counting FLOPs as multiply-adds.** One multiply-add is 2 FLOPs; data sheets and
#   PyTorch's counter use FLOPs.
# * **Reading GPU utilisation as efficiency.** Busy time is not MFU.
# * **Blaming the GPU for an overhead-bound model.** If FLOPs / peak is a thousand times
#   smaller than the step, a faster GPU will not help: batch, fuse, or capture the graph.
# * **`nn.DataParallel` on one machine.** Use DDP (chapter 09).
#
# ## 8. Summary
#
# * A step passes through six layers; the profiler shows each one's rows, and self times,
#   charged by rules you wrote, say what each adds — with the profiler's own cost apart.
# * The SimpleNet step does ~17.7 kFLOP — less than a microsecond of arithmetic — and takes
#   hundreds of microseconds: it is overhead-bound, and memory-bound under that.
# * On a CPU the process's memory is the kernel's resident set, which you read from
#   `/proc/self/status`; it follows parameters, gradients and optimizer states.
# * The roofline min(peak, I × bandwidth) and its ridge point tell compute-bound from
#   memory-bound; this machine's roofs are measured (on stated threads), the GPUs' are
#   data-sheet numbers.
# * Little's law: bandwidth × latency bytes must be in flight, which is why GPUs keep tens
#   of thousands of threads resident.
# * Utilisation is busy time; MFU is achieved FLOP/s over peak, held to the precision the op
#   runs at (TF32 for convolutions on Ampere and later). A GPU number not measured is a
#   prediction, calibrated for host overhead, and labelled so.
#
# ## Exercises (seed 000, §8)
#
# The seed's ten exercises are answered where their topic is taught: 1 and 7 (static vs
# dynamic graphs, `detach` vs `no_grad`) and 2 (forward vs reverse mode) in chapter 02;
# 3 and 6 (memory hierarchy, Tensor Cores) in chapter 04; 4 (AllReduce cost) in chapter 09;
# 5 (memory of a 100-million-parameter model) in chapter 06; 8 (a data-loading bottleneck)
# in chapter 07; 9 (pipeline vs tensor parallelism) in chapter 10; 10 (reading an MLSys
# paper) in chapter 12.
