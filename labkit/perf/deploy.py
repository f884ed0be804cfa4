"""Chapter 12: deployment — export, int8 quantization, size and latency under a budget.

* ``torch.export.export`` captures the model as an ``ExportedProgram`` (an ATen graph with
  no Python left); ``torch.onnx.export(..., dynamo=True)`` turns that graph into ONNX for
  ONNX Runtime (PyTorch docs, "torch.export" and "torch.onnx").
* Dynamic int8 quantization (``torch.ao.quantization.quantize_dynamic``; Jacob et al., CVPR
  2018 for the affine scheme): Linear weights stored as int8 with a scale and a zero point,
  activations quantized on the fly per batch, biases kept in fp32.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labkit import validate as v
from labkit.perf.frameworks import onnx_session
from labkit.perf.metrics import accuracy, top1_accuracy
from labkit.timing import benchmark, threads


def state_bytes(model) -> int:
    """Bytes of ``torch.save(model.state_dict())`` — the file you would ship."""
    import torch  # deferred: torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def quantize_int8(model):
    """A copy of ``model`` with every nn.Linear dynamically int8-quantized:
    ``torch.ao.quantization.quantize_dynamic`` (qint8 weights, per tensor; activations
    quantized per batch at run time; biases fp32). ``model`` itself is left as it was (the
    copy is put in eval mode). ``torch.ao.quantization`` is deprecated in favour of torchao
    (its warning announces removal) but still present in torch 2.13; the deprecation
    warnings are silenced here."""
    import torch  # deferred: torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic  # deferred: torch
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def int8_linear_bytes(layers) -> int:
    """Payload bytes of Linear layers after dynamic int8 quantization: 1 byte per weight,
    4 per fp32 bias, and a per-tensor scale (fp32) and zero point (int32): 8 per layer.
    ``layers`` lists (in_features, out_features)."""
    total = 0
    for i, o in layers:
        i = v.integer("in_features", i, low=1)
        o = v.integer("out_features", o, low=1)
        total += i * o + 4 * o + 8
    return total


def fp32_linear_bytes(layers) -> int:
    """Payload bytes of fp32 Linear layers: 4 per weight and per bias."""
    return sum(4 * (v.integer("in_features", i, low=1) * v.integer("out_features", o, low=1)
                    + o) for i, o in layers)


def export_program(model, in_features: int = 64):
    """``torch.export.export`` of ``model`` with a dynamic batch dimension."""
    import torch  # deferred: torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model.eval(), (torch.zeros(2, in_features),),
                                   dynamic_shapes=({0: torch.export.Dim("batch")},))


def graph_ops(program) -> list[str]:
    """The operators of an exported program's graph (its ``call_function`` nodes), in order."""
    return [n.target.__name__ if hasattr(n.target, "__name__") else str(n.target)
            for n in program.graph.nodes if n.op == "call_function"]


def format_payload(layers, int8: int | None = None) -> str:
    """fp32 and int8 payload bytes of ``layers`` and their ratio; ``int8`` (e.g. the
    learner's count) defaults to :func:`int8_linear_bytes`."""
    fp32 = fp32_linear_bytes(layers)
    int8 = int8_linear_bytes(layers) if int8 is None else v.integer("int8", int8, low=1)
    return f"payload: fp32 {fp32:,} B, int8 {int8:,} B (ratio {fp32 / int8:.2f})"


@dataclass(frozen=True)
class Variant:
    name: str
    bytes: int               # what ships
    latency_s: float         # median single-request latency here
    accuracy: float


def variants(model, x_test, y_test, workdir: str | Path, requests: int = 100) -> list[Variant]:
    """fp32 eager, int8 dynamic (eager), fp32 ONNX Runtime (if installed): size, median
    single-request latency (one thread) and test accuracy."""
    import torch  # deferred: torch

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    model.eval()                          # measured as it is served
    q = quantize_int8(model)
    x1 = torch.as_tensor(x_test[:1])
    out = []
    with threads(1), torch.no_grad():
        for name, m in (("fp32 eager", model), ("int8 dynamic", q)):
            t = benchmark(lambda m=m: m(x1), repeats=requests, warmup=5)
            out.append(Variant(name, state_bytes(m), t.median, accuracy(m, x_test, y_test)))
        path = workdir / "model.onnx"
        sess = onnx_session(model, path)          # None without onnxruntime
        if sess is None:
            return out
        iname = sess.get_inputs()[0].name
        x1n = np.ascontiguousarray(x_test[:1])
        t = benchmark(lambda: sess.run(None, {iname: x1n}), repeats=requests, warmup=5)
        scores = sess.run(None, {iname: np.ascontiguousarray(x_test)})[0]
        out.append(Variant("fp32 ONNX Runtime", path.stat().st_size, t.median,
                           top1_accuracy(scores, y_test)))
    return out


@dataclass(frozen=True)
class Budget:
    name: str
    max_bytes: float
    max_latency_s: float
    slowdown: float = 1.0     # how much slower the target is than this machine


CLOUD = Budget("cloud", max_bytes=1e9, max_latency_s=10e-3, slowdown=1.0)


def fits(variants_: list[Variant], budget: Budget) -> list[tuple[Variant, bool, str]]:
    """Which variants meet ``budget`` (latency scaled by its ``slowdown``), and why not."""
    out = []
    for var in variants_:
        lat = var.latency_s * budget.slowdown
        reasons = []
        if var.bytes > budget.max_bytes:
            reasons.append(f"{var.bytes / 1e3:.1f} kB > {budget.max_bytes / 1e3:.1f} kB")
        if lat > budget.max_latency_s:
            reasons.append(f"{lat * 1e3:.2f} ms > {budget.max_latency_s * 1e3:.2f} ms")
        out.append((var, not reasons, "; ".join(reasons) or "fits"))
    return out


def fitting(results) -> str:
    """The names of the :func:`fits` results that fit: "none", one name, or the names joined
    by "and"."""
    names = [var.name for var, ok, _ in results if ok]
    return " and ".join(names) if names else "none"
