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
# # Chapter 06 · Memory management
#
# A training run that stops with `CUDA out of memory` is where most people first meet the
# systems underneath deep learning. This chapter answers, with numbers computed in front of
# you: where the memory of a training step goes, how PyTorch's caching allocator
# （缓存分配器，Caching Allocator）hands out GPU memory（显存，GPU memory）, why a program can run out
# of memory while hundreds of MiB are free — memory fragmentation（内存碎片，Memory
# Fragmentation）— and what to do about it: activation checkpointing（激活检查点，Activation
# Checkpointing）, gradient accumulation（梯度累积，Gradient Accumulation）, allocator settings,
# and, for serving, a paged KV cache（分页 KV 缓存，Paged KV Cache）.
#
# You build three working pieces of it, and the rest of the chapter runs them: **the
# allocator's core** (best fit, split, merge on free) inside labkit's simulator of PyTorch's
# allocator, replayed on a recorded training step; **what autograd saves**, counted with
# your own `saved_tensors_hooks`, and **segment checkpointing**, measured; and **a paged
# KV cache** against contiguous reservation.
#
# **Objectives.** After this chapter you can
# 1. size the model states of training — parameters, gradients, optimizer states（优化器状态，
#    Optimizer States）— in fp32 and mixed precision（混合精度，Mixed Precision）, with ZeRO;
# 2. size the activations（激活值，Activations）a transformer layer keeps for backward, and count
#    them with a pack hook;
# 3. write the rules that decide where the caching allocator puts a request: rounding, pool,
#    segment, best fit, splitting, merging;
# 4. explain an out-of-memory error with free memory, and fix it;
# 5. trade memory for time with checkpointing and gradient accumulation, measured;
# 6. page a KV cache and measure what contiguous reservation wastes.
#
# **Guiding questions** (from the seed): When a model no longer fits in one GPU's memory,
# which techniques help, and what do they cost? How does memory fragmentation arise, and
# which strategies do deep-learning systems use against it?

# %% id="cell-001"
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch

from labkit.check import check, predict, reveal
from labkit.memory import CachingAllocator, MiB, format_size, load_snapshot, replay, save_snapshot
from labkit.memory import measure, paged, plots, report, scenarios, widgets
from labkit.memory.core import NO_LIMIT, allocator_core
from labkit.memory.core_replay import core_agreement, trace_events
from labkit.memory.record import StepSpec, record_training_step
torch.set_num_threads(1)


# %% [markdown] id="cell-002"
# ## 1 · Where the memory of training goes: model states
#
# Training keeps, for every parameter, the parameter itself, its gradient and the optimizer's
# state. Inference keeps only the parameters (and small temporary buffers). With Ψ
# parameters in fp32: parameters 4Ψ bytes, gradients 4Ψ, and the optimizer's states: none for
# plain SGD, one fp32 buffer for momentum, two (first and second moments m, v) for Adam.
#
# Mixed precision (Rajbhandari et al., *ZeRO*, 2020) keeps fp16 parameters and gradients
# (2Ψ + 2Ψ) plus fp32 master weights, momentum and variance (12Ψ): **16 bytes per
# parameter**. ZeRO stage 1/2/3 partitions the optimizer states / + gradients / + parameters
# over the Nd data-parallel GPUs. (PyTorch's `torch.amp` keeps fp32 parameters and gradients and
# casts inside `autocast`, so its model states are fp32's 16 bytes per parameter with Adam;
# mixed precision shrinks the activations, not the model states.)
#
# Before the numbers, write them yourself.

# %% [markdown] id="ex-6-1-md"
# ### Exercise 6.1 · The seed's exercise 5 as a function
# Write `model_state_fp32(num_params, optimizer)` returning the bytes of fp32 parameters,
# gradients and optimizer states for `optimizer` in `'sgd'`, `'momentum'`, `'adam'`.

# %% id="cell-030"
def model_state_fp32(num_params, optimizer):
    ### BEGIN SOLUTION
    states = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    return 4 * num_params * (2 + states)
    ### END SOLUTION


# %% labkit={"exercise": "6.1"} tags=["check"]
check("6.1", model_state_fp32)

# %% id="cell-032"
print("100M parameters, fp32 + Adam:", format_size(model_state_fp32(100_000_000, "adam")),
      "of which Adam adds", format_size(model_state_fp32(100_000_000, "adam")
                                         - model_state_fp32(100_000_000, "sgd")))

# %% [markdown] id="budget-md"
# Now labkit's estimator, for fp32 and mixed precision (the seed's exercise 5 first):

# %% id="cell-003"
psi = 100_000_000
print(report.format_model_state(psi, "fp32", "adam"))
print(report.format_model_states(report.model_state_rows(psi)))
zero = report.zero_stage_totals(7_500_000_000, "mixed", "adam", dp=64)
print("ZeRO paper check, 7.5B params, 64 GPUs, mixed Adam:",
      [round(t / 1e9, 1) for t in zero], "GB for stages 0-3")

# %% [markdown] id="cell-004"
# Move the sliders: the number of parameters (log scale), precision, optimizer, ZeRO stage
# and the data-parallel degree. Predict first: with mixed-precision Adam and ZeRO stage 1 on
# 64 GPUs, how many bytes per parameter does each GPU keep? Watch which part dominates and what each ZeRO stage removes.

