"""Chapter 06 (memory management) exercises."""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise
from labkit.memory.allocator import allocation_size, pool_of, round_size, should_split
from labkit.memory.config import NO_LIMIT
from labkit.memory.constants import MiB
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes
from labkit.memory.measure import transformer_block_saved, transformer_extra_terms


def model_state_fp32(num_params: int, optimizer: str) -> int:
    """Reference 6.1: bytes of fp32 parameters + gradients + optimizer states."""
    return model_state_bytes(num_params, "fp32", optimizer).total


def segment_for(nbytes: int) -> tuple[int, str, int]:
    """Reference 6.2: (rounded size, pool, size of a new segment) for a request."""
    rounded = round_size(nbytes)
    return rounded, pool_of(rounded), allocation_size(rounded)


def splits(block_size: int, rounded_size: int, small: bool, max_split_size: int) -> bool:
    """Reference 6.3: does the allocator split ``block_size`` to serve ``rounded_size``?"""
    return should_split(block_size, rounded_size, small=small, max_split_size=max_split_size)


def block_saved_bytes(seq: int, batch: int, hidden: int, heads: int) -> int:
    """Reference 6.4: bytes torch saves for backward in ``measure.TransformerBlock`` run in
    bfloat16 on the CPU in training mode: Korthikanti et al. (2022)'s sbh(34 + 5as/h) plus
    what the CPU adds (:func:`labkit.memory.measure.transformer_extra_terms`): dropout masks
    stored in bf16, (as²b + 2sbh) more bytes, and both LayerNorms' mean and 1/std, 4sb·2."""
    extra = transformer_extra_terms(seq, batch, hidden, heads)
    return int(round(activation_bytes_per_layer(seq, batch, hidden, heads))) + extra.total


def layer_activation_bytes(seq: int, batch: int, hidden: int, heads: int) -> float:
    """Reference 6.5: Korthikanti et al. (2022): sbh(34 + 5as/h) bytes per layer."""
    return activation_bytes_per_layer(seq, batch, hidden, heads)


_COUNTS_61 = [1, 100_000_000, 7, 123_457] + [
    int(x) for x in np.random.default_rng(6).integers(1, 10**9, 3)]

