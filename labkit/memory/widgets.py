"""Widgets of chapter 06: each wires controls to a labkit function and a labkit plot."""
from __future__ import annotations

from labkit.memory.constants import format_size
from labkit.show import show as _show


def show_walkthrough(first_mb: float, second_mb: float, then_mb: float,
                     max_split_size_mb: str, expandable_segments: bool):
    """Allocate two requests and a 0.5 MiB one, free the first, request ``then_mb``."""
    from labkit.memory.plots import plot_segment_map
    from labkit.memory.scenarios import request_walkthrough

    ms = None if max_split_size_mb == "unset" else int(max_split_size_mb)
    steps = request_walkthrough([first_mb, second_mb, 0.5], free_indices=[0], then_mb=then_mb,
                                max_split_size_mb=ms, expandable_segments=expandable_segments)
    last = steps[-1].stats
    print(" → ".join(s.action for s in steps))
    print(f"allocated {format_size(last.allocated_bytes)}, reserved "
          f"{format_size(last.reserved_bytes)}, fragmentation {last.fragmentation:.1%}, "
          f"segments {last.num_segments}")
    _show(plot_segment_map(steps[-1].segments, title="Segment map after the last request"))


def walkthrough_widget():
    import ipywidgets as w

    return w.interactive(
        show_walkthrough,
        first_mb=w.FloatSlider(value=30.0, min=0.25, max=120.0, step=0.25,
                               description="1st MiB"),
        second_mb=w.FloatSlider(value=3.0, min=0.25, max=40.0, step=0.25,
                                description="2nd MiB"),
        then_mb=w.FloatSlider(value=12.0, min=0.25, max=120.0, step=0.25,
                              description="then MiB"),
        max_split_size_mb=w.Dropdown(options=["unset", "20", "64", "128"], value="unset",
                                     description="max_split"),
        expandable_segments=w.Checkbox(value=False, description="expandable segments"))


def show_budget(log10_params: float, precision: str, optimizer: str, zero_stage: int, dp: int):
    from labkit.memory.estimator import model_state_bytes
    from labkit.memory.plots import plot_model_state

    n = int(round(10 ** log10_params))
    st = model_state_bytes(n, precision, optimizer, zero_stage, dp)
    print(f"{n:,} parameters: total {format_size(st.total)} per GPU "
          f"({st.total / max(n, 1):.2f} bytes/parameter)")
    _show(plot_model_state({"parameters": st.params, "gradients": st.grads,
                            "optimizer states": st.optimizer},
                           title=f"{precision}, {optimizer}, ZeRO-{zero_stage}, dp={dp}"))


def budget_widget():
    import ipywidgets as w

    return w.interactive(
        show_budget,
        log10_params=w.FloatSlider(value=8.0, min=6.0, max=11.0, step=0.1,
                                   description="log10 Ψ"),
        precision=w.Dropdown(options=["fp32", "mixed"], value="fp32"),
        optimizer=w.Dropdown(options=["sgd", "momentum", "adam"], value="adam"),
        zero_stage=w.IntSlider(value=0, min=0, max=3, description="ZeRO stage"),
        dp=w.IntSlider(value=1, min=1, max=64, description="dp"))


def show_activations(seq: int, hidden: int, heads: int, batch: int, tp: int,
                     sequence_parallel: bool):
    from labkit.memory.estimator import RECOMPUTE, activation_bytes_per_layer
    from labkit.memory.plots import plot_recompute_activations

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


def activation_widget():
    import ipywidgets as w

    return w.interactive(
        show_activations,
        seq=w.IntSlider(value=2048, min=128, max=8192, step=128, description="seq"),
        hidden=w.IntSlider(value=4096, min=512, max=12288, step=512, description="hidden"),
        heads=w.IntSlider(value=32, min=8, max=96, step=8, description="heads"),
        batch=w.IntSlider(value=1, min=1, max=16, description="batch"),
        tp=w.SelectionSlider(options=[1, 2, 4, 8], value=1, description="tp"),
        sequence_parallel=w.Checkbox(value=False, description="sequence parallel"))
