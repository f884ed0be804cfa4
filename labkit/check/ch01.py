"""Chapter 01's exercises: the layers of a profile and what each charges, the FLOPs of a
step, the process's memory, rooflines, Little's law, busy time and the host's pipeline."""
from __future__ import annotations

import copy
import math

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.hardware import GPUS
from labkit.perf.stack import (ALLOC_OPS, COMPUTE_OPS, CONV_OPS, MATMUL_OPS, busy_time,
                               bytes_in_flight, calibrate_host, charge_layers, charge_of,
                               kernel_intervals, layer_of, loads_in_flight, op_precision,
                               pipeline_step, simplenet_step_flops, status_bytes)


def ridge_point(peak, bandwidth):
    """Reference: the ridge point peak / bandwidth (FLOP per byte)."""
    return peak / bandwidth


def roofline_bound(peak, bandwidth, flops, nbytes):
    """Reference: (least time, 'memory-bound' or 'compute-bound') of a kernel."""
    t = max(flops / peak, nbytes / bandwidth)
    return t, ("memory-bound" if flops / nbytes < peak / bandwidth else "compute-bound")


def _close(a, b, rtol: float = 1e-9) -> bool:
    return bool(np.isclose(a, b, rtol=rtol, atol=0))


# --------------------------------------------------------------- 1.1: which layer
LAYER_CASES = [
    ("## forward ##", "application"), ("my_data_loading", "application"),
    ("aten::addmm", "framework"), ("aten::mm", "framework"),
    ("autograd::engine::evaluate_function: AddmmBackward0", "framework"),
    ("AddmmBackward0", "framework"), ("Optimizer.step#SGD.step", "framework"),
    ("Torch-Compiled Region: 0/0", "compiler/graph"), ("CompiledFunction", "compiler/graph"),
    ("cudaLaunchKernel", "runtime"), ("cudaMemcpyAsync", "runtime"),
    ("cudaStreamSynchronize", "runtime"), ("cuLaunchKernel", "runtime"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "kernel libraries"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
     "::launch_clamp_scalar>", "kernel libraries"),
    ("Memcpy HtoD (Pageable -> Device)", "kernel libraries"),
    ("triton_poi_fused_relu_0", "kernel libraries"),
]
_ATEN = ("addmm", "mm", "bmm", "linear", "relu", "sum", "t", "view", "empty", "copy_",
         "convolution", "max_pool2d", "_log_softmax", "nll_loss_forward", "add_", "mul")
_WORDS = ("forward", "backward", "optimizer", "data", "loss", "eval", "warmup", "step")


def fresh_layer_cases(rng) -> list[tuple[str, str]]:
    """Row names of every kind, drawn per run."""
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    op = pick(_ATEN)
    cap = op.strip("_").split("_")[0].capitalize()
    return [
        (f"## {pick(_WORDS)} {int(rng.integers(100))} ##", "application"),
        (f"{pick(_WORDS)}_{pick(_WORDS)}", "application"),
        (f"aten::{op}", "framework"), (f"{cap}Backward{int(rng.integers(2))}", "framework"),
        (f"autograd::engine::evaluate_function: {cap}Backward0", "framework"),
        (f"Optimizer.step#{pick(('SGD', 'Adam', 'AdamW'))}.step", "framework"),
        (f"Torch-Compiled Region: {int(rng.integers(9))}/{int(rng.integers(3))}",
         "compiler/graph"),
        (f"cuda{pick(('LaunchKernel', 'MemcpyAsync', 'EventRecord', 'Malloc', 'Free'))}",
         "runtime"), (f"cu{pick(('LaunchKernel', 'MemAlloc', 'CtxSynchronize'))}", "runtime"),
        (f"sm{pick((80, 86, 90))}_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize"
         f"{pick((64, 128, 256))}x{pick((64, 128))}", "kernel libraries"),
        (f"triton_{pick(('poi', 'red', 'per'))}_fused_{op.strip('_')}_{int(rng.integers(9))}",
         "kernel libraries"),
        (f"void at::native::{pick(('reduce_kernel', 'vectorized_elementwise_kernel'))}<"
         f"{int(rng.integers(1, 9))}>", "kernel libraries"),
        (f"cutlass_80_tensorop_s1688gemm_{pick((64, 128))}x{pick((64, 128))}_nn",
         "kernel libraries"),
    ]


