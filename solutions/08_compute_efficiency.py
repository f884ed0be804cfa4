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
# # 08 · Compute efficiency: fusion, precision, compression
#
# *Deep Learning Systems: from algorithms to hardware* — chapter 08. Seed: 002 (计算效率提升方法, methods for improving compute efficiency: 模型精简 model slimming by 剪枝 pruning, 量化 quantization and 知识蒸馏 knowledge distillation; better structures such as 深度可分离卷积 depthwise-separable convolution; 混合精度训练 mixed-precision training).
#
# **Objectives.** After this chapter you can
#
# 1. explain and measure why 算子融合（operator fusion）speeds up chains of element-wise operations;
# 2. state the rounding error and range of fp16 and bf16, show loss scaling rescuing gradients that underflow, write a loss scaler and a mixed-precision training step that train a network under `torch.autocast` step for step like `torch.amp.GradScaler`, and say which ops autocast keeps in fp32;
# 3. quantize tensors to b-bit integers (affine, symmetric/asymmetric, per tensor/per channel) and measure accuracy, size and latency of an int8 model;
# 4. prune weights by magnitude (unstructured and structured), measure what fine-tuning recovers against a control, and explain why zeros alone do not make dense kernels faster;
# 5. distil a teacher into a small student and tell, with controls, where the gain comes from; count the cost of a depthwise-separable convolution.
#
# **Guiding questions.** Which of these techniques save *memory traffic*, which save *arithmetic*, and which only save *storage*? Why is an int8 model 4× smaller but, in numpy, slower — and what do a library's int8 kernels change?

# %% id="cell-001"
# %matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from labkit.check import check, predict, reveal
from labkit.compress import model as cm, amp, distill, loss_scaling, train, plots, widgets
from labkit.data import load_digits
from labkit.numerics import FORMATS, round_to
split = load_digits()

# %% [markdown] id="seed-002-compute"
# ## 1. Operator fusion
#
# Seed 002 lists the computation itself as the place to win efficiency. The cheapest win is not arithmetic at all: a layer's epilogue `y = max(x·a + b, 0)·g + residual` in numpy runs five operations, each reading its input array from memory and writing a temporary — 11 array reads and writes of $n$ floats (6 reads, 5 writes; `labkit.kernels.cpu.EPILOGUE_ARRAY_TRAFFIC`). A fused kernel reads `x` and `residual` once and writes `y` once: 3. Element-wise operations are memory-bound (a few FLOPs per 8–12 bytes), so the time follows the bytes moved. `labkit.kernels.cpu.epilogue_fused` is that chain as one `numba.njit(parallel=True)` loop (compiled on first call); `train.fusion_timing` checks that the two agree and times both (`labkit.kernels.cpu.compare_epilogue`).
#
# **Predict**: how many times faster will the fused version be on 4 M floats?

# %% id="cell-003"
### BEGIN SOLUTION
guess = 3.0
### END SOLUTION
predict("8.fusion", guess, "fused vs numpy speed-up of the epilogue chain")

# %% id="cell-004"
fusion = train.fusion_timing(n=1 << 22, repeats=5, seed=0)    # checks fused == numpy; compiles
print(f"numpy (5 passes): {fusion.numpy_s*1e3:.1f} ms = {fusion.bandwidth('numpy')/1e9:.1f} GB/s of array traffic;  "
      f"fused: {fusion.fused_s*1e3:.1f} ms = {fusion.bandwidth('fused')/1e9:.1f} GB/s")
print(train.fusion_trials(trials=3, repeats=3))       # the same comparison, three more times
reveal("8.fusion", round(fusion.speedup, 2))

# %% [markdown] id="mixed-precision"
# The ratio of bytes moved, 11/3 ≈ 3.7, is the speed-up fusion alone explains. The measured ratio can differ from it both ways: the fused loop also runs on both cores (numpy's passes use one) and skips numpy's fresh 16 MB temporaries (memory the allocator may have to map again and the kernel zero on first touch), but on a machine shared with other jobs a parallel loop waits for its slowest thread: the trials printed above show how far one run lies from the next here. Deep-learning compilers do this automatically: `torch.compile` (TorchInductor) fuses element-wise chains into one generated kernel; XLA and TVM do the same. Compiling takes tens of seconds on a cold cache, more than this notebook's budget, so the `torch.compile` vs eager comparison of the same chain is a row of `make bench` (`benchmarks/bench_compress.py`, measured by `train.compile_timing`), which prints the speed-up measured on your machine.
#
# ## 2. Mixed precision
#
# ### Formats
#
# With $p$ significand bits (the implicit leading 1 included), rounding to nearest has relative error at most the **unit roundoff** $u = 2^{-p}$ (IEEE 754; Higham, *Accuracy and Stability of Numerical Algorithms*, §2.1). fp16 has $p = 11$ and 5 exponent bits; bf16 (Kalamkar et al. 2019) keeps fp32's 8 exponent bits and only $p = 8$.

# %% id="cell-006"
print(f"{'format':6s} {'u = 2^-p':>10s} {'digits':>7s} {'largest':>10s} {'smallest normal':>16s} {'smallest subnormal':>19s}")
for f in FORMATS.values():
    print(f"{f.name:6s} {f.unit_roundoff:10.3g} {f.decimal_digits:7.2f} {f.max:10.3g} {f.min_normal:16.3g} {f.min_subnormal:19.3g}")
