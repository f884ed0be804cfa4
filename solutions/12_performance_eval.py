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
# # Chapter 12 — Performance evaluation: measuring, profiling, comparing, deploying
#
# The course closes where every systems project ends: with numbers someone else must be able
# to trust. In this chapter you build the measuring instrument yourself — a benchmark harness
# with warm-up, synchronisation, repetitions, a median and a bootstrap interval — and then
# everything after it is measured with *your* harness: seed 002's metrics, a profiled step
# whose bottleneck you fix (and prove the fix with your own interval), a comparison of six
# implementations of one model (seed 004) whose numpy gradients you write, a deployment under
# a cloud and an edge budget, and a number reproduced from a systems paper of your choice.
#
# **Objectives.** After this chapter you can
#
# * time code correctly — warm-up, synchronisation, repeats, median, a confidence interval —
#   置信区间（Confidence Interval）— on a shared machine and on an asynchronous GPU, and say
#   what a timer without each rule measures instead;
# * measure accuracy, throughput — 吞吐量（Throughput）— latency percentiles —
#   延迟（Latency）— memory, stability, MFU and energy, and say which were estimated;
# * read a profile — 性能剖析（Profiling）— find the bottleneck — 瓶颈（Bottleneck）— fix it and
#   prove the speedup with an interval;
# * compare frameworks fairly, cold and warm, export a model and quantize it —
#   量化（Quantization）— for a deployment budget — 部署（Deployment）.
#
# **Guiding questions.** Why is one timing never enough? What does a timer measure when the
# device runs asynchronously? Which metric does a user of a service feel: mean latency or
# p99? How much of a fast machine does a training run really use?
#
# **Where the harness lives.** Seed 000 (chapter 01's seed) asks for timings in its
# experiment 1 but teaches no method; the seeds put the method — how to measure, which
# metrics, how to compare frameworks — in seed 002 §7 and seed 004 §3, this chapter's. So
# you write `benchmark()` here, and chapter 01's timings use labkit's (this exercise's
# reference).

# %% id="cell-001"
import tempfile
import time

import numpy as np
import torch
from torch.nn import functional as F
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from labkit.check import check, predict, reveal
from labkit.data import load_digits
from labkit import stats
from labkit.hardware import measure_machine
from labkit.perf import (deploy, frameworks, metrics, papers, plots, profiling, scorecard, stack,
                         virtual, widgets)
from labkit.timing import Timing, threads

data = load_digits(seed=0)


# %% [markdown] id="cell-002"
# ## 1. Benchmarking method: write the harness
#
# A benchmark harness — 基准测试（Benchmark）— follows five rules:
#
# 1. **Warm up.** The first calls pay for lazy initialisation, allocator growth, cold caches
#    and — with `torch.compile` — compilation. They are run and thrown away.
# 2. **Synchronise asynchronous devices.** A CUDA launch returns before the kernel runs
#    (PyTorch docs, "CUDA semantics: asynchronous execution"): a host clock read right after
#    the call times the launch. Call the device's synchronise hook (`torch.cuda.synchronize`)
#    before you start the clock — so earlier work is not charged to you — and before you stop
#    it.
# 3. **Repeat.** One number has no error bar: take one sample per call, `repeats` of them.
# 4. **Report the median and a confidence interval of it**, not the mean of a long-tailed
#    sample: a bootstrap percentile interval (Efron & Tibshirani, *An Introduction to the
#    Bootstrap*, 1993, ch. 13) — resample the recorded samples with replacement many times,
#    take each resample's median, and report the (1 − level)/2 and (1 + level)/2
#    percentiles of those medians. Seed it, so that the report can be repeated.
# 5. **Control the machine.** Pin threads, interleave the variants you compare.
#
# ### Exercise 12.1 — the median and its bootstrap interval
#
# Write `summarise(samples, level, resamples, seed)`: return `Timing(samples, median, low,
# high, level)` (`labkit.timing.Timing`) — the samples as a tuple in their order, their
# median, and the bootstrap percentile interval of the median: draw `resamples` resamples
# of the n samples with replacement from `np.random.default_rng(seed)`, take each one's
# median, and report the `50·(1 − level)` and `50·(1 + level)` percentiles of those medians.