@exercise("1.1", "which layer a profiler row belongs to", reference=layer_of, binds="which_layer")
def _(answer, ref, rng):
    for name, _ in [*LAYER_CASES, *fresh_layer_cases(rng)]:
        got, want = answer(name), ref(name)
        if got == want:
            continue
        if name.startswith("cu") and got == "kernel libraries":
            raise Wrong(f"{name!r} is a call on the CPU into the CUDA runtime; it asks for "
                        f"work, the kernel itself runs later on the device: 'runtime'.")
        if name.startswith("aten::") and got == "kernel libraries":
            raise Wrong(f"{name!r} is an ATen operator: the framework's dispatcher. The "
                        f"kernel it calls (MKL, cuBLAS…) is a separate row: 'framework'.")
        if "Compiled" in name:
            raise Wrong(f"{name!r} is a region run by torch.compile: 'compiler/graph'.")
        if name.startswith("##"):
            raise Wrong(f"{name!r} is a range the user labelled with record_function: "
                        f"'application'.")
        raise Wrong(f"which_layer({name!r}) = {got!r}, expected {want!r}.")


# --------------------------------------------------------- 1.2, 1.3: charging self times
_METADATA = ("aten::t", "aten::view", "aten::as_strided", "aten::linear", "aten::expand",
             "aten::transpose", "aten::detach")
_OTHERS = ("## forward ##", "## backward ##", "## optimizer ##", "my_loss",
           "autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0",
           "torch::autograd::AccumulateGrad", "Optimizer.step#SGD.step", "cudaLaunchKernel",
           "cudaMemcpyAsync", "ampere_sgemm_32x32_sliced1x4_tn",
           "Torch-Compiled Region: 0/0", "Memcpy HtoD (Pinned -> Device)")
POOL = (*sorted(COMPUTE_OPS), *sorted(ALLOC_OPS), *_METADATA, *_OTHERS)


def random_rows(rng, count: int = 4, depth: int = 4, start: float = 0.0) -> list[dict]:
    """Profiler rows as :func:`labkit.perf.stack.event_rows` gives them — names from every
    layer, self times in µs, children inside their parent's span — drawn from ``rng``."""
    rows, t = [], start
    for _ in range(count):
        name = POOL[int(rng.integers(len(POOL)))]
        self_s = float(rng.lognormal(np.log(5e-6), 1.0))
        kids = random_rows(rng, int(rng.integers(0, 4)), depth - 1, t + self_s / 2) \
            if depth > 1 and rng.random() < 0.6 else []
        end = (kids[-1]["end_s"] if kids else t) + self_s / 2 + float(rng.uniform(0, 2e-6))
        rows.append({"name": name, "self_s": self_s, "start_s": t, "end_s": end,
                     "children": kids})
        t = end + float(rng.uniform(0, 3e-6))
    return rows


def chain(n: int) -> list[dict]:
    """A row nested ``n`` deep (a record_function inside a record_function …)."""
    row = {"name": "aten::addmm", "self_s": 1e-6, "start_s": 0.0, "end_s": 1e-6, "children": []}
    for k in range(n - 1):
        row = {"name": f"## level {k} ##", "self_s": 1e-6, "start_s": 0.0,
               "end_s": (k + 2) * 1e-6, "children": [row]}
    return [row]


def _charged(rows, on_cpu: bool, *, key: str = "self", top_only: bool = False,
             cpu_rule: bool | None = None, alloc_rule: bool = True) -> dict:
    """What a charging with one stated mistake gives (the hints' models)."""
    out: dict[str, float] = {}
    todo = list(rows)
    cpu_rule = on_cpu if cpu_rule is None else cpu_rule
    while todo:
        r = todo.pop()
        layer = layer_of(r["name"])
        if layer == "framework" and alloc_rule and r["name"] in ALLOC_OPS:
            layer = "runtime"
        elif layer == "framework" and cpu_rule and r["name"] in COMPUTE_OPS:
            layer = "kernel libraries"
        out[layer] = out.get(layer, 0.0) + (r["self_s"] if key == "self"
                                            else r["end_s"] - r["start_s"])
        if not top_only:
            todo.extend(r["children"])
    return out


