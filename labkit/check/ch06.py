"""Chapter 06 (memory management) exercises.

The allocator lab (6.2, 6.6, 6.3, 6.7): what a request becomes, then the three rules of the
caching allocator's core — best fit, split, merge on free — each checked on cases and on
traces replayed through labkit's :class:`~labkit.memory.allocator.CachingAllocator`, the
learner's rule answering, decision by decision, every question the allocator asked labkit's
rule on the way (the cases, hints and replays: :mod:`labkit.check.ch06_allocator`). Then
what autograd saves (6.4: a ``saved_tensors_hooks`` counter; 6.8: the block's bytes term by
term), segment checkpointing measured (6.9) and a paged KV cache (6.10).
"""
from __future__ import annotations

import math

import numpy as np
# torch._dynamo, imported with the checks: torch.utils.checkpoint.checkpoint imports it on its
# first call, and importing it replaces torch.manual_seed with a wrapper
# (torch/_dynamo/__init__.py); the grader's answer process, which imports this module before
# it runs any call of the answer, would otherwise report that replacement as the answer
# altering torch (exercise 6.9).
import torch._dynamo  # noqa: F401

from labkit.check import ch06_allocator as A
from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise
from labkit.memory import core as C
from labkit.memory import measure, paged
from labkit.memory.allocator import allocation_size, pool_of, round_size
from labkit.memory.config import NO_LIMIT
from labkit.memory.constants import MiB, format_size
from labkit.memory.estimator import activation_bytes_per_layer, model_state_bytes
from labkit.memory.measure import transformer_extra_terms


def model_state_fp32(num_params: int, optimizer: str) -> int:
    """Reference 6.1: bytes of fp32 parameters + gradients + optimizer states."""
    return model_state_bytes(num_params, "fp32", optimizer).total


def segment_for(nbytes: int) -> tuple[int, str, int]:
    """Reference 6.2: (rounded size, pool, size of a new segment) for a request."""
    rounded = round_size(nbytes)
    return rounded, pool_of(rounded), allocation_size(rounded)


def block_saved_bytes(seq: int, batch: int, hidden: int, heads: int) -> int:
    """Reference 6.8: bytes torch saves for backward in ``measure.TransformerBlock`` run in
    bfloat16 on the CPU in training mode: Korthikanti et al. (2022)'s sbh(34 + 5as/h) plus
    what the CPU adds (:func:`labkit.memory.measure.transformer_extra_terms`): dropout masks
    stored in bf16, (as²b + 2sbh) more bytes, and both LayerNorms' mean and 1/std, 4sb·2."""
    extra = transformer_extra_terms(seq, batch, hidden, heads)
    return int(round(activation_bytes_per_layer(seq, batch, hidden, heads))) + extra.total


def layer_activation_bytes(seq: int, batch: int, hidden: int, heads: int) -> float:
    """Reference 6.5: Korthikanti et al. (2022): sbh(34 + 5as/h) bytes per layer."""
    return activation_bytes_per_layer(seq, batch, hidden, heads)


# ---- 6.1 -------------------------------------------------------------------------------

_COUNTS_61 = [1, 100_000_000, 7, 123_457] + [
    int(x) for x in np.random.default_rng(6).integers(1, 10**9, 3)]
_STATES = {"sgd": 0, "momentum": 1, "adam": 2}

formula_exercise(
    "6.1", "memory of parameters, gradients and optimizer states (fp32)", model_state_fp32,
    cases=[(n, opt) for n in _COUNTS_61 for opt in ("sgd", "momentum", "adam")],
    call=lambda n, opt: f"model_state_fp32({n}, {opt!r})", rtol=0,
    answers=("labkit.memory.estimator:model_state_bytes",),
    draw=lambda rng: (int(rng.integers(1, 10**10)), str(rng.choice(list(_STATES)))),
    shortcuts=[
        (lambda got, n, opt: opt != "sgd" and got == 8 * n,
         "that is parameters + gradients only; add the optimizer's fp32 states."),
        (lambda got, n, opt: opt == "adam" and got == 12 * n,
         "Adam keeps two states per parameter (m and v), 8 bytes in fp32."),
        # at SGD, leaving out the gradient (4n) and 2 bytes per number (8n // 2) coincide
        (lambda got, n, opt: opt == "sgd" and got == 4 * n,
         "you left out the gradient, or counted 2 bytes per fp32 number: SGD keeps the "
         "parameter and its gradient, 4 bytes each."),
        (lambda got, n, opt: got in {(2 + _STATES[opt]) * n * k for k in (1, 2, 32)},
         "count bytes, 4 per fp32 number.")],
    hint="4 bytes per fp32 number: the parameter, its gradient, and the optimizer's states "
         "(SGD none, momentum 1, Adam 2) per parameter.")