# %% id="lab-summarise"
def summarise(samples, level=0.95, resamples=2000, seed=0):
    ### BEGIN SOLUTION
    x = np.asarray(samples, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    low, high = np.percentile(medians, [50 * (1 - level), 50 * (1 + level)])
    return Timing(tuple(samples), float(np.median(x)), float(low), float(high), level)
    ### END SOLUTION


# %% labkit={"exercise": "12.1"} tags=["check"]
check("12.1", summarise)


# %% [markdown] id="benchmark-md"
# ### Exercise 12.2 — a benchmark harness
#
# First `timed_call(fn, sync, clock, number)`, one sample: `sync()` (when `sync` is not
# None), read `clock()`, call `fn()` `number` times, `sync()`, read `clock()` again, and
# return the difference divided by `number` (raise `number` when one call is shorter than the
# clock's resolution, about a microsecond). Then `benchmark(fn, repeats, warmup, number,
# sync, clock, level, resamples, seed)`: call `fn()` `warmup` times untimed, take `repeats`
# samples, and return your `summarise` of them.
#
# The check hands your harness a **virtual device** (`labkit.perf.virtual`) and its clock: a
# workload whose every cost is known, whose first call compiles for a fraction of a second,
# and whose kernels run asynchronously until `sync()` — so it can tell exactly, whatever the
# load on this machine, whether you warmed up, synchronised and summarised right. Then every
# timing in this chapter uses your `benchmark`.

# %% id="lab-benchmark"
def timed_call(fn, sync, clock, number=1):
    """One sample: seconds per call of `number` back-to-back calls of fn()."""
    ### BEGIN SOLUTION
    wait = sync if sync is not None else (lambda: None)     # no hook: nothing to wait for
    wait()
    start = clock()
    for _ in range(number):
        fn()
    wait()
    return (clock() - start) / number
    ### END SOLUTION


def benchmark(fn, *, repeats=7, warmup=1, number=1, sync=None, clock=time.perf_counter,
              level=0.95, resamples=2000, seed=0):
    """Time fn(): warm-up calls, then `repeats` samples; summarised."""
    ### BEGIN SOLUTION
    for _ in range(warmup):
        fn()
    samples = [timed_call(fn, sync, clock, number) for _ in range(repeats)]
    return summarise(samples, level, resamples, seed)
    ### END SOLUTION


# %% labkit={"exercise": "12.2"} tags=["check"]
check("12.2", benchmark)

# %% [markdown] id="pitfalls-md"
# ### What each rule prevents
#
# Time one virtual kernel of 1 ms (a 5 µs launch; its first call compiles for 0.5 s) with
# your harness three ways: right, without warm-up, and without a synchronise hook.
# **Predict:** what median does the harness report *without* `sync`, in microseconds?

# %% id="pitfalls-predict"
### BEGIN SOLUTION
guess = 5
### END SOLUTION
predict("12.nosync", guess, "median without sync for a 1 ms kernel, µs")

# %% id="pitfalls"
pits = virtual.pitfalls(benchmark)
display(Markdown(virtual.format_pitfalls(pits)))
reveal("12.nosync", round(pits[2].median_s * 1e6, 1), unit="µs")


# %% [markdown] id="cell-pitfalls-read"
# Without `sync` the host clock stops as soon as the launch returns: the median is the
# launch, 5 µs, two hundred times too fast — on a real GPU too (`benchmarks/gpu_check.py`
# prints a 4096³ matmul both ways). Without warm-up the *median* barely moves: one slow
# sample in twenty is an outlier the median ignores. The mean and the first sample show
# it: the first call is a compilation, not a run. So warm up for the steady state, and when
# a user will pay the first call (a server's cold start, `torch.compile`'s first step),
# measure it on its own — section 4 does that for `torch.compile` with your harness.
#
# ### Exercise 12.3 — interleave the variants
#
# Rule 5's second half: a neighbour's job that arrives halfway through slows every sample
# after it. Timing A's repeats and then B's charges the neighbour to B alone; alternating —
# A B A B … — spreads it over both. Write `interleaved(fns, repeats, warmup, sync, clock,
# level, resamples, seed)` for a dict `fns` of name → function: warm each up `warmup` times
# (in the dict's order), then `repeats` rounds, each taking one sample of every function in
# order (your `timed_call`, one call each), and return a dict of name → your `summarise` of
# its samples. The check's virtual device has a neighbour who arrives
# a while after the warm-up and leaves before the end.

# %% id="lab-interleaved"
def interleaved(fns, *, repeats=15, warmup=1, sync=None, clock=time.perf_counter,
                level=0.95, resamples=2000, seed=0):
    ### BEGIN SOLUTION
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(timed_call(fn, sync, clock))
    return {name: summarise(s, level, resamples, seed) for name, s in samples.items()}
    ### END SOLUTION


# %% labkit={"exercise": "12.3"} tags=["check"]
check("12.3", interleaved)

# %% [markdown] id="threads-md"
# Rule 5's first half matters on this machine too: it has 2 cores shared with other jobs.
# Watch one 64×128 matmul with two threads and with one, timed by your harness:

# %% id="cell-003"
# NBVAL_IGNORE_OUTPUT
a = torch.randn(64, 128)
b = torch.randn(128, 128)
with threads(2):
    two = benchmark(lambda: a @ b, repeats=30, warmup=3)
with threads(1):
    one = benchmark(lambda: a @ b, repeats=30, warmup=3)
print("2 threads:", two)
print("1 thread: ", one)

# %% [markdown] id="cell-004"
# When the other core is idle the two agree (or two threads win a little). When a
# neighbour's job holds it, the second thread's half of the work waits for that core, and a
# matmul of tens of microseconds can take milliseconds. Compare the two medians and their
# intervals printed above on your machine. Every measurement of small operations in this
# chapter therefore runs under `threads(1)`.
#
# **Noise, simulated.** `stats.noisy_samples` models a shared machine: each run takes 1 ms
# times a small log-normal jitter, and with probability *interference* a neighbour steals the
# core and the run takes 3× longer. **Predict:** with interference 0.3, which estimate stays
# within 5 % of the true 1 ms: the mean, the median, or both?

# %% id="cell-005"
### BEGIN SOLUTION
guess = "median"
### END SOLUTION
predict("12.noise", guess, "which estimate survives 30 % interference",
        choices=["mean", "median", "both"])

# %% id="cell-006" tags=["browser-test"]
widgets.noise_widget()

# %% id="cell-007"
est = stats.noise_estimates(50, interference=0.3, jitter=0.05, seed=0)
reveal("12.noise", est.survivors(tol=0.05))
display(Markdown(stats.format_noise_rows((0.0, 0.15, 0.3, 0.45))))

# %% [markdown] id="cell-008"
# The mean moves by half once a third of the runs are hit; the median by a few per cent. But
# read the last column: **the interval is around the median of the samples, not around the
# true time.** It says how precisely the samples fix *their own* median; once interference
# shifts that median (+2.4 % at 0.3 and +6.8 % at 0.45 in the table), the interval excludes
# the true time while looking tight. No statistic removes a bias that every sample shares:
# slide interference past 0.5 and the median is a hit run. Rerun when the machine is quiet,
# or measure on a dedicated one; the minimum ignores interference entirely but also hides
# real variation (a cache miss that *every* run pays sometimes).
#
# ## 2. Seed 002's metrics, measured on the digits
#
# Seed 002 (part 7) evaluates a system by accuracy, computational efficiency (throughput and
# latency), memory, stability and energy. We measure all of them on scikit-learn's digits for
# two models: the 64-128-10 MLP and a small CNN (`labkit.torch_models.digits_cnn`: two 3×3
# convolutions on the 8×8 image). MFU — model FLOPs utilisation (Chowdhery et al., *PaLM*, 2022,
# appendix B) — is the model's FLOPs per second over the hardware's peak; the models train on
# one thread, so the peak is this machine's matmul peak **measured on one thread** too
# (`measure_machine(threads=1)`, chapter 01): peak and run on the same resources.
# `scorecard.score_models` trains each model with its energy measured and scores it with
# `labkit.perf.metrics`; `scorecard.format_scorecards` lays the cards out as a table.
#
# Energy is power × time. Linux exposes the CPU package's energy counter (RAPL) under
# `/sys/class/powercap/intel-rapl:*/energy_uj` where the hardware and permissions allow; in
# this container there is no such file, so `metrics.measure_energy` falls back to a **TDP
# model** — busy cores × the EPYC 7763's 280 W / 64 cores — and says so in its label. The
# model is an assumption about the package, not a measurement: the constant describes an AMD
# EPYC 7763 (Zen 3), and `grep "model name" /proc/cpuinfo` says what this machine is.

# %% id="seed002-metrics"
# NBVAL_IGNORE_OUTPUT
roof = measure_machine(threads=1)
cards = scorecard.score_models({"mlp": 8, "cnn": 3}, peak=roof.peak, data=data)
display(Markdown(scorecard.format_scorecards(cards)))
print(scorecard.format_mfu(cards, roof.name))

# %% [markdown] id="cell-013"
# **Stability** (seed 002: a system whose results change from run to run cannot be
# evaluated): the MLP trained from five seeds.

# %% id="cell-014"
mean_acc, std_acc, accs = metrics.stability("mlp", seeds=(0, 1, 2, 3, 4), epochs=8, data=data)
print("test accuracies:", [f"{a:.3f}" for a in accs])
print(f"mean {mean_acc:.3f}, standard deviation {std_acc:.4f}")


# %% [markdown] id="cell-015"
# Read the table as a systems engineer. Both models are tiny, and the line under the table
# gives their training MFU against the one-thread peak: a few per cent for the MLP, several
# times more for the CNN (yours is printed above; it moves with the load on the machine).
# The MLP's step is dominated by overhead, as chapter 01 found for
# `SimpleNet`: its matmuls are too small to keep the core's vector units fed. The CNN has
# about the same number of parameters but tens of times the FLOPs per sample and the saved
# activations (the table's columns): convolutions reuse each weight at every pixel, so they
# trade memory and compute for parameters — and do more arithmetic per byte and per call.
# p99 is well above p50 even for a 64-input MLP: on a shared machine the tail is where the
# neighbours show up, and the tail is what a user of a service feels.
#
# ### Exercise 12.4 — MFU of a run
#
# Write `mfu(forward_flops_per_sample, samples_per_s, peak, training)`: model FLOPs per
# second over peak, where a training step costs 3 × the forward FLOPs (backward ≈ 2 ×
# forward; PaLM's 6N per token = 3 × 2N) and inference 1 ×. Return a fraction.

# %% id="cell-016"
def mfu(forward_flops_per_sample, samples_per_s, peak, training=True):
    ### BEGIN SOLUTION
    return (3 if training else 1) * forward_flops_per_sample * samples_per_s / peak
    ### END SOLUTION


# %% labkit={"exercise": "12.4"} tags=["check"]
check("12.4", mfu)

# %% id="mfu-use"
c = cards["mlp"]
print(f"mfu(...) of the MLP's training run: {mfu(c.forward_flops, c.train_samples_per_s, c.peak):.2%}")


# %% [markdown] id="cell-018"
# For scale: Chowdhery et al. report 46.2 % MFU for PaLM 540B on TPU v4 (Table 3 of the PaLM
# paper), on matmuls thousands wide; the digits MLP reaches the few per cent printed above.
#
# ### Exercise 12.5 — latency percentiles
#
# Latency is reported as percentiles: p50 (the median), p95, p99. Write
# `percentile(samples, q)` for q in [0, 100] by linear interpolation (numpy's default,
# Hyndman & Fan's definition 7): sort the samples, go to position h = (n − 1)·q/100, and
# interpolate between the samples at ⌊h⌋ and ⌊h⌋ + 1. No samples, or a q outside
# [0, 100], has no percentile: raise a `ValueError` that says which argument was wrong.

# %% id="cell-009"
def percentile(samples, q):
    ### BEGIN SOLUTION
    s = np.sort(np.asarray(samples, dtype=float))
    if s.size == 0:
        raise ValueError("samples must hold at least one value")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    h = (len(s) - 1) * q / 100
    lo = int(np.floor(h))
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (h - lo) * (s[hi] - s[lo]))
    ### END SOLUTION


