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
# # 10 · Model parallelism
#
# *Deep Learning Systems: from algorithms to hardware* — chapter 10. Seeds: 000 (§2 distributed
# training: 模型并行（Model Parallelism）, 流水线并行（Pipeline Parallelism）, 张量并行（Tensor
# Parallelism）, GPT-3's mixed strategy; exercise 9), 002 (part 5: model splitting and data flow).
#
# **Objectives.** After this chapter you can
#
# * show with the memory arithmetic of chapter 06 why a 7B model does not train on one 80 GB GPU
#   and a 175B model needs dozens;
# * draw GPipe, 1F1B and interleaved pipeline schedules, read the 流水线气泡（Pipeline Bubble）
#   off the chart and check it against Narayanan et al.'s formula;
# * split a linear layer, an MLP and self-attention over *t* GPUs the way Megatron-LM does, prove
#   the result exact, and count the bytes each GPU sends;
# * trade memory for communication with ZeRO stages 1–3 and FSDP — 零冗余优化器（Zero Redundancy
#   Optimizer）;
# * write a ZeRO-1 optimizer that shards Adam's state over real processes, and measure that
#   each keeps 1/p of it;
# * plan a 3D-parallel run — 混合并行（Hybrid Parallelism）— for a GPT model on a cluster, and
#   say where the planner agrees with the published configurations and where it does not;
# * write the tensor-parallel plan and the FSDP2 wrapping that PyTorch's own DTensor APIs run
#   on two processes, checked against one process and by the collectives they issue;
# * route tokens to experts with a capacity, and dispatch and combine them through
#   all-to-all — 专家并行（Expert Parallelism）.
#
# **Guiding questions.** When the model no longer fits, which dimension do you cut — layers,
# matrices, or the optimizer state? What does each cut cost in idle time, bytes on the wire, and
# memory? Why did GPT-3 (seed 000 §2) combine data, pipeline and tensor parallelism instead of
# using one? And when the model's layers are experts, what does routing a token cost?

# %% id="cell-001"
# %matplotlib inline
import numpy as np
import matplotlib.pyplot as plt

from labkit.check import check, predict, reveal
from labkit.hardware import GPUS
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes, training_memory
from labkit.parallel import fsdp_lab, moe, moe_lab, mp_labs, mp_widgets, tp_lab, zero_lab
from labkit.parallel.mp_plots import plot_capacity_sweep, plot_plans, plot_schedule, plot_zero
from labkit.parallel import pipeline
from labkit.parallel.pipeline import compare_schedules
from labkit.parallel import tensor_parallel as tp
from labkit.parallel import zero, planner, planner_cost, planner_table1

# %% id="warm-up"
mp_labs.warm_up()      # two gloo worker processes start in the background: §4, §6 and §7 run on them

# %% [markdown] id="cell-002"
# ## 1. Why one device is not enough
#
# Chapter 06's estimator counts what training keeps in memory. With mixed precision and Adam
# every parameter costs 16 bytes — fp16 weights (2) and gradients (2), fp32 master weights,
# momentum and variance (12) (Rajbhandari et al., ZeRO, SC'20 §3.1) — before a single activation
# is stored. Activations per layer follow Korthikanti et al. (2022, §4): $sbh(34 + 5as/h)$ bytes
# for sequence length *s*, micro-batch *b*, hidden size *h*, *a* heads.
#
# Two models: a 7B one shaped like LLaMA-7B (32 layers, *h* = 4096, 32 heads; 6.7 B parameters)
# and GPT-3 175B (96 layers, *h* = 12288, 96 heads; Brown et al. 2020, Table 2.1), one sequence of
# 2048 tokens. First guess: how many 80 GB A100s would GPT-3's model states fill, if they could
# be cut into pieces freely?

# %% id="cell-003"
### BEGIN SOLUTION
guess = 35
### END SOLUTION
predict("10.gpt3_gpus", guess, "80 GB GPUs filled by GPT-3's model states (16 bytes/parameter)")

# %% id="cell-004"
a100 = GPUS["A100"]
for name, (params, layers, hidden, heads) in {"7B": (6.7e9, 32, 4096, 32),
                                              "GPT-3 175B": (175e9, 96, 12288, 96)}.items():
    mem = training_memory(int(params), layers, 2048, 1, hidden, heads)
    total = sum(mem.values())
    print(f"{name:10s} " + ", ".join(f"{k} {v / 1e9:7.1f} GB" for k, v in mem.items())
          + f"  → total {total / 1e9:7.1f} GB = {total / a100.memory_bytes:5.1f} × {a100.name}")
states = model_state_bytes(int(175e9), "mixed", "adam").total
reveal("10.gpt3_gpus", int(np.ceil(states / a100.memory_bytes)))

# %% [markdown] id="cell-005"
# Read the printout: the 7B model's states alone overflow one 80 GB A100, and GPT-3's fill
# dozens of them before a single activation is stored. Data parallelism (chapter 09) copies all of it to every GPU, so
# it cannot help. We have to cut the model: by layers (pipeline), inside each matrix
# multiplication (tensor), or cut the optimizer state, gradients and weights across the
# data-parallel copies (ZeRO/FSDP).

# %% [markdown] id="pipeline-intro"
# ## 2. Pipeline parallelism and its bubble
#
# Cut the layers into *p* consecutive **stages**, one per GPU; a batch is split into *m*
# **micro-batches** that flow through the stages (GPipe, Huang et al. 2019). Only activations
# cross stage boundaries, point to point. The price is idle time: at the start stage *p*-1 waits
# for the first micro-batch to arrive, at the end stage 0 waits for the last backward. With $t_f$
# and $t_b$ the forward and backward time of one micro-batch on one stage, Narayanan et al.
# (SC'21 §2.2.1) define the **bubble fraction** as bubble time over ideal time:
#
# $$\frac{(p-1)(t_f + t_b)}{m(t_f + t_b)} = \frac{p-1}{m}.$$
#
# `pipeline_schedule` does not use this formula. It places every forward and backward by its
# dependencies (forward *j* on stage *s* needs forward *j* on *s*-1; backward *j* on *s* needs
# backward *j* on *s*+1) and a stage's fixed order, and measures the result. Predict the bubble
# fraction for GPipe with *p* = 4 and *m* = 8, then look.

# %% id="cell-007"
### BEGIN SOLUTION
guess = 0.375
### END SOLUTION
predict("10.bubble", guess, "GPipe bubble fraction, p = 4, m = 8")

# %% id="cell-008"
gpipe = pipeline.pipeline_schedule("gpipe", stages=4, microbatches=8)
fig = plot_schedule(gpipe); plt.show(); plt.close(fig)
reveal("10.bubble", gpipe.bubble_fraction)
print(f"simulated {gpipe.bubble_fraction:.4f}, formula (p-1)/m = {pipeline.bubble_formula('gpipe', 4, 8):.4f}; "
      f"idle share of the step {gpipe.idle_fraction:.4f} = bubble / (ideal + bubble)")