# ---- 6.2 -------------------------------------------------------------------------------

SIZES_62 = [1, 511, 512, 513, 1000, 4096, MiB - 1, MiB, MiB + 1, 3 * MiB + 5,
            10 * MiB - 512, 10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 21 * MiB + 7,
            4_000_000, 123_456_789]


def _sizes_62(rng) -> list[int]:
    """Fresh sizes: next to a multiple of 512, around 1 MiB and 10 MiB, and at random."""
    near = [int(rng.integers(1, 4000)) * 512 + int(d) for d in rng.integers(-1, 2, 3)]
    edges = [MiB + int(rng.integers(-600, 600)), 10 * MiB + int(rng.integers(-600, 600)),
             int(rng.integers(1, 511))]
    return near + edges + [int(x) for x in rng.integers(MiB, 300 * MiB, 3)]


@exercise("6.2", "rounding, pool and segment size of a request", reference=segment_for,
          binds="segment_for",
          answers=("labkit.memory.allocator:round_size", "labkit.memory.allocator:pool_of",
                   "labkit.memory.allocator:allocation_size"))
def _(answer, ref, rng):
    for n in [*SIZES_62, *_sizes_62(rng)]:
        got, want = answer(n), tuple(ref(n))
        if isinstance(got, (tuple, list)) and tuple(got) == want:
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


# ---- 6.6 best fit ----------------------------------------------------------------------


@exercise("6.6", "best fit: the cached block a request takes", reference=C.best_fit_block,
          binds="best_fit",
          answers=("labkit.memory.allocator:CachingAllocator._get_free_block",))
def _(answer, ref, rng):
    for free, size, ms, rounding in A.best_fit_cases(rng):
        got, want = answer(free, size, ms, rounding), ref(free, size, ms, rounding)
        if got == want and (got is None or isinstance(got, (int, np.integer))):
            continue
        call = (f"best_fit({[(hex(a), format_size(s)) for a, s in free]}, "
                f"{format_size(size)}, max_split_size="
                f"{'unset' if ms == NO_LIMIT else format_size(ms)})")
        shown = got if not isinstance(got, int) else hex(got)
        raise Wrong(f"{call} = {shown}, expected "
                    f"{None if want is None else hex(want)}: "
                    + A.best_fit_hint(got, want, free, size))
    A.replay_check(answer, ref, rng, "best_fit", "best_fit",
                 "Best fit: the smallest cached free block that fits, lowest address among "
                 "equal sizes, None when that block is oversize.")


# ---- 6.3 split -------------------------------------------------------------------------

@exercise("6.3", "when a cached block is split", reference=C.split_rule, binds="splits",
          answers=("labkit.memory.allocator:should_split",))
def _(answer, ref, rng):
    for block, size, small, ms in [*A.SPLIT_CASES, *A.split_cases(rng)]:
        got, want = answer(block, size, small, ms), ref(block, size, small, ms)
        if got == want and isinstance(got, bool):
            continue
        if got == want:
            raise Wrong(f"splits(...) returned {got!r}; return True or False.")
        pool = "small" if small else "large"
        raise Wrong(f"splits(block={block}, size={size}, {pool} pool, max_split={ms}) = "
                    f"{got!r}, expected {want}. Small pool: split when the remainder is "
                    ">= 512 B. Large pool: only when size < max_split_size AND the "
                    "remainder is > 1 MiB (strictly).")
    A.replay_check(answer, ref, rng, "should_split", "splits",
                 "A remainder too small to be worth a block stays with the block: at least "
                 "512 B in the small pool, more than 1 MiB (and size below max_split_size) "
                 "in the large pool.")


# ---- 6.7 merge on free -----------------------------------------------------------------


@exercise("6.7", "merge on free: the block a free leaves", reference=C.merge_free_block,
          binds="merge_free")
