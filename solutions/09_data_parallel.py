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
# # 09 · Data parallelism and collective communication
#
# *Deep Learning Systems: from algorithms to hardware* — chapter 09. Seeds: 000 (§2 distributed training, experiment 2, exercise 4), 002 (communication efficiency: gradient compression, asynchronous updates).
#
# **Objectives.** After this chapter you can
#
# 1. explain why 数据并行（Data Parallelism）needs a 全规约（AllReduce）of the gradients, and what 集合通信（Collective Communication）is;
# 2. run the naive, ring, tree and recursive halving/doubling all-reduce step by step and count their messages and bytes;
# 3. estimate an all-reduce's time with the α-β model (seed exercise 4) and measure α and β on this machine;
# 4. say why `DistributedDataParallel` scales better than `DataParallel` (seed experiment 2), simulate both on 1–8 GPUs and run DDP for real;
# 5. build DDP's 分桶（Bucketing）and overlap yourself — gradient hooks and asynchronous `all_reduce` in real processes — and know what 梯度压缩（Gradient Compression）and 异步更新（Asynchronous Update）buy and cost.
#
# **Guiding questions.** In multi-GPU training, how are gradients synchronised, and what communication pattern hides behind AllReduce? What does the cost of gradient synchronisation depend on — model size, batch size, number of GPUs, the links? Why do more GPUs not give proportionally more speed?

# %% id="cell-001"
# %matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
from labkit.check import check, predict, reveal
from labkit.parallel import all_gather, coverage, simulated_time
from labkit.parallel import cost, dp_sim, compression, draw, widgets
from labkit.parallel import collectives   # collectives.all_reduce: labkit's simulator of every algorithm
from labkit.parallel.collectives import compare_allreduce, run_from_log, uniform_vectors

# %% [markdown] id="cell-002"
# ## 1. Why AllReduce
#
# In data parallelism every worker (GPU, process — a *rank*) holds a full copy of the model and a different slice of the batch. After backward, rank *r* has the gradient of its own slice, $g_r$. To keep all copies identical, every rank must apply the same update with the gradient of the whole batch, the mean $\frac1p\sum_r g_r$. An operation that leaves the sum of all ranks' vectors on *every* rank is an **all-reduce**; to turn the sum into the mean, `DistributedDataParallel` divides each gradient by *p* while it copies it into its bucket, *before* the all-reduce (PyTorch's `torch/csrc/distributed/c10d/reducer.cpp` multiplies each gradient by 1/world size as it copies it into the bucket: "Divides while copying into the bucket view"). This is 梯度同步（Gradient Synchronization）, and its cost is proportional to the model size, not the batch size (seed 000, §2).
#
# Here are four ranks with small gradient-like vectors; every all-reduce algorithm below gives every rank the same sum.

# %% id="cell-003"
data = draw.demo_data(4)            # 4 ranks, 8 float32 each
for r, d in enumerate(data):
    print(f"rank {r}: {d}")
print("sum   :", np.sum(data, axis=0))
for s in compare_allreduce(data):
    print(f"{s.algorithm:28s} every rank has the sum: {s.correct};  steps {s.steps:2d}, messages {s.messages:2d}, "
          f"bytes {s.bytes_sent}, most bytes into one rank {s.max_bytes_into_rank}")

# %% [markdown] id="cell-004"
# The naive way (everyone sends to rank 0, which adds and sends the sum back) is correct but funnels every byte through one rank: its link carries $(p-1)$ whole vectors each way while the other links idle. The better algorithms spread the work over all links.
#
# ## 2. The algorithms, step by step
#
# Each algorithm is a schedule of *steps*; in a step, each rank sends at most one message. The vector is cut into *p* chunks.
#
# * **Ring** (环形算法, Ring AllReduce; Patarasuk & Yuan 2009): first a 规约散播（Reduce-Scatter）— in step *s* rank *r* sends chunk $(r-s-1) \bmod p$ to rank $r+1$, which adds it; after $p-1$ steps rank *r* holds the finished chunk *r*. Then a 全收集（All-Gather）: $p-1$ more steps pass the finished chunks around.
# * **Tree** (binomial): reduce to rank 0 in $\lceil\log_2 p\rceil$ steps, then 广播（Broadcast）back in as many. Few steps, but every message is the whole vector.
# * **Recursive halving / doubling** (Rabenseifner; Thakur et al. 2005): partners at distance $p/2, p/4, \dots$ swap halves of what they own (reduce-scatter in $\log_2 p$ steps), then the reverse doubles it back. Non-powers of two fold the extra ranks in first.
#
# Move the sliders: *world* and *algorithm* choose the run; *step* (or ▶) walks through it. Left: the messages of this step (colour = chunk, solid = add, dashed = copy); middle: how many ranks' inputs each buffer chunk holds; right: the bytes each link (sender → receiver) has carried so far, this step's links outlined in red.

# %% id="ch09-predict-ring"
### BEGIN SOLUTION
guess_ring_steps = 6
### END SOLUTION
predict("9.ring-steps", guess_ring_steps, "how many steps does a ring all-reduce take on 4 ranks?")

# %% id="cell-005" tags=["browser-test"]
widgets.collective_widget(world=4, algorithm="ring")

