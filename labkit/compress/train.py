"""Chapter 08 experiments with torch on scikit-learn's digits: trained MLPs, quantized,
pruned (and fine-tuned) and distilled copies, PyTorch's dynamic quantization, and timings
(fusion by numba and by ``torch.compile``).

Training and timing run torch and numpy's BLAS on one thread (``labkit.perf.threads(1)``):
small models on a shared machine, where more threads only contend and spinning BLAS
threads make timings erratic."""
from __future__ import annotations

import copy
import itertools
import time
import warnings
from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.compress.model import QuantLinear, fake_quant, magnitude_mask, structured_mask
from labkit.kernels.cpu import EPILOGUE_ARRAY_TRAFFIC, compare_epilogue
from labkit.memory.measure import count_params
from labkit.perf.deploy import quantize_int8, state_bytes
from labkit.perf.metrics import top1_accuracy
from labkit.timing import benchmark, threads
from labkit.torch_models import torch_mlp


def _t(x):
    import torch  # deferred: torch
    return torch.as_tensor(np.asarray(x))


def train_mlp(sizes, split, *, epochs: int = 30, lr: float = 3e-3, batch: int = 64,
              seed: int = 0, teacher=None, T: float = 4.0, alpha: float = 0.0,
              labelled: int | None = None):
    """Adam on the digits split; with a ``teacher`` the loss is the distillation loss
    α·T²·KL(teacher_T ‖ student_T) + (1 − α)·CE (Hinton et al. 2015). With ``labelled=n``
    only the first n training labels are used by the CE term (the rest of the training
    images are an unlabelled transfer set, seen only through the teacher's soft targets;
    without a teacher, training uses just those n)."""
    import torch  # deferred: torch
    import torch.nn.functional as F

    epochs = V.integer("epochs", epochs, low=1)
    model = torch_mlp(sizes, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = _t(split.x_train), _t(split.y_train)
    n = len(x) if labelled is None else V.integer("labelled", labelled, low=1, high=len(x))
    if teacher is None:
        x, y = x[:n], y[:n]
    lab = torch.arange(len(x)) < n
    soft = None
    if teacher is not None:
        with torch.no_grad():
            soft = F.log_softmax(teacher(x) / T, dim=1)
    g = torch.Generator().manual_seed(seed)
    with threads(1):
        _fit(model, opt, x, y, lab, soft, g, epochs, batch, T, alpha)
    return model.eval()


def _fit(model, opt, x, y, lab, soft, g, epochs, batch, T, alpha):
    import torch  # deferred: torch
    import torch.nn.functional as F

    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(batch):
            out = model(x[idx])
            m = lab[idx].float()
            loss = (F.cross_entropy(out, y[idx], reduction="none") * m).sum() / m.sum().clamp(min=1)
            if soft is not None:
                kl = F.kl_div(F.log_softmax(out / T, dim=1), soft[idx], log_target=True,
                              reduction="batchmean")
                loss = alpha * T * T * kl + (1 - alpha) * loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def batch_stream(n: int, size: int, steps: int, generator):
    """``steps`` index batches of ``size`` drawn from range(n) without replacement, epoch
    after epoch: seeded permutations (``torch.randperm(n, generator=generator)``) laid end to
    end and cut into consecutive batches, so over the run every index is drawn equally often
    (to within one) and each batch has exactly ``size`` indices (one may span two epochs)."""
    n = V.integer("n", n, low=1)
    size = V.integer("size", size, low=1)
    steps = V.integer("steps", steps, low=0)
    return _stream(n, size, steps, generator)


def _stream(n, size, steps, generator):
    import torch  # deferred: torch

    buf = torch.empty(0, dtype=torch.int64)
    for _ in range(steps):
        while len(buf) < size:
            buf = torch.cat([buf, torch.randperm(n, generator=generator)])
        yield buf[:size]
        buf = buf[size:]


def accuracy(fn, x, y) -> float:
    """Top-1 accuracy (:func:`labkit.perf.metrics.top1_accuracy`) of ``fn``, a torch module
    or a numpy function."""
    import torch  # deferred: torch

    with torch.no_grad():
        out = fn(_t(x)) if isinstance(fn, torch.nn.Module) else fn(np.asarray(x))
    return top1_accuracy(np.asarray(out), y)


def linears(model):
    import torch  # deferred: torch
    return [m for m in model if isinstance(m, torch.nn.Linear)]


def map_weights(model, fn):
    """A copy of ``model`` whose Linear weights are replaced by fn(weight as numpy)."""
    import torch  # deferred: torch

    m = copy.deepcopy(model)
    with torch.no_grad():
        for lin in linears(m):
            lin.weight.copy_(torch.as_tensor(fn(lin.weight.numpy().astype(np.float64)),
                                             dtype=lin.weight.dtype))
    return m


def accuracy_vs_bits(model, split, bits=(8, 6, 4, 3, 2)) -> dict[str, list[float]]:
    """Test accuracy with weights fake-quantized per tensor and per channel (symmetric)."""
    out = {"per tensor": [], "per channel": []}
    for b in bits:
        out["per tensor"].append(accuracy(map_weights(model, lambda w: fake_quant(w, b, True)),
                                          split.x_test, split.y_test))
        out["per channel"].append(accuracy(map_weights(model, lambda w: fake_quant(w, b, True, 0)),
                                           split.x_test, split.y_test))
    return out


def labkit_int8(model):
    """The MLP as numpy QuantLinear layers with ReLU between them: (forward fn, bytes)."""
    import torch  # deferred: torch

    layers = [QuantLinear(m.weight.detach().numpy(), m.bias.detach().numpy())
              for m in linears(model)]
    relu = [isinstance(m, torch.nn.ReLU) for m in model]
    assert sum(relu) == len(layers) - 1, "expects Linear/ReLU alternating"

    def forward(x):
        h = np.asarray(x, dtype=np.float32)
        for i, layer in enumerate(layers):
            h = layer(h)
            if i < len(layers) - 1:
                h = np.maximum(h, 0)
        return h
    return forward, sum(layer.nbytes for layer in layers)


@dataclass(frozen=True)
class CompressRow:
    name: str
    accuracy: float
    nbytes: int
    latency_s: float


def torch_int8_per_channel(model):
    """A copy of ``model`` with every nn.Linear dynamically int8-quantized per output channel:
    ``quantize_dynamic`` with ``per_channel_dynamic_qconfig`` (weights
    ``PerChannelMinMaxObserver``, ``per_channel_symmetric``; ``torch/ao/quantization/qconfig.py``).
    The default (:func:`labkit.perf.deploy.quantize_int8`) is per tensor."""
    import torch  # deferred: torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # torch.ao.quantization is deprecated
        # deferred: torch
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig})