for v in (1 + 2**-9, 1 + 3 * 2**-9, 65519.0, 65520.0, 70000.0, 1e-8, 3e-5):
    print(f"{v!r:>22}  → fp16 {float(round_to(v, 'fp16'))!r:>22}   bf16 {float(round_to(v, 'bf16'))!r:>22}")

# %% [markdown] id="cell-007"
# fp16 gives about 3.3 decimal digits but its largest value is 65504: rounding to nearest sends anything below 65520 (halfway to the next step, 65536) down to 65504 and anything from 65520 up to inf (IEEE 754 binary16; the rows for 65519 and 65520 above), and it flushes values below $2^{-25}$ to zero; bf16 gives only 2.4 digits but the range of fp32, so it rarely overflows or underflows. That is why fp16 training needs **loss scaling** and bf16 training usually does not.
#
# ### Loss scaling
#
# Micikevicius et al. (2018, *Mixed Precision Training*, §3.2 and Fig. 3) found that many activation gradients of real networks are smaller than fp16 can hold: in fp16 they become 0 and those weights stop learning. Multiplying the loss by $S$ multiplies every gradient by $S$ (chain rule), shifting the histogram into fp16's range; the fp32 master copy of the gradients is divided by $S$ before the update. Too large an $S$ overflows to inf.
#
# **Predict**: gradients spread log-normally around $2^{-24}$ (the demo's). What share of them is lost in fp16 without scaling?

# %% id="cell-008"
### BEGIN SOLUTION
guess = 0.4
### END SOLUTION
predict("8.underflow", guess, "share of gradients that underflow in fp16 at loss scale 1")

# %% id="cell-009"
widgets.scaling_widget()

# %% id="cell-010"
reveal("8.underflow", round(cm.underflow_fraction(widgets.demo_gradients(), "fp16"), 2))


# %% [markdown] id="cell-011"
# A fixed scale must be chosen by hand; **dynamic loss scaling** (`torch.amp.GradScaler`) adapts it: start high (`init_scale` = $2^{16}$); after every step check the gradients for inf/NaN; if found, skip the optimizer step and multiply the scale by `backoff_factor` = 0.5; otherwise count a good step, and after `growth_interval` = 2000 consecutive good steps multiply the scale by `growth_factor` = 2 (PyTorch docs, `torch.amp.GradScaler`).
#
# ### Lab 8.3 — one GradScaler update
#
# Write `loss_scale_step(scale, found_inf, good_steps, growth_interval)` returning `(new_scale, new_good_steps, skipped)`.

# %% id="cell-012"
def loss_scale_step(scale, found_inf, good_steps, growth_interval):
    ### BEGIN SOLUTION
    if found_inf:
        return scale * 0.5, 0, True
    good_steps += 1
    if good_steps >= growth_interval:
        return scale * 2.0, 0, False
    return scale, good_steps, False
    ### END SOLUTION


# %% labkit={"exercise": "8.3"} tags=["check"]
check("8.3", loss_scale_step)

# %% id="cell-014"
# A run: the scale falls fast from 2^16 until the (simulated) gradients stop overflowing, then creeps up.
# Largest |gradient| of each step: 4·exp(N(0, 0.5²)), seeded; your loss_scale_step updates the scale.
run = loss_scaling.simulate(steps=400, growth_interval=50, seed=0, update=loss_scale_step)
print(f"skipped {run.n_skipped} of {run.steps} steps; final scale 2^{np.log2(run.final_scale):.0f}")
fig = plots.plot_curves(np.arange(run.steps), {"loss scale": run.scales}, "step", "scale", "dynamic loss scaling", logy=True)
plt.show(); plt.close(fig)


# %% [markdown] id="lab-scaler"
# ### Lab 8.6 — a loss scaler that trains a network
#
# The rule above is one part of `torch.amp.GradScaler`, a small object used in every fp16 training step (PyTorch docs, `torch.amp`, "Automatic Mixed Precision examples"):
#
# ```python
# scaler.scale(loss).backward()   # the gradients of S·loss: every gradient times S
# scaler.step(optimizer)          # unscale (grad / S); skip optimizer.step() if a gradient is inf/NaN
# scaler.update()                 # your rule of lab 8.3, with the factors given to the constructor
# ```
#
# Write the class `Scaler` with GradScaler's constructor arguments and methods (the source is `torch/amp/grad_scaler.py`):
#
# * `scale(loss)` returns `loss · S`; `get_scale()` returns S;
# * `unscale_(optimizer)` divides the gradient `p.grad` of every parameter in `optimizer.param_groups` by S and notes whether any is inf or NaN (`torch.isfinite`);
# * `step(optimizer)` unscales (if `unscale_` was not called in this step) and calls `optimizer.step()` only if every gradient was finite;
# * `update()`: an inf/NaN multiplies S by `backoff_factor` and resets the count of good steps; otherwise count the step, and at `growth_interval` good steps in a row multiply S by `growth_factor` and reset the count;
# * `state_dict()` / `load_state_dict(state)`: the scaler's part of a checkpoint, GradScaler's five entries (`scale`, `growth_factor`, `backoff_factor`, `growth_interval`, and `_growth_tracker`, the count of good steps) — without it a resumed run starts again from `init_scale`.
#
# The check trains the digits MLP under `torch.autocast("cpu", dtype=torch.float16)` twice, from the same weights on the same batches: once with your `Scaler`, once with `torch.amp.GradScaler("cpu")` (CPU autocast accepts fp16 in this torch; "float16 shares the lists of bfloat16"). The scale starts far too high, so fp16 overflows. After every step the loss scale, whether the step was skipped, and every parameter must be equal **bit for bit** (the scales are powers of two, so multiplying and dividing by S is exact); the hint names the first step that differs. Then your `state_dict()` must equal GradScaler's, and a GradScaler checkpoint must load into a fresh `Scaler()`. A subclass or wrapper of GradScaler, or of labkit's `LossScaler`, is refused.

