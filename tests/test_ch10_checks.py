"""Chapter 10's checkers accept right answers written here (not the references) and reject
missing, wrong and shortcut answers with their hints. Labs 10.6-10.8 and 10.10 run for real
on two gloo processes (the shared worker pool: started once, then a second or two a run)."""
import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from labkit.check import FAIL, MISSING, PASS, evaluate
from labkit.check import ch10, ch10_runs
from labkit.memory.estimator import activation_bytes_per_layer
from labkit.parallel import moe
from check_basics import assert_fails, reference_and_missing_test

ALL = ["10.1", "10.2", "10.3", "10.4", "10.5", "10.6", "10.7", "10.8", "10.9", "10.10"]


test_reference_passes_and_missing_is_missing = reference_and_missing_test(ALL, handles=True)


def _stub(*args, **kwargs):
    raise NotImplementedError("write this, then run the check below")


class _StubOptimizer:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params = list(params)
        _stub()

    def step(self):
        _stub()


@pytest.mark.parametrize("ex, stub", [("10.6", _StubOptimizer), ("10.7", _stub),
                                      ("10.8", _stub), ("10.9", _stub), ("10.10", _stub)])
def test_a_stub_is_missing(ex, stub):
    assert evaluate(ex, stub).status == MISSING


# ---- 10.1 ----------------------------------------------------------------------------------

def _one_f_one_b(p, m, s):              # written here: forwards run ahead by the warm-up
    warm = min(p - s - 1, m)
    order, f, b = [], 0, 0
    while b < m:
        if f < m and f - b <= warm:
            order.append(("F", f))
            f += 1
        else:
            order.append(("B", b))
            b += 1
    return order


def _gpipe(p, m, s):
    return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]


def _warm_off_by_one(p, m, s):          # p - s warm-up forwards instead of p - s - 1
    warm = min(p - s, m)
    out, f, b = [("F", j) for j in range(warm)], warm, 0
    while f < m:
        out += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    return out + [("B", j) for j in range(b, m)]


def _warm_uncapped(p, m, s):            # p - s - 1 warm-up forwards even when m is smaller
    warm = p - s - 1
    out, f, b = [("F", j) for j in range(warm)], warm, 0
    while f < m:
        out += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    return out + [("B", j) for j in range(b, m)]


def _backward_first(p, m, s):           # steady state B then F
    out = ch10.one_f_one_b_order(p, m, s)
    return [("B", j) if k == "F" else ("F", j) for k, j in out]


def test_10_1_accepts_an_order_written_here():
    assert evaluate("10.1", _one_f_one_b).status == PASS


@pytest.mark.parametrize("wrong, hint", [(_gpipe, "GPipe"), (_warm_off_by_one, "warm-up"),
                                         (_warm_uncapped, "min(p - s - 1, m)"),
                                         (_backward_first, ""),
                                         (lambda p, m, s: 3, "list of (kind, micro-batch)")])