@dataclass(frozen=True)
class WeightScheme:
    """How one int8 implementation quantizes a Linear's weight: torch's ``qscheme`` name (a
    symmetric scheme shows as ``per_*_affine`` with zero points 0), the number of scales,
    and the levels max|w| / scale of the largest row (127 for labkit's restricted range
    [−127, 127]; 127.5 for torch's ``MinMaxObserver``, whose symmetric scale is
    max|w| / ((127 − (−128)) / 2) over [−128, 127])."""
    name: str
    qscheme: str
    scales: int
    levels: float


def int8_weight_schemes(model) -> list[WeightScheme]:
    """The weight scheme of the first Linear of ``model`` (a Sequential) under labkit's :class:`QuantLinear`,
    ``torch.ao.quantization.quantize_dynamic``'s default (``default_dynamic_qconfig``: weight
    observer ``default_weight_observer`` = ``MinMaxObserver(dtype=qint8,
    qscheme=per_tensor_symmetric)``, ``torch/ao/quantization/observer.py``) and torch with
    ``per_channel_dynamic_qconfig``, read from the quantized objects."""
    import torch  # deferred: torch

    first = next(i for i, m in enumerate(model) if isinstance(m, torch.nn.Linear))
    w = model[first].weight.detach().numpy().astype(np.float64)
    ql = QuantLinear(w)
    rows = [WeightScheme("labkit QuantLinear", "per_channel_symmetric", ql.w_scale.size,
                         float(np.abs(w).max() / ql.w_scale[np.abs(w).max(axis=1).argmax()]))]
    for name, q in (("torch quantize_dynamic (default)", quantize_int8(model)),
                    ("torch quantize_dynamic (per_channel_dynamic_qconfig)",
                     torch_int8_per_channel(model))):
        qw = q[first].weight()              # a quantized Linear's weight() is a method
        scheme = str(qw.qscheme()).replace("torch.", "")
        scales = (qw.q_per_channel_scales().numpy() if "channel" in scheme
                  else np.array([qw.q_scale()]))
        big = np.abs(w).max(axis=1).argmax() if scales.size > 1 else 0
        rows.append(WeightScheme(name, scheme, scales.size, float(np.abs(w).max() / scales[big])))
    return rows


