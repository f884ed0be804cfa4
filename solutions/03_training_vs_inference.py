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
# # Chapter 03 · Training vs inference
#
# Training and inference run the same forward pass, yet they ask very different things of a
# system. Training 训练 adds a backward pass and an optimizer step, and must keep the forward's
# activations 激活值 alive until backward; inference 推理 runs the forward alone, often in lower
# precision 精度, at a batch size set by a latency target. Here every one of those differences is
# **measured** on this machine — with labkit's counters and with PyTorch's own tools.
#
# **Objectives.** After this chapter you can
# 1. count the FLOPs of a forward and a backward pass and explain the ratio;
# 2. measure the bytes saved for backward, show that inference saves none of them — and
#    size what generating text keeps instead, the KV cache（键值缓存，KV Cache）;
# 3. choose a batch size from a latency/throughput measurement, and explain the curve by
#    weight reuse against a fixed cost per call;
# 4. predict what float32, bfloat16 and float16 do to a model's outputs;
# 5. explain BatchNorm and Dropout in train and eval modes and spot a missing `model.eval()`.
#
# **Guiding questions.** Why is backward about twice the forward? Where does training memory go?
# Why not always use the largest batch?

# %% id="cell-001"
import numpy as np
import torch
from IPython.display import display

from labkit.check import check
from labkit.autograd import Tensor, count, no_grad, functional as F
from labkit.autograd.nn import mlp
from labkit.check import predict, reveal
from labkit.training import phases
from labkit.training.phases import torch_phase_costs
from labkit.training import plots

# %% [markdown] id="cell-002"
# ## 1. FLOPs: forward vs backward
#
# For a layer `Y = X W` with `X` of shape `(B, k)` and `W` of shape `(k, n)` the forward costs
# `2Bkn` FLOPs (a multiply-add is two). Backward needs `dW = Xᵀ dY` — another `2Bkn` — and, unless
# `X` is the network's input, `dX = dY Wᵀ` — another `2Bkn`. So backward is about twice the
# forward. Below: one training step of a 64-256-256-10 MLP at batch 64, counted by labkit's op
# counter and by `torch.utils.flop_counter.FlopCounterMode` (which counts matrix products only).

# %% id="cell-003"
lab = phases.labkit_phase_costs((64, 256, 256, 10), batch=64)
tor = torch_phase_costs((64, 256, 256, 10), batch=64)
for c in (lab, tor):
    print(f"{c.engine:>6}: matmul forward {c.matmul_forward_flops:,} FLOPs, backward "
          f"{c.matmul_backward_flops:,} FLOPs, ratio {c.backward_over_forward:.3f}")
print(f"labkit, all ops: forward {lab.forward_flops:,}, backward {lab.backward_flops:,} FLOPs")
fig = plots.plot_phase_costs(lab)

# %% id="cell-004"
model = mlp((64, 256, 256, 10), seed=0)
xb = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
with count() as c:
    F.cross_entropy(model(Tensor(xb)), np.arange(64) % 10).backward()
print(c.table())


# %% [markdown] id="cell-005"
# The ratio is a little under 2 because the first layer's input needs no gradient: its `dX` is
# never computed.
#
# ### Exercise 3.1 — FLOPs of `Y = X W` in each phase
# Write `matmul_step_flops(batch, k, n, input_requires_grad)` returning `(forward, backward)`
# FLOPs of the product, as labkit counts them.

# %% id="cell-006"
def matmul_step_flops(batch, k, n, input_requires_grad):
    ### BEGIN SOLUTION
    fwd = 2 * batch * k * n
    return fwd, fwd * (2 if input_requires_grad else 1)
    ### END SOLUTION


# %% labkit={"exercise": "3.1"} tags=["check"]
check("3.1", matmul_step_flops)

# %% id="cell-008"
from labkit.training.phases import mlp_matmul_flops
fwd, bwd = mlp_matmul_flops((64, 256, 256, 10), 64, matmul_step_flops)   # your formula, summed over the layers
print("your formula:", fwd, bwd, "| FlopCounterMode:", tor.matmul_forward_flops, tor.matmul_backward_flops)

# %% [markdown] id="cell-009"
# ## 2. Memory: what training keeps for backward
#
# Backward reads values from the forward: a matrix product needs its inputs, ReLU its output,
# log-softmax its output. Autograd keeps them — *saved tensors* — until backward has used them.
# Inference under `no_grad()` records no graph and keeps no activations for backward
# (generating text does keep something else, the KV cache of section 6). labkit's counter reports the
# saved arrays (parameters apart; they live anyway); PyTorch shows its own through
# `torch.autograd.graph.saved_tensors_hooks`.