def _same_charges(got: dict, want: dict) -> bool:
    keys = set(got) | set(want)
    return all(np.isclose(float(got.get(k, 0.0)), float(want.get(k, 0.0)), rtol=1e-9,
                          atol=1e-15) for k in keys)


@exercise("1.2", "the layer a row's self time is charged to", reference=charge_of,
          binds="charge_of")
def _(answer, ref, rng):
    names = [*POOL, *(n for n, _ in fresh_layer_cases(rng))]
    for i in rng.permutation(len(names)):
        name = names[int(i)]
        for on_cpu in (True, False):
            got, want = answer(name, on_cpu), ref(name, on_cpu)
            if got == want:
                continue
            where = "on a CPU" if on_cpu else "on a GPU (on_cpu=False)"
            if name in ALLOC_OPS:
                raise Wrong(f"{name!r} allocates memory: its self time is the runtime's work "
                            f"(ALLOC_OPS), {where} too.")
            if name in COMPUTE_OPS and on_cpu:
                raise Wrong(f"{name!r} {where}: a compute operator (COMPUTE_OPS) runs its "
                            f"kernel inside its own body, so its self time is the kernel "
                            f"libraries'.")
            if name in COMPUTE_OPS:
                raise Wrong(f"{name!r} {where}: the kernel is a row of its own on the device; "
                            f"the operator's self time is the framework's dispatch.")
            if got == "kernel libraries" and want == "framework":
                raise Wrong(f"{name!r} is not in COMPUTE_OPS: a metadata operator (a view, a "
                            f"transpose) does no arithmetic; it stays 'framework'.")
            raise Wrong(f"charge_of({name!r}, {on_cpu}) = {got!r}, expected {want!r}: "
                        f"which_layer(name), then the rules for ALLOC_OPS and COMPUTE_OPS.")


@exercise("1.3", "charge a profile's self times to the layers", reference=charge_layers,
          binds="charge_layers", answers=("labkit.perf.stack:charge_of",))
def _(answer, ref, rng):
    cases = [(random_rows(rng), True), (random_rows(rng), False), (random_rows(rng, 6), True),
             (chain(25), True), ([], True)]
    for rows, on_cpu in cases:
        got = answer(copy.deepcopy(rows), on_cpu)
        if not isinstance(got, dict):
            raise Wrong(f"charge_layers returned {type(got).__name__}: return a dict of "
                        f"layer -> seconds.")
        want = ref(rows, on_cpu)
        if _same_charges(got, want):
            continue
        where = "a CPU trace" if on_cpu else "a GPU trace"
        mistakes = [
            (dict(key="total"), "you added each row's whole time (end − start): it holds its "
                                "children's time, which is charged again when you reach them. "
                                "Charge self_s."),
            (dict(top_only=True), "only the top rows are charged: walk the whole tree, every "
                                  "row's children too."),
            (dict(cpu_rule=not on_cpu),
             "on a CPU a compute operator (COMPUTE_OPS) runs its kernel inside itself: its "
             "self time is the kernel libraries'. On a GPU (on_cpu=False) the kernel is a "
             "row of its own, so the operator stays 'framework'."),
            (dict(alloc_rule=False), "an allocation operator (ALLOC_OPS: aten::empty …) is "
                                     "the runtime's work, not the framework's."),
        ]
        for mistake, hint in mistakes:
            if _same_charges(got, _charged(rows, on_cpu, **mistake)):
                raise Wrong(f"{where}: {hint}")
        layer = next(k for k in set(got) | set(want)
                     if not np.isclose(float(got.get(k, 0.0)), float(want.get(k, 0.0)),
                                       rtol=1e-9, atol=1e-15))
        raise Wrong(f"{where}: {layer!r} gets {float(got.get(layer, 0.0)) * 1e6:.3f} µs, "
                    f"expected {float(want.get(layer, 0.0)) * 1e6:.3f} µs: charge every row's "
                    f"self_s to charge_of(name, on_cpu).")