# %% id="ch09-reveal-ring"
reveal("9.ring-steps", collectives.all_reduce(draw.demo_data(4), "ring").steps)

# %% id="cell-006"
run = collectives.all_reduce(draw.demo_data(5), "ring")
fig = draw.plot_collective_step(run, 2); plt.show(); plt.close(fig)

# %% [markdown] id="cell-007"
# The simulator logs every message, so we can count them and compare with the formulas of the next section (`cost.cost_terms`). The columns are: steps, messages, and total bytes moved, from the simulation and from the formula, for a vector of 1 MB (non-powers of two included).

# %% id="cell-008"
print(f"{'p':>2} {'algorithm':28s} {'steps':>5} {'formula':>7} {'msgs':>5} {'formula':>7} {'bytes sent':>11} {'formula':>11}")
for p in (2, 3, 5, 8):
    for s in compare_allreduce(uniform_vectors(p, 250_000)):   # float32 ones, length a multiple of 8p
        t = s.terms
        print(f"{p:2d} {s.algorithm:28s} {s.steps:5d} {t.latency_count:7d} {s.messages:5d} {t.messages:7d} "
              f"{s.bytes_sent:11d} {t.total_bytes:11.0f}")

# %% id="cell-009"
runs = [collectives.all_reduce(draw.demo_data(6), alg) for alg in ("naive", "ring")]
fig = draw.plot_link_bytes(*runs); plt.show(); plt.close(fig)


# %% [markdown] id="cell-010"
# ### Lab 9.1 — the ring's reduce-scatter phase
#
# Write `ring_reduce_scatter(buffers)`: `buffers` is a list of *p* equal-length 1-D arrays (one per rank). Each rank works on its own copy, cut into *p* chunks as `np.array_split` cuts it (lengths may differ by one). In step $s = 0, \dots, p-2$, every rank *r* sends chunk $(r-s-1) \bmod p$ to rank $(r+1) \bmod p$, which adds it into its own copy of that chunk. Return `(chunks, messages, history)`:
#
# * `chunks[r]`: rank *r*'s finished chunk *r*;
# * `messages`: one `(step, sender, receiver, chunk, payload)` per message, `payload` the array the sender actually sent — a copy of its chunk as it held it when the step began;
# * `history[s][r]`: rank *r*'s whole buffer after step *s* (a copy).
#
# The log is the data that moved, not a description of it: the check replays it — every payload must be what its sender held at the start of the step, every buffer after a step the one before plus what it received — so a log written from the formula beside `np.array_split` of the sum fails. Do not modify the inputs. (All sends of one step happen at once; collect them first, then apply them.)

# %% id="cell-011"
def ring_reduce_scatter(buffers):
    ### BEGIN SOLUTION
    p = len(buffers)
    bufs = [np.array(b, dtype=float) for b in buffers]
    edge = np.cumsum([0] + [len(c) for c in np.array_split(bufs[0], p)])
    messages, history = [], []
    for s in range(p - 1):
        sends = []
        for r in range(p):
            c = (r - s - 1) % p
            sends.append((r, (r + 1) % p, c, bufs[r][edge[c]:edge[c + 1]].copy()))
        for src, dst, c, payload in sends:
            bufs[dst][edge[c]:edge[c + 1]] += payload
            messages.append((s, src, dst, c, payload))
        history.append([b.copy() for b in bufs])
    chunks = [bufs[r][edge[r]:edge[r + 1]].copy() for r in range(p)]
    return chunks, messages, history
    ### END SOLUTION


# %% labkit={"exercise": "9.1"} tags=["check"]
check("9.1", ring_reduce_scatter)

# %% [markdown] id="ch09-your-ring-md"
# Your function's log, turned into a run (`run_from_log`: each message is as large as its payload), is priced by the same α-β model as labkit's simulator and drawn step by step; labkit's ring all-gather then completes it to a full all-reduce.

# %% id="cell-013"
data = [np.random.default_rng(r).standard_normal(11) for r in range(5)]
chunks, msgs, history = ring_reduce_scatter(data)
yours = run_from_log(data, chunks, msgs, history)
print(f"your reduce-scatter: {yours.steps} steps, {yours.messages} messages, {yours.bytes_sent} bytes "
      f"(formula: {cost.cost_terms('reduce_scatter', 'ring', yours.nbytes, 5).total_bytes:.0f}); "
      f"time at α = 5 µs, 25 GB/s: {simulated_time(yours, alpha=5e-6, beta=1 / 25e9) * 1e6:.2f} µs "
      f"(formula {cost.collective_time('reduce_scatter', 'ring', yours.nbytes, 5, alpha=5e-6, beta=1 / 25e9) * 1e6:.2f} µs)")
gathered = all_gather(chunks, "ring")
print("your reduce-scatter + labkit's all-gather = the sum on every rank:",
      all(np.allclose(o, np.sum(data, axis=0)) for o in gathered.outputs))
fig = draw.plot_collective_step(yours, 2); plt.show(); plt.close(fig)

