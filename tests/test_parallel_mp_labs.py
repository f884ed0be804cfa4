"""labkit.parallel.mp_labs, the harness of chapter 10's real runs (the collectives spy, the
memory measurement), and the labs on it (zero_lab, tp_lab, fsdp_lab, moe_lab): the
references run for real (ZeRO-1 against torch.optim.Adam, the Megatron plans against one
process, FSDP2), and the summaries the notebook prints."""
import numpy as np
import pytest
import torch

from labkit.parallel import fsdp_lab, moe, moe_lab, mp_labs, mp_real, tp_lab, zero, zero_lab


def _spy_job(rank, world):
    import torch.distributed as dist
    with mp_labs.CollectiveSpy() as spy:
        x = torch.arange(6, dtype=torch.float64)
        out = torch.empty(3, dtype=torch.float64)
        dist.reduce_scatter_tensor(out, x)       # deprecated: calls reduce_scatter_single
        full = torch.empty(6, dtype=torch.float64)
        dist.all_gather_single(full, out)
        dist.all_reduce(out)
    return spy.calls


def _held_job(rank, world, keep):
    before = mp_labs._live_storages(collect=False)
    kept = [torch.zeros(n, dtype=torch.float64) for n in keep]
    garbage = torch.zeros(1000)                  # freed before the measurement
    del garbage
    held = sum(n for p, n in mp_labs._live_storages().items() if p not in before)
    return held, len(kept)


@pytest.mark.slow
def test_the_spy_counts_each_collective_once_with_its_full_size():
    from labkit.parallel.launch import pool_run
    calls = pool_run(_spy_job, 2)[0]
    assert [(c["op"], c["numel"]) for c in calls] == [
        ("reduce_scatter_tensor", 6), ("all_gather_single", 6), ("all_reduce", 3)]


@pytest.mark.slow
def test_held_bytes_are_the_tensors_left_alive():
    from labkit.parallel.launch import pool_run
    (held, _), _ = pool_run(_held_job, 2, (100, 28))
    assert held == 128 * 8


@pytest.mark.slow
def test_zero_adam_equals_torch_adam_with_half_the_state():
    sizes, steps = (16, 64, 9), 3
    res = zero_lab.zero_run(zero.ZeroAdam, 11, sizes, steps)
    base = zero_lab.zero_baseline(11, sizes, steps)
    for r in res:
        for got, want in zip(r["params"], base["params"]):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)
    n = base["numel"]
    assert n == 16 * 64 + 64 + 64 * 9 + 9 and base["state_bytes"] == 2 * 8 * n
    shard = -(-n // 2)
    assert [r["held_bytes"] for r in res] == [2 * 8 * shard] * 2     # m and v of one shard
    s = zero_lab.zero_summary()
    assert s.share == pytest.approx(shard / n) and s.numel == n
    assert [op for op, _ in s.step_ops] == ["reduce_scatter_single", "all_gather_single"]
    assert all(k == 2 * shard for _, k in s.step_ops)


@pytest.mark.slow
def test_megatron_plans_equal_one_process_and_issue_megatrons_collectives():
    res = tp_lab.tp_run(mp_real.megatron_plan, 3)
    base = tp_lab.tp_baseline(3)
    for rank, r in enumerate(res):
        for sp in ("False", "True"):
            want = np.split(base["y"], 2, axis=1)[rank] if sp == "True" else base["y"]
            np.testing.assert_allclose(r[sp]["y"], want, rtol=1e-12, atol=1e-13)
            for name, g in base["grads"].items():
                np.testing.assert_allclose(r[sp]["grads"][name], g, rtol=1e-10, atol=1e-13)
    s = tp_lab.tp_summary()
    assert s.shard == 0.5
    assert s.forward == {False: {"all_reduce": 2},
                         True: {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}}
    # the notebook's claim: DTensor all-reduces the input gradients of wq, wk, wv one by
    # one (3) and of mlp.up once, where Megatron's f adds the three first: 4, not 2
    assert s.backward[False] == {"all_reduce": 4}
    assert s.backward[True] == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}


@pytest.mark.slow
def test_fsdp_wrap_equals_one_process():
    res = fsdp_lab.fsdp_run(mp_real.fsdp_wrap, 4, 2)
    base = fsdp_lab.fsdp_baseline(4, 2)
    for r in res:
        for got, want in zip(r["params"], base["params"]):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    s = fsdp_lab.fsdp_summary()
    assert s.by_phase["forward"] == {"all_gather_single": 4}         # 3 blocks + the root
    assert s.by_phase["backward"]["reduce_scatter_single"] == 4
    assert s.by_phase["backward"]["all_gather_single"] == 3          # ZeRO-3's re-gathers
    assert sum(m for _, m, _ in s.stored) * 2 >= sum(n for _, _, n in s.stored)


@pytest.mark.slow
def test_moe_layer_over_gloo_equals_the_token_loop():
    problem = dict(seed=8, tokens=14, experts_per_rank=3, k=2, capacity_factor=0.9)
    res = moe_lab.moe_run(moe.moe_layer, problem)
    inp = moe.lab_inputs(**problem)
    for r, want in zip(res, inp.expected()):
        np.testing.assert_allclose(r["y"], want, rtol=1e-12, atol=1e-12)
        assert len(r["calls"]) == 2
    s = moe_lab.moe_summary()
    C = moe.capacity(14, 6, 2, 0.9)
    assert s.sent == (int(moe.all_to_all_bytes(6, C, 6, 2)),) * 2 and s.capacity == C


def test_summaries_are_none_without_a_run_or_after_a_missing_answer():
    last = {"results": [{"missing": True}, {"missing": True}], "args": {}}
    assert zero_lab.zero_summary(last) is None and fsdp_lab.fsdp_summary(last) is None
    assert moe_lab.moe_summary(last) is None
    assert tp_lab.tp_summary({"results": [{"False": {"missing": True}, "True": {}}],
                               "args": {"seed": 0}}) is None


def test_watched_names_follow_the_active_check():
    from labkit.check.refuse import Refused, watch
    assert mp_labs.watched_names() == ()
    with watch(Refused.of(["labkit.parallel.zero:ZeroAdam"])):
        assert mp_labs.watched_names() == ("labkit.parallel.zero:ZeroAdam",)


def test_the_worker_watch_sees_calls_by_code_identity():
    w = mp_labs._Watch(("labkit.parallel.moe:capacity",))
    w(lambda: moe.capacity(8, 4, 1, 1.0))
    assert w.hit == "labkit.parallel.moe.capacity"
    w2 = mp_labs._Watch(("labkit.parallel.moe:capacity",))
    w2(lambda: moe.lab_inputs(0))
    assert w2.hit is None