# %% id="budget-predict"
### BEGIN SOLUTION
guess = 4.2
### END SOLUTION
predict("6.zero1", guess, "bytes per parameter per GPU: mixed Adam, ZeRO-1, 64 GPUs")

# %% id="cell-005"
reveal("6.zero1", report.bytes_per_param_per_gpu("mixed", "adam", 1, 64), unit="B/parameter")
widgets.budget_widget()

# %% [markdown] id="cell-006"
# ## 2 · A real training step, recorded and replayed
#
# Model states are not the whole story: a step also allocates activations in the forward
# pass, frees them in backward, creates gradients, and the optimizer allocates temporaries.
# Below, torch's profiler records **every allocation and free** of PyTorch's CPU allocator
# while we build an MLP with Adam and train it for two steps. The trace (address, size,
# operator, phase) is then replayed through `CachingAllocator`, labkit's simulator of the
# CUDA caching allocator: what would this step reserve on a GPU? (In section 3 you write
# the simulator's core and replay this trace with it.)

# %% id="cell-007"
spec = StepSpec(widths=(256, 512, 512, 10), batch=64, steps=2)
trace = record_training_step(spec)
timeline = replay(trace, ignore_unknown_frees=True)
print(f"{len(trace)} events; {spec.num_params:,} parameters = {format_size(4 * spec.num_params)} in fp32")
print(f"peak requested {format_size(timeline.peak_requested)}, peak allocated "
      f"{format_size(timeline.peak_allocated)}, peak reserved {format_size(timeline.peak_reserved)}")
for phase, (count, nbytes) in trace.allocations_by_phase().items():
    print(f"  {phase:9s}: {count:3d} allocations, {format_size(nbytes)}")
fig = plots.plot_timeline(timeline, "MLP + Adam: build, then two training steps")
plt.show(); plt.close(fig)

# %% [markdown] id="cell-008"
# Read the picture from left to right: *setup* allocates the parameters; *forward* stacks up
# activations; *backward* frees them while allocating gradients; the first *optimizer* step
# allocates Adam's m and v (twice the parameters, for good); *zero_grad* (set to None) frees
# the gradients. From the second step on, Adam's states live through the whole step. Reserved
# memory (grey) stays above allocated: that gap is the cache.
#
# The same replay works on a memory snapshot from a real GPU
# (`torch.cuda.memory._dump_snapshot("snap.pickle")` after `_record_memory_history()`):
# `load_snapshot("snap.pickle")` returns its segments and its trace. Here we write one from the
# simulator and read it back:

# %% id="cell-009"
import tempfile, os
sim = CachingAllocator()
keep = [sim.malloc(n) for n in (3 * MiB, 700, 12 * MiB)]
sim.free(keep[0])
with tempfile.TemporaryDirectory() as scratch:   # the file lives for this cell
    snap = load_snapshot(save_snapshot(sim, os.path.join(scratch, "snapshot.pickle")))
print(f"{len(snap.segments)} segments, reserved {format_size(snap.reserved_bytes)}, "
      f"allocated {format_size(snap.allocated_bytes)}")
fig = plots.plot_segment_map(snap.segments, "segment map read back from a snapshot file")
plt.show(); plt.close(fig)


# %% [markdown] id="cell-010"
# ## 3 · The caching allocator, step by step — and its core, yours
#
# `cudaMalloc` and `cudaFree` are slow and synchronize the device, so PyTorch asks the driver
# for big **segments** and carves **blocks** out of them, keeping freed blocks cached for the
# next request. The rules, from `c10/cuda/CUDACachingAllocator.cpp` (constants
# `kMinBlockSize`=512 B, `kSmallSize`=1 MiB, `kSmallBuffer`=2 MiB, `kMinLargeAlloc`=10 MiB,
# `kRoundLarge`=2 MiB, `kLargeBuffer`=20 MiB):
#
# 1. **Round** the request up to a multiple of 512 B (`round_size`).
# 2. **Pool**: ≤ 1 MiB → small pool, else large pool; the pools never share segments
#    (`get_pool`).
# 3. **Best fit**: take the smallest cached free block that is big enough; among equal sizes
#    the lowest address (`get_free_block`: the free set is ordered by size, then address,
#    and searched with `lower_bound`). With `max_split_size_mb` set, blocks at least that big
#    are *oversize*: a smaller request never takes one, a bigger request only one less than
#    20 MiB larger than itself.
# 4. **Miss → new segment**: 2 MiB for small requests, 20 MiB for requests under 10 MiB,
#    else the request rounded up to 2 MiB (`get_allocation_size`).
# 5. **Split** a block that is too big: small pool if ≥ 512 B remain, large pool if more than
#    1 MiB remains and the request is below `max_split_size_mb` (`should_split`).
# 6. **Free → merge** with free neighbours in the same segment (`free_block`,
#    `try_merge_blocks`). Nothing goes back to the device until `empty_cache()` or an
#    allocation that fails: then every cached segment that is entirely free is released and
#    the allocation retried.
#
# Rules 1, 2 and 4 say what a request becomes; you write them first. Rules 3, 5 and 6 are the
# allocator's **core**: you write those next, and labkit's `CachingAllocator` runs your
# functions in place of its own.

