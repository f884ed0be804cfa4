"""Compression and precision, in numpy: the formulas of chapter 08 with their sources.

**Affine quantization** (Jacob et al. 2018, "Quantization and Training of Neural Networks
for Efficient Integer-Arithmetic-Only Inference", eq. 1): a real value r is represented by
an integer q with r = S (q − Z), scale S > 0 and zero point Z, an integer so that r = 0 is
exact. *Asymmetric* b-bit: q ∈ [0, 2^b − 1], S = (max − min) / (2^b − 1) over a range
that includes 0, Z = round(−min / S). *Symmetric*: Z = 0, q ∈ [−(2^(b−1) − 1), 2^(b−1) − 1]
(the "restricted" range of Wu et al. 2020, "Integer Quantization for Deep Learning
Inference", §3.1), S = max|r| / (2^(b−1) − 1). *Per-channel*: one (S, Z) per output channel
(Krishnamoorthi 2018, "Quantizing deep convolutional networks for efficient inference").

**Floating point**: the formats and their rounding are :mod:`labkit.numerics`'s
(``FORMATS``, ``FloatFormat``, ``round_to``, ``unit_roundoff``); underflow and overflow
under a loss scale are below.

**Loss scaling** (Micikevicius et al. 2018, "Mixed Precision Training", §3.2): multiply the
loss by S so small gradients do not underflow in fp16; divide the fp32 gradients by S
before the update; dynamic scaling (``torch.amp.GradScaler``) halves S and skips the step
when a gradient overflows, doubles it after ``growth_interval`` clean steps.

**Depthwise-separable convolution** (Howard et al. 2017, MobileNets, §3.1): a D_K×D_K
convolution of M input and N output channels on a D_F×D_F map costs D_K²·M·N·D_F²
multiply-adds; depthwise (D_K²·M·D_F²) plus pointwise 1×1 (M·N·D_F²) costs the fraction
1/N + 1/D_K² of it.

**Distillation** (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a Neural
Network", §2): soft targets softmax(z_t/T); the student minimises
α·T²·KL(p_t^T ‖ p_s^T) + (1 − α)·CE(y, p_s); the T² keeps the soft-target gradients'
magnitude (which scale as 1/T²) comparable as T changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.numerics import FORMATS, round_to


@dataclass(frozen=True)
class QParams:
    scale: np.ndarray        # shape () per tensor, or broadcastable per channel
    zero_point: np.ndarray   # integers, same shape as scale
    qmin: int
    qmax: int
    bits: int
    symmetric: bool
    axis: int | None


def _reduce(x, axis, fn):
    if axis is None:
        return np.asarray(fn(x))
    other = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    return fn(x, axis=other, keepdims=True)


def qparams(x, bits: int = 8, symmetric: bool = False, axis: int | None = None) -> QParams:
    """Scale and zero point of ``x`` for ``bits``-bit affine quantization, per tensor
    (``axis=None``) or per channel along ``axis``."""
    x = V.array("x", x, finite=True)
    bits = V.integer("bits", bits, low=2, high=16)
    if axis is not None:
        axis = V.integer("axis", axis, low=-x.ndim, high=x.ndim - 1)
    if V.boolean("symmetric", symmetric):
        qmax = 2 ** (bits - 1) - 1
        qmin = -qmax
        amax = _reduce(np.abs(x), axis, np.max)
        scale = np.where(amax > 0, amax / qmax, 1.0)
        zp = np.zeros_like(scale, dtype=np.int64)
    else:
        qmin, qmax = 0, 2 ** bits - 1
        lo = np.minimum(_reduce(x, axis, np.min), 0.0)
        hi = np.maximum(_reduce(x, axis, np.max), 0.0)
        scale = np.where(hi > lo, (hi - lo) / (qmax - qmin), 1.0)
        zp = np.clip(np.round(qmin - lo / scale), qmin, qmax).astype(np.int64)
    return QParams(np.asarray(scale, float), np.asarray(zp), qmin, qmax, bits, symmetric, axis)


def quantize(x, qp: QParams) -> np.ndarray:
    """q = clip(round(x / S) + Z, qmin, qmax) as int64."""
    x = V.array("x", x)
    return np.clip(np.round(x / qp.scale) + qp.zero_point, qp.qmin, qp.qmax).astype(np.int64)


def dequantize(q, qp: QParams) -> np.ndarray:
    """r = S (q − Z)."""
    return qp.scale * (np.asarray(q, dtype=np.float64) - qp.zero_point)


def fake_quant(x, bits: int = 8, symmetric: bool = False, axis: int | None = None) -> np.ndarray:
    """dequantize(quantize(x)): the values a quantized tensor can hold, in float."""
    qp = qparams(x, bits, symmetric, axis)
    return dequantize(quantize(x, qp), qp)


def relative_error(w, wq, axis: int | None = None):
    """‖wq − w‖₂ / ‖w‖₂: over the whole tensor (``axis`` None, the relative RMS error
    √mean((wq − w)²) / √mean(w²)), or per row (``axis=1``: one value per output channel)."""
    w = V.array("w", w, finite=True)
    wq = V.array("wq", wq, finite=True, shape=w.shape)
    if axis is not None and axis not in (0, 1):
        raise ValueError(f"axis must be None, 0 or 1, got {axis!r}")
    out = np.linalg.norm(wq - w, axis=axis) / np.linalg.norm(w, axis=axis)
    return float(out) if axis is None else out


def quant_error_curve(w, bits, symmetric: bool = True) -> dict[str, list[float]]:
    """Relative RMS error (:func:`relative_error`) of :func:`fake_quant` at each of ``bits``,
    per tensor (one scale) and per channel (a scale per row, ``axis=0``)."""
    bits = [V.integer("bits", b, low=2, high=16) for b in bits]
    return {name: [relative_error(w, fake_quant(w, b, symmetric, ax)) for b in bits]
            for name, ax in (("per tensor", None), ("per channel", 0))}


class QuantLinear:
    """y = x Wᵀ + b with int8 weights (symmetric, per output channel) and activations
    quantized per tensor at run time (asymmetric uint8): "dynamic quantization".

    y_j = S_x S_wj Σ_k (q_x,k − Z_x) q_w,jk + b_j. The integer sum is done by a float64
    BLAS matmul of the integer-valued operands, exact while |Σ| < 2^53 (255·127·K ≪ 2^53).
    """

    def __init__(self, weight, bias=None, bits: int = 8):
        w = V.array("weight", weight, ndim=2, finite=True)
        self.qp = qparams(w, bits, symmetric=True, axis=0)
        dtype = np.int8 if bits <= 8 else np.int16
        self.wq = quantize(w, self.qp).astype(dtype)
        self.w_scale = self.qp.scale.reshape(-1)
        self.bias = None if bias is None else V.array("bias", bias, ndim=1, shape=(w.shape[0],))
        self.bits = bits
        self._wq_f = np.ascontiguousarray(self.wq.T, dtype=np.float64)

    @property
    def nbytes(self) -> int:
        """Stored bytes: integer weights, one fp32 scale per channel, fp32 bias."""
        return int(self.wq.nbytes + 4 * self.w_scale.size + (0 if self.bias is None else 4 * self.bias.size))

    def __call__(self, x) -> np.ndarray:
        x = V.array("x", x, ndim=2, shape=(None, self.wq.shape[1]))
        xp = qparams(x, 8, symmetric=False)
        acc = (quantize(x, xp) - xp.zero_point).astype(np.float64) @ self._wq_f
        y = acc * (float(xp.scale) * self.w_scale)
        return (y if self.bias is None else y + self.bias).astype(np.float32)


def magnitude_mask(w, sparsity: float) -> np.ndarray:
    """Unstructured magnitude pruning (Han et al. 2015): keep all but the
    round(sparsity · size) smallest |w| (ties broken by position)."""
    w = V.array("w", w)
    s = V.fraction("sparsity", sparsity)
    k = int(round(s * w.size))
    mask = np.ones(w.size, dtype=bool)
    mask[np.argsort(np.abs(w).ravel(), kind="stable")[:k]] = False
    return mask.reshape(w.shape)


def structured_mask(w, sparsity: float) -> np.ndarray:
    """Structured pruning of whole output channels (rows of a (out, in) weight): drop the
    round(sparsity · rows) rows of smallest L2 norm (Li et al. 2017, "Pruning Filters for
    Efficient ConvNets", rank filters by their L1 norm; the idea is the same)."""
    w = V.array("w", w, ndim=2)
    s = V.fraction("sparsity", sparsity)
    k = int(round(s * w.shape[0]))
    keep = np.ones(w.shape[0], dtype=bool)
    keep[np.argsort(np.linalg.norm(w, axis=1), kind="stable")[:k]] = False
    return np.repeat(keep[:, None], w.shape[1], axis=1)


def underflow_fraction(values, fmt: str = "fp16", scale: float = 1.0) -> float:
    """Share of the non-zero ``values`` that become 0 when ``scale · values`` is rounded to
    ``fmt`` (the gradients lost without loss scaling)."""
    v = V.array("values", values)
    scale = V.positive("scale", scale)
    nz = v != 0
    if not nz.any():
        return 0.0
    return float(np.mean(round_to(v[nz] * scale, fmt) == 0))


def overflow_fraction(values, fmt: str = "fp16", scale: float = 1.0) -> float:
    """Share of ``values`` whose scale · value rounds (:func:`round_to`, round to nearest
    even) to ±inf in ``fmt``: the step that holds them is skipped. Not every value past the
    largest finite number overflows: fp16 rounds (65504, 65520) down to 65504 (IEEE 754-2008
    §4.3.1, §7.4: overflow when the result rounded with an unbounded exponent exceeds max)."""
    v = V.array("values", values)
    scale = V.positive("scale", scale)
    fmt = V.one_of("fmt", fmt, tuple(FORMATS))
    return float(np.mean(np.isinf(round_to(v * scale, fmt))))


def safe_log2_scales(values, fmt: str = "fp16", max_lost: float = 0.01, low: int = 0,
                     high: int = 40) -> list[int]:
    """The integer e in [low, high] for which the loss scale 2^e loses under ``max_lost`` of
    the non-zero ``values`` to underflow (:func:`underflow_fraction`) and overflows none
    (:func:`overflow_fraction`): chapter 08's exercise 1, on the scaling widget's slider
    range 0–40."""
    v = V.array("values", values)
    max_lost = V.fraction("max_lost", max_lost)
    low = V.integer("low", low)
    high = V.integer("high", high, low=low)
    return [e for e in range(low, high + 1)
            if underflow_fraction(v, fmt, 2.0 ** e) < max_lost
            and overflow_fraction(v, fmt, 2.0 ** e) == 0.0]


def update_loss_scale(scale: float, found_inf: bool, good_steps: int, *,
                      growth_factor: float = 2.0, backoff_factor: float = 0.5,
                      growth_interval: int = 2000) -> tuple[float, int, bool]:
    """One step of dynamic loss scaling as ``torch.amp.GradScaler.update`` does it
    (defaults: init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000).
    Returns (new scale, new count of consecutive good steps, whether the step is skipped)."""
    scale = V.positive("scale", scale)
    found_inf = V.boolean("found_inf", found_inf)
    growth_factor = V.number("growth_factor", growth_factor, low=1)
    backoff_factor = V.number("backoff_factor", backoff_factor, low=0, high=1, low_open=True)
    good_steps = V.integer("good_steps", good_steps, low=0)
    growth_interval = V.integer("growth_interval", growth_interval, low=1)
    if found_inf:
        return scale * backoff_factor, 0, True
    good_steps += 1
    if good_steps >= growth_interval:
        return scale * growth_factor, 0, False
    return scale, good_steps, False


@dataclass(frozen=True)
class ConvCost:
    standard_params: int
    standard_macs: int
    separable_params: int
    separable_macs: int

    @property
    def ratio(self) -> float:
        return self.separable_macs / self.standard_macs


def conv_cost(kernel: int, in_ch: int, out_ch: int, feature: int) -> ConvCost:
    """Weights (no bias) and multiply-adds of a standard kernel×kernel convolution and of
    its depthwise-separable version, stride 1, 'same' padding, feature×feature output."""
    k = V.integer("kernel", kernel, low=1)
    m = V.integer("in_ch", in_ch, low=1)
    n = V.integer("out_ch", out_ch, low=1)
    f = V.integer("feature", feature, low=1)
    return ConvCost(k * k * m * n, k * k * m * n * f * f, k * k * m + m * n,
                    k * k * m * f * f + m * n * f * f)


def separable_ratio(kernel: int, out_ch: int) -> float:
    """Multiply-adds of a depthwise-separable convolution over a standard one's in closed
    form, 1/N + 1/D_K² (Howard et al., "MobileNets", 2017, §3.1): the same as
    :func:`conv_cost`'s ``ratio`` for any M and D_F."""
    return 1.0 / V.integer("out_ch", out_ch, low=1) + 1.0 / V.integer("kernel", kernel, low=1) ** 2


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def kd_loss(student_logits, teacher_logits, labels, T: float = 4.0, alpha: float = 0.9) -> float:
    """α·T²·KL(softmax(t/T) ‖ softmax(s/T)) + (1 − α)·CE(labels, softmax(s)), batch mean."""
    s = V.array("student_logits", student_logits, ndim=2)
    t = V.array("teacher_logits", teacher_logits, ndim=2, shape=s.shape)
    y = np.asarray(labels, dtype=np.int64)
    T = V.positive("T", T)
    alpha = V.fraction("alpha", alpha)
    lp_t, lp_s = _log_softmax(t / T), _log_softmax(s / T)
    kl = np.mean(np.sum(np.exp(lp_t) * (lp_t - lp_s), axis=1))
    ce = -np.mean(_log_softmax(s)[np.arange(len(y)), y])
    return float(alpha * T * T * kl + (1 - alpha) * ce)