# ------------------------------------------------------------ 1.4: FLOPs of a step
def _forward_flops(b, i, h, o, rg):
    """The forward pass of step_flops's MLP: 2B(d_in·h + h·d_out)."""
    return 2 * b * (i * h + h * o)


_MULTIPLY_ADD = "a multiply-add counts as 2 FLOPs: an m×k by k×n matmul costs 2·m·n·k."

formula_exercise(
    "1.4", "FLOPs of one SimpleNet training step", simplenet_step_flops, binds="step_flops",
    cases=[(5, 10, 50, 1, True), (5, 10, 50, 1, False), (64, 10, 50, 1, True),
           (7, 33, 19, 4, True), (128, 64, 256, 10, False), (1, 1, 1, 1, True)],
    call=lambda b, i, h, o, rg: f"step_flops({b}, {i}, {h}, {o}, {rg})", rtol=0, atol=0.5,
    shortcuts=[
        (equals(_forward_flops),
         "that is the forward pass only; backward computes two matmuls per layer (dW and "
         "dx)."),
        (scaled(_forward_flops, 0.5), _MULTIPLY_ADD),
        (scaled(simplenet_step_flops, 0.5), _MULTIPLY_ADD),
        (lambda got, b, i, h, o, rg: not rg and math.isclose(
            got, 3 * _forward_flops(b, i, h, o, rg), rel_tol=1e-9),
         "with input_requires_grad=False nobody needs the gradient of the first layer's "
         "input: skip that matmul (2·B·d_in·h)."),
        (scaled(_forward_flops, 2),
         "backward is about twice the forward, not once: dW and dx of each layer are one "
         "matmul each.")],
    hint="forward 2B(d_in·h + h·d_out), then dW and dx for each layer.")


# ---------------------------------------------------- 1.5: the process's memory
_KB_FIELDS = ("VmPeak", "VmSize", "VmLck", "VmPin", "VmHWM", "VmRSS", "RssAnon", "RssFile",
              "RssShmem", "VmData", "VmStk", "VmExe", "VmLib", "VmPTE", "VmSwap",
              "HugetlbPages")
_OTHER_LINES = ("Name:\tpython3", "Umask:\t0022", "State:\tR (running)", "Tgid:\t{n}",
                "Pid:\t{n}", "PPid:\t{n}", "FDSize:\t{n}", "Threads:\t{n}", "SigQ:\t0/{n}",
                "Cpus_allowed_list:\t0-1", "voluntary_ctxt_switches:\t{n}",
                "Groups:\t{n} {n}", "CoreDumping:\t0")


def status_text(rng) -> str:
    """A ``/proc/<pid>/status`` file's text: its kB fields (VmRSS and VmHWM always among
    them) in their order, the other lines between, values and padding drawn from ``rng``."""
    lines = []
    others = list(_OTHER_LINES)
    for name in _KB_FIELDS:
        if name not in ("VmRSS", "VmHWM") and rng.random() < 0.3:
            continue
        while others and rng.random() < 0.4:
            lines.append(others.pop(int(rng.integers(len(others)))).replace(
                "{n}", str(int(rng.integers(1, 99999)))))
        value = int(rng.integers(0, 4_000_000))
        lines.append(f"{name}:{' ' * int(rng.integers(1, 4))}\t{value:>8d} kB")
    lines += [o.replace("{n}", str(int(rng.integers(1, 999)))) for o in others]
    return "\n".join(lines) + "\n"


@exercise("1.5", "read the process's memory from /proc/self/status", reference=status_bytes,
          binds="status_bytes", answers=("labkit.perf.stack:process_memory",))