# %% id="cell-010"
for c in (lab, tor):
    print(f"{c.engine:>6}: saved for backward {c.saved_bytes_train:,} bytes in training, "
          f"{c.saved_bytes_inference:,} under no_grad")
from labkit.training.phases import format_saved_beyond, saved_beyond_labkit
print(format_saved_beyond(saved_beyond_labkit((64, 256, 256, 10), batch=64), lab, tor))


# %% [markdown] id="saved-why"
# Both engines keep the same activations; torch's graph keeps two small things more, both
# saved by `nll_loss` (the second half of `cross_entropy`, after `log_softmax`): the int64
# targets, which its backward scatters the gradient into, and `total_weight`, a 0-dimensional
# float tensor — the sum of the targets' class weights, which a mean reduction divides by
# (the batch size when there are no weights). PyTorch's `tools/autograd/derivatives.yaml`
# declares it: `nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction,
# SymInt ignore_index) -> (Tensor output, Tensor total_weight)`, with the backward
# `nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight)`; the
# cell read them from the graph as `NllLossBackward0._saved_target` and `._saved_total_weight`.
# labkit's cross-entropy picks each row's target from the log-softmax output and takes the
# mean: the row indices stay with the indexing op, not among the arrays its counter counts,
# and the mean divides by the number of rows.

# %% [markdown] id="cell-011"
# ### Exercise 3.2 — activation memory of an MLP
# For a Linear-ReLU-…-Linear network with widths `sizes` followed by cross-entropy, write
# `saved_activation_bytes(batch, sizes, itemsize)`: the bytes labkit saves for backward
# (parameters excluded). Think about which tensors each op keeps, and which of them are the same
# tensor.

# %% id="cell-012"
def saved_activation_bytes(batch, sizes, itemsize=4):
    ### BEGIN SOLUTION
    return itemsize * batch * sum(sizes)
    ### END SOLUTION


# %% labkit={"exercise": "3.2"} tags=["check"]
check("3.2", saved_activation_bytes)

# %% id="cell-014"
for batch in (1, 64, 4096):   # lab.parameter_bytes: the weights and biases, read from the model
    print(f"batch {batch:>5}: {saved_activation_bytes(batch, (64, 256, 256, 10), 4) / 2**20:8.3f} MiB of activations"
          f" vs {lab.parameter_bytes / 2**20:.3f} MiB of parameters")

# %% [markdown] id="cell-015"
# Activations grow with the batch, parameters do not: at large batch sizes activations dominate
# training memory — the reason for activation checkpointing (chapter 06).
#
# ## 3. Batch size, latency and throughput
#
# An inference server trades latency 延迟 (time for one batch) against throughput 吞吐量 (samples
# per second). Larger batches use the hardware better, until it is saturated; a real-time
# service may need batch 1. Measured here with the median of repeats (timings differ from run to
# run and machine to machine). Predict first: how many times higher is the throughput
# (samples per second) at batch 256 than at batch 1?

# %% id="batch-predict"
### BEGIN SOLUTION
guess = 50
### END SOLUTION
predict("3.batch", guess, "throughput at batch 256 / throughput at batch 1")

# %% id="cell-016"
from labkit.training.inference import batch_sweep, fit_latency, weight_reuse
sweep = batch_sweep((1, 4, 16, 64, 256), width=256)
first, last = sweep.points[0], sweep.points[-1]
print(f"batch {last.batch} vs batch {first.batch}: latency x{sweep.latency_growth:.1f}, "
      f"throughput x{sweep.throughput_gain:.1f}")
reveal("3.batch", round(sweep.throughput_gain, 1))
fit = fit_latency(sweep)
print(f"fit latency = {1e6 * fit.overhead_s:.0f} µs per call + {1e6 * fit.per_sample_s:.2f} µs per sample: "
      f"the fixed cost equals the per-sample cost at batch ≈ {fit.half_batch:.0f}")
print("FLOPs per byte of fp32 weights read, batch 1 / 256:", weight_reuse(1), "/", weight_reuse(256))
fig = plots.plot_batch_sweep(sweep)