# %% [markdown] id="cell-014"
# ## 3. The cost model (seed exercise 4)
#
# A message of $m$ bytes costs $\alpha + m\beta$: α is the latency (延迟) per message, β the seconds per byte, i.e. 1/带宽（bandwidth）; adding $m$ bytes costs $m\gamma$ (Hockney; Thakur, Rabenseifner & Gropp 2005). Counting the steps and the bytes on the critical path of each schedule gives, for *p* ranks and an *n*-byte vector:
#
# | all-reduce | time |
# |---|---|
# | naive | $2(p-1)\alpha + 2(p-1)n\beta + (p-1)n\gamma$ |
# | ring | $2(p-1)\alpha + 2\frac{p-1}{p}n\beta + \frac{p-1}{p}n\gamma$ |
# | binomial tree | $2\lceil\log_2 p\rceil(\alpha + n\beta) + \lceil\log_2 p\rceil n\gamma$ |
# | recursive halving/doubling ($p$ a power of 2) | $2\log_2 p\,\alpha + 2\frac{p-1}{p}n\beta + \frac{p-1}{p}n\gamma$ |
#
# The ring's bandwidth term $2\frac{p-1}{p}n\beta$ hardly grows with *p* and is the least any all-reduce can achieve (Patarasuk & Yuan 2009); its latency term grows linearly. Against the **binomial tree** modelled here, which sends the whole vector ⌈log₂ p⌉ times, the ring wins for large messages and the tree for small ones. That is a property of this tree, not of trees: NCCL's all-reduce tree is a *pipelined double binary tree* (Sanders, Speck & Träff, Parallel Computing 2009; NCCL 2.4, Jeaugey, NVIDIA blog 2019): the vector is cut into small chunks that stream down two complementary trees at once (each rank is a leaf in one and an inner node in the other), so it keeps logarithmic latency *and* drives close to full bandwidth; NCCL picks ring or tree per call from its own tuning model, not from this table.
#
# In this α-β model **recursive halving/doubling** is best at every size when *p* is a power of two: the ring's optimal bytes with only 2 log₂ p steps. Real libraries still build rings and trees because the model assumes every pair of ranks has its own uncontended link. Recursive halving pairs rank *r* with *r* ± p/2, p/4, …: on a real topology — GPUs on a PCIe switch tree, NVLink meshes that are not all-to-all, a rail-optimised or oversubscribed network — those far pairs share links and collide, and non-powers of two pay two extra full-vector steps. A ring (and a tree) can be laid along the physical links so that each hop uses its own link in each direction, and both pipeline chunks so that links stay busy (Patarasuk & Yuan 2009; Thakur et al. 2005 §4; NCCL documentation: NCCL "patterns its communication strategy to match the system's underlying GPU interconnect topology"). The step-by-step simulation above agrees with these formulas exactly — `simulated_time` walks the message log and `collective_time` evaluates the formula:

# %% id="cell-015"
kw = dict(alpha=5e-6, beta=1 / 25e9, gamma=1e-11)
for p in (3, 4, 6):
    for s in compare_allreduce(uniform_vectors(p, p * 4 * 1024), **kw):
        print(f"p={p} {s.algorithm:28s} simulated {s.simulated_s*1e6:9.3f} µs   formula {s.formula_s*1e6:9.3f} µs")

# %% [markdown] id="cell-016"
# First predict, then move the sliders to see where the curves cross: size (log₁₀ bytes), world size, α and the link bandwidth.

# %% id="ch09-predict-crossover"
### BEGIN SOLUTION
guess_crossover_kb = 200
### END SOLUTION
predict("9.crossover", guess_crossover_kb,
        "p = 8, α = 5 µs, 25 GB/s: above how many kB does the ring beat the binomial tree?")

# %% id="cell-017"
widgets.cost_widget()

# %% id="ch09-reveal-crossover"
reveal("9.crossover", cost.crossover_bytes(8, alpha=5e-6, beta=1 / 25e9) / 1e3, unit="kB")

# %% [markdown] id="cell-018"
# **Bandwidths as nccl-tests reports them.** *Algorithm bandwidth* is $S/t$ for an $S$-byte all-reduce taking $t$ seconds. It falls as *p* grows even on perfect links, because each rank must send $2\frac{p-1}{p}S$ bytes. nccl-tests therefore also reports *bus bandwidth* = algbw × $2\frac{p-1}{p}$ (all-reduce; $\frac{p-1}{p}$ for reduce-scatter and all-gather, 1 for broadcast), which is comparable with the link's peak: for a ring with α = 0 it equals 1/β exactly.

# %% id="cell-019"
S, p = 1e9, 8
t = cost.collective_time("all_reduce", "ring", S, p, alpha=0, beta=1 / 150e9)
print(f"ring, p={p}, 1 GB at 150 GB/s links: t = {t*1e3:.2f} ms, algbw = {cost.algbw(S, t)/1e9:.1f} GB/s, "
      f"busbw = {cost.busbw('all_reduce', S, t, p)/1e9:.1f} GB/s")


# %% [markdown] id="cell-020"
# ### Lab 9.2 — estimate an all-reduce (seed exercise 4)
#
# Write `ring_allreduce_time(nbytes, world, alpha, beta)`: the ring all-reduce time without the γ term. With one rank nothing is sent.

# %% id="cell-021"
def ring_allreduce_time(nbytes, world, alpha, beta):
    ### BEGIN SOLUTION
    p = world
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    ### END SOLUTION


# %% labkit={"exercise": "9.2"} tags=["check"]
check("9.2", ring_allreduce_time)

