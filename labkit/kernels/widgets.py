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
from labkit.controls import dropdown, int_slider, interactive
from labkit.hardware import KB, MAX_THREADS_PER_BLOCK, WARP_SIZE, sm_limits
from labkit.kernels import library as lib
from labkit.kernels import ops, plots
from labkit.kernels.analysis import summarize
from labkit.kernels.models import (LADDER, LADDER_GPUS, ROOFLINE_KERNELS, kernel_cost,
                                   predict_matmul)
from labkit.kernels.occupancy import GPUS as SM_GPUS
from labkit.kernels.occupancy import occupancy, occupancy_sweep
from labkit.kernels.roofline import PRECISIONS, PRESETS, hardware
from labkit.kernels.tensorcore import error_vs_k
from labkit.kernels.tracer import run_traced
from labkit.show import show

REDUCTION_VARIANTS = ("interleaved", "strided", "shared", "warp", "fast")
REDUCTION_BLOCKS = (32, 64, 128)
DISTRIBUTIONS = ("uniform", "normal")
# each range is stated once, for the view's check and the builder's slider
REDUCTION_N = (1, 512)
LOG2_MAX_K = (4, 14)
ROOFLINE_LOG2_N = (4, 16)
LADDER_LOG2_N = (7, 15)
MAX_REGISTERS_PER_THREAD = max(s.max_registers_per_thread for s in SM_GPUS.values())
MAX_SHARED_KB = max(s.max_shared_per_block for s in SM_GPUS.values()) // KB


# ---- views -------------------------------------------------------------------------------

def occupancy_view(threads_per_block: int = 256, registers_per_thread: int = 32,
                   shared_kb: int = 0, gpu: str = "A100"):
    """Occupancy of one launch configuration, with the sweep over block sizes. Shared memory
    above what one block of ``gpu`` may use (``labkit.hardware.sm_limits``) is capped there."""
    shared_kb = V.integer("shared_kb", shared_kb, low=0)
    most = sm_limits(gpu).max_shared_per_block // KB
    if shared_kb > most:
        print(f"{gpu} lets a block use at most {most} KB of shared memory: showing {most} KB")
        shared_kb = most
    occ = occupancy(gpu, threads_per_block, registers_per_thread, shared_kb * KB)
    sweep = occupancy_sweep(gpu, registers_per_thread, shared_kb * KB)
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
    log2_max_k = V.integer("log2_max_k", log2_max_k, low=LOG2_MAX_K[0], high=LOG2_MAX_K[1])
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
    log2_n = V.integer("log2_n", log2_n, low=ROOFLINE_LOG2_N[0], high=ROOFLINE_LOG2_N[1])
    V.one_of("kernel", kernel, ROOFLINE_KERNELS)
    V.one_of("precision", precision, PRECISIONS)
    machine = hardware(hw)
    if not machine.has(precision):
        print(f"{machine.name} has no {precision} rate: showing fp32")
        precision = "fp32"
    cost = kernel_cost(kernel, 2 ** log2_n, hw if hw in PRESETS else None)
    roof = machine.roofline(precision)
    others = [PRESETS[h].roofline(precision) for h in PRESETS if h != hw]
    what = "modelled DRAM bytes" if hw in PRESETS else "requested bytes"
    print(f"{kernel}, n={2 ** log2_n}: {cost.intensity:.3g} FLOP/byte ({what}) -> "
          f"{roof.bound(cost.intensity)} on {machine.name} at {precision} "
          f"(ridge {roof.ridge:.3g} FLOP/byte)")
    show(plots.plot_roofline([roof] + others, [(kernel, cost.intensity)],
                             f"roofline, every machine at {precision}"))
    return cost


