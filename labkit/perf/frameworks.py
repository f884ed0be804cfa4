"""Chapter 12: one MLP, five implementations (seed 004's framework comparison).

The same 64 → 128 → 10 ReLU MLP, the same weights and the same batch, one SGD training
step (cross-entropy) in: hand-written numpy, labkit.autograd, torch eager, torch.compile
(measured by ``make bench`` only: its first compile on a CPU takes tens of seconds), and
inference in ONNX Runtime. ``check_same`` proves they compute the same thing before any of
them is timed.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from labkit import validate as v

SIZES = (64, 128, 10)
CACHE = Path(__file__).resolve().parents[2] / ".bench" / "perf_frameworks.json"


def init_params(seed: int = 0, sizes=SIZES):
    """He-uniform-like weights, float32: [(W1 (in, out), b1), (W2, b2)]."""
    rng = np.random.default_rng(v.integer("seed", seed, low=0))
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        bound = 1 / np.sqrt(a)
        out.append((rng.uniform(-bound, bound, (a, b)).astype(np.float32),
                    rng.uniform(-bound, bound, b).astype(np.float32)))
    return out


def batch(n: int = 64, seed: int = 0):
    """The first ``n`` training digits (x float32 (n, 64), y int64)."""
    from labkit.data import load_digits

    d = load_digits(seed=seed)
    n = v.integer("n", n, low=1, high=len(d.y_train))
    return d.x_train[:n], d.y_train[:n]


# ------------------------------------------------------------------ numpy by hand
def numpy_step(params, x, y, lr: float = 0.1):
    """One SGD step written out: forward, softmax cross-entropy, backward, update (in place).
    Returns the loss."""
    (w1, b1), (w2, b2) = params
    h = x @ w1 + b1
    a = np.maximum(h, 0)
    z = a @ w2 + b2
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    n = len(y)
    loss = -np.log(p[np.arange(n), y]).mean()
    dz = p
    dz[np.arange(n), y] -= 1
    dz /= n
    dw2, db2 = a.T @ dz, dz.sum(0)
    da = dz @ w2.T
    dh = da * (h > 0)
    dw1, db1 = x.T @ dh, dh.sum(0)
    for (w, b), (gw, gb) in zip(params, ((dw1, db1), (dw2, db2))):
        w -= lr * gw
        b -= lr * gb
    return float(loss)


# ---------------------------------------------------------------- labkit.autograd
def labkit_model(params):
    """labkit.autograd MLP carrying ``params``."""
    from labkit.autograd.nn import mlp

    model = mlp(SIZES, seed=0)
    lin = [m for m in model.layers if hasattr(m, "weight")]
    for m, (w, b) in zip(lin, params):
        m.weight.data[...] = w          # labkit stores W as (in, out), like ``params``
        m.bias.data[...] = b
    return model


def labkit_step_fn(params, x, y, lr: float = 0.1) -> Callable[[], float]:
    from labkit.autograd import functional as F
    from labkit.autograd.optim import SGD
    from labkit.autograd.tensor import Tensor

    model = labkit_model([(w.copy(), b.copy()) for w, b in params])
    opt = SGD(model.parameters(), lr=lr)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(Tensor(x)), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


# ------------------------------------------------------------------------- torch
def torch_model(params):
    import torch

    from labkit.torch_models import torch_mlp

    model = torch_mlp(SIZES)
    lin = [m for m in model if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for m, (w, b) in zip(lin, params):
            m.weight.copy_(torch.from_numpy(w.T.copy()))
            m.bias.copy_(torch.from_numpy(b))
    return model


def torch_step_fn(params, x, y, lr: float = 0.1, compile: bool = False) -> Callable[[], float]:
    import torch

    model = torch_model(params)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    fwd = torch.compile(model) if compile else model

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(fwd(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def check_same(seed: int = 0, steps: int = 3) -> dict[str, list[float]]:
    """Losses of ``steps`` SGD steps in numpy, labkit and torch from the same weights: they
    must agree to float32 rounding."""
    params = init_params(seed)
    x, y = batch()
    np_params = [(w.copy(), b.copy()) for w, b in params]
    runs = {"numpy": lambda: numpy_step(np_params, x, y),
            "labkit.autograd": labkit_step_fn(params, x, y),
            "torch eager": torch_step_fn(params, x, y)}
    return {k: [f() for _ in range(steps)] for k, f in runs.items()}


# --------------------------------------------------------------------- ONNX Runtime
def onnx_session(model, path: str | Path):
    """Export ``model`` to ONNX at ``path`` (dynamic batch) and open an ONNX Runtime CPU
    session; None when onnx/onnxscript/onnxruntime are not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    export_onnx(model, path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def export_onnx(model, path: str | Path, in_features: int = 64) -> Path:
    """``torch.onnx.export`` (the torch.export-based exporter) with a dynamic batch dim."""
    import logging
    import warnings

    import torch

    path = Path(path)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    model = model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (torch.zeros(2, in_features),), dynamo=True,
                                 dynamic_shapes=({0: torch.export.Dim("batch")},),
                                 verbose=False)
    prog.save(str(path))
    return path


# --------------------------------------------------------------------- the table
@dataclass(frozen=True)
class FrameworkRow:
    name: str
    train_s: float | None       # median seconds per training step
    train_ci: tuple | None      # 95 % bootstrap interval of that median
    infer_s: float | None       # median seconds per inference of the batch
    note: str = ""