# %% id="cell-023"
# Seed exercise 4, worked: synchronising the gradients of a 100 M-parameter fp32 model.
params = 100e6
nbytes = params * 4
print(f"{params:.0f} fp32 gradients = {nbytes / 1e6:.0f} MB to all-reduce every step")
for name, hw in dp_sim.HARDWARE.items():
    a, b = hw.alpha_beta(8)
    print(f"{name:28s} 8 GPUs: {ring_allreduce_time(nbytes, 8, a, b)*1e3:7.1f} ms   "
          f"(bf16 gradients: {ring_allreduce_time(nbytes / 2, 8, a, b)*1e3:6.1f} ms)")

# %% [markdown] id="cell-024"
# ## 4. Measuring α and β on this machine
#
# `labkit.parallel.launch.measure_allreduce` starts real `torch.distributed` processes (gloo on CPU; NCCL where GPUs exist) on a free port (it binds port 0 and lets the OS choose), checks one `all_reduce` against numpy, then times `all_reduce` at several sizes (each sample is the slowest rank's time; the median is kept). Times vary from run to run and machine to machine; only their shape matters.

# %% id="cell-025"
from labkit.parallel import launch
from labkit.parallel.launch import measure_allreduce
meas = measure_allreduce(world=2, sizes=(1 << 8, 1 << 12, 1 << 15, 1 << 18, 1 << 20), repeats=7)
print(f"backend {meas.backend}, world {meas.world}; all_reduce equals the numpy sum: "
      f"{np.allclose(meas.result, meas.expected, rtol=1e-5, atol=1e-5)}")
for n, t in zip(meas.nbytes, meas.seconds):
    print(f"{n:>9d} B  {t*1e6:9.1f} µs  busbw {cost.busbw('all_reduce', n, t, meas.world)/1e9:6.2f} GB/s")


# %% [markdown] id="cell-026"
# ### Lab 9.3 — fit α and β
#
# The model $t(n) = 2(p-1)\alpha + 2\frac{p-1}{p}n\beta$ is a straight line $A + Bn$. Write `fit_ring_alpha_beta(nbytes, seconds, world)` returning `(alpha, beta)`: fit the line by least squares (e.g. `np.polyfit` or `np.linalg.lstsq`) and convert $A$, $B$ back to α, β. Timing noise grows with the time itself, so fit *relative* errors: weight each point by $1/t$ (`np.polyfit(n, t, 1, w=1/t)`). Plain least squares is accepted too (the check recognises the plain and the weighted fit of its data exactly; any other estimate must land within six standard errors of the true α and β its timings were generated from — the standard errors of the weighted fit under the check's 2 % noise), but compare the two below: without weights, the noise of the largest message swamps the intercept that sets α.

# %% id="cell-027"
def fit_ring_alpha_beta(nbytes, seconds, world):
    ### BEGIN SOLUTION
    p = world
    n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    B, A = np.polyfit(n, t, 1, w=1 / t)
    return A / (2 * (p - 1)), B * p / (2 * (p - 1))
    ### END SOLUTION


# %% labkit={"exercise": "9.3"} tags=["check"]
check("9.3", fit_ring_alpha_beta)

# %% id="cell-029"
mine = fit_ring_alpha_beta(meas.nbytes, meas.seconds, meas.world)
fit = launch.fit_alpha_beta(meas.nbytes, meas.seconds, meas.world)   # labkit: weighted, α, β >= 0
print(f"your fit:   α = {mine[0]*1e6:.3g} µs, β = {mine[1]:.3g} s/B")
plain = launch.fit_alpha_beta(meas.nbytes, meas.seconds, meas.world, weighted=False)   # for contrast
print(f"unweighted: α = {plain.alpha * 1e6:.3g} µs (plain least squares on absolute times)")
print(f"labkit fit: α = {fit.alpha*1e6:.3g} µs, 1/β = {fit.bandwidth/1e9:.3g} GB/s; "
      f"relative errors on the measured points: {np.round(fit.relative_errors, 2)}")
fig = draw.plot_fit(meas.nbytes, meas.seconds, fit, "all_reduce, 2 gloo processes on this machine")
plt.show(); plt.close(fig)

# %% [markdown] id="cell-030"
# labkit's `fit_alpha_beta` minimises *relative* errors (so the small messages that determine α count as much as the large ones that determine β) and keeps α, β ≥ 0. Plain least squares on absolute times lets the largest message dominate; its α can even come out negative on noisy data.
#
# ## 5. DataParallel vs DistributedDataParallel (seed experiment 2)
#
# The seed's experiment trains one model with `nn.DataParallel` (DP) and with `DistributedDataParallel` (DDP) on 1, 2, 4 and 8 GPUs and compares the 扩展效率（Scaling Efficiency）, throughput(*n*) / (*n* × throughput(1)).
#
# * **DP** is one Python process with one thread per GPU. Every step GPU 0 *replicates* the model to the others, *scatters* the batch, the threads run forward/backward, outputs are *gathered* and gradients *reduced* onto GPU 0, which alone runs the optimizer. The threads share one interpreter (the GIL), so kernel launches are serialised, and the gradient reduce starts only after backward.
# * **DDP** is one process per GPU. Its constructor broadcasts rank 0's parameters and buffers to every rank; by default (`broadcast_buffers=True`, renamed `forward_sync_buffers` in PyTorch 2.13) it broadcasts the buffers (BatchNorm's running statistics) again at the start of every forward. Otherwise only gradients move, by all-reduce in buckets that start while backward is still running.
#
# `labkit.parallel.dp_sim` models both (hardware presets cite their datasheets' link bandwidths: NVLink vs PCIe, InfiniBand between nodes; every preset's compute rate is the same precision — the dense FP16 tensor-core peak from `labkit.hardware` — times an assumed 40 % sustained, so V100, A100 and H100 compare like with like). Here is one 8-GPU step of each on a PCIe server (try the NVLink presets in the widget below):