# %% id="lab-scaler-code"
class Scaler:
    """Dynamic loss scaling with torch.amp.GradScaler's interface."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        ### BEGIN SOLUTION
        self.s = float(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.good_steps = 0
        self.found_inf = None          # None: this step's gradients not checked yet
        ### END SOLUTION

    def get_scale(self):
        """The current loss scale S (a float)."""
        ### BEGIN SOLUTION
        return self.s
        ### END SOLUTION

    def scale(self, loss):
        """loss · S: call .backward() on this."""
        ### BEGIN SOLUTION
        return loss * self.s
        ### END SOLUTION

    def unscale_(self, optimizer):
        """Divide every gradient of the optimizer's parameters by S; note whether one is inf/NaN."""
        ### BEGIN SOLUTION
        if self.found_inf is not None:
            raise RuntimeError("unscale_() was already called since the last update()")
        self.found_inf = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if not torch.isfinite(p.grad).all():
                        self.found_inf = True
                    p.grad.div_(self.s)
        ### END SOLUTION

    def step(self, optimizer):
        """Unscale (if not done yet), then optimizer.step() unless a gradient was inf/NaN."""
        ### BEGIN SOLUTION
        if self.found_inf is None:
            self.unscale_(optimizer)
        if not self.found_inf:
            optimizer.step()
        ### END SOLUTION

    def update(self):
        """After step(): back off on an overflow, grow after growth_interval good steps."""
        ### BEGIN SOLUTION
        if self.found_inf is None:
            raise RuntimeError("update() before step(): no gradients were checked")
        if self.found_inf:
            self.s *= self.backoff_factor
            self.good_steps = 0
        else:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self.s *= self.growth_factor
                self.good_steps = 0
        self.found_inf = None
        ### END SOLUTION

    def state_dict(self):
        """GradScaler's checkpoint: scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker (the count of good steps in a row)."""
        ### BEGIN SOLUTION
        return {"scale": self.s, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.good_steps}
        ### END SOLUTION

    def load_state_dict(self, state):
        """Restore a state_dict() (yours or GradScaler's)."""
        ### BEGIN SOLUTION
        self.s = float(state["scale"])
        self.growth_factor = state["growth_factor"]
        self.backoff_factor = state["backoff_factor"]
        self.growth_interval = state["growth_interval"]
        self.good_steps = state["_growth_tracker"]
        ### END SOLUTION


# %% labkit={"exercise": "8.6"} tags=["check"]
check("8.6", Scaler)


# %% [markdown] id="lab-amp-step"
# ### Lab 8.7 — the mixed-precision training step
#
# Now the step that uses a scaler, the recipe of the same PyTorch page. Write `amp_step(model, optimizer, scaler, x, y, dtype)`: zero the gradients; run the forward pass and the cross-entropy loss inside `torch.autocast("cpu", dtype=dtype)` (only the forward: the backward pass runs outside it, in the types autocast chose); backward on the scaled loss; `scaler.step(optimizer)`; `scaler.update()`; return the loss (unscaled). The check trains the MLP with `torch.amp.GradScaler` and your step, and with labkit's step, in fp16 and in bf16, and compares them step by step.

# %% id="lab-amp-step-code"
def amp_step(model, optimizer, scaler, x, y, dtype):
    """One training step on the batch (x, y) under torch.autocast("cpu", dtype=dtype) with
    the loss scaler `scaler`; returns the (unscaled) loss."""
    ### BEGIN SOLUTION
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss
    ### END SOLUTION


# %% labkit={"exercise": "8.7"} tags=["check"]
check("8.7", amp_step)

# %% [markdown] id="amp-run-md"
# Your scaler and your step now train the digits MLP (64-64-10, Adam) for 150 steps, in fp16 and in bf16, from the same weights on the same batches. The scale starts at $2^{24}$, far too high for fp16, and may grow every 20 good steps. `amp.compare_scalers` runs the fp16 training again with `torch.amp.GradScaler("cpu")` and reports the first step where the two differ (None: none).
#
# **Predict**: how many of the 150 fp16 steps will be skipped?

# %% id="amp-predict"
### BEGIN SOLUTION
guess = 10
### END SOLUTION
predict("8.amp", guess, "skipped steps of 150 in fp16, loss scale from 2^24")