# %% labkit={"exercise": "12.5"} tags=["check"]
check("12.5", percentile)

# %% id="percentile-use"
# NBVAL_IGNORE_OUTPUT
lat = cards["mlp"].latency.samples
print("MLP single-request latency, percentile(...): " +
      ", ".join(f"p{q} {percentile(lat, q) * 1e6:.0f} µs" for q in (50, 95, 99)))

# %% [markdown] id="cell-019md"
# ## 3. Profiling to the bottleneck
#
# Here is a training step of the digits MLP that computes its loss one sample at a time in a
# Python loop — it reads naturally, and the answer is the same as the batched loss.
# **Predict:** how many times faster is the step once the loss is one batched call?

# %% id="cell-019"
### BEGIN SOLUTION
guess = 5
### END SOLUTION
predict("12.fix", guess, "speedup of the batched loss over the per-sample loop")

# %% id="profile-slow"
# NBVAL_IGNORE_OUTPUT
xb, yb = data.x_train[:64], data.y_train[:64]
with threads(1):
    slow = stack.profile_step(profiling.loss_step(metrics.digits_mlp(), xb, yb, batched=False),
                              steps=5, unprofiled=False)
display(Markdown("**Slow step, top operators by self time:**\n\n" +
                 profiling.format_top(profiling.top_ops(slow, 6))))