# %% [markdown] id="ex-6-2-md"
# ### Exercise 6.2 · What a request becomes
# Write `segment_for(nbytes)` returning `(rounded_size, pool, segment_size)`: the block size
# after rounding (at least 512, a multiple of 512), `'small'` or `'large'`, and the size of the
# segment a cache miss would allocate.

# %% id="cell-034"
def segment_for(nbytes):
    ### BEGIN SOLUTION
    rounded = max(512, (nbytes + 511) // 512 * 512)
    if rounded <= 1024 * 1024:
        return rounded, "small", 2 * 1024 * 1024
    if rounded < 10 * 1024 * 1024:
        return rounded, "large", 20 * 1024 * 1024
    two_mib = 2 * 1024 * 1024
    return rounded, "large", (rounded + two_mib - 1) // two_mib * two_mib
    ### END SOLUTION


# %% labkit={"exercise": "6.2"} tags=["check"]
check("6.2", segment_for)

# %% id="cell-011"
for n in (1, 700, 4_000_000, 1_048_576, 1_048_577, 9 * MiB, 10 * MiB, 21 * MiB + 7):
    rounded, pool, segment = segment_for(n)
    print(f"request {n:>10,} B → block {rounded:>10,} B, {pool} pool, new segment "
          f"{format_size(segment)}")


# %% [markdown] id="lab-core-md"
# ### The allocator's core
#
# Three functions decide where a request goes once it is rounded. `CachingAllocator` calls
# them with plain data and carries out what they return (and refuses what it cannot carry
# out, saying why):
#
# * `best_fit(free, size, max_split_size, rounding)` — `free` is the pool's cached free
#   blocks as `(addr, block_size)` pairs **in address order**; return the address of the
#   block rule 3 takes, or `None` (a miss: the allocator then allocates a segment).
#   `max_split_size` is `NO_LIMIT` (2⁶⁴ − 1) when unset; `rounding` is 20 MiB.
# * `splits(block_size, rounded_size, small, max_split_size)` — rule 5: `True` to cut the
#   request's block off the front and cache the rest (the allocator passes `small=True` for
#   the small pool, and with expandable segments, where PyTorch applies the small pool's rule).
# * `merge_free(block, before, after)` — rule 6: `block` is the block being freed,
#   `{"addr", "size", "segment"}`; `before` and `after` are the blocks whose memory touches
#   it, `{"addr", "size", "segment", "free"}`, or `None`. Return `(addr, size)` of the free
#   block that results. Careful: the driver can place two segments side by side, so a
#   neighbour may belong to another segment.
#
# Each check calls your function on cases, then replays traces — random sequences of both
# pools around the 1 MiB boundary, with `max_split_size_mb`, expandable segments and a full
# device, and section 2's recorded training step — through the allocator, and asks your
# function every question the allocator asked its rule on the way, in order: the first
# answer that differs from labkit's is where an allocator with your function inside would
# first hold other blocks, and the hint shows the question and the blocks each answer
# leaves.

# %% [markdown] id="ex-6-6-md"
# ### Exercise 6.6 · Best fit

# %% id="ex-6-6"
def best_fit(free, size, max_split_size, rounding):
    """The address of the cached free block a request of ``size`` rounded bytes takes, or
    None. ``free``: [(addr, block_size), ...] in address order."""
    ### BEGIN SOLUTION
    best_addr, best_size = None, None
    for addr, block_size in free:
        if block_size < size:
            continue
        if best_size is None or block_size < best_size:    # address order: a tie keeps the first
            best_addr, best_size = addr, block_size
    if best_addr is None:
        return None
    if size < max_split_size and best_size >= max_split_size:
        return None                        # a small request never takes an oversize block
    if size >= max_split_size and best_size >= size + rounding:
        return None                        # an oversize block only for a request close to it
    return best_addr
    ### END SOLUTION



# %% labkit={"exercise": "6.6"} tags=["check"]
check("6.6", best_fit)

# %% id="ex-6-6-try"
print(best_fit([(0, 30 * MiB), (64 * MiB, 17 * MiB)], 12 * MiB, NO_LIMIT, 20 * MiB),
      "(expected 67108864: the 17 MiB block at 64 MiB)")


# %% [markdown] id="ex-6-3-md"
# ### Exercise 6.3 · When is a cached block split?
# Write `splits(block_size, rounded_size, small, max_split_size)` → `True`/`False`,
# PyTorch's `should_split`.

# %% id="cell-038"
def splits(block_size, rounded_size, small, max_split_size):
    ### BEGIN SOLUTION
    remaining = block_size - rounded_size
    if small:
        return remaining >= 512
    return rounded_size < max_split_size and remaining > 1024 * 1024
    ### END SOLUTION



# %% labkit={"exercise": "6.3"} tags=["check"]
check("6.3", splits)

# %% id="cell-040"
print("20 MiB block, 19 MiB request:", splits(20 * MiB, 19 * MiB, False, NO_LIMIT),
      "| 18 MiB request:", splits(20 * MiB, 18 * MiB, False, NO_LIMIT))


# %% [markdown] id="ex-6-7-md"
# ### Exercise 6.7 · Merge on free

# %% id="ex-6-7"
def merge_free(block, before, after):
    """The (addr, size) of the free block left when ``block`` is freed."""
    ### BEGIN SOLUTION
    start, end = block["addr"], block["addr"] + block["size"]
    if before is not None and before["free"] and before["segment"] == block["segment"]:
        start = before["addr"]
    if after is not None and after["free"] and after["segment"] == block["segment"]:
        end = after["addr"] + after["size"]
    return start, end - start
    ### END SOLUTION



# %% labkit={"exercise": "6.7"} tags=["check"]
check("6.7", merge_free)

# %% id="ex-6-7-try"
print(merge_free({"addr": 4096, "size": 1024, "segment": 0},
                 {"addr": 0, "size": 4096, "segment": 0, "free": True}, None),
      "(expected (0, 5120))")

# %% [markdown] id="core-md"
# Your three functions are now the allocator's core (where a check failed, labkit's rule
# takes that place, and the line below says so). Section 2's training step, replayed with
# your core and with labkit's allocator, event by event:

# %% id="core-replay"
core = allocator_core(best_fit=best_fit, should_split=splits, merge=merge_free)
print(core.describe())
print(report.format_agreement(core_agreement(core, trace_events(trace))))

# %% [markdown] id="walk-md"
# The rest of this chapter's allocator runs your core. A few requests: 30 MiB, 3 MiB and
# 0.5 MiB, then the 30 MiB block is freed and 12 MiB requested.

# %% id="cell-012"
steps = scenarios.request_walkthrough([30, 3, 0.5], free_indices=[0], then_mb=12, core=core)
for s in steps:
    print(f"{s.action:22s} allocated {format_size(s.stats.allocated_bytes):>10s}  reserved "
          f"{format_size(s.stats.reserved_bytes):>10s}  segments {s.stats.num_segments}")
fig = plots.plot_walkthrough(steps)
plt.show(); plt.close(fig)

# %% [markdown] id="cell-013"
# The 3 MiB request got a 20 MiB segment (rule 4) and was split from it, leaving a 17 MiB
# free remainder; the 0.5 MiB one went to its own 2 MiB small segment; freeing the 30 MiB
# block cached it. The 12 MiB request then took the *smallest* cached block that fits — the
# 17 MiB remainder of the 20 MiB segment, not the 30 MiB block (best fit) — and split it
# into 12 + 5 MiB (the last map above: the 30 MiB segment stays entirely free).
#
# **Try it.** Predict first: a single 3 MiB request on an empty allocator — how many MiB does
# it reserve? Then the first slider sets the size of the first request; the block map below is
# recomputed by the simulator, running your core. Change `max_split_size_mb` (blocks at least that big are never
# split) and *expandable segments* (one segment per pool that grows in pages of 2 MiB/20 MiB
# instead of one segment per miss) and compare fragmentation = 1 − allocated/reserved.

# %% id="walk-predict"
### BEGIN SOLUTION
guess = 20
### END SOLUTION
predict("6.segment", guess, "MiB reserved by one 3 MiB request on an empty allocator")

# %% id="cell-014" tags=["browser-test"]
widgets.walkthrough_widget(core=core)

# %% id="walk-reveal"
reveal("6.segment", segment_for(3 * MiB)[2] / MiB, unit="MiB")

# %% [markdown] id="cell-015"
# ## 4 · Out of memory with plenty free
#
# A pattern that fails: a big temporary (loading a checkpoint, say, 512 MiB) is freed and
# cached; 32 tensors of 16 MiB are carved out of it; every other one is freed (the rest are
# kept, e.g. for logging); then a 300 MiB request arrives on a 768 MiB device. Half of the
# cached block is free, but in 16 MiB holes between live tensors: no hole fits, and no
# segment can be released because the only one is split. (Your core runs these too.)

# %% id="cell-016"
for fix, why in scenarios.HOLE_FIXES.items():
    r = scenarios.holes_oom_pattern(fix, core=core)
    verdict = "OK " if r.succeeded else "OOM"
    print(f"[{verdict}] {fix:23s} reserved {format_size(r.stats.reserved_bytes):>10s} — {why}")
failed = scenarios.holes_oom_pattern("none", core=core)
print("\n" + str(failed.oom))
print(f"\nfree but unusable: {format_size(failed.oom.free_but_unusable)}; largest cached hole "
      f"{format_size(failed.oom.largest_free_block)}")
fig = plots.plot_segment_map(failed.segments, "the segment when the 300 MiB request fails")
plt.show(); plt.close(fig)

# %% [markdown] id="cell-017"
# Expandable segments help a different pattern, the one PyTorch's source describes: sizes that
# grow a little each step (a batch of N+1 after N), so every new request misses the cache and
# a new segment is allocated, leaving slivers behind. Reserved memory after 24 growing steps
# (here only expandable segments help; the other settings are shown for comparison):

# %% id="cell-018"
for fix in scenarios.FIXES:
    r = scenarios.growing_batch_pattern(fix, core=core)
    print(f"{fix:20s} reserved {format_size(r.stats.reserved_bytes):>11s}, allocated "
          f"{format_size(r.stats.allocated_bytes)}, device mallocs {r.stats.num_device_alloc}")


# %% [markdown] id="cell-019"
# ## 5 · Activations: what autograd keeps
#
# Korthikanti et al. (2022) count, for one transformer layer with 16-bit activations and
# sequence length s, micro-batch b, hidden size h and a heads: **sbh(34 + 5as/h) bytes**, term
# by term below — after you write it (exercise 6.5). We then check it against the bytes torch
# *actually* saves for backward in a block built from the same operations, counted by a
# `saved_tensors_hooks` pack hook that you write (exercise 6.4).

# %% [markdown] id="cell-045"
# ### Exercise 6.5 · Activations of a transformer layer
# Write `layer_activation_bytes(seq, batch, hidden, heads)`: bytes per layer without
# parallelism or recomputation, from Korthikanti et al. (2022).

# %% id="cell-046"
def layer_activation_bytes(seq, batch, hidden, heads):
    ### BEGIN SOLUTION
    return seq * batch * hidden * (34 + 5 * heads * seq / hidden)
    ### END SOLUTION


# %% labkit={"exercise": "6.5"} tags=["check"]
check("6.5", layer_activation_bytes)

# %% id="cell-048"
gpt3_layer = layer_activation_bytes(2048, 1, 12288, 96)
print(f"GPT-3 175B layer, s=2048, b=1: {format_size(gpt3_layer)} per layer, "
      f"{format_size(96 * gpt3_layer)} for 96 layers; model states:",
      report.format_model_state(175_000_000_000, "mixed", "adam"))


# %% [markdown] id="ex-6-4-md"
# ### Exercise 6.4 · Count what autograd saves
# `torch.autograd.graph.saved_tensors_hooks(pack, unpack)` calls `pack(t)` for every tensor
# an operation saves for backward (and `unpack` when backward needs it back). Write
# `saved_storages(fn, exclude=())`: run `fn()` (a forward pass) under a pack hook and return
# `(storages, bytes)` — how many **storages** autograd keeps and their bytes, each storage
# once, leaving out those of the tensors in `exclude` (the parameters, which live anyway).
# Two traps: a tensor saved by two operations is stored once, and a saved view (a `chunk`, a
# `transpose`) keeps its whole base alive — `t.untyped_storage()` is what is kept.

# %% id="ex-6-4"
def saved_storages(fn, exclude=()):
    ### BEGIN SOLUTION
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    found = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            found[storage.data_ptr()] = storage.nbytes()
        return t

    def unpack(t):
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn()          # the output keeps the graph, and what it saved, alive
    del out
    return len(found), sum(found.values())
    ### END SOLUTION



# %% labkit={"exercise": "6.4"} tags=["check"]
check("6.4", saved_storages)

# %% id="ex-6-4-try"
_x = torch.randn(3, 4, requires_grad=True)
print(saved_storages(lambda: (_x * _x).sum()), "(expected (1, 48): x saved twice, one storage)")

# %% [markdown] id="cell-020-md"
# Your counter on section 5's block, term by term against Korthikanti's count:

# %% id="cell-020"
s, b, h, a = 24, 3, 96, 6
print(report.format_block_comparison(
    report.compare_block_activations(s, b, h, a, counter=saved_storages)))

# %% [markdown] id="cell-021"
# The difference is fully explained: on the CPU, dropout stores its mask in the activation's
# dtype (2 bytes, where the GPU's fused dropout stores 1), and LayerNorm keeps its mean and
# 1/std per token, which the paper neglects (exercise 6.8 asks for the block's bytes term by
# term). With tensor parallelism (t GPUs), sequence
# parallelism and selective recomputation (recompute the attention core, whose as²b terms
# dominate at long sequences), Table 2 of the paper shrinks the layer's activations. Predict first: with t = 3 and sequence
# parallelism (no recomputation), what fraction of the layer's activations does one GPU keep?

# %% id="act-predict"
### BEGIN SOLUTION
guess = 0.33
### END SOLUTION
predict("6.tp", guess, "fraction of a layer's activations per GPU with t=3 and sequence parallelism")

# %% id="cell-022"
reveal("6.tp", report.activation_fraction(s, b, h, a, tp=3, sequence_parallel=True))
widgets.activation_widget()

# %% [markdown] id="cell-023"
# ## 6 · Activation checkpointing, measured
#
# Checkpointing splits the network into k segments, keeps only each segment's input in
# forward, and recomputes a segment's activations during backward: memory for k stored
# inputs plus one segment's activations, at the price of about one more forward pass. With
# n equal blocks memory ∝ k + n/k, smallest at **k = √n** (Chen et al., 2016, "Training
# Deep Nets with Sublinear Memory Cost").
#
# Below, an MLP of 16 Linear+Tanh blocks (32 modules). What is n? Count with your counter:
# each Linear saves its input and each Tanh its output — which is the next Linear's input,
# the same storage.

# %% id="ckpt-count"
blocks, width, batch = 16, 128, 1024
count, nbytes = measure.deep_mlp_saved(saved_storages, blocks, width, batch)
print(f"{blocks} Linear+Tanh blocks save {count} storages, {format_size(nbytes)}: the input "
      f"and one activation of {format_size(batch * width * 4)} per block, so n = {count - 1}")

# %% [markdown] id="ex-6-9-md"
# ### Exercise 6.9 · Segment checkpointing
# Write `checkpointed(model, x, k)`: run the `nn.Sequential` `model` on `x` in `k` segments of
# `len(model) // k` modules (the last one takes the rest), each but the last under
# `checkpoint(segment, h, use_reentrant=False)`; the last runs plainly (backward needs its
# activations at once). The check measures the peak of forward + backward on MLPs you have
# not seen, the output, the gradients, and that something is recomputed.

# %% id="ex-6-9"
from torch.utils.checkpoint import checkpoint


def checkpointed(model, x, k):
    ### BEGIN SOLUTION
    layers = list(model)
    size = len(layers) // k

    def run(segment, h):
        for layer in segment:
            h = layer(h)
        return h

    for i in range(k - 1):                      # checkpoint passes the segment on to run
        x = checkpoint(run, layers[i * size:(i + 1) * size], x, use_reentrant=False)
    return run(layers[(k - 1) * size:], x)      # the last segment, with the rest, plainly
    ### END SOLUTION


# %% labkit={"exercise": "6.9"} tags=["check"]
check("6.9", checkpointed)

# %% [markdown] id="ckpt-md"
# Your function on the 16-block MLP for k = 2, 4, 8, 16, peaks measured from the CPU
# allocator's trace, times from repeated runs. Predict first: with k = 4, what percentage of
# the peak without checkpointing remains?

# %% id="ckpt-predict"
### BEGIN SOLUTION
guess = 50
### END SOLUTION
predict("6.ckpt", guess, "peak with k = 4 segments, % of the peak without checkpointing")

# %% id="cell-024"
results = measure.measure_checkpointing(num_layers=blocks, width=width, batch=batch,
                                        segments=(0, 2, 4, 8, 16), repeats=3,
                                        checkpointed=checkpointed)
table = report.checkpoint_table(results, num_blocks=blocks)
print(report.format_checkpoint_table(table))
reveal("6.ckpt", 100 * table[2].peak_ratio, unit="%")
fig = plots.plot_checkpointing(results)
plt.show(); plt.close(fig)

# %% [markdown] id="ckpt-after"
# The model with n = 16 — one activation per Linear+Tanh block, not 32 for 32 modules —
# follows the measurement within a few points (both peaks also hold backward's temporaries,
# the gradient flowing through a block, which the model leaves out). k = √16 = 4 is the
# best, and k = n stores every block's input again: no saving at all, one more forward for
# nothing.

# %% [markdown] id="cell-025"
# ## 7 · Gradient accumulation
#
# To train with a batch whose activations do not fit, split it into k micro-batches, call
# `backward()` on each loss divided by k, and step the optimizer once: gradients add up in
# `.grad`, so the update equals the big batch's (up to floating-point rounding), while only
# one micro-batch's activations are alive at a time. That equality needs two conditions: the
# loss is a mean over equally sized micro-batches, and no layer computes statistics across the
# batch. **BatchNorm** does: it normalizes each micro-batch with that micro-batch's mean and
# variance, so accumulated gradients differ from the big batch's (and its running statistics
# see k small batches instead of one big one). With LayerNorm or no normalization the
# gradients agree, as below (the MLP here has no BatchNorm). The seed lists gradient
# accumulation as the first memory optimization（梯度累积）; measured:

# %% id="seed-002-3-4"
for r in measure.measure_accumulation(batch=256, widths=(128, 512, 512, 10),
                                      micro_batches=(1, 2, 4, 8)):
    print(f"k={r.micro_batches}: peak {format_size(r.peak_bytes):>10s}, "
          f"max |grad - full-batch grad| = {r.max_grad_diff:.1e}")

# %% [markdown] id="cell-027"
# ## 8 · The seed's memory monitor, with a CPU fallback
#
# The seed prints `torch.cuda.memory_allocated()` and `memory_reserved()` around a
# 1000×1000 tensor. Without a GPU the same script runs on the simulator, which reproduces
# what a GPU shows: the request rounded up to a multiple of 512 bytes allocated, a 20 MiB
# segment reserved and kept after `del`, released by `empty_cache()`.

# %% id="seed-example2"
device, lines = scenarios.seed_monitor_example()
print("device:", device)
for line in lines:
    print(f"{line.when:42s} allocated {line.allocated / MiB:7.2f} MB  reserved "
          f"{line.reserved / MiB:7.2f} MB  free in cache {line.free_in_cache / MiB:7.2f} MB")


# %% [markdown] id="kv-md"
# ## 9 · Serving: a paged KV cache
#
# A model serving text keeps the keys and values of every token of every running request —
# the KV cache. Systems before vLLM reserved, when a request started, one contiguous slot for
# the longest sequence it might reach (`max_len` tokens); what the request never fills is
# wasted, and the slot cannot be shared. Kwon et al. (SOSP 2023, *Efficient Memory Management
# for Large Language Model Serving with PagedAttention*) page it instead, as an
# operating system pages memory: fixed-size **KV blocks** of B tokens, a **block table** per
# request mapping its logical blocks to physical ones, a new block only when the request's
# last block is full, and a finished request's blocks back on a free list. A request of t
# tokens then holds ⌈t/B⌉ blocks: only its last block is partly empty, fewer than B slots
# (the abstract's "near-zero waste in KV cache memory").
#
# A stream is a list of events `(request, tokens)`: `tokens > 0` appends tokens to the
# request (its prompt when it arrives, then one per decoding step), `tokens == 0` says it
# finished.

# %% [markdown] id="ex-6-10-md"
# ### Exercise 6.10 · A block manager
# Write `paged_kv(events, block_tokens, max_len)`: serve the events with a paged cache and
# return, after each event, `(blocks_in_use, pool_blocks, paged_waste, contiguous_waste)`:
# blocks held by running requests; physical blocks the pool has had to provide so far (take
# a block from the free list when there is one, else add one to the pool); token slots of
# the blocks in use that hold no token; and the slots contiguous reservation would waste,
# running requests × `max_len` − tokens stored.

# %% id="ex-6-10"
def paged_kv(events, block_tokens, max_len):
    ### BEGIN SOLUTION
    tables = {}            # request -> its physical blocks (the block table)
    stored = {}            # request -> tokens it holds
    free_list = []         # blocks given back by finished requests
    pool = 0               # physical blocks the pool has handed out so far
    out = []
    for request, tokens in events:
        if tokens == 0:
            free_list.extend(tables.pop(request))
            del stored[request]
        else:
            table = tables.setdefault(request, [])
            stored[request] = stored.get(request, 0) + tokens
            while len(table) * block_tokens < stored[request]:    # the last block is full
                if free_list:
                    table.append(free_list.pop())
                else:
                    table.append(pool)
                    pool += 1
        in_use = sum(len(t) for t in tables.values())
        held = sum(stored.values())
        out.append((in_use, pool, in_use * block_tokens - held, len(tables) * max_len - held))
    return out
    ### END SOLUTION



# %% labkit={"exercise": "6.10"} tags=["check"]
check("6.10", paged_kv)

# %% id="ex-6-10-try"
print(paged_kv([(0, 5), (0, 1), (1, 4), (0, 0)], 4, 16),
      "\n(expected [(2, 2, 3, 11), (2, 2, 2, 10), (3, 3, 2, 22), (1, 3, 0, 12)])")

# %% [markdown] id="kv-run-md"
# Your block manager on a stream of 48 requests (prompt and output lengths drawn at random,
# continuous batching), against contiguous reservation of 2048 tokens per request. Predict
# first: with blocks of 16 tokens, what percentage of the paged cache's slots is empty on
# average?

# %% id="kv-predict"
### BEGIN SOLUTION
guess = 2
### END SOLUTION
predict("6.kv", guess, "% of paged KV slots empty, 16-token blocks")

# %% id="kv-run"
stream = paged.RequestStream(requests=48, max_len=2048)
kv = paged.simulate(stream, block_tokens=16, usage=paged_kv)
print(f"{len(paged.request_events(stream)):,} events; pool of {kv.pool_blocks} blocks "
      f"({kv.pool_blocks * 16:,} slots) against a peak of {kv.peak[2]:,} slots reserved "
      f"contiguously; contiguous reservation leaves {kv.contiguous_waste:.1%} of its slots "
      f"empty, paging {kv.paged_waste:.1%}")
reveal("6.kv", 100 * kv.paged_waste, unit="%")
fig = plots.plot_kv_cache(kv)
plt.show(); plt.close(fig)

# %% [markdown] id="kv-widget-md"
# Move the block size: bigger blocks waste more of their last block (and PagedAttention's
# kernel reads fewer, longer pieces); one token per block wastes nothing but makes the block
# table as long as the sequence. The contiguous line moves only with `max_len`.

# %% id="kv-widget"
widgets.kv_cache_widget(usage=paged_kv)


# %% [markdown] id="cell-029"
# ## Programmer's view: pitfalls
#
# * **Keeping the graph alive.** Appending `loss` (not `loss.item()`) to a list keeps every
#   step's graph and its saved activations: memory grows each step (the seed's 显存泄漏).
#   Use `.item()`/`.detach()`, or compute metrics under `torch.no_grad()`.
# * **`memory_allocated` vs `memory_reserved`.** `nvidia-smi` shows reserved memory (plus the
#   CUDA context); the cache is not a leak. `empty_cache()` only returns unsplit segments and
#   makes the next allocations slow.
# * **Variable shapes** (dynamic batch or sequence length) defeat the cache: pad to a few
#   bucket sizes, or set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
# * **Long-lived small tensors carved from big cached blocks** pin them (section 4):
#   allocate long-lived buffers first, or set `max_split_size_mb`.
# * **Peak, not average, decides OOM**: the peak is usually at the end of forward or at the
#   first optimizer step (Adam's states appear then).
#
# ## Labs
#
# The labs sit where the chapter uses them: the allocator's core in section 3 (6.2, 6.6,
# 6.3, 6.7), what autograd saves in section 5 (6.5, 6.4), checkpointing in section 6 (6.9),
# the paged KV cache in section 9 (6.10). One more:

# %% [markdown] id="cell-041"
# ### Exercise 6.8 · What torch saves for a transformer block
# Section 5's block (`measure.make_transformer_block`: LayerNorm → QKV → softmax(QKᵀ/√d) →
# dropout → ·V → projection → dropout → residual → LayerNorm → fc1 → GeLU → fc2 → dropout →
# residual), run in **bfloat16 on the CPU in training mode**. Write
# `block_saved_bytes(seq, batch, hidden, heads)`: the bytes autograd saves for its backward
# (parameters excluded), as a formula. The check compares it with what autograd saves on
# shapes you have not seen. Start from Korthikanti's count and add, term by term, what your
# counter found in section 5 beyond it.

# %% id="cell-042"
def block_saved_bytes(seq, batch, hidden, heads):
    ### BEGIN SOLUTION
    s, b, h, a = seq, batch, hidden, heads
    paper = s * b * h * 34 + 5 * a * s * s * b
    masks_in_bf16 = a * s * s * b + 2 * s * b * h     # 3 dropout masks: 2 bytes, not 1
    layernorm_stats = 2 * 2 * s * b * 2               # 2 LayerNorms x (mean, 1/std) x sb x 2 B
    return paper + masks_in_bf16 + layernorm_stats
    ### END SOLUTION


# %% labkit={"exercise": "6.8"} tags=["check"]
check("6.8", block_saved_bytes)

# %% id="cell-044"
s2, b2, h2, a2 = 40, 2, 128, 8
print("predicted", block_saved_bytes(s2, b2, h2, a2), "bytes; your counter found",
      measure.transformer_block_saved(s2, b2, h2, a2, counter=saved_storages).total_bytes,
      "bytes")

# %% [markdown] id="cell-049"
# ## Summary
#
# * Training memory = model states (4+4+8 = 16 B/parameter for fp32 Adam, 2+2+12 = 16 B for
#   mixed-precision Adam; ZeRO divides them over data-parallel GPUs) + activations (grow with
#   batch × sequence, and with s² for attention) + temporaries + cache.
# * PyTorch's caching allocator rounds, pools, best-fits, splits and merges — you wrote the
#   last three, and labkit's simulator ran a recorded training step with them; it returns
#   memory only when asked or when an allocation fails.
# * Fragmentation: free memory in pieces that no request fits. Remedies: expandable
#   segments, `max_split_size_mb`, stable shapes, allocating long-lived tensors first.
# * Trading compute for memory: checkpointing (√n segments of n blocks, ≈ one extra forward;
#   n counts saved activations — one per Linear+Tanh block), selective recomputation,
#   gradient accumulation (same gradients without BatchNorm, smaller peak).
# * Serving: paging the KV cache in fixed blocks leaves waste only in each request's last
#   block, where contiguous max-length reservation leaves most of its slots empty.
#
# ## Exercises (seed 习题)
#
# **1.** *(seed exercise 5)* A model has 100 million parameters and trains in FP32. How much
# memory do parameters and gradients need? How much more with Adam?

# %% [markdown] id="seed-ex5"
# ### BEGIN SOLUTION
# Parameters 10⁸ × 4 B = 400 MB (≈ 381 MiB), gradients the same: **800 MB** together.
# Adam keeps two fp32 states per parameter (first moment m and second moment v): **800 MB
# more**, 1.6 GB in all (16 bytes per parameter), computed by `model_state_bytes` in
# section 1. Activations, temporaries and the allocator's cache come on top; with mixed
# precision it is still 16 B/parameter (2 + 2 + 12) because Adam keeps fp32 master weights.
# ### END SOLUTION

# %% [markdown] id="cell-051"
# **2.** *(guiding question)* How does memory fragmentation arise, and what do systems do
# against it?

# %% [markdown] id="cell-052"
# ### BEGIN SOLUTION
# A caching allocator carves blocks out of segments; when tensors of different sizes and
# lifetimes interleave, freed blocks are left as holes between live ones. The total free can
# be large while no single hole fits a request, and a segment with any live block cannot be
# returned to the device (section 4: 512 MiB free but unusable). Remedies: size classes and
# pools (small vs large), best fit with splitting and merging of neighbours, not splitting
# big blocks (`max_split_size_mb`), growable virtual-memory segments (expandable segments),
# static memory planning in graph compilers, stable tensor shapes, and releasing caches.
# ### END SOLUTION

# %% [markdown] id="cell-053"
# **3.** *(guiding question)* The model exceeds one GPU's memory. Which techniques help, at
# what cost?

# %% [markdown] id="cell-054"
# ### BEGIN SOLUTION
# Mixed precision (halves the activations; with Adam the model states stay 16 bytes per
# parameter — section 1 — and float16 needs loss scaling against gradient underflow); activation
# checkpointing (≈ one extra forward pass, section 6); gradient accumulation (smaller
# micro-batches, same gradients, lower utilization per step); ZeRO/FSDP (partition optimizer
# states, gradients, parameters: more communication); tensor and pipeline parallelism
# (split layers or stages: communication and pipeline bubbles); CPU/NVMe offloading (PCIe
# bandwidth); smaller optimizers (SGD with momentum, 8-bit states).
# ### END SOLUTION