# %% id="amp-run"
FORCED = dict(init_scale=2.0 ** 24, growth_interval=20)
runs = {d: amp.train_amp(split, Scaler(**FORCED), dtype=d, steps=150, step_fn=amp_step) for d in ("float16", "bfloat16")}
for d, r in runs.items():
    print(f"{d:9s} skipped {r.n_skipped:3d} of {r.steps} steps (first: {np.flatnonzero(r.skipped)[:8].tolist()}); "
          f"final scale 2^{np.log2(r.scales[-1]):.0f}; test accuracy {r.accuracy:.3f}")
print("first difference from GradScaler (fp16):",
      amp.compare_scalers(split, lambda: Scaler(**FORCED), lambda: torch.amp.GradScaler("cpu", **FORCED), steps=150))
fig = plots.plot_curves(np.arange(150), {d: r.scales for d, r in runs.items()}, "step", "loss scale S", "your Scaler under CPU autocast", logy=True)
plt.show(); plt.close(fig)
reveal("8.amp", runs["float16"].n_skipped)

# %% [markdown] id="amp-run-after"
# In fp16 the first steps overflow and are skipped while the scale halves down to where this network's scaled gradients fit (about $2^{19}$ here); from then on the scale probes upward every 20 good steps and an overflow knocks it back, so a few steps in every hundred are skipped — a skipped step costs its compute and nothing else: the parameters stay where they were. bf16 has fp32's exponent range: at the same scales nothing overflows, the scale only grows, and the loss scaler is not needed at all. Both train the MLP to about the same test accuracy (printed above).

# %% [markdown] id="cell-015"
# ### `torch.autocast` on the CPU
#
# `torch.autocast("cpu", dtype=torch.bfloat16)` runs selected ops in bf16 and leaves the parameters and the rest in fp32 (no GradScaler needed: bf16 has fp32's range). The torch.amp documentation ("CPU Op-Specific Behavior") lists them: *CPU ops that can autocast to bfloat16* — `conv1d/2d/3d`, `bmm`, `mm`, `linalg_vecdot`, `baddbmm`, `addmm`, `addbmm`, `linear`, `matmul`, … (matrix products, where low precision pays off and the kernels accumulate in fp32); *CPU ops that can autocast to float32* — losses such as `cross_entropy`, `mse_loss`, `nll_loss`, `binary_cross_entropy`, and a few ops needing range or precision (`prod`, `cdist`, linear algebra, …). Ops on neither list run in the type of their inputs; "float16 shares the lists of bfloat16". The CPU float32 list is shorter than the CUDA one: it has no norm, no `softmax` and no `sum` (the CUDA list has `layer_norm`, `group_norm`, `norm`, `softmax`, `sum`). We ask torch what it does, with fp32 inputs and with bf16 inputs:

# %% id="cell-016"
for op, dtype in train.autocast_dtypes().items():
    print(f"{op:30s} {dtype}")


# %% [markdown] id="quantization"
# Losses and `prod` are autocast to fp32 even on bf16 inputs: their error grows with the number of terms and their values span a wide range. On the CPU, `layer_norm`, `softmax` and `sum` are on neither list: on an fp32 input they stay fp32, but a bf16 input gives a bf16 result (measured above) — code that feeds them low-precision tensors, a normalisation after a bf16 matmul say, gets low-precision statistics unless it casts to fp32 itself. Matrix products are safe in bf16 because the kernels accumulate their products in fp32.
#
# ## 3. Quantization
#
# Affine quantization (Jacob et al. 2018, eq. 1) stores a real value $r$ as an integer $q$: $r = S(q - Z)$. **Asymmetric** $b$-bit: $q \in [0, 2^b - 1]$, the range $[\min, \max]$ widened to include 0, $S = (\max - \min)/(2^b - 1)$, $Z = \mathrm{round}(-\min/S)$ (so that $r = 0$ is exact: zero padding and ReLU zeros stay exact). **Symmetric**: $Z = 0$, $q \in [-(2^{b-1}-1), 2^{b-1}-1]$, $S = \max|r|/(2^{b-1}-1)$ (the restricted range, Wu et al. 2020 §3.1), which makes integer matmuls simpler.
#
# ### Lab 8.1 — scale and zero point
#
# Write `scale_zero_point(x, bits)`: the asymmetric per-tensor scale (float) and zero point (int).

# %% id="cell-018"
def scale_zero_point(x, bits):
    ### BEGIN SOLUTION
    lo, hi = min(float(np.min(x)), 0.0), max(float(np.max(x)), 0.0)
    scale = (hi - lo) / (2 ** bits - 1) if hi > lo else 1.0
    zero_point = int(np.clip(round(-lo / scale), 0, 2 ** bits - 1))
    return scale, zero_point
    ### END SOLUTION


# %% labkit={"exercise": "8.1"} tags=["check"]
check("8.1", scale_zero_point)


# %% [markdown] id="cell-020"
# One scale per tensor must cover the largest row; rows with small weights then get only a few levels. **Per-channel** quantization gives each output channel (a row of a Linear's weight, a filter of a conv) its own scale (Krishnamoorthi 2018).
#
# ### Lab 8.2 — quantize per channel
#
# Write `quantize_per_channel(w, bits)` for a weight of shape (out, in): symmetric, one scale per row; return `(q, scales)`.

# %% id="cell-021"
def quantize_per_channel(w, bits):
    ### BEGIN SOLUTION
    qmax = 2 ** (bits - 1) - 1
    scales = np.abs(w).max(axis=1) / qmax
    scales = np.where(scales > 0, scales, 1.0)
    q = np.clip(np.round(w / scales[:, None]), -qmax, qmax).astype(np.int64)
    return q, scales
    ### END SOLUTION