def test_10_1_rejects(wrong, hint):
    v = evaluate("10.1", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_1_cases_include_fewer_microbatches_than_warm_up():
    """m < p - s - 1 on some stage: the uncapped warm-up passes every other case."""
    passes_old_cases = all(_warm_uncapped(p, m, s) == ch10.one_f_one_b_order(p, m, s)
                           for p, m in ((4, 8), (4, 4), (3, 2), (1, 3), (5, 7), (2, 1))
                           for s in range(p))
    assert passes_old_cases
    assert evaluate("10.1", _warm_uncapped).status == FAIL


# ---- 10.2 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("wrong, hint", [
    (lambda p, m, v: (p - 1) / m, "without interleaving"),
    (lambda p, m, v: (p - 1) / (v * m + p - 1), "idle share"),
    (lambda p, m, v: (p - 1) / (m + p - 1), "idle share"),        # and no interleaving
    (lambda p, m, v: (p - 1) / (v * m) + 0.01, "bubble fraction"),
    (lambda p, m, v: p / (v * m), "bubble fraction"),
])
def test_10_2_rejects(wrong, hint):
    v = evaluate("10.2", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_2_accepts_the_closed_form():
    assert evaluate("10.2", lambda p, m, v: (p - 1) / (v * m)).status == PASS


# ---- 10.3 ----------------------------------------------------------------------------------

def _row_parallel(x, w, tp, all_reduce):         # written here
    k = x.shape[1] // tp
    parts = [(x[:, i * k:(i + 1) * k] @ w[i * k:(i + 1) * k]).reshape(-1) for i in range(tp)]
    run = all_reduce(parts, "ring")
    return run.outputs[-1].reshape(x.shape[0], w.shape[1]), \
        sum(msg.nbytes for msg in run.log if msg.sender == 0)


def _rank0_only(x, w, tp, all_reduce):
    y, sent = _row_parallel(x, w, tp, all_reduce)
    return np.split(x, tp, axis=1)[0] @ np.split(w, tp, axis=0)[0], sent


def _whole_tensor_bytes(x, w, tp, all_reduce):
    y, _ = _row_parallel(x, w, tp, all_reduce)
    return y, y.nbytes


def _half_bytes(x, w, tp, all_reduce):
    y, _ = _row_parallel(x, w, tp, all_reduce)
    return y, (tp - 1) / tp * y.nbytes


def _closed_form(x, w, tp, all_reduce):          # the cost returned, the all-reduce never run
    return x @ w, 2 * (tp - 1) / tp * (x @ w).nbytes


def _twice(x, w, tp, all_reduce):
    _row_parallel(x, w, tp, all_reduce)
    return _row_parallel(x, w, tp, all_reduce)


def _whole_products(x, w, tp, all_reduce):       # all-reduces tp copies of X·W / tp
    run = all_reduce([(x @ w).ravel() / tp for _ in range(tp)], "ring")
    return run.outputs[0].reshape(x.shape[0], w.shape[1]), \
        sum(m.nbytes for m in run.log if m.sender == 0)


def test_10_3_accepts_a_layer_written_here():
    assert evaluate("10.3", _row_parallel).status == PASS


@pytest.mark.parametrize("wrong, hint", [(_rank0_only, "partial"), (_whole_tensor_bytes, "whole"),
                                         (_half_bytes, "reduce-scatter"),
                                         (_closed_form, "no all-reduce was issued"),
                                         (_twice, "2 all-reduces"),
                                         (_whole_products, "not the partial products"),
                                         (lambda x, w, tp, ar: x @ w, "pair")])
def test_10_3_rejects(wrong, hint):
    assert_fails("10.3", wrong, hint)


# ---- 10.4 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("wrong, hint", [
    (lambda psi, dp: 2 * psi + 14 * psi / dp, "ZeRO-2"),
    (lambda psi, dp: 4 * psi + 12 * psi / dp, "ZeRO-1"),
    (lambda psi, dp: 16 * psi, "plain data parallelism"),
    (lambda psi, dp: 12 * psi / dp, "16 bytes"),
    (lambda psi, dp: 16 * psi / (dp + 1), "ZeRO-3 bytes"),
])
def test_10_4_rejects(wrong, hint):
    v = evaluate("10.4", wrong)
    assert v.status == FAIL and hint in v.message


def test_10_4_accepts_without_the_ceiling():
    assert evaluate("10.4", lambda psi, dp: 16 * psi / dp).status == PASS


# ---- 10.5 ----------------------------------------------------------------------------------

def _parts(model, t, p, d, b):
    m = model.batch // (d * b)
    states = 16 * math.ceil(model.params / (t * p))
    stash = 2 * model.seq * b * model.hidden * math.ceil(model.layers / p)
    work = activation_bytes_per_layer(model.seq, b, model.hidden, model.heads, t)
    return m, states, stash, work


