"""Chapter 12: seed 002's evaluation metrics measured on one task (the digits).

Seed 002, part 7, lists accuracy, computational efficiency (throughput, latency), memory,
stability and energy. Here each is a function of a trained model:

* accuracy on the held-out digits;
* throughput (samples/s at a batch) and latency percentiles of single requests;
* memory: parameter bytes and the activation bytes autograd saves for backward (counted
  with ``torch.autograd.graph.saved_tensors_hooks``);
* stability: accuracy over several seeds (mean and standard deviation);
* MFU, model FLOPs utilisation (Chowdhery et al., "PaLM", 2022, appendix B): model FLOPs
  per second — 3 × forward FLOPs for a training step — over the hardware peak;
* energy = power × time, from RAPL counters (``/sys/class/powercap/intel-rapl:*``, Linux
  powercap) when readable, else a TDP model that is labelled as such.
"""
from __future__ import annotations

import glob
import time
from dataclasses import dataclass

import numpy as np

from labkit import validate as v
from labkit.data import batches, load_digits
from labkit.memory.measure import saved_tensor_bytes
from labkit.perf.ops import count_ops
from labkit.timing import Timing, benchmark, threads
from labkit.torch_models import digits_cnn, torch_mlp


# ---------------------------------------------------------------- models and training
def digits_mlp(seed: int = 0, hidden: int = 128):
    """64 → hidden → 10 MLP (ReLU), seeded."""
    return torch_mlp((64, v.integer("hidden", hidden, low=1), 10), seed=seed)


MODELS = {"mlp": digits_mlp, "cnn": digits_cnn}


@dataclass(frozen=True)
class Trained:
    name: str
    seed: int
    model: object
    test_accuracy: float
    train_seconds: float
    epochs: int


def train(name: str = "mlp", seed: int = 0, epochs: int = 8, batch_size: int = 64,
          lr: float = 3e-3, data=None) -> Trained:
    """Train ``name`` ("mlp" or "cnn") on the digits with Adam; report test accuracy."""
    import torch  # deferred: torch
    from torch import nn

    name = v.one_of("name", name, tuple(MODELS))
    seed = v.integer("seed", seed, low=0)
    epochs = v.integer("epochs", epochs, low=1)
    data = data or load_digits(seed=0)
    model = MODELS[name](seed)
    opt = torch.optim.Adam(model.parameters(), lr=v.positive("lr", lr))
    xt, yt = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    rng = np.random.default_rng(seed)

    with threads(1):
        t0 = time.perf_counter()
        for _ in range(epochs):
            for idx in batches(len(yt), batch_size, rng):
                idx = torch.from_numpy(idx)
                opt.zero_grad()
                nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
                opt.step()
        secs = time.perf_counter() - t0
    return Trained(name, seed, model.eval(), accuracy(model, data.x_test, data.y_test), secs,
                   epochs)


def top1_accuracy(scores, labels) -> float:
    """Top-1 accuracy: the share of rows of ``scores`` (n × classes: logits or
    probabilities) whose arg-max equals the label, (1/n) Σᵢ [argmax_c scores[i, c] = yᵢ]
    (ties go to the first class, as in ``numpy.argmax`` and ``torch.argmax``).

    The one place labkit turns outputs into an accuracy; each model type's ``accuracy``
    (labkit's autograd MLP, numpy parameters, torch modules) only computes ``scores``."""
    scores = v.array("scores", scores, ndim=2, dtype=None)
    labels = v.array("labels", labels, shape=(scores.shape[0],), dtype=None)
    return float(np.mean(scores.argmax(axis=1) == labels))


def accuracy(model, x, y) -> float:
    """Top-1 accuracy of a torch ``model`` on ``x`` against the labels ``y``."""
    import torch  # deferred: torch

    with torch.no_grad():
        return top1_accuracy(model(torch.as_tensor(x)).numpy(), y)


# ------------------------------------------------------------------ speed metrics
def latency(model, x, requests: int = 200, warmup: int = 10) -> Timing:
    """Latency of single requests (batch of one row of ``x`` each), one sample per request:
    a :class:`labkit.timing.Timing` (its ``p50``, ``p95``, ``p99`` are the percentiles)."""
    import torch  # deferred: torch

    requests = v.integer("requests", requests, low=2)
    x = torch.as_tensor(x)
    row = x[:1]
    with torch.no_grad():
        return benchmark(lambda: model(row), repeats=requests, warmup=warmup)