def _(answer, ref, rng):
    for text in [status_text(rng) for _ in range(5)] + ["VmRSS:\t       1 kB\n"
                                                         "VmHWM:\t       2 kB\n"]:
        got = answer(text)
        if not isinstance(got, dict):
            raise Wrong(f"status_bytes returned {type(got).__name__}: return a dict of "
                        f"field name -> bytes.")
        want = ref(text)
        if got == want:
            continue
        rss = got.get("VmRSS")
        if isinstance(rss, str):
            raise Wrong("the values are strings: return the sizes as ints (bytes).")
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if extra:
            raise Wrong(f"{extra[0]!r} is not a size in kB: keep only the lines of the form "
                        f"'Name:  value kB'.")
        if missing:
            raise Wrong(f"{missing[0]!r} is missing: every 'Name:  value kB' line is a size "
                        f"(the name before the colon, without spaces).")
        k = next(k for k in want if got[k] != want[k])
        if got[k] * 1024 == want[k]:
            raise Wrong(f"{k} = {got[k]}: that is in kB; return bytes.")
        if got[k] * 1024 == want[k] * 1000:
            raise Wrong(f"{k} = {got[k]}: Linux's kB are 1024 bytes (the kernel shifts page "
                        f"counts by PAGE_SHIFT − 10), not 1000.")
        raise Wrong(f"{k} = {got[k]!r}, expected {want[k]} bytes.")


# -------------------------------------------------------------- 1.6: the ridge point
formula_exercise(
    "1.6", "the ridge point of a machine", ridge_point,
    cases=[(g.peak(p), g.hbm_bandwidth) for g in GPUS.values() for p in ("fp32", "fp16")
           if p in g.flops] + [(1.2e11, 2.3e10), (5e9, 5e9)],
    call=lambda peak, bw: f"ridge_point({peak:.3g}, {bw:.3g})",
    shortcuts=[
        (equals(lambda peak, bw: bw / peak),
         "that is bytes per FLOP; the ridge point is FLOP per byte: peak / bandwidth."),
        (scaled(ridge_point, 8, 1 / 8),
         "no factor 8: the bandwidth is in bytes per second, not bits."),
        (scaled(ridge_point, *(1000.0 ** k for k in (-4, -3, -2, -1, 1, 2, 3, 4))),
         "off by a power of 1000: peak is in FLOP/s and bandwidth in bytes/s, both in base "
         "units; convert neither to giga or tera.")],
    hint="the ridge point is peak / bandwidth, in FLOP per byte (Williams, Waterman & "
         "Patterson, CACM 2009).")


# ------------------------------------------------------------ 1.7: a roofline bound
def _roofline_cases(rng):
    h100, a100 = GPUS["H100"], GPUS["A100"]
    fp32, bw = h100.peak("fp32"), h100.hbm_bandwidth
    fixed = [(fp32, bw, 16500, 24928), (fp32, bw, 2 * 4096 ** 3, 3 * 4 * 4096 ** 2),
             (1.5e11, 2.3e10, 1e9, 1e7), (1.5e11, 2.3e10, 1e6, 1e6),
             (h100.peak("bf16"), bw, 1e12, 1e9),
             (a100.peak("fp32"), a100.hbm_bandwidth, 3e6, 1e6)]
    drawn = [(float(10 ** rng.uniform(10, 15)), float(10 ** rng.uniform(9.5, 12.5)),
              float(10 ** rng.uniform(4, 13)), float(10 ** rng.uniform(4, 11)))
             for _ in range(4)]
    return fixed + drawn


@exercise("1.7", "a roofline bound", reference=roofline_bound, binds="roofline_bound")
def _(answer, ref, rng):
    for peak, bw, f, q in _roofline_cases(rng):
        got = answer(peak, bw, f, q)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong("return a pair (seconds, 'memory-bound' or 'compute-bound').")
        t, kind = got
        want_t, want_kind = ref(peak, bw, f, q)
        if _close(t, f / peak + q / bw) and not _close(t, want_t):
            raise Wrong("compute and memory traffic overlap: the bound is the larger of "
                        "F/peak and Q/bandwidth, not their sum.")
        if _close(t, f / peak) and not _close(t, want_t):
            raise Wrong(f"F={f:.3g}, Q={q:.3g}: you used F/peak only; this kernel is "
                        f"memory-bound, so Q/bandwidth is the larger time.")
        if not _close(t, want_t):
            raise Wrong(f"peak={peak:.3g}, bw={bw:.3g}, F={f:.3g}, Q={q:.3g}: time {t:.4g} s, "
                        f"expected {want_t:.4g} s = max(F/peak, Q/bandwidth).")
        if kind != want_kind:
            raise Wrong(f"intensity {f / q:.3g} FLOP/byte against ridge {peak / bw:.3g}: "
                        f"that is {want_kind}, not {kind!r}.")