# %% [markdown] id="cell-009"
# GPipe runs all forwards first, so each stage keeps the activations of all *m* micro-batches
# until their backward: memory grows with *m*, the very thing that shrinks the bubble.
# **1F1B** (PipeDream-Flush; Narayanan et al., ICML 2021, and SC'21 §2.2.1) lets stage *s* run
# only $p-s-1$ warm-up forwards, then alternate one forward and one backward. Same bubble, but
# at most $p-s$ micro-batches in flight.
#
# **Interleaved 1F1B** (SC'21 §2.2.2) gives each GPU *v* non-consecutive chunks of layers
# (virtual stages): GPU *s* holds chunks $s, s+p, s+2p, \dots$. Each chunk takes $1/v$ of the
# time, so the fill and drain shrink by *v*: bubble $\frac{p-1}{v\,m}$, paid for with *v* times as
# many point-to-point messages. Megatron-LM requires *m* to be a multiple of *p* for it.
#
# Predict before you move the widget: with *p* = 4 and *m* = 8, which schedule has the smallest
# **peak stash** on stage 0 — the most micro-batches whose activations it holds at once?

# %% id="cell-010"
### BEGIN SOLUTION
guess = "1f1b"
### END SOLUTION
predict("10.stash", guess, "smallest stage-0 stash at p=4, m=8", choices=["gpipe", "1f1b", "interleaved"])

# %% id="cell-011" tags=["browser-test"]
mp_widgets.schedule_widget(kind="1f1b", stages=4, microbatches=8, chunks=2)

# %% id="cell-012"
cmp = compare_schedules(4, 8, chunks=2)
print("stage-0 peak stash in micro-batches of a whole stage:", cmp.stash)
reveal("10.stash", cmp.least_stash)
print(f"{'p':>2} {'m':>3} {'v':>2}  {'GPipe':>7} {'1F1B':>7} {'interleaved':>11} {'formula':>8}")
for p, m, v in ((4, 8, 2), (4, 16, 4), (8, 64, 4), (8, 16, 2)):
    b = compare_schedules(p, m, v)
    print(f"{p:2d} {m:3d} {v:2d}  {b.bubble['gpipe']:7.4f} {b.bubble['1f1b']:7.4f} "
          f"{b.bubble['interleaved']:11.4f} {b.formula:8.4f}")


# %% [markdown] id="cell-013"
# The simulated bubbles equal the paper's closed forms exactly, for any $t_f$ and $t_b$ (the
# tests check many). Interleaving's stash counts chunks: stage 0 holds $(p-1)\cdot 2 + (v-1)p + 1$
# chunk-activations, each $1/v$ of a stage — a little *more* than 1F1B, the memory cost the paper
# mentions.
#
# ### Lab 10.1 — the 1F1B order of one stage
#
# Write `one_f_one_b_order(stages, microbatches, stage)`: the list of `("F", j)` and `("B", j)`
# that stage `stage` runs, in order. Warm-up: $\min(p-s-1, m)$ forwards; steady state: one
# forward then one backward while forwards remain; cool-down: the remaining backwards.

# %% id="cell-014"
def one_f_one_b_order(stages, microbatches, stage):
    ### BEGIN SOLUTION
    p, m, s = stages, microbatches, stage
    warm = min(p - s - 1, m)
    order = [("F", j) for j in range(warm)]
    f, b = warm, 0
    while f < m:
        order += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    return order + [("B", j) for j in range(b, m)]
    ### END SOLUTION


# %% labkit={"exercise": "10.1"} tags=["check"]
check("10.1", one_f_one_b_order)


# %% [markdown] id="cell-016"
# ### Lab 10.2 — the interleaved bubble
#
# Write `interleaved_bubble(stages, microbatches, chunks)`: the bubble fraction (bubble time
# over ideal time) of the interleaved schedule with *v* = `chunks` (*v* = 1 is plain 1F1B). The
# checker compares with the simulator, not with a formula.

# %% id="cell-017"
def interleaved_bubble(stages, microbatches, chunks):
    ### BEGIN SOLUTION
    return (stages - 1) / (chunks * microbatches)
    ### END SOLUTION


# %% labkit={"exercise": "10.2"} tags=["check"]
check("10.2", interleaved_bubble)

# %% [markdown] id="cell-019"
# ## 3. Tensor parallelism, exact, with its communication
#
# Megatron-LM (Shoeybi et al. 2019, §3) splits the matrices inside each layer over *t* GPUs of
# one node. For the MLP $Y = \mathrm{GeLU}(XA)B$:
#
# * split *A* by **columns**, $A = [A_1, \dots, A_t]$: GPU *i* computes $\mathrm{GeLU}(XA_i)$
#   alone — GeLU is elementwise, so no communication (column-parallel);
# * split *B* by **rows**: GPU *i* computes $\mathrm{GeLU}(XA_i)B_i$, a partial sum; one
#   **all-reduce** (operator *g*) adds them (row-parallel). In backward the input gradient of
#   the column-parallel layer is a partial sum too: one all-reduce (*f*).
#
# Self-attention splits the same way **by heads**: Q, K, V column-parallel (GPU *i* owns $a/t$
# heads), the output projection row-parallel. A transformer layer therefore costs two
# all-reduces of the $s \times b \times h$ activation in forward and two in backward; a ring
# all-reduce sends $2\frac{t-1}{t}$ of the tensor per GPU (chapter 09). In labkit the sums go
# through the step-by-step ring of chapter 09 and the bytes are counted from its message log.

# %% id="cell-020"
demo = tp.megatron_demo()             # s = 8, h = 16, 4h = 64, float64, seed 0
for r in demo.mlp:
    print(f"t={r.tp}: max |sharded - dense| = {r.max_error:.1e} (Y, dX, dW1, dW2); bytes sent per GPU "
          f"{r.bytes_per_gpu:5d} = 2 all-reduces × 2(t-1)/t × {demo.activation_bytes} B = {r.formula_bytes:.0f}")
att = demo.attention
print(f"attention, 4 heads on {att.tp} GPUs: max error {att.max_error:.1e}, "
      f"{att.comms[0][0]} of {att.bytes_per_gpu} B per GPU")

# %% [markdown] id="cell-021"
# **Sequence parallelism** (Korthikanti et al. 2022, §4.2.2). Tensor parallelism leaves the
# layer norms and dropouts replicated: every GPU stores their full $s \times b \times h$
# activations. Splitting those regions along the *sequence* removes the copy; the all-reduce *g*
# becomes an all-gather before the column-parallel layer and a reduce-scatter after the
# row-parallel one. Each of these sends $\frac{t-1}{t}$ of the tensor, so together they cost
# exactly one all-reduce: memory saved for free.

# %% id="cell-022"
from dataclasses import replace
for r in demo.sequence_parallel:
    print(f"t={r.tp}: max error {r.max_error:.1e}; " + ", ".join(f"{op} {b} B" for op, b in r.comms)
          + f" = one all-reduce {r.formula_bytes:.0f} B")
# one GPT-3 layer (s=2048, micro-batch 1, h=12288, bf16) on t=8 A100s: bytes against arithmetic
lc = planner_cost.layer_comm_vs_compute(replace(planner_cost.GPT3, batch=1), 8,
                                        planner.cluster("A100", 8))
