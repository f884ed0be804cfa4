"""Widgets of chapter 06: each wires controls (:mod:`labkit.controls`) to a labkit function
and a labkit plot. Builders validate their arguments before they build anything; the
allocator widget runs the learner's core when given one."""
from __future__ import annotations

from labkit.controls import (
    checkbox, choice_slider, dropdown, fixed, float_slider, int_slider, interactive, log_slider,
)
from labkit.memory.constants import format_size
from labkit.memory.core import AllocatorCore
from labkit.memory.estimator import OPTIMIZERS, PRECISIONS, RECOMPUTE, activation_bytes_per_layer
from labkit.memory.estimator import model_state_bytes
from labkit.memory.paged import RequestStream, simulate
from labkit.memory.plots import plot_kv_cache, plot_model_state, plot_recompute_activations
from labkit.memory.plots import plot_segment_map
from labkit.memory.scenarios import request_walkthrough
from labkit.show import show as _show
from labkit.validate import integer, number

MAX_SPLIT_CHOICES = ("unset", "20", "64", "128")
BLOCK_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _core(core):
    if core is not None and not isinstance(core, AllocatorCore):
        raise TypeError(f"core must be an AllocatorCore (labkit.memory.core.allocator_core), "
                        f"got {type(core).__name__}")
    return core


def show_walkthrough(first_mb: float, second_mb: float, then_mb: float,
                     max_split_size_mb: str, expandable_segments: bool, core=None):
    """Allocate two requests and a 0.5 MiB one, free the first, request ``then_mb``, on an
    allocator running ``core`` (None: labkit's rules)."""
    ms = None if max_split_size_mb == "unset" else int(max_split_size_mb)
    steps = request_walkthrough([first_mb, second_mb, 0.5], free_indices=[0], then_mb=then_mb,
                                max_split_size_mb=ms, expandable_segments=expandable_segments,
                                core=core)
    last = steps[-1].stats
    print(" → ".join(s.action for s in steps))
    print(f"allocated {format_size(last.allocated_bytes)}, reserved "
          f"{format_size(last.reserved_bytes)}, fragmentation {last.fragmentation:.1%}, "
          f"segments {last.num_segments}")
    _show(plot_segment_map(steps[-1].segments, title="Segment map after the last request"))


def walkthrough_widget(first_mb: float = 30.0, second_mb: float = 3.0, then_mb: float = 12.0,
                       max_split_size_mb: str = "unset", expandable_segments: bool = False,
                       core=None):
    """Sliders: the sizes of the two requests and of the request after the free;
    ``max_split_size_mb`` and expandable segments; ``core``: the allocator's rules."""
    return interactive(
        show_walkthrough,
        first_mb=float_slider("first_mb", first_mb, 0.25, 120.0, 0.25, "1st MiB"),
        second_mb=float_slider("second_mb", second_mb, 0.25, 40.0, 0.25, "2nd MiB"),
        then_mb=float_slider("then_mb", then_mb, 0.25, 120.0, 0.25, "then MiB"),
        max_split_size_mb=dropdown("max_split_size_mb", max_split_size_mb, MAX_SPLIT_CHOICES,
                                   "max_split"),
        expandable_segments=checkbox("expandable_segments", expandable_segments,
                                     "expandable segments"),
        core=fixed(_core(core)))


def show_budget(log10_params: float, precision: str, optimizer: str, zero_stage: int, dp: int):
    log10_params = number("log10_params", log10_params, low=0, high=15)
    n = int(round(10 ** log10_params))
    st = model_state_bytes(n, precision, optimizer, zero_stage, dp)
    print(f"{n:,} parameters: total {format_size(st.total)} per GPU "
          f"({st.total / max(n, 1):.2f} bytes/parameter)")
    _show(plot_model_state({"parameters": st.params, "gradients": st.grads,
                            "optimizer states": st.optimizer},
                           title=f"{precision}, {optimizer}, ZeRO-{zero_stage}, dp={dp}"))


