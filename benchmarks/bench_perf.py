"""Chapter 12's framework comparison, including torch.compile (too slow to compile inside
the notebook on a CPU). Writes ``.bench/perf_frameworks.json``, which the notebook shows.

Rows: one SGD step (and one inference) of the 64-128-10 digits MLP, batch 64, one thread,
interleaved timings, against torch eager measured in the same run.
"""
from __future__ import annotations

import sys

from labkit.perf import Row
from labkit.perf import frameworks


def rows() -> list[Row]:
    try:
        table = frameworks.compare(repeats=15, include_compile=True)
    except Exception as exc:          # no C++ compiler for inductor, say: keep the rest
        print(f"torch.compile failed ({type(exc).__name__}: {exc}); measuring without it",
              file=sys.stderr)
        table = frameworks.compare(repeats=15)
    path = frameworks.save_rows(table)
    print(f"wrote {path}", file=sys.stderr)
    eager = next(r for r in table if r.name == "torch eager")
    out = []
    for r in table:
        if r.name == "torch eager":
            continue
        if r.train_s is not None:
            out.append(Row(f"MLP train step: {r.name}", r.train_s, eager.train_s, "torch eager",
                           goal="ratio > 1: faster than eager"))
        out.append(Row(f"MLP inference (batch 64): {r.name}", r.infer_s, eager.infer_s,
                       "torch eager", goal="ratio > 1: faster than eager"))
    return out


def gpu_report() -> None:
    """On a machine with a GPU: the chapter 01 and 12 measurements the notebooks can only
    predict here (``python benchmarks/bench_perf.py --gpu``)."""
    import torch

    from labkit.perf import benchmark, stack
    from labkit.hardware import measure_machine

    gpu = stack.gpu_peak("fp32")      # an unknown GPU: stack.DEFAULT_GPU's, labelled so
    key, peak = gpu.key, gpu.peak
    print(f"device: {torch.cuda.get_device_name()} ({gpu.label}: {peak / 1e12:.1f} TFLOP/s)")
    a = torch.randn(4096, 4096, device="cuda")
    host = benchmark(lambda: a @ a, repeats=10, warmup=3)
    ev = benchmark(lambda: a @ a, repeats=10, warmup=3, device="cuda")
    print(f"4096^3 fp32 matmul: host clock without sync {host.median * 1e6:.1f} us, "
          f"CUDA events {ev.median * 1e6:.1f} us = {2 * 4096 ** 3 / ev.median / 1e12:.1f} TFLOP/s")
    x = torch.zeros(1, device="cuda")
    dev = benchmark(lambda: x.add_(1), repeats=10, warmup=100, number=1000, device="cuda")
    hst = benchmark(lambda: x.add_(1), repeats=10, warmup=100, number=1000,
                    sync=torch.cuda.synchronize)
    print(f"tiny kernel back to back: {dev.median * 1e6:.2f} us each on the GPU clock, "
          f"{hst.median * 1e6:.2f} us each on the host clock with sync")
    cpu_peak = measure_machine().peak
    print(f"this host's CPU roofline: {cpu_peak / 1e9:.0f} GFLOP/s, "
          f"{measure_machine().bandwidth / 1e9:.0f} GB/s")
    print("batch | GPU samples/s | copy share | GPU busy share | GPU MFU | CPU samples/s | "
          "speedup | predicted (roofline alone) | predicted (calibrated host)")
    for b in (8, 32, 128, 512):
        g = stack.run_cnn(b, steps=20, device="cuda", gpu=key)
        c = stack.run_cnn(b, steps=3, device="cpu", peak=cpu_peak)
        p0 = stack.predict_cnn(b, key, host_s=0.0)
        p1 = stack.predict_cnn(b, key)
        print(f"{b} | {g.samples_per_s:,.0f} | {g.copy_share:.0%} | {g.busy_share:.1%} | "
              f"{g.mfu:.2%} | {c.samples_per_s:,.0f} | {g.samples_per_s / c.samples_per_s:.1f} | "
              f"{p0.samples_per_s:,.0f} | {p1.samples_per_s:,.0f}")
    prof = stack.profile_step(stack.simplenet_step(stack.simple_net().cuda(), device="cuda"),
                              steps=10)
    print("SimpleNet step on the GPU, us per step by layer:",
          {k: round(v * 1e6, 1) for k, v in prof.layer_s.items()},
          f"wall {prof.wall_s / prof.steps * 1e6:.0f} us")
    for r in prof.top(8):
        print(f"  {r.name[:70]:70s} [{r.layer}] calls {r.calls} "
              f"self {r.self_s / prof.steps * 1e6:.1f} us/step")


if __name__ == "__main__" and "--gpu" in sys.argv:
    gpu_report()