print(f"one GPT-3 layer on t=8: {lc.nbytes / 1e6:.0f} MB sent per GPU per micro-batch (forward + backward)")
print(f"  over NVLink ({lc.intra_bw / 1e9:.0f} GB/s): {lc.intra_s * 1e3:5.1f} ms;  over HDR InfiniBand "
      f"({lc.inter_bw / 1e9:.0f} GB/s): {lc.inter_s * 1e3:5.1f} ms;  arithmetic at {lc.efficiency:.0%} "
      f"of bf16 peak: {lc.compute_s * 1e3:5.1f} ms")


# %% [markdown] id="cell-023"
# The last lines say why tensor parallelism stays inside a node: over NVLink the layer's
# all-reduces cost about 7 % of its arithmetic; through one HDR InfiniBand port per GPU they
# would take about as long as the arithmetic itself. (A ring that spans two nodes shares all of
# each node's NICs and does better than one port; the planner of §5 prices that case.)
#
# ### Lab 10.3 — a row-parallel layer and its all-reduce
#
# Write `row_parallel(x, w, tp, all_reduce)`: split `x` by columns and `w` by rows into `tp`
# parts (`np.split`), compute each GPU's partial product, sum them with the `all_reduce` you
# are given — labkit's step-by-step ring (chapter 09): `all_reduce(list_of_1d_arrays, "ring")`
# returns the run, `run.outputs[r]` rank r's result — flatten, then reshape the result, and
# return `(Y, bytes_sent_by_rank_0)`, counting the bytes from the run's message log (`run.log`,
# each message has `sender` and `nbytes`). The collective is passed in, as a process group is
# in a real system; the check passes one that records every call, so the all-reduce has to be
# issued — a closed form for its bytes beside `x @ w` is not a row-parallel layer.

# %% id="cell-024"
def row_parallel(x, w, tp, all_reduce):
    ### BEGIN SOLUTION
    parts = [xi @ wi for xi, wi in zip(np.split(x, tp, axis=1), np.split(w, tp, axis=0))]
    run = all_reduce([p.ravel() for p in parts], "ring")
    sent = sum(m.nbytes for m in run.log if m.sender == 0)
    return run.outputs[0].reshape(parts[0].shape), sent
    ### END SOLUTION


# %% labkit={"exercise": "10.3"} tags=["check"]
check("10.3", row_parallel)

# %% [markdown] id="cell-026"
# ## 4. ZeRO and FSDP: memory against communication
#
# Data parallelism keeps *Nd* identical copies of the 16Ψ bytes of model state. ZeRO
# (Rajbhandari et al. SC'20, §5) partitions them: stage 1 the optimizer states, stage 2 also the
# gradients, stage 3 also the parameters. PyTorch's FSDP (Zhao et al., VLDB 2023) with full
# sharding — FSDP2's `fully_shard` — is stage 3.
#
# Communication (ZeRO §7): plain data parallelism all-reduces gradients — a reduce-scatter and
# an all-gather, 2Ψ elements per GPU. Stages 1 and 2 reduce-scatter the gradients and all-gather
# the updated parameters: the same 2Ψ. Stage 3 frees the parameters it does not own, so it
# all-gathers them before the forward *and* again before the backward: 3Ψ. `zero.step_traffic`
# runs those collectives (labkit's ring) and counts the messages; nothing is typed in.
#
# Predict: how many times DDP's traffic does ZeRO-3 send per step?

# %% id="cell-027"
### BEGIN SOLUTION
guess = 1.5
### END SOLUTION
predict("10.zero3", guess, "ZeRO-3 bytes per step / DDP bytes per step")

# %% id="cell-028"
rows = zero.zero_table(7_500_000_000, 64)
for r in rows:
    print(f"{r.name:6s} {r.memory.total / 1e9:7.1f} GB per GPU, sends {r.comm_volume_psi:.3f} Ψ per step")
reveal("10.zero3", rows[3].comm_volume_psi / rows[0].comm_volume_psi)
new, sent = zero.zero_sgd_step(np.arange(10.0), [np.ones(10) * r for r in range(4)], 0.1, "zero3")
print("a ZeRO-3 SGD step equals plain data parallelism:",
      np.allclose(new, np.arange(10.0) - 0.1 * np.mean([r for r in range(4)])))
fig = plot_zero(rows); plt.show(); plt.close(fig)

# %% [markdown] id="cell-029"
# Move Ψ and *dp*: ZeRO-1 and -2 save memory at no extra traffic; ZeRO-3 divides everything by
# *dp* for 1.5× the traffic. The table above is ZeRO's Figure 1 (a 7.5B model on *dp* = 64), recomputed: the
# per-GPU states fall from the paper's 120 GB to its 1.9 GB.

# %% id="cell-030"
mp_widgets.zero_widget(log10_params=9.9, dp=8)


# %% [markdown] id="cell-031"
# ### Lab 10.4 — ZeRO-3 bytes per GPU
#
# Write `zero3_bytes(num_params, dp)`: model-state bytes per GPU under ZeRO-3 with
# mixed-precision Adam.

# %% id="cell-032"
def zero3_bytes(num_params, dp):
    ### BEGIN SOLUTION
    return 16 * int(np.ceil(num_params / dp))
    ### END SOLUTION


# %% labkit={"exercise": "10.4"} tags=["check"]
check("10.4", zero3_bytes)

# %% [markdown] id="zero1-lab-md"
# ### Lab 10.6 — ZeRO-1 for real: a sharded Adam over gloo
#
# Now the optimizer itself, on two processes joined by gloo (the chapter-09 launcher, here a
# pool of two workers that stays up between runs). Write `ZeroAdam(params, lr, betas, eps,
# weight_decay)`, a drop-in for `torch.optim.Adam` that keeps Adam's moments *m* and *v* only
# for its own shard — stage 1 of ZeRO, P_os (Rajbhandari et al. §5.1; the sharded optimizer of
# Stanford's CS336, assignment 2). Every rank runs the same code:
#
# * `__init__`: keep the parameters in a list; `p = dist.get_world_size()`,
#   `r = dist.get_rank()`; the *N* parameters flattened into one vector are cut into *p*
#   shards of `s = ⌈N/p⌉` elements (the vector is padded with zeros to `p·s`); rank *r* owns
#   elements `[r·s, (r+1)·s)` and allocates *m* and *v* for those only; a step counter *t*.
# * `step()` (called after `loss.backward()`; each rank's `p.grad` is the mean over its own
#   rows of the batch):
#   1. flatten the gradients into a zero-padded vector of `p·s`; **reduce-scatter** it —
#      `dist.reduce_scatter_single(out, vec)` (PyTorch 2.13's name for
#      `reduce_scatter_tensor`): rank *r* receives the sum of shard *r*; divide by *p*;
#   2. update the shard of parameters with Adam exactly as `torch.optim.Adam` does
#      (`torch/optim/adam.py`, L2 weight decay): g ← g + λw; m ← β₁m + (1-β₁)g;
#      v ← β₂v + (1-β₂)g²; w ← w − lr·(m/(1-β₁ᵗ)) / (√(v/(1-β₂ᵗ)) + ε);
#   3. **all-gather** the updated shards — `dist.all_gather_single(vec, shard)` — and copy the
#      vector back into every parameter (`p.copy_(...)` under `torch.no_grad()`).
#
# The check runs your class for three steps on two ranks (each on its half of every batch) and
# compares every parameter, on both ranks, with `torch.optim.Adam` in one process on the whole
# batch (within 1e-6). It counts the collectives your `step()` issues (a reduce-scatter and an
# all-gather of all *N* elements, no all-reduce) and **measures** each rank's memory: the
# bytes of every tensor still alive after the steps that is not a parameter or a gradient —
# which must be 1/p of Adam's state. Flattened buffers are temporaries: do not keep them.
#
# First a guess: with *p* = 2, what fraction of `torch.optim.Adam`'s state bytes does one rank
# of your `ZeroAdam` keep?