# %% id="cell-031"
hw = dp_sim.HARDWARE["8× V100 PCIe 3.0"]
model = dp_sim.MODELS["ResNet-50"]
print(hw.source)
for mode in ("dp", "ddp"):
    step = dp_sim.simulate_step(model, hw, 8, mode, per_gpu_batch=32)
    print(f"{mode:4s}: step {step.step_time*1e3:.1f} ms, compute {step.compute_time*1e3:.1f} ms, "
          f"exposed communication {step.exposed_comm*1e3:.2f} ms, throughput {step.throughput:.0f} images/s")
    fig = draw.plot_timeline(step); plt.show(); plt.close(fig)

# %% [markdown] id="cell-032"
# Now the experiment for real, as far as this machine allows: the same DDP training script (`python -m labkit.parallel.ddp_train`, which also runs unchanged under `torchrun` on a cluster) trains an MLP on the digits with 1 process and with 2 gloo processes, each with the same per-process batch (so the global batch doubles). `DataParallel` needs GPUs, so it exists here only in the simulator.

# %% id="cell-033"
from labkit.parallel.ddp_train import TrainConfig, run_ddp
real = {}
for world in (1, 2):
    cfg = TrainConfig(steps=30, warmup_steps=5, global_batch=128 * world, hidden=256, dtype="float32")
    real[world] = run_ddp(world, cfg)
    print(f"world {world}: {real[world]['samples_per_s']:.0f} samples/s, final loss {real[world]['losses'][-1]:.3f}")
real_eff = dp_sim.scaling_efficiency([real[1]["samples_per_s"], real[2]["samples_per_s"]], [1, 2])
print("measured scaling efficiency at 2 processes:", np.round(real_eff, 2))

# %% id="cell-034"
sims = [dp_sim.scaling(model, hw, (1, 2, 4, 8), mode, per_gpu_batch=32) for mode in dp_sim.MODES]
for s in sims:
    print(f"{s.mode:15s} efficiency at 1, 2, 4, 8 GPUs: {np.round(s.efficiency, 3)}")
fig = draw.plot_scaling(sims, real=([1, 2], real_eff), title="ResNet-50 on 8× V100 PCIe (simulated) and the MLP here (measured)")
plt.show(); plt.close(fig)

# %% [markdown] id="cell-035"
# The measured point is a different model on a CPU with two cores shared with everything else, so do not expect it to sit on the simulated lines; it shows the same effect — communication and synchronisation eat part of the second worker. Predict first, then explore the simulator: per-GPU batch (more compute per byte of gradient), bucket size, jitter (random per-rank slowdowns: a synchronous step waits for the slowest rank, the 掉队者（Straggler）), hardware and model. Up to 8 GPUs are one node; 16 and 32 go over the network.

# %% id="ch09-predict-scaling"
### BEGIN SOLUTION
guess_ddp_efficiency = 0.9
### END SOLUTION
predict("9.ddp-efficiency", guess_ddp_efficiency,
        "DDP's scaling efficiency for ResNet-50 on 8 GPUs of a DGX-1 (V100 NVLink), batch 32 per GPU")

# %% id="cell-036"
widgets.scaling_widget(real=([1, 2], real_eff))

# %% id="ch09-reveal-scaling"
reveal("9.ddp-efficiency", dp_sim.scaling(dp_sim.MODELS["ResNet-50"],
       dp_sim.HARDWARE["8× V100 NVLink (DGX-1)"], (1, 8), "ddp").efficiency[1])