# %% [markdown] id="cell-021"
# Read the *calls* column first — it does not depend on the machine's load, the self times
# do. `aten::slice`, the loss operators (`aten::nll_loss_forward`, `NllLossBackward0`, …)
# and their backward nodes run 64 or 192 times per step: once per sample. The matmuls
# (`aten::addmm`, `aten::mm`) are not in the list at all. The bottleneck is *operator count*
# — framework overhead per call — not arithmetic.
#
# ### Exercise 12.6 — the batched loss
#
# Write `batched_loss(logits, targets)`: the mean cross-entropy of a batch of logits
# (n × classes, a torch tensor that requires grad) against integer targets, as one batched
# computation — no Python loop over samples. Make it numerically safe for large logits
# (log-softmax, not the log of a softmax you computed). The check runs it and its backward
# under `torch.profiler` at two batch sizes: a batched loss makes the same number of operator
# calls at both.

# %% id="lab-batched-loss"
def batched_loss(logits, targets):
    ### BEGIN SOLUTION
    logp = logits.log_softmax(dim=1)
    return -logp.gather(1, targets[:, None]).mean()
    ### END SOLUTION


# %% labkit={"exercise": "12.6"} tags=["check"]
check("12.6", batched_loss)

# %% [markdown] id="op-calls-md"
# ### Exercise 12.7 — count a step's operator calls
#
# `profile_step` keeps the first profiled step's rows as plain trees (`slow.step_rows`:
# `{"name", "self_s", "start_s", "end_s", "children"}`, as in chapter 01). Write
# `op_calls(rows)`: a dict of name → how many rows of that name the tree holds, children
# included — the step's calls per operator, which no load on the machine can change.

