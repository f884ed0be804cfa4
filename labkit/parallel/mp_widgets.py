"""Widgets of chapter 10: each wires controls to a labkit function and a labkit plot.

``show_*`` functions do the work (print the numbers, draw the figure) and are what the
tests call; ``*_widget`` builders validate their arguments, then wire sliders to them.
"""
from __future__ import annotations

from dataclasses import replace

from labkit.controls import dropdown, fixed, float_slider, int_slider, interactive
from labkit.parallel.mp_plots import plot_plans, plot_schedule, plot_zero
from labkit.parallel.pipeline import KINDS, bubble_formula, pipeline_schedule
from labkit.parallel.planner import advice, cluster, plan
from labkit.parallel.planner_cost import GPT3
from labkit.parallel.planner_table1 import table1_models
from labkit.parallel.zero import zero_table
from labkit.show import show

_T1 = [m for m, _, _ in table1_models()]      # Table 1's ten rows, in the paper's order
MODELS = {   # the planner's models: rows of Narayanan et al. SC'21 Table 1, and GPT-3
    "GPT 1.7B (Table 1)": _T1[0],
    "GPT 7.5B (Table 1)": _T1[2],
    "GPT 39.1B (Table 1)": _T1[4],
    "GPT-3 175B (Brown et al. 2020)": GPT3,
    "GPT 529.6B (Table 1)": _T1[8],
    "GPT 1T (Table 1)": _T1[9],
}
PLANNER_GPUS = ("A100", "H100", "H200")
GPUS_PER_NODE = 8     # a DGX A100 node, as on Selene (Narayanan et al. SC'21)


def show_schedule(stages: int, microbatches: int, kind: str, chunks: int,
                  t_forward: float, t_backward: float) -> None:
    """Simulate the schedule, print bubble (simulated and the paper's formula) and stash,
    draw the Gantt chart. An impossible combination prints the reason instead."""
    v = chunks if kind == "interleaved" else 1
    try:
        s = pipeline_schedule(kind, stages, microbatches, v, t_forward, t_backward)
    except ValueError as exc:
        print(f"✗ {exc}")
        return
    print(f"{kind}: p={stages}, m={microbatches}, v={v}: makespan {s.makespan:.2f}, "
          f"bubble fraction {s.bubble_fraction:.4f} (paper: "
          f"{bubble_formula(kind, stages, microbatches, v):.4f}), idle {s.idle_fraction:.1%}, "
          f"peak stash per stage {list(s.peak_stash)}")
    if kind != "interleaved":
        print(f"  (chunks v = {chunks} is ignored: only the interleaved schedule splits a "
              f"stage into chunks)")
    show(plot_schedule(s))


CHUNKS_KIND = "interleaved"   # the one schedule the chunks slider acts on


def chunks_follow_kind(widget):
    """Enable the chunks slider of a :func:`schedule_widget` only while the schedule is
    interleaved (for GPipe and 1F1B it changes nothing); returns the widget."""
    by = {c.description: c for c in widget.kwargs_widgets}
    kind, chunks = by["schedule"], by["chunks v"]

    def sync(_=None):
        chunks.disabled = kind.value != CHUNKS_KIND

    kind.observe(sync, names="value")
    sync()
    return widget


def schedule_widget(kind: str = "1f1b", stages: int = 4, microbatches: int = 8,
                    chunks: int = 2, t_forward: float = 1.0, t_backward: float = 2.0):
    """Stages (first slider), micro-batches, schedule, chunks (enabled for the interleaved
    schedule only), t_f, t_b → Gantt chart."""
    return chunks_follow_kind(interactive(
        show_schedule,
        stages=int_slider("stages", stages, 1, 8, "stages p"),
        microbatches=int_slider("microbatches", microbatches, 1, 32, "micro-batches m"),
        kind=dropdown("kind", kind, KINDS, "schedule"),
        chunks=int_slider("chunks", chunks, 1, 4, "chunks v"),
        t_forward=float_slider("t_forward", t_forward, 0.25, 4, 0.25, "t_f"),
        t_backward=float_slider("t_backward", t_backward, 0.25, 4, 0.25, "t_b")))


def show_zero(log10_params: float, dp: int) -> None:
    """Per-GPU model states and per-step traffic of DDP, ZeRO-1/2/3 and FSDP."""
    psi = int(round(10 ** log10_params))
    rows = zero_table(psi, dp)
    print(f"Ψ = {psi:,} parameters, dp = {dp}, mixed-precision Adam (16 bytes/parameter)")
    for r in rows:
        print(f"  {r.name:6s} {r.memory.total / 1e9:9.2f} GB per GPU   sends "
              f"{r.comm_volume_psi:.3f} Ψ = {r.comm_bytes / 1e9:8.2f} GB per step (fp16)")
    show(plot_zero(rows))


def zero_widget(log10_params: float = 9.0, dp: int = 8):
    """log10 Ψ (first slider) and data-parallel size → memory against communication."""
    return interactive(show_zero,
                       log10_params=float_slider("log10_params", log10_params, 6, 12, 0.1,
                                                 "log10 Ψ"),
                       dp=int_slider("dp", dp, 1, 64, "dp"))


def show_plans(nodes: int, model: str, gpu: str, top: int = 8) -> None:
    """Plan ``model`` on ``nodes`` × :data:`GPUS_PER_NODE` GPUs: print the best plans and
    why the others fail."""
    gm = replace(MODELS[model], name=model)
    cl = cluster(gpu, nodes * GPUS_PER_NODE, GPUS_PER_NODE)
    ps = plan(gm, cl)
    print(f"{model}: {gm.params / 1e9:.1f}B parameters, batch {gm.batch}, on {cl.gpus} × {gpu}: "
          f"{len(ps.ranked)} plans fit, {len(ps.rejected)} rejected")
    for reason, count in sorted(ps.reasons().items(), key=lambda kv: -kv[1]):
        print(f"  rejected ({reason}): {count}")
    for i, p in enumerate(ps.ranked[:top], 1):
        print(f"  #{i} {p.label:48s} {p.memory / 1e9:5.1f} GB  {p.step_time:8.2f} s  "
              f"MFU {p.mfu:.0%}")
    if ps.ranked:
        show(plot_plans(ps, top))
    else:
        for line in advice(ps):
            print(f"  nothing fits: {line}")


def planner_widget(nodes: int = 16, model: str = "GPT-3 175B (Brown et al. 2020)",
                   gpu: str = "A100"):
    """Nodes of :data:`GPUS_PER_NODE` GPUs (first slider), model and GPU → ranked plans
    and rejections."""
    return interactive(show_plans,
                       nodes=int_slider("nodes", nodes, 1, 512, f"nodes (×{GPUS_PER_NODE} GPUs)"),
                       model=dropdown("model", model, MODELS, "model"),
                       gpu=dropdown("gpu", gpu, PLANNER_GPUS, "GPU"),
                       top=fixed(8))
