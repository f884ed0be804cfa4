"""Chapter 08 experiments with torch on scikit-learn's digits: trained MLPs, quantized,
pruned and distilled copies, PyTorch's dynamic quantization, and timings.

Training and timing run torch and numpy's BLAS on one thread (``labkit.perf.threads(1)``):
small models on a shared machine, where more threads only contend and spinning BLAS
threads make timings erratic."""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.compress.model import QuantLinear, fake_quant, magnitude_mask, structured_mask
from labkit.memory.measure import count_params
from labkit.perf.deploy import quantize_int8, state_bytes
from labkit.perf.metrics import top1_accuracy
from labkit.perf.timing import benchmark, threads


def _t(x):
    import torch
    return torch.as_tensor(np.asarray(x))


def train_mlp(sizes, split, *, epochs: int = 30, lr: float = 3e-3, batch: int = 64,
              seed: int = 0, teacher=None, T: float = 4.0, alpha: float = 0.0,
              labelled: int | None = None):
    """Adam on the digits split; with a ``teacher`` the loss is the distillation loss
    α·T²·KL(teacher_T ‖ student_T) + (1 − α)·CE (Hinton et al. 2015). With ``labelled=n``
    only the first n training labels are used by the CE term (the rest of the training
    images are an unlabelled transfer set, seen only through the teacher's soft targets;
    without a teacher, training uses just those n)."""
    import torch
    import torch.nn.functional as F

    from labkit.torch_models import torch_mlp

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
    import torch
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


def accuracy(fn, x, y) -> float:
    """Top-1 accuracy (:func:`labkit.perf.metrics.top1_accuracy`) of ``fn``, a torch module
    or a numpy function."""
    import torch

    with torch.no_grad():
        out = fn(_t(x)) if isinstance(fn, torch.nn.Module) else fn(np.asarray(x))
    return top1_accuracy(np.asarray(out), y)


def linears(model):
    import torch
    return [m for m in model if isinstance(m, torch.nn.Linear)]


def map_weights(model, fn):
    """A copy of ``model`` whose Linear weights are replaced by fn(weight as numpy)."""
    import torch

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
    import torch

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


def compare_int8(model, split, batch: int = 256, repeats: int = 7) -> list[CompressRow]:
    """fp32 torch vs labkit's int8 (numpy) vs torch dynamic int8: test accuracy, stored
    bytes, and the median latency of one forward pass on ``batch`` test rows (torch on one
    thread, so that the comparison does not depend on how busy the other core is)."""
    xb = split.x_test[:batch]
    xt = _t(xb)
    fwd, nbytes = labkit_int8(model)
    dyn = quantize_int8(model)
    with threads(1):
        return _time_rows(model, fwd, nbytes, dyn, xb, xt, split, repeats)


def _time_rows(model, fwd, nbytes, dyn, xb, xt, split, repeats):
    import torch

    rows = []
    for name, fn, size, call in (
            ("fp32 (torch)", model, state_bytes(model), lambda: model(xt)),
            ("int8 (labkit, numpy)", fwd, nbytes, lambda: fwd(xb)),
            ("int8 dynamic (torch)", dyn, state_bytes(dyn), lambda: dyn(xt))):
        with torch.no_grad():
            lat = benchmark(call, repeats=repeats, warmup=2).median
        rows.append(CompressRow(name, accuracy(fn, split.x_test, split.y_test), size, lat))
    return rows


def prune_curve(model, split, sparsities, kind: str = "unstructured") -> list[float]:
    """Test accuracy after magnitude pruning every Linear but the last (no fine-tuning)."""
    import torch

    V.one_of("kind", kind, ("unstructured", "structured"))
    accs = []
    for s in sparsities:
        m = copy.deepcopy(model)
        with torch.no_grad():
            for lin in linears(m)[:-1]:
                w = lin.weight.numpy()
                mask = magnitude_mask(w, s) if kind == "unstructured" else structured_mask(w, s)
                lin.weight.mul_(torch.as_tensor(mask, dtype=lin.weight.dtype))
                if kind == "structured":     # a removed neuron's bias goes too
                    lin.bias.mul_(torch.as_tensor(mask[:, 0], dtype=lin.bias.dtype))
        accs.append(accuracy(m, split.x_test, split.y_test))
    return accs


def sparse_matmul_timing(n: int = 1024, batch: int = 256, sparsity: float = 0.9,
                         repeats: int = 5) -> dict[str, float]:
    """Seconds (best of ``repeats``, one thread) of x @ Wᵀ in torch for a dense W, the same W with ``sparsity`` of it zeroed
    (still dense storage), W as a sparse CSR tensor, and the structurally pruned W (a
    smaller dense matrix with (1 − sparsity)·n rows)."""
    import torch

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
    from labkit.kernels.cpu import EPILOGUE_ARRAY_TRAFFIC, compare_epilogue

    n = V.integer("n", n, low=1)
    repeats = V.integer("repeats", repeats, low=1)
    seed = V.integer("seed", seed, low=0)
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    res = np.random.default_rng(seed + 1).standard_normal(n).astype(np.float32)
    c = compare_epilogue(x, res, repeats=repeats)
    if not c.agrees:
        raise AssertionError("epilogue_fused and epilogue_numpy disagree")
    return FusionTiming(n, c.baseline.median, c.ours.median, dict(EPILOGUE_ARRAY_TRAFFIC))


def torch_separable_params(kernel: int, in_ch: int, out_ch: int) -> int:
    """Weights of torch's depthwise (``groups=in_ch``) + pointwise (1×1) convolutions, no
    bias: the count :func:`labkit.compress.model.conv_cost` states, from torch itself."""
    import torch

    k = V.integer("kernel", kernel, low=1)
    m = V.integer("in_ch", in_ch, low=1)
    n = V.integer("out_ch", out_ch, low=1)
    dw = torch.nn.Conv2d(m, m, k, padding=k // 2, groups=m, bias=False)
    pw = torch.nn.Conv2d(m, n, 1, bias=False)
    return count_params(dw) + count_params(pw)


def autocast_dtypes() -> dict[str, str]:
    """The dtype each op returns inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` on
    fp32 inputs."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g)
    w = torch.randn(4, 16, generator=g)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    out = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = F.linear(x, w)
        out["linear"] = z
        out["matmul"] = x @ x.T
        out["relu (follows its input)"] = torch.relu(z)
        out["softmax (follows its input)"] = torch.softmax(z, dim=1)
        out["layer_norm"] = F.layer_norm(x, (16,))
        out["cross_entropy"] = F.cross_entropy(z, y[:8] % 4)
        out["mse_loss"] = F.mse_loss(z, torch.zeros_like(z))
        out["sum"] = x.sum()
    return {k: str(v.dtype).replace("torch.", "") for k, v in out.items()}