# ------------------------------------------------------------- 1.8: Little's law
formula_exercise(
    "1.8", "Little's law: loads in flight", loads_in_flight,
    cases=[(500e-9, GPUS["H100"].hbm_bandwidth, 4), (500e-9, GPUS["H200"].hbm_bandwidth, 16),
           (80e-9, 2.3e10, 8), (1e-6, 1e9, 1)],
    call=lambda lat, bw, b: f"loads_in_flight({lat:g}, {bw:.3g}, {b})",
    shortcuts=[
        (equals(lambda lat, bw, b: bytes_in_flight(lat, bw)),
         "that is bytes in flight; divide by the bytes each load brings."),
        (equals(lambda lat, bw, b: bw / lat / b, lambda lat, bw, b: lat / bw / b),
         "Little's law multiplies: in flight = latency × throughput."),
        (scaled(loads_in_flight, 8, 1 / 8),
         "no factor 8: the bandwidth is in bytes per second and each load brings "
         "bytes_per_load bytes.")],
    hint="Little's law (Little 1961): bytes in flight = latency × bandwidth, and each load "
         "brings bytes_per_load of them.")


# ----------------------------------------------------------------- 1.9: busy time
def _short(xs) -> str:
    text = repr([tuple(round(float(a), 3) for a in x) for x in xs])
    return text if len(text) < 90 else text[:87] + "...]"


def _merged_in_order(intervals) -> float:
    """A merge that never sorts: right only when the intervals come in order."""
    total, end = 0.0, -math.inf
    for s, e in intervals:
        if s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


def _draw_intervals(rng):
    n = int(rng.integers(3, 12))
    starts = np.sort(rng.uniform(0, 10, n))
    iv = [(float(s), float(s + rng.exponential(1.5))) for s in starts]
    iv.append((iv[0][0] + 0.1, iv[0][0] + 0.2))          # one nested in the first
    order = rng.permutation(len(iv))
    return ([iv[i] for i in order],)


formula_exercise(
    "1.9", "busy time: the union of kernel intervals", busy_time,
    cases=[([(0.0, 10.0), (2.0, 3.0), (4.0, 6.0)],),          # children inside a parent
           ([(0.0, 1.0), (2.0, 3.0), (5.0, 9.0)],),            # gaps: idle time
           ([(5.0, 9.0), (0.0, 1.0), (0.5, 2.0)],),            # out of order, overlapping
           ([(0.0, 1.0), (1.0, 2.0)],), ([(3.0, 4.5)],), ([],)],
    call=lambda iv: f"busy_time({_short(iv)})", draw=_draw_intervals,
    shortcuts=[
        (equals(lambda iv: sum(e - s for s, e in iv)),
         "that adds every interval's length: where kernels overlap (or one row nests in "
         "another) the time is counted twice. Merge overlapping intervals first."),
        (equals(lambda iv: max(e for _, e in iv) - min(s for s, _ in iv)),
         "that is the span from the first start to the last end: it counts the idle gaps "
         "between kernels as busy."),
        (equals(_merged_in_order),
         "sort the intervals by start before you merge: a profiler lists rows in the order "
         "they finish, or nested, not by start.")],
    hint="sort by start; keep the end of the merged run; an interval that starts after it "
         "adds its whole length, one that overlaps adds only what passes the end.")


# ------------------------------------------------------- 1.10: the kernels' intervals
def _intervals(rows, test) -> list:
    out, todo = [], list(rows)
    while todo:
        r = todo.pop()
        if test(r):
            out.append((r["start_s"], r["end_s"]))
        todo.extend(r["children"])
    return out


