"""labkit.parallel.moe: routing with a capacity against a loop over tokens, the capacity of
Switch Transformer / DeepSpeed / Megatron-LM, the simulated all-to-all, the reference layer
on 1-4 ranks against the per-token loop, and the capacity sweep."""
import math

import numpy as np
import pytest
import torch

from labkit.parallel import moe


@pytest.mark.parametrize("T, E, k, cf, want", [
    (512, 8, 1, 1.0, 64),            # Switch §2.2 eq. 3: tokens / experts × factor
    (512, 8, 2, 1.0, 128),           # k assignments per token (DeepSpeed top-2: factor × 2)
    (512, 8, 2, 1.25, 160),
    (10, 4, 1, 1.0, 3),              # ⌈2.5⌉: rounded up, as DeepSpeed and Megatron-LM do
    (9, 3, 2, 0.5, 3),               # exact products stay exact
])
def test_capacity(T, E, k, cf, want):
    assert moe.capacity(T, E, k, cf) == want


@pytest.mark.parametrize("kw, name", [(dict(tokens=0), "tokens"), (dict(k=5), "k"),
                                      (dict(capacity_factor=0.0), "capacity_factor"),
                                      (dict(experts=True), "experts")])
def test_capacity_rejects_bad_arguments(kw, name):
    args = dict(tokens=8, experts=4, k=2, capacity_factor=1.0) | kw
    with pytest.raises((ValueError, TypeError), match=name):
        moe.capacity(**args)


def test_route_rejects_bad_arguments():
    with pytest.raises(ValueError, match="logits"):
        moe.route(np.zeros((4, 2)), 1, 1.0)
    with pytest.raises(ValueError, match="k"):
        moe.route(torch.zeros(4, 2), 3, 1.0)


@pytest.mark.parametrize("seed, k, cf", [(0, 1, 1.0), (1, 2, 1.0), (2, 2, 0.6), (3, 3, 1.3)])
def test_route_agrees_with_the_token_loop(seed, k, cf):
    inp = moe.lab_inputs(seed, world=1, tokens=20, experts_per_rank=5, k=k, capacity_factor=cf)
    logits = torch.from_numpy(inp.x[0] @ inp.router_w)
    expert, slot, gate = moe.route(logits, k, cf)
    loop = list(moe._token_loop(inp.x[0], inp.router_w, k, cf))
    for t, chosen, g, kept in loop:
        assert expert[t].tolist() == chosen
        np.testing.assert_allclose(gate[t].numpy(), g, rtol=1e-12)
        assert [(s >= 0) for s in slot[t].tolist()] == kept
    C = moe.capacity(20, 5, k, cf)
    for e in range(5):                # each expert's kept slots are 0..n-1, in token order
        s = slot[expert == e]
        kept = s[s >= 0]
        assert kept.tolist() == list(range(len(kept))) and len(kept) <= C
    np.testing.assert_array_equal(moe.kept_assignments(inp.x[0], inp.router_w, k, cf),
                                  (slot >= 0).sum(1).numpy())


def test_route_gates():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    _, _, g1 = moe.route(logits, 1, 10.0)
    _, _, g2 = moe.route(logits, 2, 10.0)
    np.testing.assert_allclose(g1.numpy(), [[0.5]])            # Switch: p itself
    np.testing.assert_allclose(g2.numpy(), [[0.625, 0.375]])   # GShard: 0.5/0.8, 0.3/0.8


def test_thread_all_to_all_moves_blocks_and_logs_them():
    world = 3
    a2a = moe.ThreadAllToAll(world)
    outs = [None] * world

    def rank(r):
        a2a.local.rank = r
        inp = torch.arange(6, dtype=torch.float64) + 10 * r      # blocks of 2
        out = torch.empty(6, dtype=torch.float64)
        a2a(out, inp)
        outs[r] = out.tolist()

    import threading
    ts = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert outs[0] == [0, 1, 10, 11, 20, 21] and outs[2] == [4, 5, 14, 15, 24, 25]
    assert sorted((s, d, n) for _, s, d, n in a2a.log) == sorted(
        (s, d, 16) for s in range(world) for d in range(world) if s != d)


@pytest.mark.parametrize("world, per_rank, k, cf", [(1, 4, 2, 1.0), (2, 2, 1, 0.8),
                                                    (3, 2, 2, 1.0), (4, 3, 2, 1.2)])
def test_reference_layer_equals_the_token_loop(world, per_rank, k, cf):
    inp = moe.lab_inputs(world, world=world, tokens=11, experts_per_rank=per_rank, k=k,
                         capacity_factor=cf)
    res = moe.run_simulated(moe.moe_layer, inp)
    assert res["errors"] == [None] * world and res["calls"] == [2] * world
    for y, want in zip(res["y"], inp.expected()):
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    C = moe.capacity(11, world * per_rank, k, cf)
    assert res["sent"] == [moe.all_to_all_bytes(world * per_rank, C, 6, world)] * world


def test_some_tokens_are_dropped_and_get_nothing():
    inp = moe.lab_inputs(7, world=1, tokens=24, experts_per_rank=4, k=1, capacity_factor=0.5)
    kept = moe.kept_assignments(inp.x[0], inp.router_w, 1, 0.5)
    assert (kept == 0).any()
    y = inp.expected()[0]
    assert np.all(y[kept == 0] == 0) and np.all(np.abs(y[kept > 0]).sum(1) > 0)


def test_a_layer_that_raises_is_reported_per_rank():
    def broken(*args):
        raise KeyError("oops")

    res = moe.run_simulated(broken, moe.lab_inputs(0, world=2))
    assert all("KeyError" in e for e in res["errors"])


def test_capacity_sweep():
    sweep = moe.capacity_sweep(moe.route, moe.sweep_logits(), k=2,
                               factors=(0.5, 1.0, 2.0, 3.0))
    T, E = 512, 8
    assert sweep.capacity == tuple(moe.capacity(T, E, 2, f) for f in (0.5, 1.0, 2.0, 3.0))
    assert sum(sweep.loads) == 2 * T
    assert sweep.imbalance == pytest.approx(max(sweep.loads) / (2 * T / E))
    for f, c, d, pad in zip(sweep.factors, sweep.capacity, sweep.dropped, sweep.padding):
        kept = sum(min(n, c) for n in sweep.loads)          # each expert keeps min(load, C)
        assert d == pytest.approx(1 - kept / (2 * T))
        assert pad == pytest.approx(1 - kept / (E * c))
        assert (d == 0) == (f >= sweep.imbalance)
    assert sweep.dropped == tuple(sorted(sweep.dropped, reverse=True))
    assert sweep.aux_loss > 1                               # unbalanced: above 1


def test_a_balanced_router_has_aux_loss_one():
    logits = torch.zeros(8, 4, dtype=torch.float64)
    logits[torch.arange(8), torch.arange(8) % 4] = 5.0      # each expert first for 2 tokens
    sweep = moe.capacity_sweep(moe.route, logits, k=1, factors=(1.0,))
    assert sweep.loads == (2, 2, 2, 2) and sweep.dropped == (0.0,)
    assert sweep.aux_loss == pytest.approx(1.0)
    assert sweep.imbalance == 1.0


def test_plot_capacity_sweep():
    from labkit.parallel.mp_plots import plot_capacity_sweep
    import matplotlib.pyplot as plt
    fig = plot_capacity_sweep(moe.capacity_sweep(moe.route, moe.sweep_logits(), k=2))
    assert len(fig.axes) == 2 and len(fig.axes[1].patches) == 8
    plt.close(fig)