def reduction_view(n: int = 200, variant: str = "interleaved", block: int = 64):
    """Trace one pass of a reduction: divergence picture and conflict count of block 0."""
    n = V.integer("n", n, low=REDUCTION_N[0], high=REDUCTION_N[1])
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
    log2_n = V.integer("log2_n", log2_n, low=LADDER_LOG2_N[0], high=LADDER_LOG2_N[1])
    V.one_of("gpu", gpu, LADDER_GPUS)
    preds = [predict_matmul(2 ** log2_n, v, gpu) for v in LADDER]
    print(f"PREDICTION (model, not measured), n={2 ** log2_n}, {gpu} FP32: " + ", ".join(
        f"{p.variant} {p.tflops:.1f} TFLOP/s ({p.limiter})" for p in preds))
    show(plots.plot_ladder(preds))
    return preds


# ---- builders ----------------------------------------------------------------------------

def occupancy_widget(gpu: str = "A100", threads_per_block: int = 256,
                     registers_per_thread: int = 32, shared_kb: int = 0):
    """Threads per block, registers per thread, shared KB per block, GPU → occupancy."""
    return interactive(
        occupancy_view,
        threads_per_block=int_slider("threads_per_block", threads_per_block, WARP_SIZE,
                                     MAX_THREADS_PER_BLOCK, "threads/block", step=WARP_SIZE),
        registers_per_thread=int_slider("registers_per_thread", registers_per_thread, 8,
                                        MAX_REGISTERS_PER_THREAD, "regs/thread"),
        shared_kb=int_slider("shared_kb", shared_kb, 0, MAX_SHARED_KB, "smem KB/block", step=4),
        gpu=dropdown("gpu", gpu, SM_GPUS, "GPU"))


def coalescing_widget(stride: int = 1):
    """Stride between consecutive lanes' addresses → sectors per warp request."""
    return interactive(coalescing_view, stride=int_slider("stride", stride, 1, 32, "stride"))


def bank_conflict_widget(stride: int = 1):
    """Stride between consecutive lanes' shared words → bank-conflict ways."""
    return interactive(bank_conflict_view,
                       stride=int_slider("stride", stride, 1, 33, "stride"))


def tensorcore_widget(log2_max_k: int = 12, distribution: str = "uniform"):
    """Largest K and input distribution → error of FP32- vs FP16-accumulated matmuls."""
    return interactive(
        tensorcore_view,
        log2_max_k=int_slider("log2_max_k", log2_max_k, *LOG2_MAX_K, "log2 K max", step=2),
        distribution=dropdown("distribution", distribution, DISTRIBUTIONS, "inputs"))


def reduction_widget(n: int = 200, variant: str = "interleaved", block: int = 64):
    """n, variant and block → the active lanes of each memory instruction of block 0."""
    return interactive(
        reduction_view,
        n=int_slider("n", n, *REDUCTION_N, "n", continuous_update=False),
        variant=dropdown("variant", variant, REDUCTION_VARIANTS, "variant"),
        block=dropdown("block", block, REDUCTION_BLOCKS, "block"))


def roofline_widget(log2_n: int = 10, hw: str = "H100", kernel: str = "matmul tiled 32",
                    precision: str = "fp32"):
    """log2 n, hardware, kernel and precision → the kernel on the roofline."""
    return interactive(
        roofline_view,
        log2_n=int_slider("log2_n", log2_n, *ROOFLINE_LOG2_N, "log2 n"),
        hw=dropdown("hw", hw, tuple(PRESETS) + ("this machine",), "hardware"),
        kernel=dropdown("kernel", kernel, ROOFLINE_KERNELS, "kernel"),
        precision=dropdown("precision", precision, PRECISIONS, "precision"))


def ladder_widget(log2_n: int = 12, gpu: str = "H100"):
    """log2 n and GPU → the model's predicted speed of each rung of the matmul ladder."""
    return interactive(
        ladder_view,
        log2_n=int_slider("log2_n", log2_n, *LADDER_LOG2_N, "log2 n"),
        gpu=dropdown("gpu", gpu, LADDER_GPUS, "GPU"))