# %% [markdown] id="batch-why"
# **Why the curve has this shape.** A call costs a fixed part and a part per sample:
# `latency(B) ≈ t₀ + B·t₁`, fitted above. The fixed part `t₀` is paid once per call whatever
# the batch: Python and operator dispatch, and reading every weight from memory once. The
# per-sample part `t₁` is the arithmetic, `2 × parameters` FLOPs per sample. So throughput
# `B / (t₀ + B·t₁)` rises almost linearly while `B·t₁ ≪ t₀` and levels off at `1/t₁` once
# `B·t₁ ≫ t₀`; half of that ceiling is reached at `B = t₀/t₁`. The same argument, in bytes:
# each weight read from memory serves one multiply-add per sample, so a batch of `B` does
# `2B / itemsize` FLOPs per weight byte (`weight_reuse`) — at batch 1 a matrix–vector product
# is bound by memory bandwidth, at large batch by arithmetic (the roofline of chapter 05).
# Latency, though, keeps growing with `B`: a latency budget caps the batch.

# %% id="cell-017"
from labkit.training.widgets import batch_sweep_widget
batch_sweep_widget()


# %% [markdown] id="cell-018"
# ### Exercise 3.3 — choose a batch size
# Write `best_batch(sweep, budget_s)`: among the points of a `BatchSweep` (each has `.batch`,
# `.latency_s`, `.throughput`) whose latency is within the budget, return the batch size with the
# highest throughput; `None` if none fits.

# %% id="cell-019"
def best_batch(sweep, budget_s):
    ### BEGIN SOLUTION
    ok = [p for p in sweep.points if p.latency_s <= budget_s]
    return max(ok, key=lambda p: p.throughput).batch if ok else None
    ### END SOLUTION


# %% labkit={"exercise": "3.3"} tags=["check"]
check("3.3", best_batch)

# %% id="cell-021"
budget = 2 * sweep.points[0].latency_s
print("with a budget of twice the batch-1 latency, use batch", best_batch(sweep, budget))

# %% [markdown] id="cell-022"
# ## 4. Precision: the same model in float32, bfloat16 and float16
#
# Training commonly uses FP32 or mixed precision (FP16/BF16); inference can go lower. The formats
# differ in what they spend their bits on. bfloat16 keeps float32's 8-bit exponent (same range)
# with an 8-bit significand (7 stored + 1 implicit): unit roundoff `u = 2⁻⁸`, about
# `log₁₀ 2⁸ ≈ 2.4` significant decimal digits. float16 has a 5-bit exponent (largest value 65504,
# smallest normal 2⁻¹⁴ ≈ 6.1e-5) and an 11-bit significand: `u = 2⁻¹¹`, about 3.3 digits
# (IEEE 754-2008; Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", 2019).
# (`torch.finfo(...).eps` is the gap above 1, `2u`; the cell prints both.) Below, one MLP with the
# same weights runs on the same input in each format and is compared with float64. Predict
# first: at which input scale does float16 first overflow (1, 10, 100, 1e3, 1e4 or 1e5)?

# %% id="precision-predict"
### BEGIN SOLUTION
guess = 1e5
### END SOLUTION
predict("3.fp16", guess, "smallest input scale at which float16 outputs overflow",
        choices=(1.0, 10.0, 100.0, 1e3, 1e4, 1e5))

# %% id="cell-023"
from labkit.training.inference import (dtype_facts, format_dtype_facts, format_precision,
                                       precision_scan)
print(format_dtype_facts(dtype_facts()))   # torch.finfo, and the unit roundoff u = eps / 2
scan = precision_scan((1.0, 10.0, 100.0, 1e3, 1e4, 1e5))
print(format_precision(scan, (1.0, 1e5)))
reveal("3.fp16", scan.first_overflow("float16"))

# %% id="cell-024" tags=["browser-test"]
from labkit.training.widgets import precision_widget
precision_widget()


# %% [markdown] id="precision-training"
# **In training.** Mixed precision does not halve the memory of the model states. With Adam, the
# mixed-precision recipe of Micikevicius et al. (2018) keeps fp16 weights and gradients (2 + 2
# bytes per parameter) *plus* fp32 master weights, momentum and variance (4 + 4 + 4): 16 bytes
# per parameter, the same as fp32 Adam (Rajbhandari et al., *ZeRO*, 2020, §3.1). PyTorch's
# `torch.amp` keeps the parameters and their gradients in fp32 and casts to 16 bits inside
# `autocast` on the fly, so its model states are fp32's too; what shrinks are the activations
# and the time of the matrix products. And float16's danger in training is not only overflow:
# small gradients *underflow* — below 2⁻²⁴ ≈ 6e-8 they flush to zero — and loss scaling
# (`torch.amp.GradScaler`) multiplies the loss so that they stay representable, then divides
# the gradients back before the update. bfloat16 has float32's range and needs no scaling.