# %% id="lab-op-calls"
from collections import Counter


def op_calls(rows):
    ### BEGIN SOLUTION
    calls = Counter()
    for row in rows:
        calls[row["name"]] += 1
        calls.update(op_calls(row["children"]))     # the rows inside this one
    return dict(calls)
    ### END SOLUTION


# %% labkit={"exercise": "12.7"} tags=["check"]
check("12.7", op_calls)


# %% [markdown] id="cell-023"
# ### Exercise 12.8 — a speedup with its confidence interval
#
# Write `speedup_with_ci(baseline, candidate, level=0.95, resamples=2000, seed=0)` returning
# `(speedup, low, high)`: speedup = median(baseline) / median(candidate); the interval by
# bootstrap — draw `resamples` resamples of each set with replacement (independently), take
# the ratio of their medians each time, and report the (1 − level)/2 and (1 + level)/2
# percentiles of those ratios.

# %% id="cell-024"
def speedup_with_ci(baseline, candidate, level=0.95, resamples=2000, seed=0):
    ### BEGIN SOLUTION
    a, b = np.asarray(baseline, float), np.asarray(candidate, float)
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    lo, hi = np.percentile(ma / mb, [50 * (1 - level), 50 * (1 + level)])
    return float(np.median(a) / np.median(b)), float(lo), float(hi)
    ### END SOLUTION


# %% labkit={"exercise": "12.8"} tags=["check"]
check("12.8", speedup_with_ci)

# %% [markdown] id="profile-fix-md"
# Now fix the step with your loss, count both steps' calls with your `op_calls`, time them
# with your `interleaved` harness and give the speedup with your interval:

# %% id="profile-fix"
# NBVAL_IGNORE_OUTPUT
with threads(1):
    steps = {"per-sample loss": profiling.loss_step(metrics.digits_mlp(), xb, yb, batched=False),
             "batched loss": profiling.loss_step(metrics.digits_mlp(), xb, yb,
                                                 loss=batched_loss)}
    t = interleaved(steps, repeats=15, warmup=2)
    fast = stack.profile_step(steps["batched loss"], steps=5, unprofiled=False)
display(Markdown(profiling.format_calls(op_calls(slow.step_rows), op_calls(fast.step_rows))))
s, lo, hi = speedup_with_ci(t["per-sample loss"].samples, t["batched loss"].samples)
for name, timing in t.items():
    print(f"{name}: {timing}")
print(f"speedup {s:.1f} [{lo:.1f}, {hi:.1f}] (95 % bootstrap interval, {frameworks.whose(interleaved)})")
reveal("12.fix", round(s, 1))


# %% [markdown] id="cell-026"
# ## 4. Framework comparison (seed 004)
#
# Seed 004 compares frameworks by training and inference speed. The same 64-hidden-10 MLP,
# the same weights, the same batch of digits, one SGD step, in: hand-written numpy (forward,
# softmax cross-entropy and backward by hand — yours, below), this course's
# `labkit.autograd` (chapter 02), PyTorch eager, `torch.compile` (cold: its first call,
# which compiles; and warm), JAX (`jax.jit` of the whole step: its first call traces the
# Python function and compiles it with XLA, so it too is timed cold and warm; chapter 02
# shows the jaxpr it traces), and ONNX Runtime for inference. TensorFlow, which the seeds
# also name, is not in the course's pinned environment (`environment.yml`), so it has no
# row: a row for a framework that is not installed would be a number typed in, not measured.
#
# ### Exercise 12.9 — an MLP's loss and gradients by hand
#
# Write `mlp_grads(params, x, y)` for `params = [(W1, b1), (W2, b2), …]` — any number of
# layers, W of shape (in, out): a₀ = x, zᵢ = aᵢ Wᵢ + bᵢ, aᵢ₊₁ = max(zᵢ, 0) between layers,
# and on the last z the mean softmax cross-entropy against the integer labels y. Return
# `(loss, [(dW1, db1), (dW2, db2), …])`. Subtract each row's maximum of z before `exp` (z
# near 800 overflows float64; near 89, float32). Backward from the last layer:
# dz = (softmax(z) − onehot(y)) / n; for each layer, dWᵢ = aᵢᵀ dz and dbᵢ = Σ dz over the
# batch, then dz ← (dz Wᵢᵀ) where the layer below's z was > 0 (else 0).

