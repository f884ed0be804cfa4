"""Widgets of chapters 04 and 05: each builder validates its arguments, then wires controls
to a ``*_view`` function that prints its headline numbers and draws a labkit plot.

    occupancy_widget(gpu="A100")        # blocks per SM and the binding resource
    coalescing_widget(stride=1)         # sectors per warp request
    bank_conflict_widget(stride=1)      # shared-memory bank conflicts
    tensorcore_widget()                 # error of emulated tensor-core matmuls against K
    reduction_widget(variant="interleaved")   # active lanes of each reduction
    roofline_widget(hw="H100")          # a kernel on the roofline, one precision
    ladder_widget(gpu="H100")           # the matmul ladder, predicted by the model

The views are plain functions (tests call them); the builders only wire controls.
"""
from __future__ import annotations

import numpy as np

from labkit import validate as V
from labkit.hardware import MAX_THREADS_PER_BLOCK
from labkit.kernels import library as lib
from labkit.kernels import ops, plots
from labkit.kernels.analysis import summarize
from labkit.kernels.models import LADDER, ROOFLINE_KERNELS, kernel_cost, predict_matmul
from labkit.kernels.occupancy import GPUS as SM_GPUS
from labkit.kernels.occupancy import occupancy, occupancy_sweep
from labkit.kernels.roofline import PRECISIONS, PRESETS, bound, hardware
from labkit.kernels.tensorcore import error_vs_k
from labkit.kernels.tracer import run_traced
from labkit.show import show

REDUCTION_VARIANTS = ("interleaved", "strided", "shared", "warp", "fast")
LADDER_GPUS = ("A100", "H100", "H200")


# ---- views -------------------------------------------------------------------------------

def occupancy_view(threads_per_block: int = 256, registers_per_thread: int = 32,
                   shared_kb: int = 0, gpu: str = "A100"):
    """Occupancy of one launch configuration, with the sweep over block sizes."""
    shared_kb = V.integer("shared_kb", shared_kb, low=0)
    occ = occupancy(gpu, threads_per_block, registers_per_thread, shared_kb * 1024)
    sweep = occupancy_sweep(gpu, registers_per_thread, shared_kb * 1024)
    print(f"{occ.blocks_per_sm} blocks x {threads_per_block} threads per SM; "
          f"limited by {occ.limiter}; occupancy {occ.occupancy:.1%}")
    show(plots.plot_occupancy(occ, sweep))
    return occ


def coalescing_view(stride: int = 1):
    """One warp copying ``out[i] = a[i * stride]``: sectors fetched per warp read."""
    stride = V.integer("stride", stride, low=1, high=64)
    a = np.arange(32 * 64, dtype=np.float32)
    out = np.zeros(32, dtype=np.float32)
    trace = run_traced(lib.strided_copy, 1, 32, a, out, stride)
    s = summarize(trace)
    print(f"stride {stride}: {s.sectors} sectors for {s.global_requests} warp requests "
          f"(coalescing efficiency {s.coalescing_efficiency:.0%})")
    show(plots.plot_warp_request(trace, "a"))
    return s


def bank_conflict_view(stride: int = 1):
    """A warp writing and reading shared word ``t * stride``: the conflict it causes."""
    stride = V.integer("stride", stride, low=1, high=64)
    trace = run_traced(lib.shared_stride(32, stride), 1, 32,
                       np.arange(32, dtype=np.float32), np.zeros(32, dtype=np.float32))
    s = summarize(trace)
    print(f"stride {stride}: {s.max_conflict_ways}-way conflict, {s.conflict_replays} "
          "extra shared-memory passes")
    show(plots.plot_bank_conflicts(trace, op=0))
    return s


def tensorcore_view(log2_max_k: int = 12, distribution: str = "uniform"):
    """Error of emulated tensor-core matmuls as K grows to 2**log2_max_k."""
    log2_max_k = V.integer("log2_max_k", log2_max_k, low=4, high=14)
    ks = 2 ** np.arange(4, log2_max_k + 1, 2)
    result = error_vs_k(ks, distribution=distribution)
    worst = {k: float(v[-1]) for k, v in result.errors.items()}
    for label, err in worst.items():
        print(f"K={ks[-1]}: {label}: relative error {err:.2e}")
    show(plots.plot_error_vs_k(result))
    return result