# %% [markdown] id="cell-025"
# ## 5. BatchNorm and Dropout: two modes
#
# BatchNorm normalizes with the batch's mean and variance while training, and with running
# averages at inference; Dropout drops units with probability `p` while training (scaling the
# survivors by `1/(1−p)`) and does nothing at inference. `model.train()` and `model.eval()` switch
# them. Forget `eval()` and your predictions depend on the rest of the batch — and on chance.
#
# ### Exercise 3.4 — BatchNorm in eval mode
# Write `batchnorm_eval(x, running_mean, running_var, gamma, beta, eps)` for `x` of shape
# `(N, C)`.

# %% id="cell-026"
def batchnorm_eval(x, running_mean, running_var, gamma, beta, eps=1e-5):
    ### BEGIN SOLUTION
    return gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
    ### END SOLUTION


# %% labkit={"exercise": "3.4"} tags=["check"]
check("3.4", batchnorm_eval)


# %% [markdown] id="cell-028"
# ### Exercise 3.5 — inverted dropout
# Write `dropout_train(x, keep_mask, p)`: training-mode dropout given the 0/1 mask of kept units.
# Raise `ValueError` unless `0 <= p < 1`.

# %% id="cell-029"
def dropout_train(x, keep_mask, p):
    ### BEGIN SOLUTION
    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    return x * keep_mask / (1 - p)
    ### END SOLUTION


# %% labkit={"exercise": "3.5"} tags=["check"]
check("3.5", dropout_train)

# %% id="cell-031"
from labkit.training.modes import mode_rules_vs_torch
rules = mode_rules_vs_torch(batchnorm_eval, dropout_train, p=0.3)
print("mean activation after dropout_train(p=0.3):", rules.dropout_mean, "(1.0 before)")
print("matches torch eval BatchNorm:", rules.batchnorm_matches_torch)

# %% [markdown] id="cell-032"
# **The bug, measured.** A digits classifier with BatchNorm and Dropout, trained in PyTorch, then
# evaluated batch by batch — once correctly after `model.eval()`, once left in train mode.
# Predict first: left in train mode, is accuracy at test batch 2 higher or lower than at
# batch 256?

# %% id="modes-predict"
### BEGIN SOLUTION
guess = "lower"
### END SOLUTION
predict("3.eval", guess, "train-mode accuracy at batch 2 compared with batch 256",
        choices=("higher", "lower", "the same"))

# %% id="cell-033"
from labkit.training.modes import forgot_eval_experiment
res = forgot_eval_experiment(p=0.5)
for b, a_train, a_eval in zip(res.batch_sizes, res.acc_train_mode, res.acc_eval_mode):
    print(f"test batch {b:>3}: train mode {a_train:.3f}   eval mode {a_eval:.3f}")
reveal("3.eval", res.smallest_vs_largest)
fig = plots.plot_mode_accuracy(res)

# %% id="cell-034"
from labkit.training.widgets import forgot_eval_widget
forgot_eval_widget()

# %% [markdown] id="kv-md"
# ## 6. Generating text: the KV cache
#
# A language model generates one token at a time, and each new token attends to every token
# before it. Recomputing the keys and values of all earlier tokens at every step makes each
# step cost as much as a forward pass over the whole sequence — its attention alone grows as
# the square of the length, so the attention of a whole generation of `L` tokens grows as
# `L³`. Inference keeps them instead: the **KV cache**（键值缓存，KV Cache）. Then each step
# attends one new query over the cached keys, work linear in the length, and a whole
# generation's attention grows as `L²` (section 7 builds a cache, counts this work and times
# it). For each layer and each token the cache holds one key and one value vector per
# key/value head:
#
# `bytes per token per layer = 2 · n_kv_heads · head_dim · bytes per value`.
#
# With multi-head attention `n_kv_heads = n_heads`. Grouped-query attention (GQA; Ainslie et al.,
# 2023) lets groups of query heads share one key/value head — Llama-2-70B has 64 query heads and
# 8 KV heads (its `config.json`: `num_key_value_heads = 8`) — and only the KV heads are cached;
# the queries are used once and dropped. The cache grows linearly with the tokens and the batch,
# and at long contexts it rivals the weights. Predict first: how many GiB does Llama-2-70B's
# KV cache take for one 4,096-token sequence in 16-bit (80 layers, head_dim 128)?

# %% id="kv-predict"
### BEGIN SOLUTION
guess = 1.25
### END SOLUTION
predict("3.kv", guess, "GiB of KV cache, Llama-2-70B, 4096 tokens, batch 1, bf16")