# %% id="lab-mlp-grads"
def mlp_grads(params, x, y):
    ### BEGIN SOLUTION
    acts = [x]                                  # the input of every layer
    for w, b in params[:-1]:
        acts.append(np.maximum(acts[-1] @ w + b, 0))
    w_out, b_out = params[-1]
    z = acts[-1] @ w_out + b_out
    z = z - z.max(axis=1, keepdims=True)        # exp(z) <= 1: no overflow
    e = np.exp(z)
    total = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = np.mean(np.log(total[:, 0]) - z[rows, y])
    onehot = np.eye(z.shape[1], dtype=z.dtype)[y]
    dz = (e / total - onehot) / len(y)
    grads = []
    for (w, _), a in zip(reversed(params), reversed(acts)):
        grads.append((a.T @ dz, dz.sum(axis=0)))
        dz = (dz @ w.T) * (a > 0)               # ReLU: a > 0 exactly where its z was
    return loss, grads[::-1]
    ### END SOLUTION


# %% labkit={"exercise": "12.9"} tags=["check"]
check("12.9", mlp_grads)

# %% [markdown] id="cell-027md"
# First, proof that the implementations compute the same thing (your gradients in the
# numpy row):

# %% id="cell-027"
same = frameworks.check_same(seed=0, steps=3, grads=mlp_grads)
for k, losses in same.items():
    print(f"{k:16s}", [f"{l:.5f}" for l in losses])

# %% [markdown] id="cell-028"
# **Predict:** which is fastest for the *training step* at this size (hidden 128, batch 64):
# numpy by hand, labkit.autograd or torch eager?

# %% id="cell-029"
### BEGIN SOLUTION
guess = "numpy (by hand)"
### END SOLUTION
predict("12.fastest", guess, "fastest training step",
        choices=["numpy (by hand)", "labkit.autograd", "torch eager"])

# %% id="frameworks"
# NBVAL_IGNORE_OUTPUT
fw_rows = frameworks.compare(hidden=128, batch_size=64, bench=benchmark, interleave=interleaved,
                             grads=mlp_grads, include_compile=True, repeats=10, seed=0)
print(f"measured on one thread with {frameworks.whose(interleaved)}, interleaved; "
      f"torch.compile's first call with {frameworks.whose(benchmark)}")
display(Markdown(frameworks.format_rows(fw_rows)))
fig = plots.plot_rows(fw_rows)
plt.show()
plt.close(fig)
reveal("12.fastest", frameworks.fastest_trainer(
    [r for r in fw_rows if r.name in ("numpy (by hand)", "labkit.autograd", "torch eager")]))

# %% [markdown] id="cell-031"
# At this size every implementation is overhead-bound: the two matmuls take a few
# microseconds, and what differs is what each framework does around them. Hand-written numpy
# does exactly the arithmetic and nothing else; labkit.autograd adds a Python graph walk;
# PyTorch eager adds its dispatcher, autograd engine and optimizer machinery per operator —
# costs that buy generality and become negligible once the matmuls are large. ONNX Runtime
# runs the whole exported graph in C++ with no Python per operator, which is why it beats
# torch eager at inference. The two compilers' notes give their first calls. torch.compile
# pays seconds of tracing and code generation (faster the second time you run the notebook,
# when Inductor finds its compiled kernels in its on-disk cache); warm, its forward and
# backward run as generated, fused code (AOTAutograd compiles the backward too), but at this
# size that need not beat eager: the kernels are tiny, and the optimizer step and the guards
# and Python around the compiled graph remain. `jax.jit` compiles the *whole* step — loss,
# gradients and update — into one XLA program in well under a second, and warm it runs with
# no Python per operator. A framework ranking is a statement about one workload on one
# machine — report the workload, cold and warm.
#
# **Widen it.** `frameworks.compare(hidden=1024, batch_size=512, bench=benchmark,
# interleave=interleaved, grads=mlp_grads)` (add `include_compile=True` to see the compile
# again) runs the same comparison on a model whose matmuls dominate; try it and watch the
# order change.
#
# ## 5. Deployment: export, quantize, fit a budget
#
# Seed 004 (§4.1) separates cloud deployment (big servers, a latency target) from edge
# deployment (a small device, a size and power budget). Three variants of the trained MLP:
# fp32 eager, dynamic int8 (`torch.ao.quantization.quantize_dynamic`: int8 weights,
# activations quantized on the fly; Jacob et al., CVPR 2018), and fp32 ONNX exported through
# `torch.export` and run by ONNX Runtime.