def _(answer, ref, rng):
    for block, before, after in A.merge_cases(rng):
        got, want = answer(block, before, after), tuple(ref(block, before, after))
        if isinstance(got, (tuple, list)) and tuple(got) == want:
            continue
        shown = (hex(got[0]), got[1]) if isinstance(got, (tuple, list)) and len(got) == 2 \
            and isinstance(got[0], int) else got
        raise Wrong(f"merge_free({A.hex_block(block)}, {A.hex_block(before)}, {A.hex_block(after)}) = "
                    f"{shown!r}, expected {(hex(want[0]), want[1])}: "
                    + A.merge_hint(got, block, before, after))
    A.replay_check(answer, ref, rng, "merge", "merge_free",
                 "A freed block absorbs each free neighbour of its own segment.")


# ---- 6.4 what autograd saves -----------------------------------------------------------

def saved_cases(rng) -> list[tuple]:
    """Forwards for the counter: a transformer block (views of one QKV output, dropout
    masks), an MLP (a ReLU output that is also the next Linear's input) and a function that
    saves one tensor twice and the halves of another; shapes drawn from ``rng``."""
    a = int(rng.choice([2, 4]))
    h = a * int(rng.integers(4, 12))
    widths = [int(w) for w in rng.integers(8, 64, int(rng.integers(3, 6)))]
    return [("block", int(rng.integers(3, 12)), int(rng.integers(1, 4)), h, a,
             int(rng.integers(100))),
            ("mlp", int(rng.integers(2, 40)), widths, int(rng.integers(100))),
            ("shared", int(rng.integers(3, 17)), int(rng.integers(100)))]


_SAVED_HINTS = {
    "saves": "you counted every save: a tensor saved by two operations (x·x, a ReLU output "
             "that is the next Linear's input) is stored once. Count storages, each once.",
    "data_ptr": "a view (chunk, transpose, reshape) shares its base's storage: key on "
                "t.untyped_storage().data_ptr(), not t.data_ptr().",
    "view_bytes": "a saved view keeps its whole base alive: count the storage's bytes, "
                  "t.untyped_storage().nbytes(), not the view's.",
    "params": "leave out the storages of the tensors in exclude (the parameters live "
              "anyway).",
}


@exercise("6.4", "what autograd saves: a saved_tensors_hooks counter",
          reference=measure.count_saved_storages, binds="saved_storages",
          answers=("labkit.memory.measure:saved_tensor_bytes",
                   "labkit.memory.measure:transformer_block_saved",
                   "labkit.memory.measure:mlp_saved"))
def _(answer, ref, rng):
    for case in saved_cases(rng):
        got = answer.derive(measure.saved_probe, case)
        want = tuple(ref.derive(measure.saved_probe, case))
        if tuple(got) == want:
            continue
        variants = measure.saved_variants(case)
        hint = next((h for key, h in _SAVED_HINTS.items() if tuple(variants[key]) == tuple(got)
                     and tuple(variants[key]) != want),
                    "count each storage once (t.untyped_storage().data_ptr()) with its "
                    "nbytes(), leaving out the parameters.")
        raise Wrong(f"on {case[0]} {case[1:]}: your counter found {got[0]} storages, "
                    f"{got[1]:,} bytes; autograd saved {want[0]} storages, {want[1]:,} "
                    f"bytes: {hint}")


# ---- 6.8 the block's bytes, term by term -----------------------------------------------

# the shapes 6.8 is measured on: (seq, batch, hidden, heads); small, so torch runs in ms
BLOCK_CASES = [(24, 3, 96, 6), (8, 2, 32, 4), (16, 1, 64, 2), (5, 4, 48, 8)]


@exercise("6.8", "bytes torch saves for a transformer block, term by term",
          reference=block_saved_bytes, binds="block_saved_bytes",
          answers=("labkit.memory.measure:transformer_extra_terms",
                   "labkit.memory.measure:transformer_block_saved",
                   "labkit.memory.report:compare_block_activations"))