def compare_int8(model, split, batch: int = 256, repeats: int = 7) -> list[CompressRow]:
    """fp32 torch vs labkit's int8 (numpy; weights per channel) vs torch's dynamic int8,
    per tensor (``quantize_dynamic``'s default) and per channel: test accuracy, stored bytes,
    and the median latency of one forward pass on ``batch`` test rows (torch on one thread,
    so that the comparison does not depend on how busy the other core is)."""
    xb = split.x_test[:batch]
    xt = _t(xb)
    fwd, nbytes = labkit_int8(model)
    dyn, dyn_pc = quantize_int8(model), torch_int8_per_channel(model)
    with threads(1):
        return _time_rows(model, fwd, nbytes, dyn, dyn_pc, xb, xt, split, repeats)


def _time_rows(model, fwd, nbytes, dyn, dyn_pc, xb, xt, split, repeats):
    import torch  # deferred: torch

    rows = []
    for name, fn, size, call in (
            ("fp32 (torch)", model, state_bytes(model), lambda: model(xt)),
            ("int8 (labkit, numpy)", fwd, nbytes, lambda: fwd(xb)),
            ("int8 dynamic (torch)", dyn, state_bytes(dyn), lambda: dyn(xt)),
            ("int8 dynamic per channel (torch)", dyn_pc, state_bytes(dyn_pc),
             lambda: dyn_pc(xt))):
        with torch.no_grad():
            lat = benchmark(call, repeats=repeats, warmup=2).median
        rows.append(CompressRow(name, accuracy(fn, split.x_test, split.y_test), size, lat))
    return rows


PRUNE_KINDS = ("unstructured", "structured")


def prune(model, sparsity: float, kind: str = "unstructured", mask_fn=None):
    """A copy of ``model`` with every Linear but the last pruned to ``sparsity``, and its
    masks: ``(copy, [(weight mask, bias mask or None), ...])`` as float tensors of ones and
    zeros. ``mask_fn(w, sparsity) -> bool mask of w's shape`` (w: the (out, in) weight as
    float64 numpy) chooses the weights; by default :func:`labkit.compress.model.magnitude_mask`
    (``kind="unstructured"``, Han et al. 2015) or
    :func:`~labkit.compress.model.structured_mask` (``"structured"``: whole rows, whose
    biases are removed too, so the neuron's output is ReLU(0) = 0)."""
    import torch  # deferred: torch

    kind = V.one_of("kind", kind, PRUNE_KINDS)
    sparsity = V.fraction("sparsity", sparsity)
    if mask_fn is None:
        mask_fn = magnitude_mask if kind == "unstructured" else structured_mask
    elif not callable(mask_fn):
        raise TypeError(f"mask_fn must be a function (w, sparsity) -> mask, got "
                        f"{type(mask_fn).__name__}")
    m = copy.deepcopy(model)
    masks = []
    for lin in linears(m)[:-1]:
        w = lin.weight.detach().numpy().astype(np.float64)
        mask = np.asarray(mask_fn(w.copy(), sparsity))
        if mask.shape != w.shape:
            raise ValueError(f"mask_fn returned a mask of shape {mask.shape} for a weight of "
                             f"shape {w.shape}")
        wm = torch.as_tensor(mask.astype(bool), dtype=lin.weight.dtype)
        bm = wm[:, 0].clone() if kind == "structured" else None
        masks.append((wm, bm))
    _apply_masks(m, masks)
    return m, masks


def _apply_masks(model, masks):
    import torch  # deferred: torch

    with torch.no_grad():
        for lin, (wm, bm) in zip(linears(model), masks):
            lin.weight.mul_(wm)
            if bm is not None:
                lin.bias.mul_(bm)


def prune_curve(model, split, sparsities, kind: str = "unstructured") -> list[float]:
    """Test accuracy after magnitude pruning every Linear but the last (no fine-tuning)."""
    return [accuracy(prune(model, s, kind)[0], split.x_test, split.y_test) for s in sparsities]