# %% id="cell-032"
mlp = cards["mlp"].trained.model
program = deploy.export_program(mlp)
print("torch.export graph:", deploy.graph_ops(program))


# %% [markdown] id="cell-033"
# ### Exercise 12.10 — the size of an int8 model
#
# Write `int8_bytes(layers)` for a list of Linear layers `(in_features, out_features)`: after
# dynamic int8 quantization each weight takes 1 byte, each bias stays fp32 (4 bytes), and
# each layer stores a scale (fp32) and a zero point (int32) — 8 bytes.

# %% id="cell-034"
def int8_bytes(layers):
    ### BEGIN SOLUTION
    return sum(i * o + 4 * o + 8 for i, o in layers)
    ### END SOLUTION


# %% labkit={"exercise": "12.10"} tags=["check"]
check("12.10", int8_bytes)

# %% id="deploy"
# NBVAL_IGNORE_OUTPUT
with tempfile.TemporaryDirectory(prefix="ch12-") as workdir:   # the exported files
    variants = deploy.variants(mlp, data.x_test, data.y_test, workdir, requests=100)
shape = [(64, 128), (128, 10)]
print(deploy.format_payload(shape, int8_bytes(shape)))
for v_ in variants:
    print(f"{v_.name:18s} file {v_.bytes:7,} B  latency {v_.latency_s * 1e6:6.0f} µs  accuracy {v_.accuracy:.3f}")

# %% [markdown] id="cell-037"
# The files are bigger than the payload — `torch.save` and ONNX add names, shapes and
# structure — and int8 shrinks the file by about 3×, not 4×, because of the biases and that
# overhead. Accuracy is unchanged here. Latency is *not* better for int8 on this tiny model:
# quantizing activations on the fly costs more than the int8 matmul saves. Quantization buys
# size and bandwidth first; speed only when the matmuls dominate.
#
# **Predict:** an edge device 10× slower than this machine, with 30 kB of storage for the
# model and a 1 ms latency budget. Which variant fits?

# %% id="cell-038"
### BEGIN SOLUTION
guess = "int8 dynamic"
### END SOLUTION
predict("12.edge", guess, "variant that fits 30 kB and 1 ms on a 10× slower device",
        choices=["fp32 eager", "int8 dynamic", "fp32 ONNX Runtime", "none"])

# %% id="cell-039"
widgets.deploy_widget(variants)

# %% id="cell-040"
edge = deploy.Budget("edge", max_bytes=30e3, max_latency_s=1e-3, slowdown=10)
reveal("12.edge", deploy.fitting(deploy.fits(variants, edge)));

# %% [markdown] id="cell-041"
# Under the cloud budget (`deploy.CLOUD`: 1 GB, 10 ms, this machine's speed) all variants
# fit, and one would pick by throughput and cost. Under the edge budget only int8 is small
# enough — and only if the device is not so slow that the quantization overhead breaks the
# latency budget: slide *slowdown* up and watch it fail.
#
# ## 6. Reading a systems paper: reproduce one of its numbers (seed 000, exercise 10)
#
# Seed 000's last exercise asks you to read a recent MLSys paper. Read it the way a systems
# engineer does: **reproduce one of its numbers** with a model you can run. Pick one of
# these (`papers.PAPERS`), find the setup in the paper, and compute its numbers with the
# labkit model named:
#
# | key | paper | numbers | labkit model |
# |---|---|---|---|
# | `"zero"` | Rajbhandari et al., *ZeRO*, SC 2020, Figure 1 | model-state GB per GPU at ZeRO stages 0–3: Ψ = 7.5 B, mixed-precision Adam, N_d = 64 | `labkit.memory.estimator.model_state_bytes` (chapter 06) |
# | `"korthikanti"` | Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, MLSys 2023, §5 | share of activation memory selective recomputation saves for GPT-3 175B and MT-NLG 530B | `labkit.memory.estimator.activation_bytes_per_layer` (chapters 06, 10) |
# | `"vllm"` | Kwon et al., *PagedAttention* (vLLM), SOSP 2023, §3 | KV cache of OPT-13B: KB per token, GB for a 2048-token request | `labkit.training.inference.kv_cache_bytes_per_token_per_layer` (chapter 03) |
#
# Set `paper` to the key and `reproduced` to a dict from each number's label (the keys of
# `papers.paper(key).published`) to your value; the next line sets them beside the paper's.