def _(answer, ref, rng):
    drawn = []
    for _ in range(3):
        a = int(rng.choice([2, 4, 8]))
        drawn.append((int(rng.integers(3, 40)), int(rng.integers(1, 5)),
                      a * int(rng.integers(2, 16)), a))
    for s, b, h, a in [*BLOCK_CASES, *drawn]:
        got, want = answer(s, b, h, a), ref(s, b, h, a)
        if isinstance(got, (int, float, np.integer, np.floating)) and \
                math.isclose(got, want, rel_tol=1e-9):
            continue
        where = f"block_saved_bytes{(s, b, h, a)} = {got!r}; torch saved {want:,} bytes"
        paper = 34 * s * b * h + 5 * a * s * s * b
        masks, ln = a * s * s * b + 2 * s * b * h, 8 * s * b
        close = lambda x: isinstance(got, (int, float)) and math.isclose(got, x)  # noqa: E731
        if close(paper):
            raise Wrong(f"{where}: that is Korthikanti's GPU count. On the CPU each dropout mask "
                        f"is stored in bf16 (2 bytes, not 1), and each LayerNorm also saves its "
                        f"mean and 1/std per token.")
        if close(paper + ln):
            raise Wrong(f"{where}: the dropout masks (attention probabilities and two outputs) "
                        f"are bf16 tensors here, 2 bytes per element, not the GPU's 1.")
        if close(paper + masks):
            raise Wrong(f"{where}: both LayerNorms save their mean and 1/std, one value per "
                        f"token each.")
        if close(34 * s * b * h + 2 * s * b * h + ln) or close(34 * s * b * h):
            raise Wrong(f"{where}: the attention scores are saved too: softmax output, its "
                        f"dropout mask and the dropped-out probabilities, a·s²·b elements each.")
        if close(2 * want):
            raise Wrong(f"{where}: the block runs in bfloat16, 2 bytes per element.")
        raise Wrong(f"{where}.")


# ---- 6.5 -------------------------------------------------------------------------------

def _korthikanti(s, b, h, a):
    return s * b * h * (34 + 5 * a * s / h)


formula_exercise(
    "6.5", "activation bytes of a transformer layer (Korthikanti et al.)",
    layer_activation_bytes,
    cases=[(2048, 1, 4096, 32), (1024, 4, 1024, 16), (16, 2, 64, 4), (4096, 2, 12288, 96),
           (100, 3, 96, 6)],
    call=lambda s, b, h, a: f"layer_activation_bytes{(s, b, h, a)}",
    answers=("labkit.memory.estimator:activation_bytes_per_layer",
             "labkit.memory.estimator:activation_terms"),
    shortcuts=[
        (equals(lambda s, b, h, a: 34 * s * b * h),
         "you left out the attention scores: softmax output, its dropout mask and dropout "
         "output add 5as²b bytes."),
        (equals(lambda s, b, h, a: _korthikanti(s, b, h, a) / 2),
         "the formula is in bytes already (16-bit activations): sbh(34 + 5as/h), do not "
         "halve it."),
        (equals(lambda s, b, h, a: s * b * h * (34 + 5 * a / h)),
         "the attention scores are a×s×s per sample: the term is 5as/h, not 5a/h.")],
    hint="Korthikanti et al. (2022) §4.1: sbh(34 + 5as/h) bytes per layer.")


# ---- 6.9 segment checkpointing, measured -----------------------------------------------

def checkpoint_cases(rng) -> list[tuple[int, int, int, int, int]]:
    """(blocks n, width, batch, segments k, seed): k + n/k well below n, drawn. Two small
    MLPs: the answer runs watched (a profile hook on every Python call), which makes
    torch's module calls some twenty times slower."""
    pairs = [(8, 2), (9, 3), (12, 2), (12, 3), (12, 4)]
    chosen = rng.choice(len(pairs), 2, replace=False)
    return [(pairs[i][0], int(rng.choice([64, 96])), int(rng.choice([256, 384])),
             pairs[i][1], int(rng.integers(100))) for i in chosen]


@exercise("6.9", "segment checkpointing whose peak follows k + n/k",
          reference=measure.checkpoint_segments, binds="checkpointed",
          answers=("torch.utils.checkpoint:checkpoint_sequential",))
def _(answer, ref, rng):
    for n, width, batch, k, seed in checkpoint_cases(rng):
        got = answer.derive(measure.checkpoint_probe, n, width, batch, k, seed)
        want = ref.derive(measure.checkpoint_probe, n, width, batch, k, seed)
        act = want["activation"]
        what = f"{n} Linear+Tanh blocks of width {width}, batch {batch}, k = {k}"
        if got["out_diff"] > 1e-5 or got["grad_diff"] > 1e-4:
            raise Wrong(f"on {what}: the output differs from the plain forward by "
                        f"{got['out_diff']:.3g} and the gradients by {got['grad_diff']:.3g}: "
                        "a checkpointed segment must compute the same function, with its "
                        "gradient (run it through torch.utils.checkpoint.checkpoint, not "
                        "under torch.no_grad or on a detached input).")
        if got["linear_calls"] <= n:
            raise Wrong(f"on {what}: {got['linear_calls']} Linear forwards for {n} Linear "
                        f"layers, so nothing was recomputed in backward: no segment was "
                        f"checkpointed (peak {got['peak'] / act:.1f} activations, expected "
                        f"about {want['peak'] / act:.1f}).")
        if abs(got["peak"] - want["peak"]) > act / 2:
            raise Wrong(f"on {what}: peak of forward + backward {got['peak'] / act:.1f} "
                        f"activations ({format_size(got['peak'])}), expected about "
                        f"{want['peak'] / act:.1f} ({format_size(want['peak'])}): k segments "
                        f"of n/k blocks keep k segment inputs plus one segment's n/k "
                        f"activations, k + n/k = {k + n // k} — one activation per block, "
                        f"the Tanh output that is also the next Linear's input.")