# %% id="kv-widget"
from labkit.training import inference
from labkit.training.inference import DECODERS
from labkit.training.widgets import kv_cache_widget
reveal("3.kv", inference.kv_cache_bytes(DECODERS["Llama-2-70B"], 4096) / 2**30, unit="GiB")
kv_cache_widget()


# %% [markdown] id="kv-ex-md"
# ### Exercise 3.6 — KV-cache bytes per token per layer
# Write `kv_bytes_per_token_per_layer(n_heads, n_kv_heads, head_dim, dtype_bytes)`. The check
# tries multi-head, grouped-query and multi-query shapes, then multiplies your answer by layers ×
# tokens and compares it with the bytes a small GQA decoder's cache actually holds in PyTorch.

# %% id="kv-ex"
def kv_bytes_per_token_per_layer(n_heads, n_kv_heads, head_dim, dtype_bytes=2):
    ### BEGIN SOLUTION
    return 2 * n_kv_heads * head_dim * dtype_bytes
    ### END SOLUTION


# %% labkit={"exercise": "3.6"} tags=["check"]
check("3.6", kv_bytes_per_token_per_layer)

# %% id="kv-use"
from labkit.training.inference import format_kv_cache_rows, kv_cache_rows
rows = kv_cache_rows(kv_bytes_per_token_per_layer, seq=4096, batch=8)   # your rule x layers x tokens
print(format_kv_cache_rows(rows, seq=4096, batch=8))

# %% [markdown] id="lab-md"
# ## 7. Lab: a KV-cached decoder
#
# Section 6 sized the cache; now you build one and generate with it. `labkit.training.decoder`
# holds a small decoder in the shape of Llama (Touvron et al., 2023, §2.2; a ReLU MLP in
# place of SwiGLU): token embeddings, then per layer RMSNorm → attention with rotary
# positions and grouped-query heads → residual, RMSNorm → MLP → residual, and a final norm
# and the unembedding. Its weights are
# random (seeded), so the text it writes is token ids; everything a serving system does with
# it is real. The model gives you the parts that are not the lab's — `model.embed(tokens)`,
# `model.project(layer, h)` → `q, k, v`, `model.output(layer, o)`, `model.mlp(layer, h)`,
# `model.logits(h)` — and counts the token rows that go through its matrix products
# (`model.work`). You write the rest, five parts, each checked on inputs it draws afresh: the
# cache (3.7), rotary positions (3.8), attention over the cache (3.9), the decoding step
# (3.10) and greedy decoding (3.11). The last cells time *your* decoder against
# recomputation. Where a part of yours fails its check, labkit's takes its place in the cells
# after it, and the check says so.
#
# Shapes: a layer's activations `h` are `(n, d_model)` for `n` tokens; split into heads,
# `(heads, n, head_dim)`; the cache holds `(n_kv_heads, tokens, head_dim)` per layer.

# %% id="lab-model"
from labkit.training.decoder import DecoderConfig, init_decoder
config = DecoderConfig()        # 2 layers, 4 query heads sharing 2 key/value heads, float64
model = init_decoder(config)
q, k, v = model.project(0, model.embed([3, 1, 4]))
print(config, f"head_dim={config.head_dim}")
print("layer 0 on 3 tokens: q", q.shape, "k", k.shape, "v", v.shape)


# %% [markdown] id="kvcache-md"
# ### Exercise 3.7 — the cache
# Write `KVCache(n_layers, n_kv_heads, head_dim, dtype)`. `append(layer, k, v)` puts a step's
# keys and values `(n_kv_heads, new tokens, head_dim)` after that layer's cached ones and
# returns the layer's whole cache `(K, V)`; `length` is the number of tokens cached — the
# position of the next token; `nbytes` the bytes of the cached keys and values. Concatenating
# at every step is right but copies the whole cache each time (work linear in its length, per
# token); reserving room and doubling it when full copies each token a constant number of
# times on average (either passes). `append` raises `ValueError` for keys or values of the
# wrong shape. The check appends prompts, single tokens and chunks to
# caches of several shapes and dtypes, and holds `nbytes` to exercise 3.6's formula: exactly
# `2 · n_kv_heads · head_dim · itemsize` bytes more per token per layer.