# %% labkit={"exercise": "8.2"} tags=["check"]
check("8.2", quantize_per_channel)

# %% id="cell-023"
w = widgets.demo_weights()      # 16 rows whose ranges span 50x
bits = [2, 3, 4, 5, 6, 8]
err = cm.quant_error_curve(w, bits, symmetric=True)      # relative RMS error, per tensor and per channel
for b, a, c in zip(bits, err["per tensor"], err["per channel"]):
    print(f"{b} bits: relative RMS error per tensor {a:.4f}, per channel {c:.4f}")
fig = plots.plot_curves(bits, err, "bits", "relative RMS error", "Quantization error vs bits", logy=True)
plt.show(); plt.close(fig)

# %% [markdown] id="cell-024"
# Each extra bit halves the step and so the error (a straight line on the log scale). **Predict** before moving the widget: at 4 bits symmetric per tensor, what will the *median* row's relative error be (0 to 1)?

# %% id="cell-025"
### BEGIN SOLUTION
guess = 0.3
### END SOLUTION
predict("8.quant4", guess, "median row relative error, 4-bit per tensor")

# %% id="cell-026" tags=["browser-test"]
widgets.quant_widget()

# %% id="cell-027"
rel = cm.relative_error(w, cm.fake_quant(w, 4, True), axis=1)     # per row
reveal("8.quant4", round(float(np.median(rel)), 2))

# %% [markdown] id="cell-028"
# ### A trained model, quantized
#
# An MLP 64-128-128-10 trained on the digits; its weights fake-quantized to $b$ bits (symmetric), per tensor and per channel:

# %% id="cell-029"
teacher = train.train_mlp((64, 128, 128, 10), split, epochs=15)
bits = [8, 6, 4, 3, 2]
acc = train.accuracy_vs_bits(teacher, split, bits)
print("fp32 test accuracy:", round(train.accuracy(teacher, split.x_test, split.y_test), 4))
for name, a in acc.items():
    print(f"{name:12s}", "  ".join(f"{b} bits {x:.3f}" for b, x in zip(bits, a)))
fig = plots.plot_curves(bits, acc, "bits", "test accuracy", "Digits MLP: accuracy vs weight bits"); plt.show(); plt.close(fig)

# %% [markdown] id="cell-030"
# Now real int8 inference, three ways: the fp32 model in torch; labkit's `QuantLinear` (int8 weights per channel, activations quantized per batch at run time, integer accumulation); and PyTorch's dynamic quantization, `torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`, with fbgemm/oneDNN int8 kernels (deprecated in favour of the `torchao` package — its warning announces removal — but still present in the installed torch 2.13). It is not the same scheme as labkit's: its default `default_dynamic_qconfig` quantizes each weight **per tensor** (a `MinMaxObserver` with `per_tensor_symmetric`, scale max|w| / 127.5 over [−128, 127]; `torch/ao/quantization/observer.py`); `per_channel_dynamic_qconfig` gives one scale per row, as labkit's `QuantLinear` (max|w_row| / 127 over [−127, 127]). We read the schemes from the quantized objects, then compare accuracy, size (the stored bytes) and latency (one forward pass on 256 rows):

# %% id="cell-031"
for sch in train.int8_weight_schemes(teacher):
    print(f"{sch.name:52s} {sch.qscheme:22s} {sch.scales:4d} scale(s), max|w| = {sch.levels:.2f} steps")
rows = train.compare_int8(teacher, split)
for r in rows:
    print(f"{r.name:22s} accuracy {r.accuracy:.4f}   {r.nbytes/1e3:7.1f} kB   {r.latency_s*1e3:7.3f} ms")

# %% [markdown] id="pruning"
# All int8 versions keep the accuracy and are 3 to 4× smaller (1 byte instead of 4 per weight, plus the scales; torch's per-channel version stores a scale and a zero point per row). Latency is another matter: labkit's numpy version is several times *slower* than fp32 torch — numpy has no int8 matrix kernel, so it quantizes, converts and multiplies in float64 — while torch's versions call int8 GEMM kernels (fbgemm / oneDNN) and are about as fast as fp32, a little slower, at this tiny size, where quantizing the activations on every call costs about what the int8 GEMM saves; the gain grows with the layer size. Quantization saves time only where the hardware and the kernel library support low-precision arithmetic; it always saves memory and bandwidth.
#
# ## 4. Pruning
#
# Magnitude pruning (Han et al. 2015) zeroes the weights with the smallest $|w|$ (**unstructured**); **structured** pruning removes whole output channels (rows, filters) with the smallest norm (Li et al. 2017 rank filters by their ℓ1 norm; we use ℓ2), so the layer becomes genuinely smaller. Below: accuracy of the trained MLP with its hidden layers pruned, without fine-tuning (fine-tuning follows the labs, measured).

# %% id="cell-033"
sp = [0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95]
curves = {kind: train.prune_curve(teacher, split, sp, kind) for kind in ("unstructured", "structured")}
for kind, a in curves.items():
    print(f"{kind:12s}", " ".join(f"{s:.0%}:{x:.3f}" for s, x in zip(sp, a)))