def budget_widget(log10_params: float = 8.0, precision: str = "fp32", optimizer: str = "adam",
                  zero_stage: int = 0, dp: int = 1):
    """Sliders: log10 of the parameter count, ZeRO stage, data-parallel degree; dropdowns:
    precision and optimizer (:data:`labkit.memory.estimator.PRECISIONS`, ``OPTIMIZERS``)."""
    return interactive(
        show_budget,
        log10_params=float_slider("log10_params", log10_params, 6.0, 11.0, 0.1, "log10 Ψ"),
        precision=dropdown("precision", precision, PRECISIONS, "precision"),
        optimizer=dropdown("optimizer", optimizer, OPTIMIZERS, "optimizer"),
        zero_stage=int_slider("zero_stage", zero_stage, 0, 3, "ZeRO stage"),
        dp=int_slider("dp", dp, 1, 64, "dp"))


def show_activations(seq: int, hidden: int, heads: int, batch: int, tp: int,
                     sequence_parallel: bool):
    hidden, heads = integer("hidden", hidden, low=1), integer("heads", heads, low=1)
    tp = integer("tp", tp, low=1)
    if hidden % heads:
        print(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        return
    if heads % tp:
        print(f"tp ({tp}) must divide heads ({heads}): each rank holds heads/tp of them")
        return
    vals = {r: activation_bytes_per_layer(seq, batch, hidden, heads, tp, sequence_parallel, r)
            for r in RECOMPUTE}
    for r, v in vals.items():
        print(f"recompute={r:9s}: {format_size(v)} per layer")
    _show(plot_recompute_activations(
        vals, title=f"Korthikanti Table 2: s={seq}, b={batch}, h={hidden}, a={heads}, t={tp}"))


def activation_widget(seq: int = 2048, hidden: int = 4096, heads: int = 32, batch: int = 1,
                      tp: int = 1, sequence_parallel: bool = False):
    """Sliders: sequence length, hidden size, heads, micro-batch, tensor-parallel degree;
    sequence parallelism on or off."""
    return interactive(
        show_activations,
        seq=int_slider("seq", seq, 128, 8192, "seq", step=128),
        hidden=int_slider("hidden", hidden, 512, 12288, "hidden", step=512),
        heads=int_slider("heads", heads, 8, 96, "heads", step=8),
        batch=int_slider("batch", batch, 1, 16, "batch"),
        tp=choice_slider("tp", tp, (1, 2, 4, 8), "tp"),
        sequence_parallel=checkbox("sequence_parallel", sequence_parallel,
                                   "sequence parallel"))


def show_kv_cache(block_tokens: int, max_len: int, requests: int, mean_output: float,
                  usage=None):
    """Serve a seeded stream of requests with a paged KV cache (``usage``: the block manager,
    labkit's when None) and with contiguous max-length reservation; print and plot both."""
    stream = RequestStream(requests=requests, max_len=max_len,
                           mean_output=min(mean_output, max_len - 1))
    r = simulate(stream, block_tokens, usage)
    stored, pg, ct = r.peak
    print(f"{requests} requests, max_len {max_len}, blocks of {block_tokens} tokens: peak "
          f"{stored:,} tokens stored; paged peak {pg:,} slots ({r.paged_waste:.1%} of them "
          f"empty on average), contiguous peak {ct:,} slots ({r.contiguous_waste:.1%} empty)")
    _show(plot_kv_cache(r))
    return r


def kv_cache_widget(block_tokens: int = 16, max_len: int = 2048, requests: int = 48,
                    mean_output: float = 300.0, usage=None):
    """Sliders: tokens per KV block, the contiguous reservation ``max_len``, the number of
    requests and their mean output length; ``usage``: the block manager (exercise 6.10)."""
    if usage is not None and not callable(usage):
        raise TypeError(f"usage must be a function (events, block_tokens, max_len), got "
                        f"{type(usage).__name__}")
    return interactive(
        show_kv_cache,
        block_tokens=choice_slider("block_tokens", block_tokens, BLOCK_TOKENS, "tokens/block"),
        max_len=int_slider("max_len", max_len, 512, 8192, "max_len", step=512),
        requests=int_slider("requests", requests, 4, 128, "requests", step=4),
        mean_output=log_slider("mean_output", mean_output, 10.0, 2000.0, 0.1, "mean output"),
        usage=fixed(usage))
