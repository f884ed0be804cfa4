"""Chapter 12: one MLP, six implementations (seed 004's framework comparison).

The same 64 → hidden → 10 ReLU MLP, the same weights and the same batch, one SGD training
step (cross-entropy) in: hand-written numpy (the gradients are the learner's, exercise
12.9), labkit.autograd, torch eager, torch.compile (its first call, which compiles, timed
on its own: cold; then warm), JAX and inference in ONNX Runtime. ``check_same`` proves they
compute the same thing before any of them is timed; :func:`compare` times them with the
harness it is given (the learner's ``benchmark`` of exercise 12.1 in the chapter).

JAX (``jax.jit``, CPU) runs the same step too: its first call traces the Python function
and compiles it with XLA, so like torch.compile it is timed cold (that call alone) and warm.
"""
from __future__ import annotations

import json
import logging
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from labkit import timing, validate as v
from labkit.autograd import functional as F
from labkit.autograd.nn import mlp
from labkit.autograd.optim import SGD
from labkit.autograd.tensor import Tensor, no_grad
from labkit.data import load_digits
from labkit.timing import benchmark, interleaved, threads
from labkit.torch_models import torch_mlp

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
    d = load_digits(seed=seed)
    n = v.integer("n", n, low=1, high=len(d.y_train))
    return d.x_train[:n], d.y_train[:n]


# ------------------------------------------------------------------ numpy by hand
def numpy_grads(params, x, y):
    """The loss and the gradients of a ReLU MLP with softmax cross-entropy, written out
    (exercise 12.9's reference), for any number of layers (W (in, out), b): the forward
    pass a₀ = x, zᵢ = aᵢ Wᵢ + bᵢ, aᵢ₊₁ = max(zᵢ, 0) between layers; on the last z,
    log p = z - m - log Σ exp(z - m) with m the row maximum (so that exp cannot overflow),
    loss = mean(-log p[i, y_i]); backward from dz = (p - onehot(y)) / n: dWᵢ = aᵢᵀ dz,
    dbᵢ = Σ dz, then dz ← (dz Wᵢᵀ) ⊙ [zᵢ₋₁ > 0]. Returns (loss, [(dW1, db1), …])."""
    inputs, pre = [], []
    a = x
    for i, (w, b) in enumerate(params):
        inputs.append(a)
        z = a @ w + b
        if i < len(params) - 1:
            pre.append(z)
            a = np.maximum(z, 0)
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    n = len(y)
    loss = float(-logp[np.arange(n), y].mean())
    dz = np.exp(logp)
    dz[np.arange(n), y] -= 1
    dz /= n
    grads = []
    for i in range(len(params) - 1, -1, -1):
        grads.append((inputs[i].T @ dz, dz.sum(0)))
        if i:
            dz = (dz @ params[i][0].T) * (pre[i - 1] > 0)
    return loss, grads[::-1]


def numpy_step(params, x, y, lr: float = 0.1, grads=None):
    """One SGD step by hand: ``grads(params, x, y)`` (default :func:`numpy_grads`), then
    W -= lr·dW, b -= lr·db in place. Returns the loss."""
    loss, g = (grads or numpy_grads)(params, x, y)
    for (w, b), (gw, gb) in zip(params, g):
        w -= lr * np.asarray(gw, dtype=w.dtype)
        b -= lr * np.asarray(gb, dtype=b.dtype)
    return float(loss)


def grads_report(grads, spec: dict) -> dict:
    """``grads(params, x, y)`` on the MLP ``spec`` describes (``seed``, ``sizes``, ``batch``,
    an ``offset`` added to the last layer's bias, which lifts every logit; float64), as plain
    data: the loss and the gradients, or what was wrong with what came back. Exercise
    12.6's derive function."""
    rng = np.random.default_rng(int(spec["seed"]))
    sizes = tuple(int(s) for s in spec["sizes"])
    params = [(rng.standard_normal((a, b)) / np.sqrt(a), rng.standard_normal(b) * 0.1)
              for a, b in zip(sizes[:-1], sizes[1:])]
    params[-1] = (params[-1][0], params[-1][1] + float(spec["offset"]))
    x = rng.standard_normal((spec["batch"], sizes[0]))
    y = rng.integers(0, sizes[-1], spec["batch"])
    out = grads([(w.copy(), b.copy()) for w, b in params], x.copy(), y.copy())
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return {"ok": False, "why": f"returned {type(out).__name__}, not (loss, grads)"}
    loss, g = out
    try:
        loss = float(loss)
    except (TypeError, ValueError):
        return {"ok": False, "why": f"returned ({type(loss).__name__}, …): the first item "
                                    f"must be the loss, a number"}
    try:
        g = [(np.asarray(gw, dtype=float), np.asarray(gb, dtype=float)) for gw, gb in g]
    except (TypeError, ValueError) as exc:
        return {"ok": False, "why": f"grads must be a list of (dW, db) pairs: {exc}"}
    return {"ok": True, "loss": loss, "grads": g}