fig = plots.plot_curves(sp, curves, "sparsity", "test accuracy", "Pruning without fine-tuning"); plt.show(); plt.close(fig)


# %% [markdown] id="cell-034"
# ### Lab 8.4 — a structured pruning mask
#
# Write `structured_mask(w, sparsity)`: for a weight of shape (out, in), a boolean mask of the same shape that removes `round(sparsity · out)` whole rows, those with the smallest L2 norm.

# %% id="cell-035"
def structured_mask(w, sparsity):
    ### BEGIN SOLUTION
    k = int(round(sparsity * w.shape[0]))
    keep = np.ones(w.shape[0], dtype=bool)
    keep[np.argsort(np.linalg.norm(w, axis=1), kind="stable")[:k]] = False
    return np.repeat(keep[:, None], w.shape[1], axis=1)
    ### END SOLUTION


# %% labkit={"exercise": "8.4"} tags=["check"]
check("8.4", structured_mask)


# %% [markdown] id="lab-magnitude-mask"
# ### Lab 8.8 — an unstructured pruning mask
#
# Write `magnitude_mask(w, sparsity)`: a boolean mask shaped like `w` (True keeps a weight) that zeroes the `round(sparsity · w.size)` weights of smallest magnitude $|w|$, ranked over the whole layer (Han et al. 2015, §3).

# %% id="lab-magnitude-mask-code"
def magnitude_mask(w, sparsity):
    ### BEGIN SOLUTION
    k = int(round(sparsity * w.size))
    keep = np.ones(w.size, dtype=bool)
    keep[np.argsort(np.abs(w).ravel(), kind="stable")[:k]] = False
    return keep.reshape(w.shape)
    ### END SOLUTION


# %% labkit={"exercise": "8.8"} tags=["check"]
check("8.8", magnitude_mask)

# %% [markdown] id="finetune-md"
# ### Pruning, then fine-tuning, measured
#
# Han et al. (2015, §3) prune and then *retrain* the connections that remain. `train.prune_finetune` does that with your masks (`mask_fn=`): it prunes the trained MLP, fine-tunes it with Adam on the training set, multiplies the weights by their masks after every step so the pruned ones stay exactly 0 (the `zeros` column), and measures the test accuracy after k steps. The row at 0 % sparsity is the **control**: the dense model fine-tuned for the same steps. A recovery is the pruned row against that row at the same k, not against the accuracy before fine-tuning.
#
# **Predict**: after 400 fine-tuning steps, what test accuracy will the MLP with 90 % of its hidden rows removed (structured) reach? (Just pruned, it is where the structured curve above puts 90 %.)

# %% id="finetune-predict"
### BEGIN SOLUTION
guess = 0.8
### END SOLUTION
predict("8.finetune", guess, "structured 90 %: test accuracy after 400 fine-tuning steps")

# %% id="finetune-run"
finetuned = {kind: train.prune_finetune(teacher, split, sparsities=(0.0, 0.5, 0.7, 0.9, 0.95), steps=(0, 25, 100, 400), kind=kind, mask_fn=mask)
             for kind, mask in (("unstructured", magnitude_mask), ("structured", structured_mask))}
for curve in finetuned.values():
    print(train.format_finetune(curve), end="\n\n")
reveal("8.finetune", round(finetuned["structured"].at(0.9, 400), 3))

# %% [markdown] id="finetune-after"
# Read the tables row against the control. Unstructured pruning to 50–70 % costs up to 3 points before fine-tuning and, after 400 steps, lands within a point of the control; even at 90 % all but about 2 points come back. Structured pruning hurts far more at the same sparsity (whole neurons go), and fine-tuning recovers a large part of it — but at 95 % of the rows (6 of 128 neurons per layer left) the small network stays well below the control after 400 steps. The control row itself moves: fine-tuning the dense model on the training set changes its test accuracy too, which is why a recovery is read against it.

# %% [markdown] id="cell-037"
# **Why unstructured zeros do not speed up dense kernels.** A dense matmul multiplies every entry whether it is zero or not: same FLOPs, same bytes, same time. A sparse format (CSR) skips the zeros but stores an index per nonzero and reads $x$ irregularly: at moderate sparsity it is slower than dense, and even at 90 % it gains far less than the 10× fewer FLOPs (hardware support such as NVIDIA's 2:4 structured sparsity exists for exactly this reason). Structured pruning simply makes a smaller dense matrix. Measured on one thread ($x$: 256×1024, $W$: 1024×1024, 50 % and 90 % pruned; best of 5 runs; on this shared machine two timings of the same dense product can differ severalfold — compare the two "dense" rows — so compare rows within one block):

# %% id="cell-038"
for s in (0.5, 0.9):
    for name, t in train.sparse_matmul_timing(n=1024, batch=256, sparsity=s).items():
        print(f"{name:28s} {t*1e3:7.2f} ms")
    print()