# %% id="kvcache"
class KVCache:
    """Per layer, the keys and values of every token so far: (n_kv_heads, tokens, head_dim)."""

    def __init__(self, n_layers, n_kv_heads, head_dim, dtype="float64"):
        ### BEGIN SOLUTION
        self.dtype = np.dtype(dtype)
        room = (n_kv_heads, 8, head_dim)                  # reserved; doubled when full
        self.k = [np.empty(room, self.dtype) for _ in range(n_layers)]
        self.v = [np.empty(room, self.dtype) for _ in range(n_layers)]
        self.used = [0] * n_layers
        ### END SOLUTION

    def append(self, layer, k, v):
        """Add k, v (n_kv_heads, new, head_dim) to `layer`; return its cache (K, V)."""
        ### BEGIN SOLUTION
        want = (self.k[layer].shape[0], self.k[layer].shape[2])
        if k.shape != v.shape or k.ndim != 3 or (k.shape[0], k.shape[2]) != want:
            raise ValueError(f"k, v must be ({want[0]}, new, {want[1]}); got {k.shape}, {v.shape}")
        start, stop = self.used[layer], self.used[layer] + k.shape[1]
        if stop > self.k[layer].shape[1]:
            room = max(stop, 2 * self.k[layer].shape[1])
            for store in (self.k, self.v):
                grown = np.empty((k.shape[0], room, k.shape[2]), self.dtype)
                grown[:, :start] = store[layer][:, :start]
                store[layer] = grown
        self.k[layer][:, start:stop] = k
        self.v[layer][:, start:stop] = v
        self.used[layer] = stop
        return self.k[layer][:, :stop], self.v[layer][:, :stop]
        ### END SOLUTION

    @property
    def length(self):
        """Tokens cached: the position of the next token."""
        ### BEGIN SOLUTION
        return self.used[0]
        ### END SOLUTION

    @property
    def nbytes(self):
        """Bytes of the cached keys and values, all layers (not the room reserved)."""
        ### BEGIN SOLUTION
        per_token = 2 * self.k[0].shape[0] * self.k[0].shape[2] * self.dtype.itemsize
        return per_token * sum(self.used)
        ### END SOLUTION


# %% labkit={"exercise": "3.7"} tags=["check"]
check("3.7", KVCache)

# %% id="kvcache-use"
from labkit.training.decoder_measure import cache_growth, format_cache_growth
print(format_cache_growth(cache_growth(KVCache, config, tokens=4), kv_bytes_per_token_per_layer,
                          config))


# %% [markdown] id="rope-md"
# ### Exercise 3.8 — rotary positions
# A cache works only if a token's key, computed once, stays right while later tokens arrive.
# Rotary position embedding (RoPE; Su et al., *RoFormer*, 2021, §3.4) makes that so: it
# rotates the query and the key of the token at position `p` by angles `p·θᵢ`, so a score
# `q·k` depends on the two positions only through their difference. Write `rope(x, positions,
# base)` for `x` of shape `(heads, n, head_dim)` and `positions` of shape `(n,)`: with
# `half = head_dim / 2`, `θᵢ = base^(−i/half)` for `i < half`, and the angle `a = p·θᵢ`,
# the pair `(xᵢ, x_{i+half})` becomes
# `(xᵢ cos a − x_{i+half} sin a, x_{i+half} cos a + xᵢ sin a)`
# (the two-halves layout of Hugging Face's Llama, its `rotate_half`).

# %% id="rope"
def rope(x, positions, base=10000.0):
    ### BEGIN SOLUTION
    half = x.shape[-1] // 2
    angle = np.outer(positions, base ** (-np.arange(half) / half))      # (n, half)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    ### END SOLUTION


# %% labkit={"exercise": "3.8"} tags=["check"]
check("3.8", rope)


# %% [markdown] id="attend-md"
# ### Exercise 3.9 — attention over the cache
# `attend(q, K, V)`: `q` `(n_heads, n, head_dim)` holds the queries of the `n` newest tokens,
# `K` and `V` `(n_kv_heads, T, head_dim)` every cached token, the new ones last. Query head
# `h` reads key/value head `h // (n_heads / n_kv_heads)`. Query `i` sits at position
# `T − n + i` and may see the keys at positions up to its own: for one new token that is the
# whole cache, for a prompt (`n = T`) the causal triangle. Scores `q·kᵀ / √head_dim`, a
# softmax over the keys (subtract each row's maximum first: scores can be large), the
# weights times `V`. Return `(n_heads, n, head_dim)`; raise `ValueError` for more queries
# than cached tokens, or query heads that are not a multiple of the key/value heads.