def throughput(model, x, batch: int = 256, repeats: int = 5) -> float:
    """Inference samples per second at ``batch`` (median over ``repeats``)."""
    import torch  # deferred: torch

    batch = v.integer("batch", batch, low=1)
    xb = torch.as_tensor(x)[:batch]
    with torch.no_grad():
        t = benchmark(lambda: model(xb), repeats=repeats, warmup=2)
    return len(xb) / t.median


def parameter_bytes(model) -> int:
    """Bytes of the parameters and buffers."""
    return int(sum(p.numel() * p.element_size() for p in model.parameters())
               + sum(b.numel() * b.element_size() for b in model.buffers()))


def saved_activation_bytes(model, x) -> int:
    """Bytes autograd saves for backward in one training-mode forward pass on ``x``,
    counted by :func:`labkit.memory.measure.saved_tensor_bytes` (each storage once;
    parameters that are saved are not counted: they live in the model anyway). Leaves
    ``model`` in eval mode."""
    import torch  # deferred: torch

    model.train()
    try:
        return saved_tensor_bytes(lambda: model(torch.as_tensor(x)).sum(),
                                  exclude=list(model.parameters())).total_bytes
    finally:
        model.eval()


def mfu(forward_flops_per_sample: float, samples_per_s: float, peak: float,
        training: bool = True) -> float:
    """Model FLOPs utilisation: (3 if training else 1) × forward FLOPs × samples/s / peak
    (backward costs about twice the forward: PaLM appendix B uses 6N = 3 × 2N per token)."""
    f = v.positive("forward_flops_per_sample", forward_flops_per_sample)
    s = v.positive("samples_per_s", samples_per_s)
    peak = v.positive("peak", peak)
    return (3 if v.boolean("training", training) else 1) * f * s / peak


def forward_flops(model, x) -> float:
    """Forward FLOPs of ``model`` on ``x`` (labkit.perf.ops.count_ops)."""
    import torch  # deferred: torch

    with torch.no_grad():
        return count_ops(lambda: model(torch.as_tensor(x))).flops


# ------------------------------------------------------------------------ energy
RAPL_GLOB = "/sys/class/powercap/intel-rapl:*/energy_uj"
# TDP model: AMD EPYC 7763 (Zen 3 "Milan", CPU family 25 model 1), 280 W default TDP over
# 64 cores (AMD EPYC 7763 product page). An ASSUMPTION about this machine's package.
TDP_WATTS_PER_CORE = 280.0 / 64


def read_rapl() -> float | None:
    """Joules from the package RAPL counters, or None when absent or unreadable (most VMs
    and containers; reading needs root on Linux ≥ 5.10)."""
    total = 0.0
    files = glob.glob(RAPL_GLOB)
    if not files:
        return None
    try:
        for f in files:
            with open(f) as fh:
                total += int(fh.read()) / 1e6
    except (OSError, ValueError):
        return None
    return total


@dataclass(frozen=True)
class Energy:
    joules: float
    seconds: float
    method: str            # "RAPL counters" or "TDP model (…)"

    @property
    def watts(self) -> float:
        return self.joules / self.seconds


def measure_energy(fn, busy_cores: int = 1, watts_per_core: float = TDP_WATTS_PER_CORE) -> Energy:
    """Run ``fn()`` and estimate its energy: RAPL counters when readable, else a TDP model
    power = busy cores × TDP per core (an upper-bound model, labelled in ``method``)."""
    busy_cores = v.integer("busy_cores", busy_cores, low=1)
    watts_per_core = v.positive("watts_per_core", watts_per_core)
    e0 = read_rapl()
    t0 = time.perf_counter()
    fn()
    secs = time.perf_counter() - t0
    e1 = read_rapl()
    if e0 is not None and e1 is not None and e1 > e0:
        return Energy(e1 - e0, secs, "RAPL counters (whole package, measured)")
    return Energy(secs * busy_cores * watts_per_core, secs,
                  f"TDP model: {busy_cores} core(s) × {watts_per_core:.2f} W (NOT measured)")


def stability(name: str = "mlp", seeds=(0, 1, 2), epochs: int = 8, data=None):
    """Test accuracies of ``name`` trained from several seeds: (mean, std, accuracies)."""
    accs = [train(name, s, epochs, data=data).test_accuracy for s in seeds]
    return float(np.mean(accs)), float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0, accs