def _one_mb(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + stash + work


def _no_tp_split(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return 16 * model.params / p + min(p, m) * stash + work


def _no_working_layer(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + min(p, m) * stash


def _p_in_flight(model, t, p, d, b):             # p micro-batches even when m < p
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + p * stash + work


def _by_hand(model, t, p, d, b):
    m, states, stash, work = _parts(model, t, p, d, b)
    return states + min(p, m) * stash + work


@pytest.mark.parametrize("wrong, hint", [(_one_mb, "one micro-batch"), (_no_tp_split, "splits"),
                                         (_no_working_layer, "recomputed"),
                                         (_p_in_flight, "never holds more than m")])
def test_10_5_rejects(wrong, hint):
    assert_fails("10.5", wrong, hint)


def test_10_5_cases_include_fewer_microbatches_than_stages():
    """min(p, m) with m < p: p micro-batches in flight passes all the cases that have m >= p."""
    plans = [(ch10.GPTModel(**f), t, p, d, b) for f, t, p, d, b in ch10_runs._PLANS]
    assert any(model.batch // (d * b) < p for model, t, p, d, b in plans)
    assert all(np.isclose(_p_in_flight(*c), _by_hand(*c)) for c in plans
               if c[0].batch // (c[3] * c[4]) >= c[2])


def test_10_5_accepts_by_hand():
    assert evaluate("10.5", _by_hand).status == PASS


# ---- 10.6: ZeRO-1 over gloo ------------------------------------------------------------------

class _MyZero:
    """ZeRO-1 Adam written here: torch's update form (addcdiv with the bias corrections), the
    deprecated collective names, the list all-gather."""

    keep_buffers = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.ps = list(params)
        self.lr, (self.b1, self.b2), self.eps, self.wd = lr, betas, eps, weight_decay
        self.p, self.r = dist.get_world_size(), dist.get_rank()
        self.n = sum(q.numel() for q in self.ps)
        self.chunk = math.ceil(self.n / self.p)
        self.exp_avg = torch.zeros(self.chunk, dtype=torch.float64)
        self.exp_avg_sq = torch.zeros(self.chunk, dtype=torch.float64)
        self.k = 0

    def _grad_shard(self):
        flat = torch.nn.functional.pad(torch.cat([q.grad.flatten() for q in self.ps]),
                                       (0, self.chunk * self.p - self.n))
        mine = torch.empty(self.chunk, dtype=torch.float64)
        dist.reduce_scatter_tensor(mine, flat)
        return mine / self.p, flat

    def _adam(self, g, w):
        """torch.optim.Adam's update of ``w`` in place, L2 weight decay."""
        g = g + self.wd * w
        self.k += 1
        self.exp_avg.lerp_(g, 1 - self.b1)
        self.exp_avg_sq.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - self.b2 ** self.k)).add_(self.eps)
        w.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - self.b1 ** self.k))

    def step(self):
        g, flat = self._grad_shard()
        w = torch.nn.functional.pad(torch.cat([q.detach().flatten() for q in self.ps]),
                                    (0, self.chunk * self.p - self.n))
        w = w[self.r * self.chunk:(self.r + 1) * self.chunk].clone()
        self._adam(g, w)
        pieces = [torch.empty_like(w) for _ in range(self.p)]
        dist.all_gather(pieces, w)
        full = torch.cat(pieces)[:self.n]
        if self.keep_buffers:
            self.flat_grad, self.flat_params = flat, full
        with torch.no_grad():
            for q, v in zip(self.ps, full.split([q.numel() for q in self.ps])):
                q.copy_(v.view_as(q))


class _KeepsBuffers(_MyZero):
    keep_buffers = True


class _NoMean(_MyZero):
    def _grad_shard(self):
        g, flat = super()._grad_shard()
        return g * self.p, flat


class _Ddp(_MyZero):
    """DDP's optimizer: all-reduce the gradients, keep Adam's state for every parameter and
    update all of them on every rank."""

    def __init__(self, params, **kw):
        super().__init__(params, **kw)
        self.exp_avg = torch.zeros(self.n, dtype=torch.float64)
        self.exp_avg_sq = torch.zeros(self.n, dtype=torch.float64)

    def step(self):
        g = torch.cat([q.grad.flatten() for q in self.ps])
        dist.all_reduce(g)
        w = torch.cat([q.detach().flatten() for q in self.ps])
        self._adam(g / self.p, w)
        with torch.no_grad():
            for q, v in zip(self.ps, w.split([q.numel() for q in self.ps])):
                q.copy_(v.view_as(q))


class _NoGather(_MyZero):
    """Updates its own shard of the parameters and never sends it."""

    def step(self):
        g, _ = self._grad_shard()
        w = torch.cat([q.detach().flatten() for q in self.ps])
        lo, hi = self.r * self.chunk, min(self.n, (self.r + 1) * self.chunk)
        w[lo:hi] -= self.lr * g[:hi - lo]
        with torch.no_grad():
            for q, v in zip(self.ps, w.split([q.numel() for q in self.ps])):
                q.copy_(v.view_as(q))


class _NoBiasCorrection(_MyZero):
    def step(self):
        self.k = 10 ** 6                    # 1 - β^k ≈ 1: the bias corrections vanish
        super().step()


def test_10_6_accepts_an_optimizer_written_here():
    v = evaluate("10.6", _MyZero)
    assert v.status == PASS, v.message


@pytest.mark.parametrize("wrong, hint", [
    (_Ddp, "all_reduce"),
    (_NoMean, "too large"),
    (_NoGather, "no all-gather"),
    (_KeepsBuffers, "on self — those are temporaries"),
    (_NoBiasCorrection, "torch.optim.Adam on one process"),
])
def test_10_6_rejects(wrong, hint):
    assert_fails("10.6", wrong, hint)


def test_10_6_measures_a_full_copy_of_the_state():
    """DDP's state without its all-reduce (a reduce-scatter, then every shard gathered into
    full-size m and v kept on every rank) fails on memory alone."""
    class FullState(_MyZero):
        def step(self):
            super().step()
            self.copy_m = torch.zeros(self.n, dtype=torch.float64)
            self.copy_v = torch.zeros(self.n, dtype=torch.float64)

    v = evaluate("10.6", FullState)
    assert v.status == FAIL and "m and v for all" in v.message, v.message


def test_10_6_calling_labkits_optimizer_is_refused():
    from labkit.parallel.zero import ZeroAdam

    class Wrapper:
        def __init__(self, params, **kw):
            self.inner = ZeroAdam(params, **kw)

        def step(self):
            self.inner.step()

    v = evaluate("10.6", Wrapper)
    assert v.status == FAIL and "labkit's implementation" in v.message, v.message


# ---- 10.7: a parallelize_module plan ---------------------------------------------------

def _plan(sequence_parallel=False):            # written here
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    out = {}
    for half, cols, row, norm in (("attn", ("wq", "wk", "wv"), "wo", "norm1"),
                                  ("mlp", ("up",), "down", "norm2")):
        for c in cols:
            out[f"{half}.{c}"] = ColwiseParallel(use_local_output=True)
        out[f"{half}.{row}"] = RowwiseParallel(output_layouts=Shard(1) if sequence_parallel
                                               else Replicate())
        if sequence_parallel:
            out[norm] = SequenceParallel()
            out[half] = PrepareModuleInput(input_layouts=(Shard(1),),
                                           desired_input_layouts=(Replicate(),))
    return out


def _mlp_only(sequence_parallel=False):
    return {k: v for k, v in _plan(sequence_parallel).items() if not k.startswith("attn")}


def _gathering(sequence_parallel=False):       # every layer colwise, outputs gathered
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel
    return {f"{h}.{n}": ColwiseParallel(output_layouts=Replicate())
            for h, ns in (("attn", ("wq", "wk", "wv", "wo")), ("mlp", ("up", "down")))
            for n in ns}


def _no_sequence_parallel(sequence_parallel=False):
    return _plan(False)


def test_10_7_accepts_a_plan_written_here():
    v = evaluate("10.7", _plan)
    assert v.status == PASS, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda sequence_parallel=False: {}, "not sharded"),
    (_mlp_only, "attn.wq.weight is not sharded"),
    (_gathering, "gathered its output"),
    (_no_sequence_parallel, "sequence_parallel=True"),
])
def test_10_7_rejects(wrong, hint):
    assert_fails("10.7", wrong, hint)