# %% [markdown] id="cell-037"
# ## 6. Bucketing and overlap
#
# Backward produces gradients from the last layer to the first. All-reducing each tensor separately would pay α for every one of them; waiting for all of them would leave the network idle during backward. DDP packs gradients, in the order they become ready, into buckets of `bucket_cap_mb` = 25 MiB by default, and all-reduces each bucket as soon as its last gradient is ready, overlapping with the rest of backward (Li et al., "PyTorch Distributed", VLDB 2020, §3.2–3.3). Three details of the real thing (PyTorch's `torch/nn/parallel/distributed.py` and `reducer.cpp`):
#
# * the **first bucket is only 1 MiB** (`dist._DEFAULT_FIRST_BUCKET_BYTES` = 1,048,576, used when `bucket_cap_mb` is left at its default), so the first all-reduce starts as early as possible;
# * the initial buckets follow `reversed(model.parameters())`, a guess at the backward order; **after the first iteration DDP rebuilds the buckets** in the order gradients really became ready (`Reducer::rebuild_buckets`);
# * each gradient is **divided by the world size as it is copied into its bucket**, so the all-reduce's sum is the mean.
#
# ### Lab 9.4 — bucketed DDP with hooks and asynchronous all-reduce (CS336-style)
#
# Write the class `BucketedDDP(model, bucket_cap_bytes)` that does DDP's job by hand. It runs for real: the check ships your class to **two gloo processes** (labkit's launcher, on a free port), trains two steps of a small MLP on each rank's half of the batch, and compares every gradient with one process on the whole batch.
#
# * `__init__`: group the parameters into buckets over `reversed(list(model.parameters()))` with the bucketing rule of `make_buckets` (from `labkit.parallel.dp_sim`: close a bucket at ≥ `bucket_cap_bytes` bytes; a parameter has `p.numel() * p.element_size()` bytes). On every parameter register `p.register_post_accumulate_grad_hook(hook)`: autograd calls `hook(p)` during backward, right after `p.grad` is final.
# * the hook: count the ready gradients of that parameter's bucket; when the bucket is complete, flatten its gradients into one tensor (`torch.cat([q.grad.reshape(-1) ...])`), divide by the world size (`dist.get_world_size()`), and start `handle = dist.all_reduce(flat, async_op=True)` — it runs while backward continues. Keep the handle.
# * `finish()` (called after `loss.backward()`): `handle.wait()` for each bucket, copy each slice back into its `p.grad`, and reset the per-step state for the next step.
#
# The check counts the all-reduce calls (one per bucket, in backward order), checks that they start *during* backward and that every handle was waited, and compares the gradients (so it notices a missing division too).

# %% id="cell-038"
import torch
import torch.distributed as dist
from labkit.parallel.dp_sim import make_buckets


class BucketedDDP:
    def __init__(self, model, bucket_cap_bytes):
        ### BEGIN SOLUTION
        self.world = dist.get_world_size()
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        sizes = [p.numel() * p.element_size() for p in params]
        self.buckets = [[params[i] for i in b] for b in make_buckets(sizes, bucket_cap_bytes)]
        self.ready = [0] * len(self.buckets)
        self.pending = []
        for k, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, k=k: self.grad_ready(k))
        ### END SOLUTION

    def grad_ready(self, k):
        ### BEGIN SOLUTION
        self.ready[k] += 1
        if self.ready[k] == len(self.buckets[k]):
            flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[k]]) / self.world
            self.pending.append((k, flat, dist.all_reduce(flat, async_op=True)))
        ### END SOLUTION

    def finish(self):
        ### BEGIN SOLUTION
        for k, flat, handle in self.pending:
            handle.wait()
            offset = 0
            for p in self.buckets[k]:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
        self.pending, self.ready = [], [0] * len(self.buckets)
        ### END SOLUTION


# %% labkit={"exercise": "9.4"} tags=["check"]
check("9.4", BucketedDDP)

# %% [markdown] id="ch09-bucket-timeline-md"
# The check's run also recorded *when* things happened on rank 0: the bar of each bucket spans its `all_reduce` from the call to the moment `wait()` returned. The last layers' buckets start while autograd is still computing the first layer's gradients — gloo runs asynchronous work on its own threads — which is the overlap DDP is built for. (Times are microseconds on a tiny model and vary from run to run.)

# %% id="ch09-bucket-timeline"
from labkit.parallel.ddp_train import bucket_timeline
tl = bucket_timeline()          # the check's last run: rank 0, last step
print(tl.title if tl else "run the check above with your class first")
if tl:
    fig = draw.plot_timeline(tl, title=tl.title); plt.show(); plt.close(fig)

# %% id="cell-040"
sweep = dp_sim.bucket_sweep(model, dp_sim.HARDWARE["8× V100 PCIe 3.0"], 8)
for cap, n, t, exposed in zip(sweep.caps_mb, sweep.buckets, sweep.step_time, sweep.exposed_comm):
    print(f"cap {cap:6.1f} MB: {n:3d} buckets, step {t*1e3:6.1f} ms, exposed comm {exposed*1e3:5.1f} ms")
fig = draw.plot_bucket_sweep(sweep); plt.show(); plt.close(fig)