# %% [markdown] id="distillation"
# ## 5. Knowledge distillation
#
# Hinton, Vinyals & Dean (2015, §2) train a small **student** on the **teacher**'s softened outputs $\mathrm{softmax}(z/T)$: at temperature $T > 1$ the teacher's small probabilities for wrong classes (a 3 that looks a bit like an 8) carry information that one-hot labels lack. The loss is $\alpha T^2\,\mathrm{KL}(p_t^T\,\|\,p_s^T) + (1-\alpha)\,\mathrm{CE}(y, p_s)$, where $p^T = \mathrm{softmax}(z/T)$ and the cross-entropy uses $T = 1$; the factor $T^2$ keeps the soft term's gradients, which scale as $1/T^2$, comparable when $T$ changes. Soft targets also need no labels: the teacher can label a **transfer set**. Here the student (64-16-10, about 20× fewer weights than the teacher) may see only 60 labels; the other 1288 training images are its transfer set.
#
# ### Lab 8.9 — the distillation loss
#
# Write `kd_loss(student_logits, teacher_logits, labels, T=4.0, alpha=0.9)` in torch (a scalar the student's gradient flows through): the KL term averaged over the images of the batch, the cross-entropy over the labelled ones — a label −100 (`distill.NO_LABEL`) marks a transfer image without a label, and `F.cross_entropy` leaves such rows out by default (`ignore_index=-100`). The check compares your loss and its gradient with a computation by hand and with `F.kl_div` on logits you have not seen, and names the usual slips (no $T^2$, the KL the wrong way round, probabilities where `F.kl_div` wants log-probabilities).