# ---- 10.8: FSDP2 -----------------------------------------------------------------------

def _shard(model, mesh):                       # written here: children, then the root
    from torch.distributed.fsdp import fully_shard
    for child in list(model.blocks.children()):
        fully_shard(child, mesh=mesh, reshard_after_forward=True)
    return fully_shard(model, mesh=mesh)


def _root_only(model, mesh):
    from torch.distributed.fsdp import fully_shard
    return fully_shard(model, mesh=mesh)


def _blocks_only(model, mesh):
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return model


def test_10_8_accepts_a_wrapping_written_here():
    v = evaluate("10.8", _shard)
    assert v.status == PASS, v.message


@pytest.mark.parametrize("wrong, hint", [(_root_only, "one all-gather"),
                                         (_blocks_only, "head.weight is not sharded")])
def test_10_8_rejects(wrong, hint):
    assert_fails("10.8", wrong, hint)


# ---- 10.9: routing -------------------------------------------------------------------------

def _route(logits, k, capacity_factor, *, rounding=math.ceil, per_token=False,
           renormalise=True, first_choices_first=False, capacity=True):
    """Written here, a loop over tokens; the keywords make the named mistakes."""
    T, E = logits.shape
    C = rounding((k if not per_token else 1) * T / E * capacity_factor - 1e-9)
    p = torch.softmax(logits, -1)
    top, expert = p.topk(k, -1)
    gate = top / top.sum(-1, keepdim=True) if (k > 1 and renormalise) else top
    slot = torch.full((T, k), -1, dtype=torch.long)
    used = [0] * E
    order = [(j, t) for j in range(k) for t in range(T)] if first_choices_first else \
        [(j, t) for t in range(T) for j in range(k)]
    for j, t in order:
        e = int(expert[t, j])
        if used[e] < C or not capacity:
            slot[t, j] = used[e]
        used[e] += 1
    return expert, slot, gate