# ---------------------------------------------------------------- labkit.autograd
def sizes_of(params) -> tuple[int, ...]:
    """The layer widths (in, hidden…, out) of ``params`` [(W (in, out), b), …]."""
    return (params[0][0].shape[0], *(w.shape[1] for w, _ in params))


def labkit_model(params):
    """labkit.autograd MLP carrying ``params``."""
    model = mlp(sizes_of(params), seed=0)
    lin = [m for m in model.layers if hasattr(m, "weight")]
    for m, (w, b) in zip(lin, params):
        m.weight.data[...] = w          # labkit stores W as (in, out), like ``params``
        m.bias.data[...] = b
    return model


def labkit_step_fn(params, x, y, lr: float = 0.1) -> Callable[[], float]:
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
    import torch  # deferred: torch

    model = torch_mlp(sizes_of(params))
    lin = [m for m in model if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for m, (w, b) in zip(lin, params):
            m.weight.copy_(torch.from_numpy(w.T.copy()))
            m.bias.copy_(torch.from_numpy(b))
    return model


def torch_step_fn(params, x, y, lr: float = 0.1, compile: bool = False) -> Callable[[], float]:
    import torch  # deferred: torch

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


# --------------------------------------------------------------------------- JAX
def _jax_forward(params, x):
    import jax.numpy as jnp  # deferred: jax

    a = x
    for i, (w, b) in enumerate(params):
        a = a @ w + b
        if i < len(params) - 1:
            a = jnp.maximum(a, 0)
    return a


def _jax_loss(params, x, y):
    import jax  # deferred: jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(_jax_forward(params, x), axis=1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def jax_step_fn(params, x, y, lr: float = 0.1) -> Callable[[], float]:
    """One SGD step in JAX: ``jax.value_and_grad`` of the cross-entropy, the update, the
    whole step under ``jax.jit`` (traced and compiled by XLA on the first call). JAX
    dispatches asynchronously; returning the loss as a Python float waits for it, as
    ``loss.item()`` does in the torch step."""
    import jax  # deferred: jax
    import jax.numpy as jnp

    @jax.jit
    def update(ps, xb, yb):
        loss, grads = jax.value_and_grad(_jax_loss)(ps, xb, yb)
        return loss, [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(ps, grads)]
    state = {"params": [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]}
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def step():
        loss, state["params"] = update(state["params"], xj, yj)
        return float(loss)
    return step


def jax_infer_fn(params, x) -> Callable[[], object]:
    """Inference of the batch under ``jax.jit``, waited for (``block_until_ready``)."""
    import jax  # deferred: jax
    import jax.numpy as jnp

    ps = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
    xj = jnp.asarray(x)
    forward = jax.jit(_jax_forward)
    return lambda: forward(ps, xj).block_until_ready()


def check_same(seed: int = 0, steps: int = 3, grads=None) -> dict[str, list[float]]:
    """Losses of ``steps`` SGD steps in numpy (with ``grads``, default :func:`numpy_grads`),
    labkit, torch and JAX from the same weights: they must agree to float32 rounding."""
    params = init_params(seed)
    x, y = batch()
    np_params = [(w.copy(), b.copy()) for w, b in params]
    runs = {"numpy": lambda: numpy_step(np_params, x, y, grads=grads),
            "labkit.autograd": labkit_step_fn(params, x, y),
            "torch eager": torch_step_fn(params, x, y),
            "JAX": jax_step_fn(params, x, y)}
    return {k: [f() for _ in range(steps)] for k, f in runs.items()}


# --------------------------------------------------------------------- ONNX Runtime
def onnx_session(model, path: str | Path):
    """Export ``model`` to ONNX at ``path`` (dynamic batch) and open an ONNX Runtime CPU
    session; None when onnx/onnxscript/onnxruntime are not installed."""
    try:
        import onnxruntime as ort  # deferred: onnxruntime
    except ImportError:
        return None
    export_onnx(model, path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def export_onnx(model, path: str | Path, in_features: int = 64) -> Path:
    """``torch.onnx.export`` (the torch.export-based exporter) with a dynamic batch dim."""
    import torch  # deferred: torch

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
    cold_s: float | None = None  # the first training call alone (torch.compile: compiling)


def whose(fn) -> str:
    """Who wrote the harness ``fn``: labkit (its :func:`labkit.timing.benchmark` or
    :func:`~labkit.timing.interleaved`, the references, in use where the learner's
    exercise has not passed) or the learner."""
    if fn is timing.benchmark or fn is timing.interleaved:
        return f"labkit's {fn.__name__}"
    return f"your {getattr(fn, '__name__', 'harness')}()"


def compare(hidden: int = 128, batch_size: int = 64, *, bench=None, interleave=None,
            grads=None, repeats: int = 15, seed: int = 0, tmpdir: str | Path | None = None,
            include_compile: bool = False, onnx: bool = True,
            include_jax: bool = True) -> list[FrameworkRow]:
    """Time one training step and one inference of ``batch_size`` digits through the
    64 → ``hidden`` → 10 MLP in every implementation, on one thread: with
    ``interleave(fns, repeats=, warmup=)`` (alternating them, A B C A B C …; default
    :func:`labkit.timing.interleaved`) or, when ``interleave`` is False, one after
    the other with ``bench(fn, repeats=, warmup=)`` (default
    :func:`labkit.timing.benchmark`). The numpy row's gradients are ``grads`` (default
    :func:`numpy_grads`). torch.compile's and JAX's first training calls — the compilations —
    are timed alone with ``bench`` (``warmup=0``, one repeat): their cold starts; then they
    are timed warm like the others."""
    import torch  # deferred: torch

    hidden = v.integer("hidden", hidden, low=1, high=1 << 14)
    repeats = v.integer("repeats", repeats, low=3)
    bench = benchmark if bench is None else bench
    interleave = interleaved if interleave is None else interleave
    for name, fn in (("bench", bench), ("interleave", interleave)):
        if fn is not False and not callable(fn):
            raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
    params = init_params(seed, (SIZES[0], hidden, SIZES[-1]))
    x, y = batch(batch_size)
    np_params = [(w.copy(), b.copy()) for w, b in params]
    steps = {"numpy (by hand)": lambda: numpy_step(np_params, x, y, lr=1e-3, grads=grads),
             "labkit.autograd": labkit_step_fn(params, x, y, lr=1e-3),
             "torch eager": torch_step_fn(params, x, y, lr=1e-3)}
    if include_compile:
        steps["torch.compile"] = torch_step_fn(params, x, y, lr=1e-3, compile=True)
    tm = torch_model(params).eval()
    xt = torch.from_numpy(x)
    (w1, b1), (w2, b2) = params
    lab = labkit_model(params)

    def lab_infer():
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
    if v.boolean("include_jax", include_jax):
        steps["JAX (jit)"] = jax_step_fn(params, x, y, lr=1e-3)
        infers["JAX (jit)"] = jax_infer_fn(params, x)
    cold_starts = [k for k in ("torch.compile", "JAX (jit)") if k in steps]
    with tempfile.TemporaryDirectory() as d, threads(1):   # one thread each: fair
        sess = onnx_session(tm, Path(tmpdir or d) / "mlp.onnx") if onnx else None
        if sess is not None:
            name = sess.get_inputs()[0].name
            infers["ONNX Runtime"] = lambda: sess.run(None, {name: x})
        cold = {k: bench(steps[k], repeats=1, warmup=0).median for k in cold_starts}
        if interleave is False:
            train_t = {k: bench(f, repeats=repeats, warmup=2) for k, f in steps.items()}
            infer_t = {k: bench(f, repeats=repeats, warmup=2) for k, f in infers.items()}
        else:
            train_t = interleave(steps, repeats=repeats, warmup=2)
            infer_t = interleave(infers, repeats=repeats, warmup=2)
    rows = []
    for k in infers:
        tt = train_t.get(k)
        note = "inference only" if k == "ONNX Runtime" else (
            f"first call (compiles) {cold[k]:.2f} s" if k in cold else "")
        rows.append(FrameworkRow(k, tt.median if tt else None, (tt.low, tt.high) if tt else None,
                                 infer_t[k].median, note, cold.get(k)))
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


def fastest_trainer(rows: list[FrameworkRow]) -> str:
    """The name of the row with the shortest training step (rows without one skipped)."""
    trainers = [r for r in rows if r.train_s is not None]
    if not trainers:
        raise ValueError("rows must hold at least one row with a training time")
    return min(trainers, key=lambda r: r.train_s).name


def format_rows(rows: list[FrameworkRow]) -> str:
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