def _same_intervals(got, want) -> bool:
    try:
        g = sorted((float(a), float(b)) for a, b in got)
    except (TypeError, ValueError):
        return False
    w = sorted((float(a), float(b)) for a, b in want)
    return len(g) == len(w) and bool(np.allclose(g, w, rtol=1e-12, atol=0)) if w else not g


@exercise("1.10", "the intervals when the kernel libraries ran", reference=kernel_intervals,
          binds="kernel_intervals")
def _(answer, ref, rng):
    for rows, on_cpu in ((random_rows(rng, 6), True), (random_rows(rng), False),
                         (chain(20), True), ([], True)):
        got = answer(copy.deepcopy(rows), on_cpu)
        if not isinstance(got, (list, tuple)):
            raise Wrong(f"kernel_intervals returned {type(got).__name__}: return a list of "
                        f"(start_s, end_s) pairs.")
        want = ref(rows, on_cpu)
        if _same_intervals(got, want):
            continue
        if _same_intervals(got, _intervals(rows, lambda r: True)):
            raise Wrong("that is every row's interval: keep only the rows whose self time "
                        "is the kernel libraries' (charge_of).")
        if _same_intervals(got, _intervals(rows, lambda r: layer_of(r["name"]) ==
                                           "kernel libraries")):
            raise Wrong("which_layer reads the name only: on a CPU the compute operators' "
                        "self time is the kernel libraries' too. Use charge_of(name, on_cpu).")
        top = [(r["start_s"], r["end_s"]) for r in rows
               if charge_of(r["name"], on_cpu) == "kernel libraries"]
        if _same_intervals(got, top):
            raise Wrong("only the top rows are there: walk the children too (a compute "
                        "operator often sits inside a record_function range).")
        raise Wrong(f"{len(got)} intervals, expected {len(want)}: the (start_s, end_s) of "
                    f"every row, in the whole tree, with charge_of(name, on_cpu) == "
                    f"'kernel libraries'.")


# ----------------------------------------------------- 1.11: the precision of an op
_SHEETS = {k: dict(g.flops) for k, g in GPUS.items()}
_OP_NAMES = (*sorted(CONV_OPS), *sorted(MATMUL_OPS), "relu", "threshold_backward",
             "max_pool2d_with_indices", "_log_softmax", "add_", "sum")


@exercise("1.11", "the precision an fp32 op runs at", reference=op_precision,
          binds="op_precision")
def _(answer, ref, rng):
    cases = [(n, g, c, m) for n in _OP_NAMES for g in _SHEETS for c in (True, False)
             for m in (False, True)]
    for i in rng.permutation(len(cases)):
        name, gpu, conv, mm = cases[int(i)]
        got, want = answer(name, dict(_SHEETS[gpu]), conv, mm), ref(name, _SHEETS[gpu], conv, mm)
        if got == want:
            continue
        where = f"{name!r} on the {gpu} (cudnn_tf32={conv}, matmul_tf32={mm})"
        if want == "tf32" and name in CONV_OPS:
            raise Wrong(f"{where}: PyTorch runs fp32 convolutions on TF32 Tensor Cores when "
                        f"cudnn_tf32 is set (torch.backends.cudnn.allow_tf32, True by "
                        f"default) and the GPU has them: 'tf32'.")
        if want == "tf32":
            raise Wrong(f"{where}: with matmul_tf32 set (torch.backends.cuda.matmul."
                        f"allow_tf32) matmuls run at TF32 too.")
        if "tf32" not in _SHEETS[gpu]:
            raise Wrong(f"{where}: the {gpu} has no TF32 (its data sheet lists no tf32 "
                        f"peak: TF32 arrived with Ampere); 'fp32'.")
        if name in MATMUL_OPS:
            raise Wrong(f"{where}: matmuls stay FP32 unless matmul_tf32 is set (False by "
                        f"default since PyTorch 1.12).")
        if name in CONV_OPS:
            raise Wrong(f"{where}: with cudnn_tf32 off, convolutions run at FP32.")
        raise Wrong(f"{where}: only convolutions and matmuls run on Tensor Cores; "
                    f"elementwise ops run at FP32 on the CUDA cores.")