def roofline_view(log2_n: int = 10, hw: str = "H100", kernel: str = "matmul tiled 32",
                  precision: str = "fp32"):
    """Place a kernel of size n = 2**log2_n on the roofline of ``hw`` at ``precision``.

    On a data-sheet GPU a matmul's bytes are its modelled DRAM traffic (tiles reused
    through L2 within a wave, :func:`labkit.kernels.models.dram_bytes`); on this machine
    they are the kernel's global requests."""
    log2_n = V.integer("log2_n", log2_n, low=4, high=16)
    V.one_of("kernel", kernel, ROOFLINE_KERNELS)
    V.one_of("precision", precision, PRECISIONS)
    machine = hardware(hw)
    if not machine.has(precision):
        print(f"{machine.name} has no {precision} rate: showing fp32")
        precision = "fp32"
    cost = kernel_cost(kernel, 2 ** log2_n, hw if hw in PRESETS else None)
    others = [hardware(h) for h in PRESETS if h != hw]
    what = "modelled DRAM bytes" if hw in PRESETS else "requested bytes"
    print(f"{kernel}, n={2 ** log2_n}: {cost.intensity:.3g} FLOP/byte ({what}) -> "
          f"{bound(machine, cost.intensity, precision)} on {machine.name} at {precision} "
          f"(ridge {machine.ridge(precision):.3g} FLOP/byte)")
    show(plots.plot_roofline([machine] + others, [cost], precision))
    return cost


def reduction_view(n: int = 200, variant: str = "interleaved", block: int = 64):
    """Trace one pass of a reduction: divergence picture and conflict count of block 0."""
    n = V.integer("n", n, low=1, high=512)
    V.one_of("variant", variant, REDUCTION_VARIANTS)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    result = ops.reduce_sum(x, variant=variant, block=block)
    s = summarize(result.trace)
    print(f"{variant}: sum {float(result.value[0]):.4f} (numpy {float(x.sum()):.4f}); "
          f"{s.traffic.global_reads} global reads, {s.traffic.shared_reads} shared reads, "
          f"max {s.max_conflict_ways}-way conflicts, SIMT efficiency {s.simt_efficiency:.0%}")
    show(plots.plot_divergence(result.trace, max_rows=24))
    return s


def ladder_view(log2_n: int = 12, gpu: str = "H100"):
    """The model's predicted FP32 TFLOP/s of each matmul of the ladder at n = 2**log2_n."""
    log2_n = V.integer("log2_n", log2_n, low=7, high=15)
    V.one_of("gpu", gpu, LADDER_GPUS)
    preds = [predict_matmul(2 ** log2_n, v, gpu) for v in LADDER]
    print(f"PREDICTION (model, not measured), n={2 ** log2_n}, {gpu} FP32: " + ", ".join(
        f"{p.variant} {p.tflops:.1f} TFLOP/s ({p.limiter})" for p in preds))
    show(plots.plot_ladder(preds))
    return preds


# ---- builders ----------------------------------------------------------------------------

def _w():
    import ipywidgets
    return ipywidgets


def occupancy_widget(gpu: str = "A100", threads_per_block: int = 256,
                     registers_per_thread: int = 32, shared_kb: int = 0):
    """Threads per block, registers per thread, shared KB per block, GPU → occupancy."""
    V.one_of("gpu", gpu, tuple(SM_GPUS))
    threads_per_block = V.integer("threads_per_block", threads_per_block, low=32,
                                  high=MAX_THREADS_PER_BLOCK)
    registers_per_thread = V.integer("registers_per_thread", registers_per_thread, low=8,
                                     high=255)
    shared_kb = V.integer("shared_kb", shared_kb, low=0, high=160)
    W = _w()
    return W.interactive(
        occupancy_view,
        threads_per_block=W.IntSlider(value=threads_per_block, min=32, max=MAX_THREADS_PER_BLOCK, step=32,
                                      description="threads/block"),
        registers_per_thread=W.IntSlider(value=registers_per_thread, min=8, max=255,
                                         description="regs/thread"),
        shared_kb=W.IntSlider(value=shared_kb, min=0, max=160, step=4,
                              description="smem KB/block"),
        gpu=W.Dropdown(options=list(SM_GPUS), value=gpu, description="GPU"))