# %% [markdown] id="cell-041"
# Tiny buckets pay α many times; one huge bucket cannot start until backward ends. The best size sits in between.
#
# ## 7. Sending less: compression and asynchronous / local updates
#
# Seed 002 lists three ways to make communication cheaper: 梯度压缩（Gradient Compression）, 异步更新（Asynchronous Update）, and better protocols. We try each on a real task — a small MLP on the scikit-learn digits, 4 simulated workers — and measure bytes sent per worker against test accuracy.
#
# * **Top-k sparsification** sends the *k* largest entries (value + index). Without 误差反馈（Error Feedback）the small entries are lost forever; with it, what was not sent is kept and added to the next gradient.
# * **8-bit quantisation** sends one byte per entry plus the worker's scale.
# * **PowerSGD** sends a rank-*r* factorisation $PQ^\top$ of each weight gradient; it stays all-reduce-friendly.
# * **Local SGD** (本地SGD) lets each worker take *H* steps alone and then averages the models: *H* times fewer messages.
# * **Asynchronous SGD**: a parameter server applies each gradient as it arrives, computed on parameters a few updates old (stale).
#
# **What a method costs is the collective it needs, not its payload.** A dense gradient of *n* bytes is summed on the way by a ring all-reduce: each worker sends $2\frac{p-1}{p}n$. That works only for a *linear* compressor, whose messages from different workers add up to the message of the sum: PowerSGD's *P* and *Q* are all-reduced (Vogels, Karimireddy & Jaggi, NeurIPS 2019), and so are local SGD's parameters. Top-k is not: two workers' top-k sets have different indices, and their sum is not *k*-sparse, so every worker needs every other worker's (value, index) pairs — an **all-gather** (top-k "requires costly All-Gather operations": "An All-Reduce Compatible Top-K Compressor for Communication-Efficient Distributed Learning", arXiv:2510.26709, 2025, abstract); so does int8 with a per-worker scale. In a ring all-gather each of the *p* workers contributes a block of *b* bytes and sends $(p-1)b$: its own block and the $p-2$ it forwards (`cost.cost_terms("all_gather", "ring", p·b, p)`). At *p* = 4, top-k's $3 \cdot 8k$ against the ring's $1.5 \cdot 4n$ is **twice** what the payload ratio $8k / 4n$ says — and the gap grows with *p*: the all-gather's cost grows like *p*, the all-reduce's not at all.
#
# ### Lab 9.5 — top-k with error feedback
#
# Write `topk_ef(grad, memory, k)` returning `(kept, new_memory)`: form `acc = grad + memory`; `kept` has the *k* entries of `acc` with the largest absolute value (zeros elsewhere), shaped like `grad`; `new_memory = acc - kept`.

# %% id="cell-042"
def topk_ef(grad, memory, k):
    ### BEGIN SOLUTION
    acc = np.asarray(grad, float) + memory
    flat = acc.ravel()
    kept = np.zeros_like(flat)
    if k > 0:
        idx = np.argsort(np.abs(flat))[-k:]
        kept[idx] = flat[idx]
    kept = kept.reshape(acc.shape)
    return kept, acc - kept
    ### END SOLUTION


# %% labkit={"exercise": "9.5"} tags=["check"]
check("9.5", topk_ef)

# %% id="cell-044"
g = np.random.default_rng(0).standard_normal(8)
mem = np.zeros(8)
for step in range(3):
    sent, mem = topk_ef(g, mem, 2)
    print(f"step {step}: sent {np.round(sent, 2)}  memory {np.round(mem, 2)}")


# %% [markdown] id="ch09-topk-bytes-md"
# ### Lab 9.6 — what top-k costs on the wire
#
# Write `topk_allgather_bytes(n, k, world, value_bytes=4, index_bytes=4)`: the bytes one worker sends when *p* = `world` workers all-gather their top-*k* (value, index) pairs with a ring (`n`, the gradient's length, is there to tempt you).

# %% id="ch09-topk-bytes"
def topk_allgather_bytes(n, k, world, value_bytes=4, index_bytes=4):
    ### BEGIN SOLUTION
    return (world - 1) * k * (value_bytes + index_bytes)
    ### END SOLUTION


# %% labkit={"exercise": "9.6"} tags=["check"]
check("9.6", topk_allgather_bytes)

