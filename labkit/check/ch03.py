"""Checks for chapter 03: training vs inference."""
from __future__ import annotations

import numpy as np

from labkit.training.inference import BatchPoint, BatchSweep
from labkit.training.modes import batchnorm_eval, inverted_dropout
from labkit.check.core import Wrong, exercise, expect_close, expect_equal, expect_raises


# ---- 3.1 FLOPs of a matrix product in each phase -------------------------------------------

def _matmul_step_flops(batch, k, n, input_requires_grad):
    fwd = 2 * batch * k * n
    return fwd, fwd * (2 if input_requires_grad else 1)


@exercise("3.1", "forward and backward FLOPs of y = x W", reference=_matmul_step_flops,
          binds="matmul_step_flops")
def _(matmul_step_flops):
    from labkit.autograd import Tensor, count

    rng = np.random.default_rng(31)
    for b, k, n, need in [(64, 64, 256, False), (7, 13, 5, True), (1, 3, 1, True),
                          (32, 100, 10, False)]:
        x = Tensor(rng.normal(size=(b, k)).astype(np.float32), requires_grad=need)
        w = Tensor(rng.normal(size=(k, n)).astype(np.float32), requires_grad=True)
        with count() as c:
            (x @ w).sum().backward()
        want = (c.forward["matmul"], c.backward["matmul"])
        got = tuple(int(v) for v in matmul_step_flops(b, k, n, need))
        if got[0] != want[0]:
            raise Wrong(f"forward FLOPs for ({b}x{k}) @ ({k}x{n}) = {got[0]}, expected "
                        f"{want[0]}: a multiply-add counts as 2 FLOPs.")
        if got[1] != want[1]:
            hint = ("when x needs no gradient only dW = x^T dY is computed" if not need else
                    "backward computes dW = x^T dY and dX = dY W^T: two products the size "
                    "of the forward one")
            raise Wrong(f"backward FLOPs (x requires grad: {need}) = {got[1]}, expected "
                        f"{want[1]}. Hint: {hint}.")


# ---- 3.2 activation memory ----------------------------------------------------------------

def _saved_activation_bytes(batch, sizes, itemsize=4):
    return int(itemsize * batch * sum(sizes))


@exercise("3.2", "bytes an MLP saves for backward", reference=_saved_activation_bytes,
          binds="saved_activation_bytes")
def _(saved_activation_bytes):
    from labkit.autograd import Tensor, count, functional as F
    from labkit.autograd.nn import mlp

    for batch, sizes in [(64, (64, 256, 256, 10)), (3, (5, 7, 2)), (10, (8, 3)),
                         (17, (4, 9, 11, 6, 3))]:
        model = mlp(sizes, seed=1)
        x = np.ones((batch, sizes[0]), np.float32)
        with count() as c:
            F.cross_entropy(model(Tensor(x)), np.zeros(batch, np.int64))
        got = int(saved_activation_bytes(batch, sizes, 4))
        if got != c.saved_bytes:
            per = c.saved_bytes // (4 * batch)
            raise Wrong(f"for batch {batch}, sizes {sizes}: {got} bytes, labkit's counter saw "
                        f"{c.saved_bytes}. Hint: per sample {per} floats are saved -- the "
                        f"input, each ReLU output (the next matmul reuses it) and the "
                        f"log-softmax output; pre-activations are not saved.")
    if int(saved_activation_bytes(8, (4, 4), 2)) != 2 * 8 * 8:
        raise Wrong("use the itemsize argument (2 for float16/bfloat16).")


# ---- 3.3 picking a batch size under a latency budget ----------------------------------------

def _best_batch(sweep, budget_s):
    ok = [p for p in sweep.points if p.latency_s <= budget_s]
    return max(ok, key=lambda p: p.throughput).batch if ok else None


def _sweep(lat):
    return BatchSweep(tuple(BatchPoint(b, t, b / t) for b, t in lat), 8, 1)


@exercise("3.3", "the best batch size under a latency budget", reference=_best_batch,
          binds="best_batch")
def _(best_batch):
    cases = [
        (_sweep([(1, 1e-4), (8, 2e-4), (64, 9e-4), (512, 6e-3)]), 1e-3, 64),
        (_sweep([(1, 1e-4), (8, 2e-4), (64, 9e-4), (512, 6e-3)]), 1e-2, 512),
        (_sweep([(1, 1e-4), (8, 2e-4), (64, 9e-4)]), 9e-4, 64),        # equal counts as within
        (_sweep([(4, 3e-3), (16, 4e-3)]), 1e-3, None),                # nothing fits
        (_sweep([(32, 5e-4), (2, 1e-4), (128, 1.9e-3)]), 2e-3, 128),   # unsorted input
        # a slow large batch inside the budget is still not better than a faster one:
        (_sweep([(16, 1e-4), (32, 9e-4)]), 1e-3, 16),
    ]
    for sweep, budget, want in cases:
        got = best_batch(sweep, budget)
        expect_equal(got, want, f"best_batch(budget={budget:g} s) on batches "
                                f"{[p.batch for p in sweep.points]}",
                     hint="among points with latency_s <= budget pick the highest throughput; "
                          "return None when no point fits")


# ---- 3.4 BatchNorm in eval mode --------------------------------------------------------------