# %% id="seed-ex10"
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes
from labkit.training.inference import kv_cache_bytes_per_token_per_layer

### BEGIN SOLUTION
paper = "korthikanti"
full = lambda s, h, a: activation_bytes_per_layer(s, 1, h, a, sequence_parallel=True)
kept = lambda s, h, a: activation_bytes_per_layer(s, 1, h, a, sequence_parallel=True,
                                                  recompute="selective")
reproduced = {"GPT-3 175B": 1 - kept(2048, 12288, 96) / full(2048, 12288, 96),
              "MT-NLG 530B": 1 - kept(2048, 20480, 128) / full(2048, 20480, 128)}
### END SOLUTION
print(papers.format_reproduction(paper, reproduced))

# %% [markdown] id="cell-043"
# Then ask what the number leaves out. ZeRO's figure counts model states only: not
# activations (chapters 06 and 10), temporary buffers, fragmentation (chapter 06's
# allocator) or the communication stage 3 adds (1.5× the data-parallel baseline's volume,
# the paper's §7). Korthikanti's 70 % is of activation memory, for sequence length 2048: the
# share grows with the sequence (5as/h against 34), and it costs recomputing attention
# (2.7 % more FLOPs for GPT-3, by the paper). vLLM's 800 KB is per token and per sequence:
# the paper's point is that reserving the maximum length for every request wastes most of it.
# A reproduction is where a reader finds those edges.
#
# ## 7. The programmer's view: pitfalls
#
# * **Timing without warm-up** measures initialisation and compilation; the median can hide
#   it — look at the first sample, and measure a cold start on its own when users pay it.
# * **Timing a GPU without synchronising** measures the launch. Synchronise before starting
#   and before stopping the clock, or use CUDA events.
# * **Averages of long-tailed samples.** Report medians and percentiles with intervals — and
#   remember the interval is around the samples' median, not the truth.
# * **Comparing A then B** on a drifting machine: interleave.
# * **Leaving thread pools at default on a shared box**: pin them, or your numbers measure
#   the neighbours; measure the peak on the threads the run uses.
# * **Printing timings in graded output.** Timings vary run to run; only compare values that
#   do not (this notebook marks every timing cell `NBVAL_IGNORE_OUTPUT`).
# * **An unlabelled estimate.** Energy from a TDP model or a GPU time from a data sheet is a
#   prediction: say so next to the number.
#
# ## 8. Summary
#
# * Your `benchmark` does warm-up, synchronisation, repeats, the median and a seeded
#   bootstrap interval; without warm-up it reports compilation, without sync the launch.
# * Seed 002's metrics — accuracy, throughput, latency percentiles, memory, stability,
#   MFU, energy — are each a function in `labkit.perf.metrics`, and each says how it was
#   obtained; MFU is against a peak measured on the same threads.
# * Profile, count the calls, fix the operator that dominates, and prove the gain with an
#   interval.
# * Framework speed at small sizes is overhead; ONNX Runtime removes Python from inference;
#   `torch.compile` pays seconds on its first call, `jax.jit` a fraction of one for the
#   whole step.
# * Int8 shrinks the model about 3–4×; it speeds inference only when matmuls dominate.
#
# ## Exercises
#
# **Seed 000, exercise 10.** *Read a recent MLSys paper, summarise its optimisation and its
# practical value.*

# %% [markdown] id="cell-044"
# ### BEGIN SOLUTION
# **Answer (ZeRO, Rajbhandari et al., SC 2020).** Data parallelism replicates the model
# states — fp16 parameters and gradients and fp32 Adam states, 16 bytes per parameter — on
# every GPU. ZeRO partitions them over the N_d data-parallel ranks in three stages (optimizer
# states; plus gradients; plus parameters), gathering parameters just in time for each layer
# and reduce-scattering gradients instead of all-reducing them. Stages 1 and 2 keep the
# data-parallel communication volume (a reduce-scatter plus an all-gather equal one
# all-reduce); stage 3 adds 50 %. Its Figure 1 (reproducible above with `paper = "zero"`):
# 120 → 31.4 → 16.6 → 1.9 GB per GPU for 7.5 B parameters on 64 GPUs. Practical value, in
# the abstract's own terms: ZeRO alone, as data parallelism, trains models of up to 13 B
# parameters without model parallelism, which is harder to apply; its runs of over 100 B
# parameters on 400 GPUs (15 PFLOP/s) combine it with model parallelism (Megatron's tensor
# slicing). PyTorch FSDP is its stage-3 design in the framework. Where it does not help:
# activations (use checkpointing, chapter 06), and small clusters where N_d is too small to
# shrink the states much.
# ### END SOLUTION
