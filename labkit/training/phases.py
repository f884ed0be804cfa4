"""Training vs inference, measured: FLOPs of each phase and bytes saved for backward.

Two meters on the same MLP: labkit's op counter (:mod:`labkit.autograd.counters`) and
PyTorch's own -- ``torch.utils.flop_counter.FlopCounterMode`` for FLOPs (it counts matrix
products only) and ``torch.autograd.graph.saved_tensors_hooks`` for what autograd saves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd import Tensor, count, functional as F, no_grad
from labkit.autograd.nn import mlp
from labkit.memory.measure import saved_tensor_bytes
from labkit.perf.metrics import parameter_bytes
from labkit.torch_models import torch_mlp
from labkit.validate import integer


@dataclass(frozen=True)
class PhaseCosts:
    engine: str
    batch: int
    sizes: tuple[int, ...]
    forward_flops: int            # all counted ops of the forward pass
    backward_flops: int
    matmul_forward_flops: int     # matrix products only (what FlopCounterMode counts)
    matmul_backward_flops: int
    saved_bytes_train: int        # activations saved for backward (parameters excluded)
    saved_bytes_inference: int    # the same forward under no_grad
    parameter_bytes: int          # the model's weights and biases, read from the model

    @property
    def backward_over_forward(self) -> float:
        return self.matmul_backward_flops / self.matmul_forward_flops


def _check(sizes, batch):
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes needs at least two positive widths, got {sizes}")
    if not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    return sizes


def _data(sizes, batch, seed):
    batch = integer("batch", batch, low=1, high=1 << 20)
    rng = np.random.default_rng(integer("seed", seed, low=0))
    return (rng.normal(size=(batch, sizes[0])).astype(np.float32),
            rng.integers(0, sizes[-1], batch))


def labkit_phase_costs(sizes=(64, 256, 256, 10), batch: int = 64, seed: int = 0) -> PhaseCosts:
    """One labkit training step (forward, cross-entropy, backward) and one no_grad forward."""
    sizes = _check(sizes, batch)
    x, y = _data(sizes, batch, seed)
    model = mlp(sizes, seed=seed)
    with count() as train:
        F.cross_entropy(model(Tensor(x)), y).backward()
    with no_grad(), count() as infer:
        model(Tensor(x))
    return PhaseCosts("labkit", batch, sizes, train.forward_flops, train.backward_flops,
                      train.forward.get("matmul", 0), train.backward.get("matmul", 0),
                      train.saved_bytes, infer.saved_bytes,
                      sum(int(p.data.nbytes) for p in model.parameters()))


def torch_phase_costs(sizes=(64, 256, 256, 10), batch: int = 64, seed: int = 0) -> PhaseCosts:
    """The same step in PyTorch, measured with FlopCounterMode and saved_tensors_hooks
    (:func:`labkit.memory.measure.saved_tensor_bytes`, parameters excluded)."""
    import torch  # deferred: torch
    from torch.utils.flop_counter import FlopCounterMode

    sizes = _check(sizes, batch)
    x, y = (torch.from_numpy(a) for a in _data(sizes, batch, seed))
    model = torch_mlp(sizes, seed)
    params = list(model.parameters())
    box = {}

    def forward():
        box["loss"] = torch.nn.functional.cross_entropy(model(x), y)

    with FlopCounterMode(display=False) as fwd:
        saved_train = saved_tensor_bytes(forward, params).total_bytes
    with FlopCounterMode(display=False) as bwd:
        box["loss"].backward()
    with torch.no_grad():
        saved_infer = saved_tensor_bytes(lambda: model(x), params).total_bytes
    f, b = int(fwd.get_total_flops()), int(bwd.get_total_flops())
    return PhaseCosts("torch", batch, sizes, f, b, f, b, saved_train, saved_infer,
                      parameter_bytes(model))


def mlp_matmul_flops(sizes, batch: int, layer_flops) -> tuple[int, int]:
    """(forward, backward) FLOPs of the matrix products of an MLP with widths ``sizes``:
    the sum over its layers of ``layer_flops(batch, k, n, input_requires_grad)``, where
    only the first layer's input (the data) needs no gradient."""
    sizes = _check(sizes, batch)
    if not callable(layer_flops):
        raise TypeError(f"layer_flops must be a function, got {type(layer_flops).__name__}")
    per_layer = [layer_flops(batch, k, n, i > 0)
                 for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:]))]
    return sum(int(f) for f, _ in per_layer), sum(int(b) for _, b in per_layer)


@dataclass(frozen=True)
class SavedTensor:
    node: str            # the autograd node that saved it ("NllLossBackward0")
    name: str            # its derivatives.yaml name: grad_fn._saved_<name> ("total_weight")
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def torch_saved_tensors(sizes=(64, 256, 256, 10), batch: int = 64, seed: int = 0
                        ) -> tuple[SavedTensor, ...]:
    """Every tensor one PyTorch training step (the MLP of :func:`torch_phase_costs`, then
    cross-entropy) saves for backward, read from its graph: each node's ``_saved_<name>``
    attributes, the names of ``tools/autograd/derivatives.yaml``. A storage saved by two
    nodes is listed once (the first met from the loss); parameters are left out."""
    import torch  # deferred: torch

    sizes = _check(sizes, batch)
    x, y = (torch.from_numpy(a) for a in _data(sizes, batch, seed))
    model = torch_mlp(sizes, seed)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    loss = torch.nn.functional.cross_entropy(model(x), y)
    rows, seen_nodes, seen_storage, stack = [], set(), set(params), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen_nodes:
            continue
        seen_nodes.add(node)
        for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
            t = getattr(node, attr)
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen_storage:
                seen_storage.add(t.untyped_storage().data_ptr())
                rows.append(SavedTensor(node.name(), attr[len("_saved_"):], tuple(t.shape),
                                        str(t.dtype).replace("torch.", ""),
                                        t.untyped_storage().nbytes()))
        stack.extend(f for f, _ in reversed(node.next_functions))
    return tuple(rows)


def saved_beyond_labkit(sizes=(64, 256, 256, 10), batch: int = 64, seed: int = 0
                        ) -> tuple[SavedTensor, ...]:
    """The tensors of :func:`torch_saved_tensors` that labkit's step does not keep: torch's
    saved tensors less, one for one, a float tensor of the same byte size for each
    activation labkit saves (the input, each ReLU output, the log-softmax output)."""
    sizes = _check(sizes, batch)
    x, y = _data(sizes, batch, seed)
    with count() as c:
        F.cross_entropy(mlp(sizes, seed=seed)(Tensor(x)), y)
    unmatched = sorted(b for _, b, kind in c.saved.values() if kind == "activation")
    out = []
    for row in torch_saved_tensors(sizes, batch, seed):
        if row.dtype.startswith(("float", "bfloat")) and row.nbytes in unmatched:
            unmatched.remove(row.nbytes)
        else:
            out.append(row)
    return tuple(out)


def format_saved_beyond(rows, lab: PhaseCosts, tor: PhaseCosts) -> str:
    """What torch saves beyond labkit, one line per tensor, and their sum against the
    measured difference of the two engines' saved bytes."""
    lines = [f"torch also saves {r.node}.{r.name}: {r.dtype} {list(r.shape)}, {r.nbytes} bytes"
             for r in rows]
    total = sum(r.nbytes for r in rows)
    diff = tor.saved_bytes_train - lab.saved_bytes_train
    lines.append(f"together {total} bytes; measured difference torch - labkit: {diff} bytes")
    return "\n".join(lines)