def test_10_9_accepts_routing_written_here():
    assert evaluate("10.9", _route).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (lambda l, k, cf: _route(l, k, cf, capacity=False), "dropped nothing"),
    (lambda l, k, cf: _route(l, k, cf, rounding=math.floor), "rounded down"),
    (lambda l, k, cf: _route(l, k, cf, per_token=True), "count all k·T assignments"),
    (lambda l, k, cf: _route(l, k, cf, renormalise=False), "raw probabilities"),
    (lambda l, k, cf: _route(l, k, cf, first_choices_first=True), "token order"),
    (lambda l, k, cf: (_route(l, k, cf)[0], _route(l, k, cf)[1],
                       torch.ones(l.shape[0], k, dtype=torch.float64)), "p_e itself"),
    (lambda l, k, cf: (torch.softmax(l, -1).topk(k, -1, largest=False)[1],) + _route(l, k, cf)[1:],
     "experts differ"),
    (lambda l, k, cf: _route(l, k, cf)[:2], "three"),
])
def test_10_9_rejects(wrong, hint):
    assert_fails("10.9", wrong, hint)


def test_10_9_refuses_labkits_capacity():
    def uses_capacity(logits, k, cf):
        moe.capacity(logits.shape[0], logits.shape[1], k, cf)
        return _route(logits, k, cf)

    v = evaluate("10.9", uses_capacity)
    assert v.status == FAIL and "labkit" in v.message


# ---- 10.10: dispatch and combine ---------------------------------------------------------

def _layer(x, router_w, w1, w2, k, capacity_factor, all_to_all, *, gates=True, drop=True,
           swap=False, combine=True):
    """Written here: dispatch and combine by loops over tokens; the keywords make the named
    mistakes (no gates, slot -1 used as an index, the received buffer read the wrong way
    round, no second all-to-all)."""
    T, d = x.shape
    E, local = router_w.shape[1], w1.shape[0]
    p = E // local
    expert, slot, gate = _route(x @ router_w, k, capacity_factor)
    C = math.ceil(k * T / E * capacity_factor - 1e-9)
    buf = torch.zeros(E, C, d, dtype=x.dtype)
    for t in range(T):
        for j in range(k):
            if slot[t, j] >= 0 or not drop:
                buf[expert[t, j], slot[t, j]] = x[t]
    got = torch.empty_like(buf)
    all_to_all(got, buf)
    shape = (local, p, C, d) if swap else (p, local, C, d)
    h = got.view(*shape)
    if not swap:
        h = h.transpose(0, 1)
    h = h.reshape(local, p * C, d)
    out = torch.tanh(h @ w1) @ w2
    out = out.view(local, p, C, d)
    back = (out if swap else out.transpose(0, 1)).reshape(E, C, d).contiguous()
    res = torch.empty_like(back)
    if combine:
        all_to_all(res, back)
    else:
        res = back
    y = torch.zeros_like(x)
    for t in range(T):
        for j in range(k):
            if slot[t, j] >= 0 or not drop:
                y[t] += (gate[t, j] if gates else 1.0) * res[expert[t, j], slot[t, j]]
    return y


def test_10_10_accepts_a_layer_written_here():
    v = evaluate("10.10", _layer)
    assert v.status == PASS, v.message


def test_10_10_simulated_all_to_all_counts_messages():
    inp = moe.lab_inputs(5, world=3, tokens=9, experts_per_rank=2, k=2)
    res = moe.run_simulated(_layer, inp)
    E, T = 6, 9
    C = moe.capacity(T, E, 2, inp.capacity_factor)
    assert res["calls"] == [2, 2, 2]
    assert res["sent"] == [moe.all_to_all_bytes(E, C, 6, 3)] * 3
    for y, w in zip(res["y"], inp.expected()):
        np.testing.assert_allclose(y, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw, hint", [
    (dict(gates=False), "not scaled by the gates"),
    (dict(drop=False), "-1 is not an index"),
    (dict(swap=True), "view it as (p, E_local, C, d)"),
    (dict(combine=False), "called all_to_all 1 times"),
])
def test_10_10_rejects(kw, hint):
    assert_fails("10.10", lambda *a: _layer(*a, **kw), hint)


def test_10_10_a_layer_that_never_communicates_fails():
    def alone(x, router_w, w1, w2, k, cf, all_to_all):
        return torch.zeros_like(x)

    v = evaluate("10.10", alone)
    assert v.status == FAIL and "never called all_to_all" in v.message