# %% id="attend"
def attend(q, K, V):
    ### BEGIN SOLUTION
    n_heads, n, d = q.shape
    T = K.shape[1]
    if n > T:
        raise ValueError(f"{n} queries but only {T} cached tokens")
    if n_heads % K.shape[0]:
        raise ValueError(f"{n_heads} query heads cannot share {K.shape[0]} key/value heads")
    kv_of = np.arange(n_heads) // (n_heads // K.shape[0])   # the KV head each query head reads
    Kh, Vh = K[kv_of], V[kv_of]                               # (n_heads, T, d)
    scores = q @ Kh.swapaxes(1, 2) / d ** 0.5                # (n_heads, n, T)
    visible = np.arange(T)[None, :] <= (T - n + np.arange(n))[:, None]
    scores = np.where(visible, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ Vh
    ### END SOLUTION


# %% labkit={"exercise": "3.9"} tags=["check"]
check("3.9", attend)


# %% [markdown] id="step-md"
# ### Exercise 3.10 — the decoding step
# `decode_step(model, cache, tokens)` runs the next `n` tokens — positions `cache.length`,
# `cache.length + 1`, … — through every layer: embed them; per layer `q, k, v =
# model.project(layer, h)`, split into heads (`config.n_heads` for `q`, `config.n_kv_heads`
# for `k` and `v`), rotate `q` and `k` with your `rope` at their positions, append `k` and
# `v` to the cache, attend `q` over the cache's `K, V`, merge the heads back to
# `(n, n_heads·head_dim)`, then `h = h + model.output(layer, o)` and
# `h = h + model.mlp(layer, h)`; finally return `model.logits(h)`, `(n, vocab)`. The check
# feeds a prompt, then single tokens and a chunk, and holds every call's logits to labkit's
# within 1e-5 (labkit's equal the full recomputation `forward`'s to 1e-12).

# %% id="step"
def decode_step(model, cache, tokens):
    ### BEGIN SOLUTION
    cfg = model.config
    n, hd = len(tokens), cfg.head_dim
    positions = np.arange(cache.length, cache.length + n)
    h = model.embed(tokens)
    for layer in range(cfg.n_layers):
        q, k, v = model.project(layer, h)
        q = rope(q.reshape(n, cfg.n_heads, hd).swapaxes(0, 1), positions, cfg.rope_base)
        k = rope(k.reshape(n, cfg.n_kv_heads, hd).swapaxes(0, 1), positions, cfg.rope_base)
        K, V = cache.append(layer, k, v.reshape(n, cfg.n_kv_heads, hd).swapaxes(0, 1))
        o = attend(q, K, V).swapaxes(0, 1).reshape(n, cfg.n_heads * hd)
        h = h + model.output(layer, o)
        h = h + model.mlp(layer, h)
    return model.logits(h)
    ### END SOLUTION


# %% labkit={"exercise": "3.10"} tags=["check"]
check("3.10", decode_step)

# %% id="step-use"
from labkit.training.decoder_measure import incremental_vs_full
print("your decode_step on chunks of 5, 1, 1, 3, 1 tokens vs forward over all 11 at once: "
      f"largest logit difference {incremental_vs_full(decode_step, KVCache, config):.2e}")


# %% [markdown] id="greedy-md"
# ### Exercise 3.11 — greedy decoding
# `greedy_decode(model, prompt, steps)`: one cache for the whole generation (shape it from
# `model.config`: `n_layers`, `n_kv_heads`, `head_dim`, `dtype`); the prompt goes through
# `decode_step` at once (the *prefill*), then `steps` times the argmax of the last row of
# logits is the next token, fed back alone. Return the `steps` new tokens (`ValueError` for
# `steps < 0`). The check
# compares your tokens with full recomputation's on prompts it draws, and counts the token
# rows through the model's products: a decoder that rebuilds its cache (or calls `forward`)
# at every step writes the same tokens and fails that count.

# %% id="greedy"
def greedy_decode(model, prompt, steps):
    ### BEGIN SOLUTION
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    cfg = model.config
    cache = KVCache(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, cfg.dtype)
    new, feed = [], list(prompt)
    while len(new) < steps:
        logits = decode_step(model, cache, feed)
        new.append(int(logits[-1].argmax()))
        feed = new[-1:]
    return new
    ### END SOLUTION


# %% labkit={"exercise": "3.11"} tags=["check"]
check("3.11", greedy_decode)

# %% id="greedy-use"
from labkit.training.decoder_measure import format_generation_work
print(format_generation_work(greedy_decode, config, prompt_len=8, steps=24))


# %% [markdown] id="flops-md"
# ### Exercise 3.12 — attention work over a generation
# Per layer and query head, each query–key pair costs two products of `head_dim`
# multiply-adds — `q·kᵀ`, then the weight times `v` — so `4·head_dim` FLOPs, and `attend`
# computes the whole `n × T` score matrix, masked entries too. Write
# `attention_flops(length, n_layers, n_heads, head_dim, cached)`: the attention FLOPs of
# generating a sequence of `length` tokens one at a time, where step `t = 1 … length` holds
# `t` tokens — with the cache one query over `t` keys, without it `t` queries over `t` keys.

# %% id="flops"
def attention_flops(length, n_layers, n_heads, head_dim, cached):
    ### BEGIN SOLUTION
    steps = np.arange(1, length + 1)
    pairs = steps.sum() if cached else (steps * steps).sum()
    return 4 * n_layers * n_heads * head_dim * int(pairs)
    ### END SOLUTION


# %% labkit={"exercise": "3.12"} tags=["check"]
check("3.12", attention_flops)

# %% id="flops-use"
from labkit.training.decoder_measure import format_attention_totals
print(format_attention_totals(attention_flops, (128, 512, 2048), config))   # your formula

# %% [markdown] id="timing-md"
# **Time per token, measured.** The sums above grow as `L²` with the cache and `L³` without:
# per token, the cached step attends one query over `L` keys (linear in `L`) and projects one
# token, while recomputing projects all `L` tokens and attends `L` queries over them
# (quadratic). Below, your `decode_step` and your `KVCache` produce one new token after `L`
# tokens of context, once with the prefilled cache and once from an empty cache over all
# `L + 1` tokens (numpy pinned to one thread; the median of a few repeats). Predict first: at
# 512 tokens of context, how many times longer does a token take when everything is
# recomputed?

# %% id="timing-predict"
### BEGIN SOLUTION
guess = 100
### END SOLUTION
predict("3.decode", guess, "time per token at 512 tokens of context: recomputing / cached")

# %% id="timing"
from labkit.training.decoder_measure import decode_timing, format_decode_timing
timing = decode_timing(decode_step, KVCache, config, lengths=(16, 32, 64, 128, 256, 512),
                       repeats=3)          # your step, your cache
print(format_decode_timing(timing))
reveal("3.decode", round(timing.speedups[-1], 1))
fig = plots.plot_decode_timing(timing)

# %% [markdown] id="timing-why"
# **Reading the measurement.** The cached step's time hardly moves with the context: at these
# widths it is dominated by the few dozen numpy calls a step makes, and its attention — the
# only part that grows — is a single query. Recomputing grows with `L` from the projections
# and with `L²` from the attention, the FLOP columns above; its time per token follows them
# once the arrays are large enough for the arithmetic to outweigh the calls. A server pays the
# cache in memory instead (the right-hand column, section 6's formula): at long contexts and
# large batches that memory, not the FLOPs, limits how many sequences it can decode at once.

# %% [markdown] id="cell-035"
# ## Programmer's view: pitfalls
#
# * **Inference without `no_grad()`/`inference_mode()`** records a graph and saves activations
#   for a backward that never comes (section 2 measured the bytes).
# * **Forgetting `model.eval()`**: accuracy depends on the test batch size; batch-1 serving of a
#   BatchNorm model in train mode fails outright.
# * **Tiny batches waste the hardware**: per-call overhead dominates (section 3); but latency
#   budgets cap the batch.
# * **float16** overflows beyond 65504, and in training its small gradients underflow to zero:
#   loss scaling fights the underflow. bfloat16 keeps float32's range but has about 2.4 digits.
# * **Mixed precision does not halve the model states**: Adam still needs 16 bytes per parameter.
# * **The KV cache**, not the weights, often limits the batch of a text-generation server.
# * **Decoding without a cache** redoes a forward pass over the whole sequence for every new
#   token (section 7 counted the rows and timed it); **a cache that forgets positions** puts
#   every new token at position 0 — RoPE rotates by absolute position, so new tokens continue
#   from `cache.length`.
#
# ## Summary
#
# * Backward costs about twice the forward (two products per layer, one for the first).
# * Training keeps activations proportional to batch × width; inference under `no_grad` keeps
#   none of them, but generation keeps a KV cache of `2 · n_kv_heads · head_dim` values per token
#   per layer.
# * With the cache a new token goes through each layer once and attends one query over the
#   cache: a generation's attention grows as the square of its length, without the cache as
#   the cube — you wrote the cache, the attention, the step and the decoder that show it.
# * Throughput rises with batch size while a fixed per-call cost (dispatch, reading the weights)
#   is shared by more samples, and levels off at 1 / per-sample time; latency rises too.
# * Lower precision changes outputs by amounts you can measure; range (fp16) and digits (bf16)
#   fail differently.
# * BatchNorm and Dropout have two behaviours; `eval()` selects the inference one.