def zero_fraction(model) -> float:
    """Share of exact zeros among the weights of every Linear but the last."""
    ws = [lin.weight.detach().numpy() for lin in linears(model)[:-1]]
    return float(sum(int((w == 0).sum()) for w in ws) / sum(w.size for w in ws))


@dataclass(frozen=True)
class FineTuneCurve:
    """Test accuracy after pruning to each sparsity (rows) and ``steps[j]`` steps of
    fine-tuning (columns; 0 = just pruned), and the share of zero weights left in the
    pruned layers after the last step."""
    kind: str
    sparsities: tuple
    steps: tuple
    accuracy: np.ndarray
    zeros: tuple
    dense_accuracy: float

    def at(self, sparsity: float, steps: int) -> float:
        """The test accuracy at one of the curve's sparsities after one of its step counts."""
        sparsity = V.one_of("sparsity", float(sparsity), self.sparsities)
        steps = V.one_of("steps", steps, self.steps)
        return float(self.accuracy[self.sparsities.index(sparsity), self.steps.index(steps)])


def prune_finetune(model, split, sparsities=(0.5, 0.7, 0.9, 0.95), steps=(0, 25, 100, 400),
                   kind: str = "unstructured", mask_fn=None, lr: float = 1e-3, batch: int = 64,
                   seed: int = 0) -> FineTuneCurve:
    """Prune ``model`` (:func:`prune`) to each of ``sparsities``, then fine-tune it with Adam
    (``lr``) on the training set (:func:`batch_stream`, seeded by ``seed``; one thread),
    multiplying the weights by their masks again after every step so that pruned weights
    stay exactly 0 (Han et al. 2015, "Learning both Weights and Connections for Efficient
    Neural Networks", §3: prune, then retrain the remaining connections). Test accuracy is
    taken after each of ``steps`` (increasing, from 0: just pruned)."""
    import torch  # deferred: torch
    import torch.nn.functional as F

    steps = tuple(V.integer("steps", k, low=0) for k in steps)
    if not steps or list(steps) != sorted(set(steps)):
        raise ValueError(f"steps must be increasing step counts, got {steps}")
    lr = V.positive("lr", lr)
    batch = V.integer("batch", batch, low=1, high=len(split.y_train))
    seed = V.integer("seed", seed, low=0)
    x, y = _t(split.x_train), _t(split.y_train)
    acc = np.empty((len(sparsities), len(steps)))
    zeros = []
    with threads(1):
        for i, s in enumerate(sparsities):
            m, masks = prune(model, s, kind, mask_fn)
            m.train()
            opt = torch.optim.Adam(m.parameters(), lr=lr)
            stream = batch_stream(len(x), batch, steps[-1], torch.Generator().manual_seed(seed))
            done = 0
            for j, k in enumerate(steps):
                for idx in itertools.islice(stream, k - done):
                    loss = F.cross_entropy(m(x[idx]), y[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    _apply_masks(m, masks)
                done = k
                acc[i, j] = accuracy(m.eval(), split.x_test, split.y_test)
                m.train()
            zeros.append(zero_fraction(m))
    return FineTuneCurve(kind, tuple(float(s) for s in sparsities), steps, acc, tuple(zeros),
                         accuracy(model, split.x_test, split.y_test))


def format_finetune(curve: FineTuneCurve) -> str:
    """One row per sparsity: the accuracy after each number of fine-tuning steps."""
    if not isinstance(curve, FineTuneCurve):
        raise TypeError(f"curve must be a FineTuneCurve, got {type(curve).__name__}")
    lines = [f"{curve.kind} pruning, dense accuracy {curve.dense_accuracy:.3f}; test accuracy "
             f"after k fine-tuning steps",
             f"{'sparsity':>8s} {'zeros':>6s} " + " ".join(f"{'k = ' + str(k):>9s}"
                                                        for k in curve.steps)]
    for s, z, row in zip(curve.sparsities, curve.zeros, curve.accuracy):
        lines.append(f"{s:8.0%} {z:6.1%} " + " ".join(f"{a:9.3f}" for a in row))
    return "\n".join(lines)


def sparse_matmul_timing(n: int = 1024, batch: int = 256, sparsity: float = 0.9,
                         repeats: int = 5) -> dict[str, float]:
    """Seconds (best of ``repeats``, one thread) of x @ Wᵀ in torch for a dense W, the same W with ``sparsity`` of it zeroed
    (still dense storage), W as a sparse CSR tensor, and the structurally pruned W (a
    smaller dense matrix with (1 − sparsity)·n rows)."""
    import torch  # deferred: torch

    g = torch.Generator().manual_seed(0)
    w = torch.randn(n, n, generator=g)
    x = torch.randn(batch, n, generator=g)
    wz = w * torch.as_tensor(magnitude_mask(w.numpy(), sparsity))
    keep = max(1, int(round((1 - sparsity) * n)))
    ws = w[:keep].contiguous()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # "Sparse CSR tensor support is in beta"
        csr = wz.to_sparse_csr()
    with torch.no_grad(), threads(1):
        t = lambda f: benchmark(f, repeats=repeats, warmup=1).best  # noqa: E731  (least disturbed run)
        res = {"dense": t(lambda: x @ w.T),
               f"{sparsity:.0%} zeros, dense kernel": t(lambda: x @ wz.T),
               "sparse CSR kernel": t(lambda: torch.sparse.mm(csr, x.T)),
               f"structured: {keep} rows": t(lambda: x @ ws.T)}
    return res


@dataclass(frozen=True)
class FusionTiming:
    """Chapter 08's fusion experiment: median seconds of the numpy epilogue chain and of the
    fused kernel on ``n`` float32 elements, and the arrays each reads and writes
    (:data:`labkit.kernels.cpu.EPILOGUE_ARRAY_TRAFFIC`)."""
    n: int
    numpy_s: float
    fused_s: float
    traffic: dict

    def bandwidth(self, which: str) -> float:
        """Bytes/s of array traffic: arrays × 4 bytes × n / seconds."""
        V.one_of("which", which, ("numpy", "fused"))
        return self.traffic[which] * 4 * self.n / getattr(self, f"{which}_s")

    @property
    def speedup(self) -> float:
        return self.numpy_s / self.fused_s


def fusion_timing(n: int = 1 << 22, repeats: int = 5, seed: int = 0) -> FusionTiming:
    """:func:`labkit.kernels.cpu.compare_epilogue` (numpy chain against the fused kernel,
    checked to agree; the check also compiles it) on seeded standard-normal float32 inputs:
    x from ``seed``, the residual from ``seed + 1``."""
    n = V.integer("n", n, low=1)
    repeats = V.integer("repeats", repeats, low=1)
    seed = V.integer("seed", seed, low=0)
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    res = np.random.default_rng(seed + 1).standard_normal(n).astype(np.float32)
    c = compare_epilogue(x, res, repeats=repeats)
    if not c.agrees:
        raise AssertionError("epilogue_fused and epilogue_numpy disagree")
    return FusionTiming(n, c.baseline.median, c.ours.median, dict(EPILOGUE_ARRAY_TRAFFIC))


@dataclass(frozen=True)
class Speedups:
    """Speed-ups of one comparison measured in several independent trials: what a chapter
    prints instead of a range typed into its prose."""
    name: str
    values: tuple

    @property
    def low(self) -> float:
        return float(min(self.values))

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def high(self) -> float:
        return float(max(self.values))

    def __str__(self) -> str:
        return (f"{self.name}: {self.low:.1f}–{self.high:.1f}× over {len(self.values)} trials "
                f"(median {self.median:.1f}×)")


def fusion_trials(trials: int = 5, n: int = 1 << 22, repeats: int = 5,
                  seed: int = 0) -> Speedups:
    """:func:`fusion_timing`'s speed-up (numpy median / fused median) in ``trials``
    independent trials: the spread the chapter's fusion experiment shows on this machine."""
    trials = V.integer("trials", trials, low=1)
    return Speedups("fused vs numpy epilogue",
                    tuple(fusion_timing(n, repeats, seed).speedup for _ in range(trials)))


def epilogue_torch(x, r):
    """The epilogue chain relu(x·1.5 − 0.25)·0.5 + r in eager torch: five element-wise ops,
    each writing a temporary (what ``torch.compile`` fuses into one kernel)."""
    import torch  # deferred: torch
    return torch.relu(x * 1.5 - 0.25) * 0.5 + r


@dataclass(frozen=True)
class CompileTiming:
    """``torch.compile`` (TorchInductor) against eager torch on the epilogue chain: seconds
    the first compiled call took (compiling; far less when Inductor's on-disk cache already
    holds the kernel) and the speed-up of each trial (eager median / compiled median)."""
    n: int
    compile_s: float
    speedups: Speedups
    compiled_s: tuple
    eager_s: tuple


def compile_timing(trials: int = 3, n: int = 1 << 22, repeats: int = 9,
                   seed: int = 0) -> CompileTiming:
    """Compile :func:`epilogue_torch`, check it against eager (1e-6), then time both in
    ``trials`` trials of ``repeats`` (median each). Compiling takes tens of seconds on a cold
    cache, seconds on a warm one: too long for a chapter's notebook; ``make bench`` runs it."""
    import torch  # deferred: torch

    trials = V.integer("trials", trials, low=1)
    n = V.integer("n", n, low=1)
    g = torch.Generator().manual_seed(V.integer("seed", seed, low=0))
    x, r = torch.randn(n, generator=g), torch.randn(n, generator=g)
    fused = torch.compile(epilogue_torch)
    start = time.perf_counter()
    out = fused(x, r)
    compile_s = time.perf_counter() - start
    if not torch.allclose(out, epilogue_torch(x, r), atol=1e-6):
        raise AssertionError("torch.compile changed the epilogue's result")
    comp, eager = [], []
    for _ in range(trials):
        comp.append(benchmark(lambda: fused(x, r), repeats=repeats, warmup=2).median)
        eager.append(benchmark(lambda: epilogue_torch(x, r), repeats=repeats, warmup=2).median)
    sp = Speedups("torch.compile vs eager epilogue", tuple(e / c for e, c in zip(eager, comp)))
    return CompileTiming(n, compile_s, sp, tuple(comp), tuple(eager))


def torch_separable_params(kernel: int, in_ch: int, out_ch: int) -> int:
    """Weights of torch's depthwise (``groups=in_ch``) + pointwise (1×1) convolutions, no
    bias: the count :func:`labkit.compress.model.conv_cost` states, from torch itself."""
    import torch  # deferred: torch

    k = V.integer("kernel", kernel, low=1)
    m = V.integer("in_ch", in_ch, low=1)
    n = V.integer("out_ch", out_ch, low=1)
    dw = torch.nn.Conv2d(m, m, k, padding=k // 2, groups=m, bias=False)
    pw = torch.nn.Conv2d(m, n, 1, bias=False)
    return count_params(dw) + count_params(pw)


def autocast_dtypes(dtype: str = "bfloat16") -> dict[str, str]:
    """``"op (input type)" → output type`` inside ``torch.autocast("cpu", dtype=dtype)``,
    measured. The PyTorch docs (``torch.amp``, "CPU Op-Specific Behavior") list the ops that
    autocast to the low type (``linear``, ``matmul``: bf16 even on fp32 inputs) and to float32
    (losses, ``prod``, ``cdist``: fp32 even on low-precision inputs); an op on neither list
    keeps its input's type. The CPU float32 list has no norm, no ``sum`` and no ``softmax``
    (the CUDA list has ``layer_norm``, ``group_norm``, ``norm``, ``sum``, ``softmax``): on
    low-precision inputs they stay low precision on the CPU. "float16 shares the lists of
    bfloat16"."""
    import torch  # deferred: torch
    import torch.nn.functional as F

    dtype = V.one_of("dtype", dtype, ("bfloat16", "float16"))
    low = getattr(torch, dtype)
    short = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g)
    w = torch.randn(4, 16, generator=g)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    xl = x.to(low)
    out = {}
    with torch.autocast("cpu", dtype=low):
        out["linear (fp32 input)"] = F.linear(x, w)
        out["matmul (fp32 input)"] = x @ x.T
        out[f"cross_entropy ({short} input)"] = F.cross_entropy(xl[:, :4], y)
        out[f"mse_loss ({short} input)"] = F.mse_loss(xl, torch.zeros_like(xl))
        out[f"prod ({short} input)"] = xl.prod()
        out[f"relu ({short} input)"] = torch.relu(xl)
        out[f"softmax ({short} input)"] = torch.softmax(xl, dim=1)
        out[f"layer_norm ({short} input)"] = F.layer_norm(xl, (16,))
        out[f"sum ({short} input)"] = xl.sum()
        out["layer_norm (fp32 input)"] = F.layer_norm(x, (16,))
        out["sum (fp32 input)"] = x.sum()
    return {k: str(v.dtype).replace("torch.", "") for k, v in out.items()}