formula_exercise(
    "6.1", "memory of parameters, gradients and optimizer states (fp32)", model_state_fp32,
    cases=[(n, opt) for n in _COUNTS_61 for opt in ("sgd", "momentum", "adam")],
    call=lambda n, opt: f"model_state_fp32({n}, {opt!r})", rtol=0,
    shortcuts=[
        (lambda got, n, opt: opt != "sgd" and got == 8 * n,
         "that is parameters + gradients only; add the optimizer's fp32 states."),
        (lambda got, n, opt: opt == "adam" and got == 12 * n,
         "Adam keeps two states per parameter (m and v), 8 bytes in fp32."),
        # at SGD, leaving out the gradient (4n) and 2 bytes per number (8n // 2) coincide
        (lambda got, n, opt: opt == "sgd" and got == 4 * n,
         "you left out the gradient, or counted 2 bytes per fp32 number: SGD keeps the "
         "parameter and its gradient, 4 bytes each."),
        (lambda got, n, opt: got in {model_state_fp32(n, opt) // k for k in (4, 2)}
         | {8 * model_state_fp32(n, opt)},
         "count bytes, 4 per fp32 number.")],
    hint="4 bytes per fp32 number: the parameter, its gradient, and the optimizer's states "
         "(SGD none, momentum 1, Adam 2) per parameter.")


SIZES_62 = [1, 511, 512, 513, 1000, 4096, MiB - 1, MiB, MiB + 1, 3 * MiB + 5,
            10 * MiB - 512, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 21 * MiB + 7,
            4_000_000, 123_456_789]


@exercise("6.2", "rounding, pool and segment size of a request", reference=segment_for,
          binds="segment_for")
def _(answer):
    for n in SIZES_62:
        got, want = answer(n), segment_for(n)
        if tuple(got) == want:
            continue
        try:
            rounded, pool, seg = got
        except (TypeError, ValueError):
            raise Wrong(f"segment_for({n}) must return (rounded, pool, segment_size), "
                        f"got {got!r}") from None
        if rounded != want[0]:
            hint = ("requests below 512 bytes become 512" if n < 512 else
                    "round up to a multiple of 512 (kMinBlockSize), not down")
            raise Wrong(f"segment_for({n}): rounded size {rounded}, expected {want[0]}: {hint}.")
        if pool != want[1]:
            raise Wrong(f"segment_for({n}): pool {pool!r}, expected {want[1]!r}: rounded "
                        "sizes <= 1 MiB (kSmallSize, inclusive) go to the small pool.")
        raise Wrong(f"segment_for({n}): segment size {seg}, expected {want[2]}: small → 2 MiB, "
                    "large below 10 MiB (kMinLargeAlloc, exclusive) → 20 MiB, else round "
                    "up to a multiple of 2 MiB.")


@exercise("6.3", "when a cached block is split", reference=splits, binds="splits")
def _(answer):
    cases = [
        (2 * MiB, 512, True, NO_LIMIT), (2 * MiB, 2 * MiB - 512, True, NO_LIMIT),
        (2 * MiB, 2 * MiB - 1024, True, NO_LIMIT), (2 * MiB, 2 * MiB, True, NO_LIMIT),
        (20 * MiB, 19 * MiB, False, NO_LIMIT), (20 * MiB, 19 * MiB - 512, False, NO_LIMIT),
        (20 * MiB, 3 * MiB, False, NO_LIMIT), (100 * MiB, 50 * MiB, False, 64 * MiB),
        (100 * MiB, 70 * MiB, False, 64 * MiB), (100 * MiB, 64 * MiB, False, 64 * MiB),
        (100 * MiB, 64 * MiB - 512, False, 64 * MiB), (22 * MiB, 20 * MiB + 512, False, NO_LIMIT),
    ]
    for block, size, small, ms in cases:
        got, want = answer(block, size, small, ms), splits(block, size, small, ms)
        if bool(got) == want and isinstance(got, (bool, np.bool_)):
            continue
        if bool(got) == want:
            raise Wrong(f"splits(...) returned {got!r}; return True or False.")
        pool = "small" if small else "large"
        raise Wrong(f"splits(block={block}, size={size}, {pool} pool, max_split={ms}) = "
                    f"{got!r}, expected {want}. Small pool: split when the remainder is "
                    ">= 512 B. Large pool: only when size < max_split_size AND the "
                    "remainder is > 1 MiB (strictly).")


# the shapes 6.4 is measured on: (seq, batch, hidden, heads); small, so torch runs in ms
BLOCK_CASES = [(24, 3, 96, 6), (8, 2, 32, 4), (16, 1, 64, 2), (5, 4, 48, 8)]


@exercise("6.4", "bytes torch saves for a transformer block (saved_tensors_hooks)",
          reference=block_saved_bytes, binds="block_saved_bytes")
def _(answer):
    for s, b, h, a in BLOCK_CASES:
        got = answer(s, b, h, a)
        want = transformer_block_saved(s, b, h, a).total_bytes      # measured, not computed
        if np.isclose(got, want, rtol=1e-9):
            continue
        where = f"block_saved_bytes{(s, b, h, a)} = {got!r}; torch saved {want:,} bytes"
        paper = activation_bytes_per_layer(s, b, h, a)
        extra = transformer_extra_terms(s, b, h, a)       # bf16 dropout masks, LN statistics
        masks, ln = extra.masks, extra.layernorm
        if np.isclose(got, paper):
            raise Wrong(f"{where}: that is Korthikanti's GPU count. On the CPU each dropout mask "
                        f"is stored in bf16 (2 bytes, not 1), and each LayerNorm also saves its "
                        f"mean and 1/std per token.")
        if np.isclose(got, paper + ln):
            raise Wrong(f"{where}: the dropout masks (attention probabilities and two outputs) "
                        f"are bf16 tensors here, 2 bytes per element, not the GPU's 1.")
        if np.isclose(got, paper + masks):
            raise Wrong(f"{where}: both LayerNorms save their mean and 1/std, one value per "
                        f"token each.")
        if np.isclose(got, 34 * s * b * h + 2 * s * b * h + ln) or \
                np.isclose(got, 34 * s * b * h):
            raise Wrong(f"{where}: the attention scores are saved too: softmax output, its "
                        f"dropout mask and the dropped-out probabilities, a·s²·b elements each.")
        if np.isclose(got, 2 * want):
            raise Wrong(f"{where}: the block runs in bfloat16, 2 bytes per element.")
        raise Wrong(f"{where}.")


formula_exercise(
    "6.5", "activation bytes of a transformer layer (Korthikanti et al.)",
    layer_activation_bytes,
    cases=[(2048, 1, 4096, 32), (1024, 4, 1024, 16), (16, 2, 64, 4), (4096, 2, 12288, 96),
           (100, 3, 96, 6)],
    call=lambda s, b, h, a: f"layer_activation_bytes{(s, b, h, a)}",
    shortcuts=[
        (equals(lambda s, b, h, a: 34 * s * b * h),
         "you left out the attention scores: softmax output, its dropout mask and dropout "
         "output add 5as²b bytes."),
        (equals(lambda s, b, h, a: layer_activation_bytes(s, b, h, a) / 2),
         "the formula is in bytes already (16-bit activations): sbh(34 + 5as/h), do not "
         "halve it."),
        (equals(lambda s, b, h, a: s * b * h * (34 + 5 * a / h)),
         "the attention scores are a×s×s per sample: the term is 5as/h, not 5a/h.")],
    hint="Korthikanti et al. (2022) §4.1: sbh(34 + 5as/h) bytes per layer.")