# %% id="ch09-topk-vs-ring"
n = 25_000_000                       # about ResNet-50's 25.6 M parameters, fp32 gradients
for p in (4, 16, 64):
    ring = compression.ring_allreduce_bytes(4 * n, p)
    top = topk_allgather_bytes(n, n // 100, p)
    print(f"p = {p:2d}: top-1 % all-gathered {top / 1e6:7.1f} MB per worker, fp32 ring all-reduce "
          f"{ring / 1e6:6.1f} MB: {top / ring:.2f} of it (the payload alone: {8 * (n // 100) / (4 * n):.2f})")

# %% [markdown] id="ch09-compression-predict-md"
# The table below prices every method by its collective. Predict first: on 4 workers, what share of fp32's bytes does top-1 % send?

# %% id="ch09-predict-topk"
### BEGIN SOLUTION
guess_topk_share = 0.04
### END SOLUTION
predict("9.topk-share", guess_topk_share, "top-1 % (+ EF) bytes per worker / fp32 ring all-reduce bytes, 4 workers")

# %% id="cell-045"
results = compression.compare_methods(steps=150, workers=4, seed=0)
full = results[0].bytes_per_worker
print(f"{'method':26s} {'collective':22s} {'bytes/worker':>13s} {'vs fp32':>8s} {'test acc':>8s}")
for r in results:
    print(f"{r.name:26s} {r.collective:22s} {r.bytes_per_worker:13,d} {r.bytes_per_worker / full:8.3f} "
          f"{r.test_accuracy:8.3f}")
reveal("9.topk-share", results[2].bytes_per_worker / full)
fig = draw.plot_compression(results); plt.show(); plt.close(fig)

# %% [markdown] id="cell-046"
# Compare top-1 % with and without error feedback: the same bytes, very different accuracy. Priced by their collectives, top-1 % sends about 4 % of fp32's bytes (not the 2 % its payload suggests), int8 about half (not a quarter: it too must be all-gathered), PowerSGD rank 2 about 10 % and local SGD with *H* = 8 about 13 %, at little cost in accuracy on this easy task. Asynchronous SGD removes the wait for stragglers, and each worker sends only its gradient (two thirds of a ring all-reduce at *p* = 4) — but all of them send to one parameter server, whose link carries *p* times that (and sends the parameters back *p* times), and its stale gradients hurt as staleness grows.
#
# ## 8. The programmer's view: pitfalls
#
# * **Mean, not sum.** `dist.all_reduce` sums; DDP divides each gradient by the world size as it copies it into the bucket, before the all-reduce. If you all-reduce by hand, divide too (Lab 9.4), or scale the learning rate.
# * **Global batch grows with the world.** With a fixed per-GPU batch, 8 GPUs train with an 8× batch: adjust the learning rate (linear scaling with warm-up, Goyal et al. 2017).
# * **Unequal shards** make the mean of per-rank means differ from the global mean, and a rank that runs out of data early hangs the others in the next all-reduce (use `DistributedSampler(drop_last=...)` or `Join`).
# * **Gradient accumulation**: wrap the non-final micro-batches in `model.no_sync()` or you all-reduce every micro-batch.
# * **Ports and launchers**: never hard-code a port — two jobs on one machine collide; bind port 0 (what `labkit.parallel.launch.free_port` does) or use `torchrun --standalone`.
# * **Threads**: *N* processes × the default thread count oversubscribe the CPU; set `torch.set_num_threads` (or `OMP_NUM_THREADS`).
# * **Stragglers**: a synchronous step is as slow as its slowest rank; one slow GPU, a noisy neighbour or a slow data loader slows everyone.
# * **DataParallel** is simple but single-process: prefer DDP even on one node.
#
# ## 9. Summary
#
# * Data parallelism keeps replicas identical by all-reducing gradients every step; the traffic is proportional to the model size.
# * Ring all-reduce sends the optimal $2\frac{p-1}{p}n$ bytes per rank but needs $2(p-1)$ steps; trees and recursive halving/doubling need $O(\log p)$ steps. The α-β model predicts which wins, and you can fit α and β to measurements.
# * nccl-tests' bus bandwidth makes all-reduce speeds comparable to link speeds.
# * DDP beats DataParallel through one process per GPU, gradient-only traffic, and bucketed all-reduce overlapped with backward.
# * Compression (top-k with error feedback, 8-bit, low rank), local SGD and asynchronous SGD trade bytes against accuracy and staleness.
#
# ## 10. Exercises
#
# 1. *(Seed exercise 4.)* In data-parallel training, which factors does the communication cost of gradient synchronisation depend on? How do you estimate the time of an AllReduce?

# %% [markdown] id="cell-047"
# ### BEGIN SOLUTION
# **Answer.** The cost depends on: the number of bytes to synchronise *n* (parameter count × bytes per gradient element — fp32, bf16, or compressed), *not* the batch size; the number of ranks *p*; the algorithm (ring: $2(p-1)$ messages of $n/p$; tree: $2\lceil\log_2 p\rceil$ messages of $n$); the link latency α and bandwidth 1/β of the slowest link on the path (NVLink vs PCIe inside a node, InfiniBand/Ethernet between nodes); the reduction speed γ; how much is hidden behind backward (bucketing and overlap); and stragglers, since the collective waits for the last rank. Estimate: $T_{ring} \approx 2(p-1)\alpha + 2\frac{p-1}{p} n\beta$ (+ $\frac{p-1}{p}n\gamma$), with α and β from the datasheet or, better, fitted to measured `all_reduce` times (nccl-tests, or section 4). Example (computed in Lab 9.2's follow-up cell): 100 M fp32 parameters on 8 GPUs is 400 MB, which takes milliseconds over NVLink and many times longer over PCIe 3.0 (compare the printed times).
# ### END SOLUTION

# %% [markdown] id="cell-048"
# 2. With the cost widget, find for *p* = 8, α = 5 µs and 25 GB/s the message size above which the ring beats the binomial tree. Check it with `cost.crossover_bytes`.
# 3. In the scaling widget, find a per-GPU batch below which DDP's efficiency on 8× A100 PCIe drops under 0.8 for ResNet-50. Why does a smaller batch hurt?
# 4. Why can top-k compression not use a ring all-reduce directly, while PowerSGD can?

# %% [markdown] id="cell-049"
# ### BEGIN SOLUTION
# 2. `cost.crossover_bytes(8, alpha=5e-6, beta=1/25e9)` gives the size where the two curves cross; above it the ring's smaller bandwidth term wins.
# 3. Compute per step shrinks with the batch, the gradient bytes do not: less backward time to hide the all-reduce behind, so exposed communication grows as a share of the step.
# 4. The sum of two top-k sparse vectors is not k-sparse (indices differ), so partial sums grow as they travel around the ring; one needs an all-gather of (index, value) pairs, in which each worker sends (p−1)·k·(value + index bytes) — Lab 9.6; at p = 4 that is twice the share of fp32's bytes the payload suggests, and it grows with p. PowerSGD's P and Q are dense matrices whose sum is meaningful (the compressor is linear), so they can be all-reduced like the gradient itself.
# ### END SOLUTION

# %% id="cell-050"
print(f"ring beats tree above {cost.crossover_bytes(8, alpha=5e-6, beta=1/25e9)/1e3:.1f} kB (p=8, α=5 µs, 25 GB/s)")
