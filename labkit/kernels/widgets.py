"""Views behind the widgets of chapters 4 and 5.

Each ``*_view`` computes one state with a labkit function, prints its headline numbers and
draws it with a labkit plot; a notebook cell wires sliders and dropdowns to it with
``ipywidgets.interactive``, and tests call the views directly.
"""
from __future__ import annotations

import numpy as np

from labkit.kernels import library as lib
from labkit.kernels import ops, plots
from labkit.kernels.analysis import summarize
from labkit.kernels.models import kernel_cost
from labkit.kernels.occupancy import occupancy, occupancy_sweep
from labkit.kernels.roofline import PRESETS, bound, hardware
from labkit.kernels.tensorcore import error_vs_k
from labkit.kernels.tracer import run_traced


def _show(fig) -> None:
    import matplotlib.pyplot as plt
    from IPython.display import display
    display(fig)
    plt.close(fig)


def occupancy_view(threads_per_block: int = 256, registers_per_thread: int = 32,
                   shared_kb: int = 0, gpu: str = "A100"):
    """Occupancy of one launch configuration, with the sweep over block sizes."""
    occ = occupancy(gpu, threads_per_block, registers_per_thread, shared_kb * 1024)
    sweep = occupancy_sweep(gpu, registers_per_thread, shared_kb * 1024)
    print(f"{occ.blocks_per_sm} blocks x {threads_per_block} threads per SM; "
          f"limited by {occ.limiter}; occupancy {occ.occupancy:.1%}")
    _show(plots.plot_occupancy(occ, sweep))
    return occ



def coalescing_view(stride: int = 1):
    """One warp copying ``out[i] = a[i * stride]``: sectors fetched per warp read."""
    if not 1 <= stride <= 64:
        raise ValueError(f"stride must be in [1, 64], got {stride}")
    a = np.arange(32 * 64, dtype=np.float32)
    out = np.zeros(32, dtype=np.float32)
    trace = run_traced(lib.strided_copy, 1, 32, a, out, stride)
    s = summarize(trace)
    print(f"stride {stride}: {s.sectors} sectors for {s.global_requests} warp requests "
          f"(coalescing efficiency {s.coalescing_efficiency:.0%})")
    _show(plots.plot_warp_request(trace, "a"))
    return s



def bank_conflict_view(stride: int = 1):
    """A warp writing and reading shared word ``t * stride``: the conflict it causes."""
    trace = run_traced(lib.shared_stride(32, stride), 1, 32,
                       np.arange(32, dtype=np.float32), np.zeros(32, dtype=np.float32))
    s = summarize(trace)
    print(f"stride {stride}: {s.max_conflict_ways}-way conflict, {s.conflict_replays} "
          "extra shared-memory passes")
    _show(plots.plot_bank_conflicts(trace, op=0))
    return s



def tensorcore_view(log2_max_k: int = 12, distribution: str = "uniform"):
    """Error of emulated tensor-core matmuls as K grows to 2**log2_max_k."""
    if not 4 <= log2_max_k <= 14:
        raise ValueError(f"log2_max_k must be in [4, 14], got {log2_max_k}")
    ks = 2 ** np.arange(4, log2_max_k + 1, 2)
    result = error_vs_k(ks, distribution=distribution)
    worst = {k: float(v[-1]) for k, v in result.errors.items()}
    for label, err in worst.items():
        print(f"K={ks[-1]}: {label}: relative error {err:.2e}")
    _show(plots.plot_error_vs_k(result))
    return result



def roofline_view(log2_n: int = 10, hw: str = "H100", kernel: str = "matmul tiled 32",
                  precision: str = "fp32"):
    """Place a kernel of size n = 2**log2_n on the roofline of ``hw``."""
    if not 4 <= log2_n <= 16:
        raise ValueError(f"log2_n must be in [4, 16], got {log2_n}")
    cost = kernel_cost(kernel, 2 ** log2_n)
    machine = hardware(hw)
    others = [hardware(h) for h in PRESETS if h != hw]
    print(f"{kernel}, n={2 ** log2_n}: {cost.intensity:.3g} FLOP/byte -> "
          f"{bound(machine, cost.intensity, precision)} on {machine.name} "
          f"(ridge {machine.ridge(precision):.3g} FLOP/byte)")
    _show(plots.plot_roofline([machine] + others, [cost], precision))
    return cost



def reduction_view(n: int = 200, variant: str = "interleaved", block: int = 64):
    """Trace one pass of a reduction: divergence picture and conflict count of block 0."""
    if not 1 <= n <= 512:
        raise ValueError(f"n must be in [1, 512] (the tracer is slow), got {n}")
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    result = ops.reduce_sum(x, variant=variant, block=block)
    s = summarize(result.trace)
    print(f"{variant}: sum {float(result.value[0]):.4f} (numpy {float(x.sum()):.4f}); "
          f"{s.traffic.global_reads} global reads, {s.traffic.shared_reads} shared reads, "
          f"max {s.max_conflict_ways}-way conflicts, SIMT efficiency {s.simt_efficiency:.0%}")
    _show(plots.plot_divergence(result.trace, max_rows=24))
    return s