# %% id="zero1-guess"
### BEGIN SOLUTION
guess = 0.5
### END SOLUTION
predict("10.zero1_share", guess, "bytes one ZeroAdam rank keeps / torch.optim.Adam's state (p = 2)")

# %% id="zero1-lab"
import math
import torch
import torch.distributed as dist


class ZeroAdam:
    """ZeRO-1 Adam: rank r keeps m and v for shard r of the flattened parameters."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        ### BEGIN SOLUTION
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.numel = sum(p.numel() for p in self.params)
        self.shard = math.ceil(self.numel / self.world)
        self.m = torch.zeros(self.shard, dtype=self.params[0].dtype)
        self.v = torch.zeros(self.shard, dtype=self.params[0].dtype)
        self.t = 0
        ### END SOLUTION

    def step(self):
        ### BEGIN SOLUTION
        n, s = self.numel, self.shard
        vec = torch.zeros(s * self.world, dtype=self.m.dtype)
        vec[:n] = torch.cat([p.grad.reshape(-1) for p in self.params])
        g = torch.empty(s, dtype=self.m.dtype)
        dist.reduce_scatter_single(g, vec)
        g /= self.world
        vec[:n] = torch.cat([p.detach().reshape(-1) for p in self.params])
        w = vec[self.rank * s:(self.rank + 1) * s].clone()
        g += self.weight_decay * w
        b1, b2 = self.betas
        self.t += 1
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        m_hat, v_hat = self.m / (1 - b1 ** self.t), self.v / (1 - b2 ** self.t)
        w -= self.lr * m_hat / (v_hat.sqrt() + self.eps)
        dist.all_gather_single(vec, w)
        pieces = vec[:n].split([p.numel() for p in self.params])
        with torch.no_grad():
            for p, piece in zip(self.params, pieces):
                p.copy_(piece.view_as(p))
        ### END SOLUTION


# %% labkit={"exercise": "10.6"} tags=["check"]
check("10.6", ZeroAdam)

# %% [markdown] id="zero1-run-md"
# The check's run, read back: what each rank kept, and the collectives of one step.

# %% id="zero1-run"
run = zero_lab.zero_summary()         # the check's last run (rank 0 and 1)
print("\n".join(run.lines()) if run else "run the check above with your class first")
if run:
    reveal("10.zero1_share", run.share)

# %% [markdown] id="cell-034"
# ## 5. Putting it together: a 3D-parallel planner
#
# A plan picks tensor-parallel size *t*, pipeline size *p*, data-parallel size *d* ($t\,p\,d$ =
# GPUs), micro-batch *b*, the number *v* of model chunks per GPU (*v* = 1 is 1F1B, *v* > 1 the
# interleaved schedule, which needs *m* a multiple of *p*), ZeRO stage and activation
# recomputation — 激活重计算（Activation Recomputation）. `planner.plan` tries all of them. For
# each it estimates memory per GPU (states of $Ψ/(tp)$ parameters plus the first stage's peak
# stash, `pipeline.peak_stash`: $\min(p, m)$ micro-batches under 1F1B) and step time: the GEMMs
# at a fixed fraction of peak; the memory-bound kernels (layer norms, softmax, GeLU, dropouts:
# their HBM bytes over the bandwidth, Narayanan et al. SC'21 §4.2); the tensor-parallel
# all-reduces; the bubble, $(p-1)/v$ micro-batch times; the pipeline sends; and the
# data-parallel gradient reduction. A collective inside a node runs at NVLink speed; a ring that
# spans nodes gets its members' share of the node's network cards, so tensor parallelism across
# nodes is priced, not forbidden. ZeRO-2 and -3 reduce-scatter (and ZeRO-3 re-gathers) every
# micro-batch, so they are charged per micro-batch, and refused together with a pipeline, as
# DeepSpeed's pipeline engine refuses them. Plans that do not fit are rejected, with the
# reason. **MFU** (model FLOPs utilization, Chowdhery et al. 2022) counts only the model's
# FLOPs, $72Bslh^2(1 + \frac{s}{6h}) + 6BsVh$. Narayanan et al. report "% of peak" with
# recomputation counted ($96Bslh^2(\dots)$); labkit calls that `hfu`.
#
# **Check against the paper.** Narayanan et al. (SC'21, Table 1) trained GPT models from 1.7B to
# 1T parameters on up to 3072 A100s (vocabulary 51,200, sequence 2048, the interleaved
# schedule). For each row: the published (*t*, *p*, *d*) beside the planner's fastest plan in
# the paper's search space (full recomputation, no ZeRO), the published pair's rank among the
# (*t*, *p*) pairs and its time over the fastest, and the estimated % of peak beside the
# published one. The planner's one free constant — GEMM efficiency 0.58 — was fitted once for
# all rows (`planner_table1.fit_table1_efficiency()`: 0.579), not per row.

# %% id="cell-035"
print(planner_table1.format_table1())
print(planner_table1.TABLE1_SOURCE)

# %% [markdown] id="cell-036"
# Read it for what it shows. The estimated % of peak is within 2.1 points of the published one
# in every row, and it rises with model size as the paper's does (§5.1: "GPU utilization
# improves as the models get larger") — but by 4.1 points where the paper's rises 8, with a dip
# between 1.7B and 18B where the paper's is flat (Spearman's ρ 0.86). The published (*t*, *p*)
# is the planner's fastest in only 2 of the 10 rows (1.7B and 1T); elsewhere the planner
# prefers less tensor parallelism and more pipeline or data parallelism, and by its estimate the
# published plan is up to 17 % slower (18.4B). Many (*t*, *p*) pairs lie within a few per cent
# of each other, and the planner cannot see what decided the paper's choices in practice (GEMM
# efficiency that changes with the matrices' shapes, kernel launch overheads, stages unbalanced
# by the embedding). So the planner reproduces the size and the trend of the utilisation, not
# the published configurations.
#
# Predict, then use the widget: for GPT-3 175B (batch 1536) on 128 nodes of 8 A100s — 1024
# GPUs — which tensor-parallel size does the best plan use?

# %% id="cell-037"
### BEGIN SOLUTION
guess = 4
### END SOLUTION
predict("10.gpt3_tp", guess, "tensor-parallel size of the best GPT-3 plan on 1024 A100s",
        choices=[1, 2, 4, 8, 16])

# %% id="cell-038"
mp_widgets.planner_widget(nodes=128, model="GPT-3 175B (Brown et al. 2020)", gpu="A100")

# %% id="cell-039"
gpt3 = planner_cost.GPT3
ps = planner.plan(gpt3, planner.cluster("A100", 1024))
best = ps.ranked[0]
reveal("10.gpt3_tp", best.tp)
print(f"GPT-3 on 1024 A100s: best {best.label}, {best.memory / 1e9:.0f} GB per GPU, MFU {best.mfu:.0%}")
for k, v in best.time_parts.items():
    print(f"  {k:22s} {v:6.2f} s")
print("rejected:", ps.reasons())
for t in (1, 2, 8, 16):
    q = ps.best(tp=t)
    print(f"best plan with t = {t:2d}: {q.label}, {ps.relative_time(q):.2f}× the best plan's time")


# %% [markdown] id="cell-040"
# **GPT-3's mix, explained by the planner.** The seed says GPT-3 was trained with data, pipeline
# and tensor parallelism together; Brown et al. (2020, §2.3) describe "a mixture of model
# parallelism within each matrix multiply and model parallelism across the layers of the
# network" and give no sizes. The planner's best plan on 1024 A100s uses all three:
#
# * **tensor parallelism inside a node (t = 4):** it splits the weights *and* activations of
#   every layer, but sends four all-reduces per layer per micro-batch, which NVLink carries;
#   *t* = 8, a whole node, is 2 % slower; *t* = 16 spans two nodes, whose rings share the
#   nodes' network cards, and is 17 % slower; the best plan with *t* = 2 has twice the
#   pipeline stages and is 22 % slower; without tensor parallelism the best plan needs full
#   recomputation and takes 1.9 times as long (printed above);
# * **pipeline parallelism (p = 8, interleaved, v = 6):** only one activation per micro-batch
#   crosses a stage boundary; with $m = 1536/(32 \cdot 1) = 48$ micro-batches per pipeline the
#   bubble $(p-1)/(v\,m)$ is 2.4 %;
# * **data parallelism for the rest (d = 32), with ZeRO-1:** splitting the optimizer states
#   over the 32 copies takes this plan from 132 GB to 68 GB per GPU, room for selective
#   recomputation (without ZeRO the best plan needs 32 pipeline stages and is 3 % slower).
#
# Narayanan et al.'s nearest row (145.6B on 1536 GPUs) uses *t* = 8, *p* = 8; the planner ranks
# that pair 4th of 15 in its own search, 5 % behind its best: the same ingredients in another
# balance. The balance moves with the cluster: on 8 nodes (64 GPUs, *d* = 1) the best plan uses
# *t* = 8 — slide the nodes to see it.
#
# ### Lab 10.5 — a plan's memory
#
# Write `first_stage_bytes(model, tp, pp, dp, microbatch)`: bytes per GPU on the first pipeline
# stage with full recomputation, no ZeRO and the 1F1B schedule. `model` is a
# `planner_cost.GPTModel` (`.params`, `.layers`, `.hidden`, `.heads`, `.seq`, `.batch`).
# Count: 16 bytes per parameter
# for $\lceil Ψ/(t\,p) \rceil$ parameters; $m = B/(d\,b)$; $\min(p, m)$ micro-batches in flight
# (with fewer micro-batches than stages only *m* ever are), each keeping $2sbh$ bytes per layer
# for $\lceil l/p \rceil$ layers; plus one layer's full activations while it is recomputed
# (`activation_bytes_per_layer(s, b, h, a, tp)`).

# %% id="cell-041"
def first_stage_bytes(model, tp, pp, dp, microbatch):
    ### BEGIN SOLUTION
    m = model.batch // (dp * microbatch)
    states = 16 * int(np.ceil(model.params / (tp * pp)))
    layers = int(np.ceil(model.layers / pp))
    stash = min(pp, m) * layers * 2 * model.seq * microbatch * model.hidden
    work = activation_bytes_per_layer(model.seq, microbatch, model.hidden, model.heads, tp)
    return states + stash + work
    ### END SOLUTION


# %% labkit={"exercise": "10.5"} tags=["check"]
check("10.5", first_stage_bytes)

# %% [markdown] id="real-runs"
# ## 6. The real engine: PyTorch's own APIs on two processes
#
# The same ideas with PyTorch's distributed APIs, on two CPU processes joined by gloo on a free
# port (labkit's pool of workers, `labkit.parallel.launch`, chapter 09), each checked against
# one process doing the same float64 computation. PyTorch 2.13 runs DTensor, FSDP2 and
# pipelining on CPU with gloo; on a GPU cluster the same code runs with NCCL and `"cuda"`
# meshes.
#
# ### Lab 10.7 — the tensor-parallel plan, in PyTorch's API
#
# `torch.distributed.tensor.parallel.parallelize_module(module, mesh, plan)` applies Megatron's
# split to a real module: `plan` maps submodule names to *parallel styles*, and the parameters
# become `DTensor`s. `ColwiseParallel()` shards an `nn.Linear` by output features (its weight's
# rows, `Shard(0)`) and leaves its output sharded on the last dimension; `RowwiseParallel()`
# shards by input features (`Shard(1)`), takes an input sharded on the last dimension and
# all-reduces its output. The check's block is `tp_lab.LabBlock`, a pre-norm transformer
# block:
#
#     norm1 → attn (wq, wk, wv, wo) → +,   norm2 → mlp (up, tanh, down) → +
#
# Its attention counts heads from the local width, so a column-parallel `wq`, `wk`, `wv` gives
# each rank whole heads — Megatron's split by heads (§3).
#
# Write `tp_plan(sequence_parallel)`, the plan (a dict: name → style):
#
# * `sequence_parallel=False`: tensor parallelism — `attn.wq`, `attn.wk`, `attn.wv` and
#   `mlp.up` column-parallel, `attn.wo` and `mlp.down` row-parallel;
# * `sequence_parallel=True`: the same with Korthikanti et al.'s sequence parallelism, as
#   torchtitan's plan for Llama has it: `norm1` and `norm2` → `SequenceParallel()` (they run on
#   the rank's slice of the sequence); `attn` and `mlp` →
#   `PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))`
#   (all-gather the sequence before each half); `attn.wo` and `mlp.down` →
#   `RowwiseParallel(output_layouts=Shard(1))` (reduce-scatter instead of all-reduce). The
#   block then takes and returns each rank's shard of the sequence.
#
# The check parallelizes the block on a 1-D CPU mesh of the two processes with each plan, runs
# a forward and a backward, and compares the output and every gradient with one process (to
# 1e-9). Every linear weight must be split in half, and it counts the collectives DTensor
# issues in the forward (`torch.distributed.tensor.debug.CommDebugMode`).
#
# Predict: how many all-reduces does one forward of the block issue under tensor parallelism?

# %% id="tp-guess"
### BEGIN SOLUTION
guess = 2
### END SOLUTION
predict("10.tp_allreduces", guess, "all-reduces in one forward of a tensor-parallel block")

# %% id="tp-lab"
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel)


def tp_plan(sequence_parallel=False):
    ### BEGIN SOLUTION
    col, row = ColwiseParallel, RowwiseParallel
    plan = {"attn.wq": col(), "attn.wk": col(), "attn.wv": col(), "mlp.up": col()}
    if not sequence_parallel:
        plan["attn.wo"], plan["mlp.down"] = row(), row()
        return plan
    for half, norm in (("attn", "norm1"), ("mlp", "norm2")):
        plan[norm] = SequenceParallel()
        plan[half] = PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),))
    plan["attn.wo"], plan["mlp.down"] = row(output_layouts=Shard(1)), row(output_layouts=Shard(1))
    return plan
    ### END SOLUTION


# %% labkit={"exercise": "10.7"} tags=["check"]
check("10.7", tp_plan)

# %% id="tp-run"
run = tp_lab.tp_summary()             # the check's last run, rank 0
print("\n".join(run.lines()) if run else "run the check above with your plan first")
if run:
    reveal("10.tp_allreduces", run.forward[False].get("all_reduce", 0))

# %% [markdown] id="tp-run-md"
# Forward: two all-reduces, Megatron's *g* after each row-parallel layer; with sequence
# parallelism two all-gathers and two reduce-scatters, each of half the bytes (§3). Backward
# shows what DTensor does that Megatron does not: it all-reduces the input gradient of `wq`,
# `wk` and `wv` separately, where Megatron's *f* adds the three partial sums first and
# all-reduces once — the same result for three times the messages.
#
# ### Lab 10.8 — FSDP2: `fully_shard`, bottom-up
#
# FSDP2's `fully_shard(module, mesh=mesh)` (`torch.distributed.fsdp`) turns every parameter of
# `module` that no inner `fully_shard` owns into a `DTensor` sharded along dim 0, and makes them
# one unit: before the unit's forward (and again before its backward) its parameters are
# all-gathered, after it they are freed; in backward its gradients are reduce-scattered and
# averaged — ZeRO-3 (§4). The documentation asks for it bottom-up, each block and then the
# root, so that one block's parameters are whole at a time.
#
# Write `shard_model(model, mesh)` for `fsdp_lab.LabNet` (`model.blocks`, a `ModuleList` of three
# residual MLP blocks, and `model.head`): wrap each block, then the model, and return the model.
# The check trains two SGD steps on the two processes, each on its half of every batch, and
# compares every parameter with one process on the whole batch. It requires every parameter to
# be a shard and counts the collectives: one all-gather per unit in each forward and one
# reduce-scatter per unit in each backward (four units: three blocks and the root, which owns
# the head).

# %% id="fsdp-lab"
from torch.distributed.fsdp import fully_shard


def shard_model(model, mesh):
    ### BEGIN SOLUTION
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
    ### END SOLUTION


# %% labkit={"exercise": "10.8"} tags=["check"]
check("10.8", shard_model)

# %% id="fsdp-run"
run = fsdp_lab.fsdp_summary()         # the check's last run, rank 0, first step
print("\n".join(run.lines()) if run else "run the check above with your wrapping first")

# %% [markdown] id="pipeline-real-md"
# The all-gathers in backward are the re-gathers of ZeRO-3 (`reshard_after_forward=True`, the
# default below the root); `reshard_after_forward=False` keeps a unit's parameters from
# forward to backward — ZeRO-2's traffic for more memory. The third API,
# `torch.distributed.pipelining`, splits the MLP of `labkit.parallel.mp_real` into a
# `PipelineStage` per process and runs `ScheduleGPipe` with 4 micro-batches:

# %% id="cell-044"
from labkit.parallel import mp_real
run = mp_real.run_pipeline()
print(f"{run.name}: {run.api}; max |2 processes - 1 process| = {run.max_error:.1e} ({run.detail})")


# %% [markdown] id="moe-intro"
# ## 7. Expert parallelism: mixture of experts
#
# A mixture-of-experts layer — 混合专家（Mixture of Experts, MoE） — replaces a transformer's
# MLP by *E* expert MLPs and a router (Shazeer et al. 2017). For token *x* the router gives
# probabilities $p = \mathrm{softmax}(x W_r)$; the token goes to its *k* most probable experts
# and the layer returns $y = \sum_j g_j\,E_{e_j}(x)$. Switch Transformer (Fedus et al. 2021,
# §2.1) routes to *k* = 1 expert with gate $g = p_e$; GShard (Lepikhin et al. 2020,
# Algorithm 1) routes to *k* = 2 and renormalises the two chosen probabilities to sum to 1.
# Parameters grow with *E*; arithmetic per token grows only with *k*.
#
# **Capacity.** Experts compute on buffers of fixed size — the all-to-all and the batched GEMMs
# need static shapes — so an expert takes at most *C* of a group's *T* tokens. Switch
# Transformer (§2.2, eq. 3): "expert capacity = (tokens per batch / number of experts) ×
# capacity factor"; GShard (§2.2) bounds the tokens one expert processes by a uniform
# threshold of order *T/E*, its expert capacity. With *k* assignments per token, DeepSpeed
# (`deepspeed/moe/sharded_moe.py`, `_capacity`, top-2 with twice the factor) and Megatron-LM
# (`megatron/core/transformer/moe/moe_utils.py`, `get_capacity` with `num_tokens * topk`) use
#
# $$C = \left\lceil \frac{k\,T}{E} \cdot \text{capacity factor} \right\rceil .$$
#
# An expert asked for more keeps its first *C* tokens in token order (Megatron-LM's
# `drop_policy="position"`; GShard lets every first choice go before any second choice) and
# drops the rest: a dropped assignment adds nothing, and the residual connection carries the
# token past the layer.
#
# **Expert parallelism** (GShard §3): rank *r* of *p* holds *E/p* experts and routes its own
# tokens. It packs a buffer (*E*, *C*, *d*) — slot *s* of expert *e* holds the token routed
# there — and one all-to-all sends block *j* (the slots of rank *j*'s experts) to rank *j*; each
# rank runs its experts on the *p·C* rows it received; a second all-to-all brings the results
# home, where each rank combines them with its gates.
#
# ### Lab 10.9 — top-k routing with a capacity
#
# Write `route(logits, k, capacity_factor)` for a (*T*, *E*) tensor of router logits. Return
# three (*T*, *k*) tensors:
#
# * `expert[t, j]`: token *t*'s *j*-th most probable expert (`torch.topk` of the softmax: most
#   probable first);
# * `gate[t, j]`: its gate — the probability itself for *k* = 1, the *k* chosen probabilities
#   renormalised to sum to 1 for *k* ≥ 2;
# * `slot[t, j]`: its position in that expert's buffer — the number of earlier tokens (*t'* <
#   *t*) routed to the same expert — or −1 where that position is ≥ *C* (dropped).
#
# (`torch.nn.functional.one_hot` and a `cumsum` over the tokens give all positions at once; a
# loop over the tokens is fine too.)

# %% id="moe-route"
def route(logits, k, capacity_factor):
    ### BEGIN SOLUTION
    T, E = logits.shape
    C = math.ceil(k * T / E * capacity_factor - 1e-9)
    top, expert = torch.softmax(logits, dim=-1).topk(k, dim=-1)
    gate = top / top.sum(dim=-1, keepdim=True) if k > 1 else top
    hits = torch.nn.functional.one_hot(expert, E)                        # (T, k, E)
    earlier = hits.reshape(T * k, E).cumsum(0).reshape(T, k, E) - hits
    slot = (earlier * hits).sum(-1)
    slot[slot >= C] = -1
    return expert, slot, gate
    ### END SOLUTION


# %% labkit={"exercise": "10.9"} tags=["check"]
check("10.9", route)

# %% [markdown] id="moe-sweep-md"
# Your `route` on a batch of 512 tokens, 8 experts, top-2, with a router that prefers some
# experts (as an untrained one does), at capacity factors from 0.5 to 3. Predict first: at
# capacity factor 1.0, what fraction of the 1024 assignments is dropped?

# %% id="moe-sweep-guess"
### BEGIN SOLUTION
guess = 0.25
### END SOLUTION
predict("10.moe_dropped", guess, "fraction of top-2 assignments dropped at capacity factor 1.0")

# %% id="moe-sweep"
sweep = moe.capacity_sweep(route, moe.sweep_logits(), k=2)
for cf, c, d, pad in zip(sweep.factors, sweep.capacity, sweep.dropped, sweep.padding):
    print(f"capacity factor {cf:4.2f}: C = {c:3d}, dropped {d:6.1%}, empty buffer slots {pad:6.1%}")
reveal("10.moe_dropped", sweep.dropped[sweep.factors.index(1.0)])
fig = plot_capacity_sweep(sweep); plt.show(); plt.close(fig)


# %% [markdown] id="moe-layer-md"
# Nothing is dropped once the capacity factor reaches the most loaded expert's load over the
# mean (the dotted line), but by then half of all buffer slots are empty: compute and
# all-to-all bytes spent on padding. Switch Transformer works with factors of 1 to 1.25 and an
# auxiliary loss, $E \sum_e f_e P_e$ (§2.2, eq. 4: $f_e$ the share of tokens sent to expert *e*,
# $P_e$ its mean probability; 1 when balanced), that pushes the router toward balance.
#
# ### Lab 10.10 — dispatch and combine through all-to-all
#
# Write `moe_layer(x, router_w, w1, w2, k, capacity_factor, all_to_all)`: one rank's layer, as
# every rank runs it. `x` (*T*, *d*) is this rank's tokens, `router_w` (*d*, *E*) the router,
# `w1` (*E/p*, *d*, *h*) and `w2` (*E/p*, *h*, *d*) this rank's experts — expert *e* maps a row
# *u* to $\tanh(u\,w_1[e])\,w_2[e]$, and rank *r* holds experts *r·E/p* … (*r*+1)·*E/p* − 1.
# `all_to_all(output, input)` behaves as `torch.distributed.all_to_all_single(output, input)`:
# `input` is cut into *p* equal blocks along dim 0, block *j* goes to rank *j*, and `output`'s
# block *j* is what rank *j* sent. Steps:
#
# 1. route with your `route(x @ router_w, k, capacity_factor)`, *C* as above;
# 2. dispatch: a zero buffer (*E*, *C*, *d*) with token *t* at `[expert, slot]` for each kept
#    assignment; `all_to_all` it;
# 3. the received buffer holds, for each source rank *j*, its slots for *your* experts: view it
#    as (*p*, *E/p*, *C*, *d*), bring your experts first, run each on its *p·C* rows
#    (`torch.bmm`), and undo the view;
# 4. combine: `all_to_all` the results back; token *t* adds gate × result for each kept
#    assignment.
#
# The check runs your layer on 2, 3 and 4 threads joined by a simulated all-to-all
# (`moe.ThreadAllToAll`, which logs every message), then on the two gloo processes with the real
# `all_to_all_single`. Each rank's output must match a loop over its tokens that runs all the
# experts in one place (`moe.dense_reference`), and each rank must call `all_to_all` twice.

# %% id="moe-layer"
def moe_layer(x, router_w, w1, w2, k, capacity_factor, all_to_all):
    ### BEGIN SOLUTION
    T, d = x.shape
    E, local = router_w.shape[1], w1.shape[0]
    world = E // local
    C = math.ceil(k * T / E * capacity_factor - 1e-9)
    expert, slot, gate = route(x @ router_w, k, capacity_factor)
    kept = slot >= 0
    token = torch.arange(T).unsqueeze(1).expand(T, k)[kept]
    send = torch.zeros(E, C, d, dtype=x.dtype)
    send[expert[kept], slot[kept]] = x[token]
    recv = torch.empty_like(send)
    all_to_all(recv, send)
    rows = recv.view(world, local, C, d).transpose(0, 1).reshape(local, world * C, d)
    out = torch.bmm(torch.tanh(torch.bmm(rows, w1)), w2)
    back = out.view(local, world, C, d).transpose(0, 1).reshape(E, C, d).contiguous()
    done = torch.empty_like(back)
    all_to_all(done, back)
    y = torch.zeros_like(x)
    y.index_add_(0, token, gate[kept].unsqueeze(1) * done[expert[kept], slot[kept]])
    return y
    ### END SOLUTION


# %% labkit={"exercise": "10.10"} tags=["check"]
check("10.10", moe_layer)

# %% id="moe-run"
run = moe_lab.moe_summary()           # the check's gloo run
print("\n".join(run.lines()) if run else "run the check above with your layer first")

# %% [markdown] id="cell-045"
# ## 8. Programmer's view: pitfalls
#
# * **Adding the bias on every rank.** A row-parallel layer must add its bias once, after the
#   all-reduce; added before, it is counted *t* times.
# * **Tensor parallelism across nodes.** Four all-reduces of $sbh$ per layer per micro-batch
#   need NVLink-class bandwidth; keep *t* ≤ GPUs per node (the planner prices *t* = 16 for GPT-3
#   17 % slower than its best plan).
# * **Too few micro-batches.** The bubble is $(p-1)/m$: a deep pipeline with *m* ≈ *p* idles
#   almost half the time. Interleaving helps by *v*, at *v*× the point-to-point messages and
#   a larger stash.
# * **GPipe's memory.** All *m* micro-batches' activations are alive at once; 1F1B caps it at *p*.
# * **ZeRO-3's hidden cost.** 1.5× the traffic of data parallelism, and each layer waits for its
#   all-gather unless it is prefetched — FSDP overlaps it with the previous layer's compute.
#   With gradient accumulation ZeRO-2 and -3 communicate every micro-batch, which is why
#   DeepSpeed refuses them together with pipeline parallelism.
# * **`fully_shard` on the root alone.** Correct, but one unit: the whole model is gathered
#   for the forward, and the memory saving is gone while it runs. Wrap bottom-up.
# * **A ZeRO optimizer that keeps its buffers.** The flattened gradient and parameter vectors
#   are as large as the model; kept on the optimizer they undo the 1/p (lab 10.6 measures it).
# * **Heads that do not divide.** *t* must divide the number of attention heads (and *h*).
# * **Uneven stages.** The first and last stages also hold the embedding and the output layer;
#   a plan balanced by layer count is not balanced by memory (labkit's planner ignores this).
# * **A capacity set by the average.** At capacity factor 1 an unbalanced router drops every
#   token above an expert's share; a larger factor pads every expert's buffer, computing and
#   sending empty slots (§7's sweep). Balance the router (Switch's auxiliary loss) rather than
#   raising the factor.
# * **The all-to-all.** Each MoE layer sends two all-to-alls of its whole (*E*, *C*, *d*) buffer
#   per forward and two in backward; across nodes they dominate the layer's time.
#
# ## 9. Summary
#
# * One GPU cannot hold a 7B model's training state; GPT-3's fills dozens (section 1).
# * Pipeline parallelism cuts layers: cheap communication, a bubble of $(p-1)/m$ — $(p-1)/(vm)$
#   interleaved — and a stash of *m* (GPipe) or $p-s$ (1F1B) micro-batches.
# * Tensor parallelism cuts matrices: exact, but two all-reduces per layer in forward and two in
#   backward; sequence parallelism saves activation memory at the same traffic.
# * ZeRO/FSDP cuts the model states over the data-parallel copies: 2Ψ traffic for stages 1–2,
#   3Ψ for stage 3. Your `ZeroAdam` kept half of Adam's state per rank on two processes and
#   matched `torch.optim.Adam` on one, with a reduce-scatter and an all-gather per step.
# * PyTorch does the same with DTensor: your `parallelize_module` plan issued Megatron's two
#   all-reduces per block (sequence parallelism: two all-gathers and two reduce-scatters), and
#   your bottom-up `fully_shard` one all-gather per block.
# * Real systems combine them: the planner's best GPT-3 plan puts tensor parallelism inside a
#   node, an interleaved pipeline and ZeRO-1 data parallelism over the rest; against Table 1 of
#   Narayanan et al. it matches the size and trend of the utilisation, not most of the
#   published (*t*, *p*).
# * Experts cut the MLP: top-k routing with a capacity $C = \lceil kT/E \cdot
#   \text{factor}\rceil$ trades dropped tokens against padding, and each layer moves its tokens
#   there and back with two all-to-alls.
#
# ## 10. Exercises
#
# 1. **Seed exercise 9.** Compare pipeline and tensor parallelism: their strengths and
#    weaknesses. When should you choose one over the other?

# %% [markdown] id="seed-ex9"
# ### BEGIN SOLUTION
# **Answer.** *What each cuts.* Pipeline parallelism gives each GPU a consecutive block of
# layers; tensor parallelism gives each GPU a slice of every layer's matrices.
#
# *Communication.* Pipeline: only the activation (and its gradient) at each stage boundary,
# point to point, $2sbh$ bytes per micro-batch — the slow inter-node network is enough. Tensor:
# two all-reduces of $sbh$ per layer in forward and two in backward (§3: 352 MB per GPT-3 layer
# per micro-batch at *t* = 8), which needs NVLink.
#
# *Idle time.* Pipeline has a bubble $(p-1)/m$ (§2: 0.375 for *p* = 4, *m* = 8) and needs many
# micro-batches to hide it; tensor parallelism has no bubble but its GEMMs get smaller
# (less efficient) as *t* grows.
#
# *Memory.* Both divide the weights. Tensor parallelism also divides most activations of every
# layer (and, with sequence parallelism, all of them); a pipeline stage keeps up to $p-s$
# micro-batches in flight (1F1B) or *m* (GPipe).
#
# *Complexity.* Pipelines need balanced stages and a schedule; tensor parallelism needs layers
# whose math splits (Megatron's column/row pairing) and heads divisible by *t*.
#
# *Choose.* Tensor parallelism inside a node, up to its GPU count, when single layers are large
# (large *h*) or activations dominate memory; pipeline parallelism across nodes when the model has
# many layers and the batch provides enough micro-batches; data parallelism for the remaining
# GPUs. The planner (§5) picks this mix for GPT-3 on 1024 A100s — *t* = 4 inside a node, an
# interleaved pipeline of *p* = 8, *d* = 32 — and prices tensor parallelism across two nodes
# (*t* = 16) 17 % slower.
# ### END SOLUTION

# %% [markdown] id="cell-047"
# 2. With the schedule widget, find the smallest *m* for which 1F1B's bubble on *p* = 4 stages is
#    under 10 %. How many chunks *v* does the interleaved schedule need to get under 10 % with
#    *m* = 8? (The chunks slider works once the kind is "interleaved".)
# 3. Why does ZeRO-2 send no more than plain data parallelism, although it partitions the
#    gradients?
# 4. In the planner widget, shrink GPT-3's cluster node by node. Which constraint rejects the
#    plans first, and what does the last plan that fits give up?
# 5. In §7's capacity sweep, from which capacity factor is nothing dropped, and what fraction of
#    the experts' buffer slots is empty there? Why does Switch Transformer not simply train at
#    that factor?

# %% [markdown] id="cell-048"
# ### BEGIN SOLUTION
# 2. $(p-1)/m < 0.1$ with *p* = 4 needs *m* > 30, so *m* = 31 (bubble 0.0968; 1F1B has no
#    multiple-of-*p* constraint). Interleaved with *m* = 8: $3/(8v) < 0.1$ needs *v* > 3.75, so
#    *v* = 4, bubble 0.09375.
# 3. Data parallelism's all-reduce is itself a reduce-scatter plus an all-gather. ZeRO-2 stops
#    after the reduce-scatter (each rank only needs the gradient shard it updates) and
#    all-gathers the updated parameters instead: the same two collectives, 2Ψ in total.
# 4. Not memory: at 127 nodes (1016 GPUs) no plan passes the divisibility tests — *t·p* must
#    divide the GPU count, *d·b* the batch of 1536 and *t* the 96 heads — and the widget points
#    to 96 or 128 nodes. Plans fit again down to 6 nodes; there the best one is *d* = 2, *t* = 2,
#    *p* = 12 with ZeRO-1 and *full* recomputation (MFU 40 % against 49 % on 128 nodes): it gives
#    up selective recomputation, paying a third more arithmetic for memory, and ZeRO-2/3 cannot
#    help, being refused with a pipeline. At 4 nodes memory rejects every plan (the smallest
#    needs 92 GB).
# 5. From the factor where the capacity reaches the most loaded expert's load: max/mean load =
#    1.98, so at factor 2.0 nothing is dropped — and half the slots are empty, so half the
#    experts' GEMM rows and all-to-all bytes carry padding. Switch trains at 1–1.25 with its
#    auxiliary loss balancing the router, accepting a few dropped tokens (the residual carries
#    them) for less padding.
# ### END SOLUTION