def coalescing_widget(stride: int = 1):
    """Stride between consecutive lanes' addresses → sectors per warp request."""
    stride = V.integer("stride", stride, low=1, high=32)
    W = _w()
    return W.interactive(coalescing_view, stride=W.IntSlider(value=stride, min=1, max=32,
                                                             description="stride"))


def bank_conflict_widget(stride: int = 1):
    """Stride between consecutive lanes' shared words → bank-conflict ways."""
    stride = V.integer("stride", stride, low=1, high=33)
    W = _w()
    return W.interactive(bank_conflict_view, stride=W.IntSlider(value=stride, min=1, max=33,
                                                                description="stride"))


def tensorcore_widget(log2_max_k: int = 12, distribution: str = "uniform"):
    """Largest K and input distribution → error of FP32- vs FP16-accumulated matmuls."""
    log2_max_k = V.integer("log2_max_k", log2_max_k, low=4, high=14)
    V.one_of("distribution", distribution, ("uniform", "normal"))
    W = _w()
    return W.interactive(
        tensorcore_view,
        log2_max_k=W.IntSlider(value=log2_max_k, min=4, max=14, step=2,
                               description="log2 K max"),
        distribution=W.Dropdown(options=["uniform", "normal"], value=distribution,
                                description="inputs"))


def reduction_widget(n: int = 200, variant: str = "interleaved", block: int = 64):
    """n, variant and block → the active lanes of each memory instruction of block 0."""
    n = V.integer("n", n, low=1, high=512)
    V.one_of("variant", variant, REDUCTION_VARIANTS)
    V.one_of("block", block, (32, 64, 128))
    W = _w()
    return W.interactive(
        reduction_view,
        n=W.IntSlider(value=n, min=1, max=512, description="n", continuous_update=False),
        variant=W.Dropdown(options=REDUCTION_VARIANTS, value=variant, description="variant"),
        block=W.Dropdown(options=[32, 64, 128], value=block, description="block"))


def roofline_widget(log2_n: int = 10, hw: str = "H100", kernel: str = "matmul tiled 32",
                    precision: str = "fp32"):
    """log2 n, hardware, kernel and precision → the kernel on the roofline."""
    log2_n = V.integer("log2_n", log2_n, low=4, high=16)
    V.one_of("hw", hw, tuple(PRESETS) + ("this machine",))
    V.one_of("kernel", kernel, ROOFLINE_KERNELS)
    V.one_of("precision", precision, PRECISIONS)
    W = _w()
    return W.interactive(
        roofline_view,
        log2_n=W.IntSlider(value=log2_n, min=4, max=16, description="log2 n"),
        hw=W.Dropdown(options=list(PRESETS) + ["this machine"], value=hw,
                      description="hardware"),
        kernel=W.Dropdown(options=ROOFLINE_KERNELS, value=kernel, description="kernel"),
        precision=W.Dropdown(options=PRECISIONS, value=precision, description="precision"))


def ladder_widget(log2_n: int = 12, gpu: str = "H100"):
    """log2 n and GPU → the model's predicted speed of each rung of the matmul ladder."""
    log2_n = V.integer("log2_n", log2_n, low=7, high=15)
    V.one_of("gpu", gpu, LADDER_GPUS)
    W = _w()
    return W.interactive(
        ladder_view,
        log2_n=W.IntSlider(value=log2_n, min=7, max=15, description="log2 n"),
        gpu=W.Dropdown(options=LADDER_GPUS, value=gpu, description="GPU"))