# %% id="lab-kd-code"
def kd_loss(student_logits, teacher_logits, labels, T=4.0, alpha=0.9):
    """α·T²·KL(softmax(t/T) ‖ softmax(s/T)) + (1 − α)·CE(labels, s): the KL a mean over the
    images, the CE over the labelled ones (label −100: none)."""
    ### BEGIN SOLUTION
    log_p_s = F.log_softmax(student_logits / T, dim=1)
    log_p_t = F.log_softmax(teacher_logits / T, dim=1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum(dim=1).mean()
    ce = F.cross_entropy(student_logits, labels)          # rows labelled -100 are left out
    return alpha * T * T * kl + (1 - alpha) * ce
    ### END SOLUTION


# %% labkit={"exercise": "8.9"} tags=["check"]
check("8.9", kd_loss)

# %% [markdown] id="distill-controls-md"
# ### Is it the soft targets, or the labelling? Controls
#
# A student distilled with soft targets beats one trained on the 60 labels alone — but it also sees 1288 more images. Which part helps? `distill.distill_controls` trains the student five ways, everything else equal (the same batches of 16 labelled and 48 transfer images, the same 300 steps, initial weights, optimizer and α = 0.9), over three seeds: the **labelled only** loss (transfer images get no target); **soft targets** with your `kd_loss` at T = 4 and at T = 1; the teacher's **argmax** as a hard label for every transfer image (no soft information at all); and **all true labels** (what the teacher's labels are worth at best).
#
# **Predict**: on the transfer images, which targets give the better student — the teacher's soft targets at T = 4, or its argmax labels?

# %% id="distill-predict"
### BEGIN SOLUTION
guess = "soft, T = 4"
### END SOLUTION
predict("8.distill", guess, "soft targets (T = 4) or the teacher's argmax labels",
        choices=["soft, T = 4", "teacher argmax", "equal within the spread"])

# %% id="cell-040"
from labkit.memory.measure import count_params
from labkit.torch_models import torch_mlp
controls = distill.distill_controls(split, teacher, loss=kd_loss)      # your loss in the soft rows
print(f"weights: teacher {count_params(teacher)}, student {count_params(torch_mlp((64, 16, 10)))}")
print(distill.format_distill(controls))
reveal("8.distill", controls.better("soft, T = 4", "teacher argmax"))


# %% [markdown] id="distill-after"
# What the controls say, on this teacher and this transfer set: the gain over *labelled only* comes from the teacher **labelling the transfer images**. Its argmax labels — one-hot, no "dark knowledge" — give as good a student as its soft targets at T = 1 and as the true labels themselves; soft targets at T = 4 do not beat them (here they are a little worse). Hinton et al. report benefits of soft targets on MNIST and speech (§3–4); this measurement does not show one. Whatever the temperature, distillation here works first of all as pseudo-labelling: a strong teacher turns unlabelled images into training data. A claim that soft targets help must be measured against the argmax control.

# %% [markdown] id="depthwise-separable"
# ## 6. Depthwise-separable convolution
#
# A standard $D_K\times D_K$ convolution from $M$ to $N$ channels on a $D_F\times D_F$ output costs $D_K^2 M N D_F^2$ multiply-adds. MobileNets (Howard et al. 2017, §3.1) factor it into a **depthwise** convolution (one $D_K\times D_K$ filter per input channel: $D_K^2 M D_F^2$) and a **pointwise** 1×1 convolution ($M N D_F^2$); the ratio is $\frac1N + \frac1{D_K^2}$ — 8 to 9 times fewer for 3×3 kernels.
#
# ### Lab 8.5 — count it
#
# Write `separable_cost(kernel, in_ch, out_ch, feature)` returning `(weights, multiply_adds)` of the depthwise-separable version (no biases, stride 1, `feature`×`feature` output).

# %% id="cell-042"
def separable_cost(kernel, in_ch, out_ch, feature):
    ### BEGIN SOLUTION
    k, m, n, f = kernel, in_ch, out_ch, feature
    return k * k * m + m * n, k * k * m * f * f + m * n * f * f
    ### END SOLUTION


# %% labkit={"exercise": "8.5"} tags=["check"]
check("8.5", separable_cost)

# %% id="cell-044"
for k, m, n, f in ((3, 32, 64, 112), (3, 256, 256, 28), (3, 512, 512, 14)):
    c = cm.conv_cost(k, m, n, f)
    print(f"{k}x{k}, {m}→{n}, {f}x{f}: standard {c.standard_macs/1e6:7.1f} M MACs, separable "
          f"{c.separable_macs/1e6:6.1f} M (×{c.ratio:.3f}; 1/N + 1/K² = {cm.separable_ratio(k, n):.3f}); "
          f"weights {c.separable_params} = torch {train.torch_separable_params(k, m, n)}")

# %% [markdown] id="cell-045"
# Fewer FLOPs is not the same as proportionally faster: the depthwise part has low arithmetic intensity (each weight is used only $D_F^2$ times on one channel), so it is often memory-bound and runs far below peak — chapter 05's roofline again.
#
# ## 7. The programmer's view: pitfalls
#
# * **Reductions in low precision.** Summing many fp16/bf16 values loses small terms; keep accumulators, softmax, norms and losses in fp32. CPU autocast does it for losses and a few ops (`prod`, `cdist`), not for `sum`, `softmax` or `layer_norm` on low-precision inputs: custom code must cast.
# * **fp16 without a GradScaler** silently zeroes small gradients; bf16 without one is usually fine. **A GradScaler without its step**: `loss.backward()` instead of `scaler.scale(loss).backward()`, or `optimizer.step()` instead of `scaler.step(optimizer)`, trains on overflowed steps (lab 8.7's check shows the step where it goes wrong).
# * **Per-tensor quantization of weights with uneven channels** destroys the small channels; quantize weights per channel.
# * **Forgetting that 0 must be exact** (asymmetric ranges that exclude 0) shifts every padded or ReLU-zero value.
# * **Expecting speed from sparsity**: unstructured zeros in a dense tensor change nothing; measure.
# * **Crediting soft targets for what the labelling did**: compare a distilled student with one trained on the teacher's argmax labels, not only with one trained on fewer labels.
# * **Calibrating on unrepresentative data** (static quantization): activation ranges come from the calibration batches.
# * **Comparing latency at batch 1 vs throughput at batch 256**: compression helps the two differently.
#
# ## 8. Summary
#
# * Fusion removes memory traffic, not FLOPs; element-wise chains speed up by about the ratio of bytes moved.
# * fp16: $u = 2^{-11}$, ≈ 3.3 digits, largest 65504 → loss scaling (dynamic: halve on overflow and skip, double after 2000 clean steps — your `Scaler` trains bit for bit like `torch.amp.GradScaler`); bf16: $u = 2^{-8}$, ≈ 2.4 digits, fp32's range, no scaler needed. CPU autocast runs matmuls/convolutions in low precision and keeps losses (and `prod`) in fp32; norms, `softmax` and `sum` follow their input.
# * Quantization: $r = S(q - Z)$; per-channel beats per-tensor (torch's `quantize_dynamic` is per tensor by default); 8-bit weights keep this model's accuracy, 2-bit does not; 4× less storage; speed needs int8 kernels.
# * Pruning: accuracy falls slowly then fast; fine-tuning with the masks held recovers much of it (measured against the dense model fine-tuned alike), less the more structure is removed; structured pruning shrinks the dense matrices (real speed), unstructured needs sparse kernels or hardware support.
# * Distillation lets a teacher label data that has no labels; here its argmax labels do as well as its soft targets, so the gain is the labelling. Depthwise-separable convolutions cut FLOPs by $1/N + 1/D_K^2$.
#
# ## 9. Exercises
#
# 1. With the scaling widget, find the range of loss scales that loses under 1 % of the demo gradients and overflows none. Why does dynamic scaling sit near the top of that range?
# 2. Why does per-channel quantization of *activations* cost more at inference than per-channel quantization of weights?
# 3. Seed 002 says model slimming keeps "the same performance while lowering complexity". Using this chapter's curves, at what sparsity does that stop being true for the digits MLP without fine-tuning, for each kind of pruning?

# %% [markdown] id="cell-046"
# ### BEGIN SOLUTION
# 1. $2^{11}$ to $2^{20}$ for the demo (`cm.safe_log2_scales(widgets.demo_gradients())`; at $2^{10}$ 1.43 % still underflow, and from $2^{21}$ some gradients overflow): the histogram must fit between $2^{-24}$ and 65504; dynamic scaling keeps raising the scale until an overflow occurs, then backs off by half, so it hovers just below the overflow limit — as far from underflow as possible.
# 2. A per-channel activation scale varies along the reduction dimension $k$ of $x W^T$, so it cannot be factored out of the integer sum $\sum_k q_x q_w$; weight scales vary per output column and factor out.
# 3. Read the printed pruning curves: unstructured pruning keeps the accuracy within about a point up to roughly 50 % sparsity and loses a few points by 70 %; structured pruning already loses several points at 30 %. With fine-tuning (the tables after lab 8.8) both limits move up: unstructured stays within a point of the fine-tuned control to 70 % and within about 2 points at 90 %; structured within about a point at 50 % and 2–3 points at 70 %.
# ### END SOLUTION