def compare(repeats: int = 15, seed: int = 0, tmpdir: str | Path | None = None,
            include_compile: bool = False, onnx: bool = True) -> list[FrameworkRow]:
    """Time one training step and one inference of the batch in every implementation,
    interleaved (A B C A B C …) so the machine's drift hits all alike."""
    import tempfile

    import torch

    from labkit.perf.timing import interleaved, threads

    repeats = v.integer("repeats", repeats, low=3)
    params = init_params(seed)
    x, y = batch()
    np_params = [(w.copy(), b.copy()) for w, b in params]
    steps = {"numpy (by hand)": lambda: numpy_step(np_params, x, y, lr=1e-3),
             "labkit.autograd": labkit_step_fn(params, x, y, lr=1e-3),
             "torch eager": torch_step_fn(params, x, y, lr=1e-3)}
    if include_compile:
        steps["torch.compile"] = torch_step_fn(params, x, y, lr=1e-3, compile=True)
    tm = torch_model(params).eval()
    xt = torch.from_numpy(x)
    (w1, b1), (w2, b2) = params
    lab = labkit_model(params)

    def lab_infer():
        from labkit.autograd.tensor import Tensor, no_grad
        with no_grad():
            return lab(Tensor(x))

    def torch_infer():
        with torch.no_grad():
            return tm(xt)
    infers = {"numpy (by hand)": lambda: np.maximum(x @ w1 + b1, 0) @ w2 + b2,
              "labkit.autograd": lab_infer, "torch eager": torch_infer}
    if include_compile:
        ct = torch.compile(tm)

        def compiled_infer():
            with torch.no_grad():
                return ct(xt)
        infers["torch.compile"] = compiled_infer
    with tempfile.TemporaryDirectory() as d:
        sess = onnx_session(tm, Path(tmpdir or d) / "mlp.onnx") if onnx else None
        if sess is not None:
            name = sess.get_inputs()[0].name
            infers["ONNX Runtime"] = lambda: sess.run(None, {name: x})
        with threads(1):       # one thread each: fair, and immune to a busy second core
            train_t = interleaved(steps, repeats=repeats, warmup=2)
            infer_t = interleaved(infers, repeats=repeats, warmup=2)
    rows = []
    for k in infers:
        tt = train_t.get(k)
        ci = tt.ci() if tt else None
        rows.append(FrameworkRow(k, tt.median if tt else None,
                                 (ci.low, ci.high) if ci else None, infer_t[k].median,
                                 "inference only" if k == "ONNX Runtime" else ""))
    return rows


def save_rows(rows: list[FrameworkRow], path: Path = CACHE) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return path


def load_rows(path: Path = CACHE) -> list[FrameworkRow] | None:
    """The rows ``make bench`` saved, or None when it has not run here."""
    path = Path(path)
    if not path.exists():
        return None
    return [FrameworkRow(**{**r, "train_ci": tuple(r["train_ci"]) if r["train_ci"] else None})
            for r in json.loads(path.read_text())]


def cached_compile_rows(path: Path = CACHE) -> list[FrameworkRow]:
    """The torch.compile rows ``make bench`` saved (:func:`load_rows`), or [] when it has
    not run here (compiling takes tens of seconds on a CPU: too slow for the notebook)."""
    return [r for r in (load_rows(path) or []) if r.name == "torch.compile"]


def compile_note(compiled: list[FrameworkRow], path: Path = CACHE) -> str:
    """What the chapter says under the table about the torch.compile row."""
    if compiled:
        return ("torch.compile row: measured by `make bench` (benchmarks/bench_perf.py), "
                f"loaded from {Path(path).name}")
    return ("torch.compile: its first compile on this CPU takes tens of seconds, so it is "
            "measured by `make bench` (benchmarks/bench_perf.py writes "
            ".bench/perf_frameworks.json); run it and rerun this cell to see the row.")


def fastest_trainer(rows: list[FrameworkRow]) -> str:
    """The name of the row with the shortest training step (rows without one skipped)."""
    trainers = [r for r in rows if r.train_s is not None]
    if not trainers:
        raise ValueError("rows must hold at least one row with a training time")
    return min(trainers, key=lambda r: r.train_s).name


def format_rows(rows: list[FrameworkRow], measured_here: str = "") -> str:
    """Markdown table: times in µs, speed relative to torch eager."""
    base = next((r for r in rows if r.name == "torch eager"), None)
    lines = ["| implementation | train step µs [95 % CI] | × torch eager (train) | "
             "inference µs | × torch eager (inference) | note |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        tr = "-" if r.train_s is None else (
            f"{r.train_s * 1e6:.0f} [{r.train_ci[0] * 1e6:.0f}, {r.train_ci[1] * 1e6:.0f}]")
        xs = "-" if r.train_s is None or base is None or base.train_s is None else \
            f"{base.train_s / r.train_s:.2f}"
        xi = "-" if r.infer_s is None or base is None else f"{base.infer_s / r.infer_s:.2f}"
        inf = "-" if r.infer_s is None else f"{r.infer_s * 1e6:.0f}"
        lines.append(f"| {r.name} | {tr} | {xs} | {inf} | {xi} | {r.note} |")
    return "\n".join(lines)
