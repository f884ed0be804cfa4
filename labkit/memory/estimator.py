"""Training-memory estimator: model states (ZeRO) and transformer activations.

Model states (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", SC 2020, §3.1 and §5): with Ψ parameters,

* fp32 training keeps fp32 parameters (4Ψ) and gradients (4Ψ) and the optimizer's states:
  none for SGD, one fp32 buffer for momentum SGD (4Ψ), two for Adam (m and v: 8Ψ).
* mixed precision keeps fp16 parameters (2Ψ) and gradients (2Ψ) and K·Ψ bytes of fp32
  optimizer states: K = 12 for Adam (fp32 master weights, momentum, variance), 8 for
  momentum SGD, 4 for SGD (master weights only). Adam: 2 + 2 + 12 = 16 bytes per parameter.
* ZeRO stage 1 partitions the optimizer states over the Nd data-parallel ranks, stage 2 also
  the gradients, stage 3 also the parameters: (2 + 2 + K)Ψ → 2Ψ + 2Ψ + KΨ/Nd →
  2Ψ + (2 + K)Ψ/Nd → (2 + 2 + K)Ψ/Nd per rank (the paper's Figure 1).

Activations per transformer layer (Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models", 2022, §4, Table 2), with s = sequence length, b = micro-batch,
h = hidden size, a = attention heads, t = tensor-parallel size, 16-bit activations and
1-byte dropout masks:

=====================================================  ======================
no parallelism                                          sbh(34 + 5as/h)
tensor parallel                                          sbh(10 + 24/t + 5as/(ht))
tensor + sequence parallel                               sbh(34/t + 5as/(ht))
tensor parallel + selective recomputation                sbh(10 + 24/t)
tensor + sequence parallel + selective recomputation     sbh(34/t)
full recomputation                                       sbh·2
=====================================================  ======================
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.validate import boolean, divides, integer, one_of

PRECISIONS = ("fp32", "mixed")
OPTIMIZERS = ("sgd", "momentum", "adam")
RECOMPUTE = ("none", "selective", "full")

# bytes per parameter: (parameters, gradients, optimizer states)
_BYTES = {
    ("fp32", "sgd"): (4, 4, 0), ("fp32", "momentum"): (4, 4, 4), ("fp32", "adam"): (4, 4, 8),
    ("mixed", "sgd"): (2, 2, 4), ("mixed", "momentum"): (2, 2, 8), ("mixed", "adam"): (2, 2, 12),
}


def _check_int(name: str, value, low: int) -> int:
    """An int >= ``low``; an integral float (7.5e9) is accepted, bool/str/NaN are not."""
    return integer(name, value, low=low)


@dataclass(frozen=True)
class ModelStateBytes:
    """Bytes per data-parallel rank for parameters, gradients and optimizer states."""
    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer


def bytes_per_param(precision: str = "fp32", optimizer: str = "adam") -> tuple[int, int, int]:
    """(parameter, gradient, optimizer-state) bytes per parameter without ZeRO."""
    return _BYTES[(one_of("precision", precision, PRECISIONS),
                   one_of("optimizer", optimizer, OPTIMIZERS))]


def model_state_bytes(num_params: int, precision: str = "fp32", optimizer: str = "adam",
                      zero_stage: int = 0, dp: int = 1) -> ModelStateBytes:
    """Model-state memory per rank (ZeRO paper §5). Partitioned states hold
    ceil(Ψ / dp) elements per rank, as ZeRO pads the flat buffer to a multiple of dp."""
    num_params = _check_int("num_params", num_params, 0)
    zero_stage = _check_int("zero_stage", zero_stage, 0)
    if zero_stage > 3:
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    dp = _check_int("dp", dp, 1)
    p, g, o = bytes_per_param(precision, optimizer)
    shard = math.ceil(num_params / dp)
    return ModelStateBytes(
        params=p * (shard if zero_stage >= 3 else num_params),
        grads=g * (shard if zero_stage >= 2 else num_params),
        optimizer=o * (shard if zero_stage >= 1 else num_params),
    )


def activation_terms(seq: int, batch: int, hidden: int, heads: int) -> dict[str, int]:
    """Bytes one transformer layer stores for backward, term by term (Korthikanti §4.1),
    without parallelism: attention 11sbh + 5as²b, MLP 19sbh, layer norms 4sbh."""
    s, b, h, a = (_check_int(n, v, 1) for n, v in
                  (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads)))
    sbh, as2b = s * b * h, a * s * s * b
    return {
        "attn: QKV input (2sbh)": 2 * sbh,
        "attn: Q and K for QK^T (4sbh)": 4 * sbh,
        "attn: softmax output (2as²b)": 2 * as2b,
        "attn: softmax dropout mask (as²b)": as2b,
        "attn: dropout output for ·V (2as²b)": 2 * as2b,
        "attn: V (2sbh)": 2 * sbh,
        "attn: output projection input (2sbh)": 2 * sbh,
        "attn: output dropout mask (sbh)": sbh,
        "mlp: first linear input (2sbh)": 2 * sbh,
        "mlp: GeLU input (8sbh)": 8 * sbh,
        "mlp: second linear input (8sbh)": 8 * sbh,
        "mlp: dropout mask (sbh)": sbh,
        "layernorm inputs (4sbh)": 4 * sbh,
    }


def activation_bytes_per_layer(seq: int, batch: int, hidden: int, heads: int, tp: int = 1,
                               sequence_parallel: bool = False,
                               recompute: str = "none") -> float:
    """Activation bytes per transformer layer per tensor-parallel rank (Korthikanti Table 2).

    Tensor parallelism splits the attention heads over the ``tp`` ranks (Shoeybi et al.,
    Megatron-LM, 2019, §3), so ``tp`` must divide ``heads``.

    ``recompute``: 'none', 'selective' (recompute the attention core: drops 5as²b/t) or
    'full' (keep only the layer input: 2sbh). Returns a float because 24/t need not divide.
    """
    s, b, h, a = (_check_int(n, v, 1) for n, v in
                  (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads)))
    t = _check_int("tp", tp, 1)
    boolean("sequence_parallel", sequence_parallel)
    one_of("recompute", recompute, RECOMPUTE)
    if h % a:
        raise ValueError(f"hidden ({h}) must be a multiple of heads ({a})")
    divides("tp", t, "heads", a)     # Megatron splits the heads over the t ranks
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    core = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    if sequence_parallel:
        return sbh * (34 / t + core)
    return sbh * (10 + 24 / t + core)


def training_memory(num_params: int, num_layers: int, seq: int, batch: int, hidden: int,
                    heads: int, *, precision: str = "mixed", optimizer: str = "adam",
                    zero_stage: int = 0, dp: int = 1, tp: int = 1,
                    sequence_parallel: bool = False, recompute: str = "none") -> dict[str, float]:
    """Model states (per rank, with tensor parallelism splitting them t ways) plus
    activations of ``num_layers`` layers: a first-order budget of one GPU."""
    st = model_state_bytes(num_params, precision, optimizer, zero_stage, dp)
    t = _check_int("tp", tp, 1)
    act = _check_int("num_layers", num_layers, 1) * activation_bytes_per_layer(
        seq, batch, hidden, heads, tp, sequence_parallel, recompute)
    return {"params": st.params / t, "grads": st.grads / t, "optimizer": st.optimizer / t,
            "activations": act}


def sqrt_checkpoint_segments(num_layers: int) -> int:
    """Segments that minimise stored activations when checkpointing ``num_layers`` equal
    layers (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"): memory ∝
    k + n/k, smallest at k = √n; returns the best integer k."""
    n = _check_int("num_layers", num_layers, 1)
    # k + ceil(n/k) >= k + n/k: every k as good as a candidate's m lies where k² - m k + n <= 0
    m = min(checkpoint_memory_units(n, k) for k in {1, math.isqrt(n), min(n, math.isqrt(n) + 1)})
    root = math.sqrt(max(m * m - 4 * n, 0))
    low, high = max(1, int((m - root) / 2) - 1), min(n, int((m + root) / 2) + 2)
    return min(range(low, high + 1), key=lambda k: (checkpoint_memory_units(n, k), k))


def checkpoint_memory_units(num_layers: int, segments: int) -> int:
    """Layer activations alive at the peak of backward with ``segments`` checkpointed
    segments: one stored input per segment plus the activations of the largest segment
    while it is recomputed (no checkpointing: segments = 1 gives n + 1 → we return n)."""
    n = _check_int("num_layers", num_layers, 1)
    k = _check_int("segments", segments, 1)
    if k > n:
        raise ValueError(f"segments must be in [1, {n}], got {k}")
    if k == 1:
        return n
    return k + math.ceil(n / k)


def mlp_saved_bytes(batch: int, widths, bytes_per_element: int = 4) -> int:
    """Bytes autograd saves for ``Linear → ReLU → ... → Linear`` (no loss): each Linear
    saves its input (batch × width_in); a ReLU saves its output, which is the next Linear's
    input (the same tensor, counted once). Total = batch · Σ widths[:-1] · bytes."""
    b = _check_int("batch", batch, 1)
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise TypeError(f"widths must be a sequence of layer widths, got {widths!r}")
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"widths needs at least 2 entries, got {widths}")
    for w in widths:
        _check_int("width", w, 1)
    return b * sum(widths[:-1]) * _check_int("bytes_per_element", bytes_per_element, 1)