# ---- 6.10 a paged KV cache -------------------------------------------------------------

def kv_streams(rng) -> list[tuple[list, int, int]]:
    """(events, block_tokens, max_len): streams of random lengths drawn from ``rng``, and
    one whose prompts fill whole blocks."""
    out = []
    for _ in range(3):
        max_len = int(rng.choice([64, 128, 256]))
        stream = paged.RequestStream(
            requests=int(rng.integers(5, 14)), max_len=max_len,
            mean_prompt=float(max_len / 6), mean_output=float(max_len / 5),
            arrivals=float(rng.uniform(0.1, 0.6)), seed=int(rng.integers(10**6)))
        out.append((paged.request_events(stream), int(rng.choice([4, 8, 16])), max_len))
    b = int(rng.choice([4, 8]))
    whole = [(0, 2 * b), (1, b), (0, 1), (1, b - 1), (1, 1), (0, 0), (2, 3 * b), (1, 0),
             (2, b), (2, 0)]
    return out + [(whole, b, 8 * b)]


_KV_FIELDS = ("blocks in use", "blocks in the pool", "paged waste", "contiguous waste")


@exercise("6.10", "a paged KV cache against contiguous reservation",
          reference=paged.kv_usage, binds="paged_kv",
          answers=("labkit.memory.paged:simulate",))
def _(answer, ref, rng):
    for events, b, max_len in kv_streams(rng):
        got, want = answer(events, b, max_len), ref(events, b, max_len)
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            raise Wrong(f"paged_kv on {len(events)} events returned "
                        f"{type(got).__name__} of length "
                        f"{len(got) if hasattr(got, '__len__') else '?'}: return one "
                        f"(blocks_in_use, pool_blocks, paged_waste, contiguous_waste) per "
                        f"event.")
        for i, (g, w) in enumerate(zip(got, want)):
            if isinstance(g, (list, tuple)) and tuple(g) == tuple(w):
                continue
            try:
                g = tuple(int(v) for v in g)
                assert len(g) == 4
            except Exception:
                raise Wrong(f"paged_kv: entry {i} is {g!r}; it must be four ints "
                            f"(blocks_in_use, pool_blocks, paged_waste, "
                            f"contiguous_waste).") from None
            field = next(j for j in range(4) if g[j] != w[j])
            req, n = events[i]
            action = (f"request {req} finished" if n == 0 else
                      f"{n} token{'s' if n > 1 else ''} appended to request {req}")
            hint = _kv_hint(field, g, w, events, i, b, max_len)
            raise Wrong(f"paged_kv(..., block_tokens={b}, max_len={max_len}) after event "
                        f"{i} ({action}): {_KV_FIELDS[field]} {g[field]}, expected "
                        f"{w[field]}: {hint}")


def _kv_hint(field, g, w, events, i, b, max_len) -> str:
    if field == 0:
        if g[0] > w[0]:
            if events[i][1] == 0 or any(n == 0 for _, n in events[:i]):
                return ("a finished request returns all its blocks to the free list; a "
                        "block holds B tokens, so a request of t tokens holds ⌈t/B⌉ blocks.")
            return ("a block holds B tokens: take a new one only when the request's last "
                    "block is full (⌈t/B⌉ blocks for t tokens, not ⌊t/B⌋ + 1).")
        return "a request of t tokens needs ⌈t/B⌉ blocks: round up."
    if field == 1:
        return ("take blocks from the free list before adding new ones to the pool; the pool "
                "grows only when the free list is empty.")
    if field == 2:
        if g[2] == w[3]:
            return "that is the contiguous reservation's waste; paging wastes only the " \
                   "empty slots of each request's last block."
        return "paged waste = blocks in use × B − tokens stored."
    return ("contiguous reservation holds max_len slots for every running request from its "
            "first token: waste = running requests × max_len − tokens stored.")