# --------------------------------------------------------- 1.12: the host's pipeline
def _draw_pipeline(rng):
    n = int(rng.integers(4, 16))
    host = [float(x) for x in rng.lognormal(np.log(10e-6), 0.5, n)]
    device = [float(x) for x in rng.lognormal(np.log(rng.choice([2e-6, 10e-6, 60e-6])), 1.0, n)]
    return host, device


def _us(xs) -> str:
    text = "[" + ", ".join(f"{x:.3g}" for x in xs) + "]"
    return text if len(text) < 70 else text[:67] + "...]"


formula_exercise(
    "1.12", "a step whose host and device overlap", pipeline_step,
    cases=[([1.0, 1.0, 1.0], [5.0, 0.0, 0.0]),                # the device behind the host
           ([4.0, 4.0, 4.0, 4.0], [1.0, 1.0, 1.0, 1.0]),      # host-bound: launches dominate
           ([1.0, 1.0, 1.0, 1.0], [4.0, 4.0, 4.0, 4.0]),      # device-bound
           ([1.0, 5.0, 1.0], [3.0, 1.0, 6.0]), ([2.0], [3.0])],
    call=lambda h, d: f"pipeline_step(host_s={_us(h)}, device_s={_us(d)})",
    draw=_draw_pipeline,
    shortcuts=[
        (equals(lambda h, d: sum(h) + sum(d)),
         "that is the host's time plus the device's: as if the device waited for the host "
         "to finish every launch. The host queues operator i and goes on to issue i + 1 "
         "while the device runs it."),
        (equals(lambda h, d: max(sum(h), sum(d))),
         "that is the larger of the two totals: a perfect overlap. The device cannot start "
         "operator i before the host has issued it, so it waits where the host is behind."),
        (equals(lambda h, d: sum(max(a, b) for a, b in zip(h, d))),
         "that pairs each operator's host and device time: the device runs operator i "
         "while the host issues operator i + 1, not i.")],
    hint="host_done += host_s[i]; device_done = max(device_done, host_done) + device_s[i]; "
         "the step is max(host_done, device_done) at the end.")


# ---------------------------------------------------- 1.13: calibrating the host
def _draw_calibration(rng):
    n = int(rng.integers(4, 24))
    device = [float(x) for x in rng.lognormal(np.log(rng.choice([2e-6, 20e-6, 80e-6])), 1.0, n)]
    return device, float(sum(device) * rng.uniform(1.2, 30))


formula_exercise(
    "1.13", "calibrate the host time per operator", calibrate_host,
    cases=[([1e-6] * 21, 1.6e-3),                      # the H200 at batch 8: host-bound
           ([50e-6, 1e-6, 1e-6, 1e-6], 120e-6),        # one kernel longer than the host's
           ([10e-6, 30e-6, 5e-6], 60e-6), ([2e-6], 10e-6)],
    call=lambda d, t: f"calibrate_host(device_s={_us(d)}, target_s={t:.3g})",
    draw=_draw_calibration, rtol=1e-6,
    shortcuts=[
        (equals(lambda d, t: t / len(d), rtol=1e-6),
         "that spreads the whole step over the operators as host time: the device's time "
         "counts too. Find h with pipeline_step([h] * n, device_s) == target_s."),
        (equals(lambda d, t: (t - sum(d)) / len(d), rtol=1e-6),
         "that assumes the host and the device never overlap: they do (pipeline_step). "
         "Search for h instead: the step grows with h, so bisect."),
        (equals(lambda d, t: (t - d[-1]) / len(d), rtol=1e-6),
         "that holds only while the host is behind the device everywhere; where a kernel "
         "is longer than the host's time the device sets the pace. Bisect on h with "
         "pipeline_step.")],
    hint="bisection on [0, target_s]: if pipeline_step([mid] * n, device_s) < target_s the "
         "host time is larger, else smaller; 60 halvings reach float precision.")