@exercise("3.4", "BatchNorm in eval mode", reference=batchnorm_eval, binds="batchnorm_eval")
def _(answer):
    import torch

    rng = np.random.default_rng(34)
    for n, c in [(5, 3), (1, 7), (64, 16)]:
        bn = torch.nn.BatchNorm1d(c).double()
        with torch.no_grad():
            bn.running_mean.copy_(torch.tensor(rng.normal(size=c)))
            bn.running_var.copy_(torch.tensor(rng.uniform(0.2, 3, c)))
            bn.weight.copy_(torch.tensor(rng.normal(size=c)))
            bn.bias.copy_(torch.tensor(rng.normal(size=c)))
        bn.eval()
        x = rng.normal(size=(n, c)) * 2 + 1
        want = bn(torch.tensor(x)).detach().numpy()
        got = answer(x, bn.running_mean.numpy(), bn.running_var.numpy(),
                     bn.weight.detach().numpy(), bn.bias.detach().numpy(), 1e-5)
        if n > 1 and np.allclose(got, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
                                 * bn.weight.detach().numpy() + bn.bias.detach().numpy()):
            raise Wrong("you normalized with the batch's statistics -- that is train mode. "
                        "Eval mode uses running_mean and running_var.")
        expect_close(got, want, f"batchnorm_eval on a ({n}, {c}) batch",
                     hint="gamma * (x - running_mean) / sqrt(running_var + eps) + beta")


# ---- 3.5 inverted dropout ---------------------------------------------------------------------

@exercise("3.5", "inverted dropout (train mode)", reference=inverted_dropout,
          binds="dropout_train")
def _(dropout_train):
    rng = np.random.default_rng(35)
    for p in (0.1, 0.5, 0.8, 0.0):
        x = rng.normal(size=(4, 6))
        mask = (rng.random((4, 6)) >= p).astype(float)
        got = dropout_train(x, mask, p)
        if p and np.allclose(got, x * mask):
            raise Wrong("survivors must be scaled by 1/(1-p) so the expected value is "
                        "unchanged and eval mode can be the identity.")
        expect_close(got, x * mask / (1 - p), f"dropout_train with p={p}",
                     hint="x * keep_mask / (1 - p)")
    expect_raises(lambda: dropout_train(np.ones(2), np.ones(2), 1.0), ValueError,
                  "dropout_train(..., p=1.0)", hint="p must be in [0, 1): raise ValueError")


# ---- 3.6 KV-cache sizing --------------------------------------------------------------------

def _kv_bytes_per_token_per_layer(n_heads, n_kv_heads, head_dim, dtype_bytes=2):
    """Reference 3.6: 2 · n_kv_heads · head_dim · dtype_bytes (a key and a value per KV head;
    the query heads do not count: queries are not cached)."""
    from labkit.training.inference import kv_cache_bytes_per_token_per_layer
    return kv_cache_bytes_per_token_per_layer(n_kv_heads, head_dim, dtype_bytes)


# (n_heads, n_kv_heads, head_dim, dtype_bytes): Llama-2-7B (MHA), Llama-2-70B (GQA, 8 KV
# heads), multi-query attention, fp32, and a small GQA shape measured in torch below
KV_CASES = [(32, 32, 128, 2), (64, 8, 128, 2), (16, 1, 64, 2), (12, 4, 64, 4), (8, 2, 16, 2)]


@exercise("3.6", "KV-cache bytes per token per layer (with grouped-query attention)",
          reference=_kv_bytes_per_token_per_layer, binds="kv_bytes_per_token_per_layer")
def _(kv_bytes_per_token_per_layer):
    answers = [kv_bytes_per_token_per_layer(*case) for case in KV_CASES]
    # judged over all cases: with bf16 (2 bytes) "no dtype_bytes" and "no 2x" look the same
    if answers != [2 * k * d * nb for _, k, d, nb in KV_CASES] and answers == [
            2 * k * d for _, k, d, _ in KV_CASES]:
        raise Wrong("that counts elements, not bytes: multiply by dtype_bytes (2 for bf16, "
                    "4 for fp32).")
    for (n_heads, n_kv, d, nb), got in zip(KV_CASES, answers):
        want = 2 * n_kv * d * nb
        if got == want:
            continue
        where = f"kv_bytes_per_token_per_layer({n_heads}, {n_kv}, {d}, {nb}) = {got!r}, expected {want}"
        if got == want // 2:
            raise Wrong(f"{where}: the cache keeps a key AND a value vector per KV head (x 2).")
        if n_kv != n_heads and got in (2 * n_heads * d * nb, n_heads * d * nb):
            raise Wrong(f"{where}: with grouped-query attention only the {n_kv} key/value heads "
                        f"are cached; the {n_heads} query heads share them (queries are not "
                        f"cached).")
        if got == want * 8:
            raise Wrong(f"{where}: dtype_bytes is already in bytes (2 for bf16), not bits.")
        if got in (want * n_heads, want * n_kv):
            raise Wrong(f"{where}: head_dim is the size of one head; do not multiply by the "
                        f"heads twice.")
        raise Wrong(f"{where}.")
    # the formula against a real cache: a tiny GQA decoder in torch, 2 layers, 12 tokens
    from labkit.training.inference import torch_kv_cache_bytes
    measured = torch_kv_cache_bytes(n_heads=8, n_kv_heads=2, head_dim=16, layers=2, steps=12)
    predicted = kv_bytes_per_token_per_layer(8, 2, 16, 2) * 2 * 12
    expect_equal(predicted, measured, "your formula x layers x tokens vs the bytes torch's "
                 "cache holds")
