"""Mixed precision trained for real: the digits MLP under CPU autocast, labkit's loss scaler
against torch.amp.GradScaler step for step on the same real gradients."""
import dataclasses

import numpy as np
import pytest
import torch

from labkit.compress import amp
from labkit.compress.loss_scaling import LossScaler, gradscaler_step
from labkit.data import load_digits

# A large initial scale with a short growth interval forces overflows: fp16 gradients of the
# digits MLP overflow from about 2^20 on, so the run backs off from 2^24 and then probes
# upward every 20 good steps, overflowing again.
FORCED = {"init_scale": 2.0 ** 24, "growth_interval": 20}
RUN = {"dtype": "float16", "steps": 150}


@pytest.fixture(scope="module")
def split():
    return load_digits()


@pytest.fixture(scope="module")
def torch_run(split):
    return amp.train_amp(split, torch.amp.GradScaler("cpu", **FORCED), **RUN)


def test_cpu_autocast_supports_float16_in_this_torch():
    """torch/amp/autocast_mode.py: the supported types of a non-custom device are
    [bfloat16, float16]; a linear runs in fp16 and its parameter gradients stay fp32."""
    lin = torch.nn.Linear(4, 2)
    with torch.autocast("cpu", dtype=torch.float16):
        out = lin(torch.randn(3, 4))
    assert out.dtype == torch.float16
    out.float().sum().backward()
    assert lin.weight.grad.dtype == torch.float32


def test_labkit_scaler_equals_gradscaler_step_for_step_with_overflows(split, torch_run):
    ours = amp.train_amp(split, LossScaler(**FORCED), **RUN)
    assert torch_run.steps == ours.steps == 150
    assert amp.first_difference(torch_run, ours) is None          # bit for bit
    np.testing.assert_array_equal(torch_run.params, ours.params)
    np.testing.assert_array_equal(torch_run.scales, ours.scales)
    # real overflows: the first five steps (2^24 … 2^20) and later probes past 2^19
    skipped = np.flatnonzero(torch_run.skipped)
    assert skipped[:5].tolist() == [0, 1, 2, 3, 4] and len(skipped) > 5
    assert torch_run.scales[:5].tolist() == [2.0 ** 23, 2.0 ** 22, 2.0 ** 21, 2.0 ** 20, 2.0 ** 19]
    # a skipped step leaves every parameter as it was
    t = skipped[5]
    np.testing.assert_array_equal(torch_run.params[t], torch_run.params[t - 1])
    assert np.isfinite(torch_run.params).all() and torch_run.accuracy > 0.9


def test_state_dict_is_gradscalers_after_a_run_and_loads_back(split):
    ours, theirs = LossScaler(**FORCED), torch.amp.GradScaler("cpu", **FORCED)
    for scaler in (ours, theirs):
        amp.train_amp(split, scaler, dtype="float16", steps=37)
    assert ours.state_dict() == theirs.state_dict()
    assert 0 < ours.state_dict()["_growth_tracker"] < 20        # mid-interval: a real count
    fresh = LossScaler()
    fresh.load_state_dict(theirs.state_dict())
    assert fresh.state_dict() == theirs.state_dict()
    with pytest.raises(RuntimeError, match="lacks _growth_tracker"):
        fresh.load_state_dict({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                               "growth_interval": 3})


def test_a_step_function_replaces_labkits_step(split, torch_run):
    """amp_step is the step train_amp takes by default; a learner's step plugs in."""
    import torch.nn.functional as F

    calls = []

    def mine(model, optimizer, scaler, x, y, dtype):
        calls.append(dtype)
        return amp.amp_step(model, optimizer, scaler, x, y, dtype)
    run = amp.train_amp(split, torch.amp.GradScaler("cpu", **FORCED), step_fn=mine, **RUN)
    assert amp.first_difference(torch_run, run) is None and calls == [torch.float16] * 150
    np.testing.assert_array_equal(run.losses, torch_run.losses)

    def no_autocast(model, optimizer, scaler, x, y, dtype):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss
    d = amp.first_difference(torch_run, amp.train_amp(
        split, torch.amp.GradScaler("cpu", **FORCED), step_fn=no_autocast, **RUN))
    assert (d.step, d.what) == (0, "skipped")           # fp32 gradients do not overflow
    with pytest.raises(TypeError, match="step_fn must return the loss"):
        amp.train_amp(split, LossScaler(), steps=2, step_fn=lambda *a: None)
    with pytest.raises(ValueError, match="step_fn trains under autocast with a scaler"):
        amp.train_amp(split, None, steps=2, step_fn=mine)
    with pytest.raises(ValueError, match="step_fn trains under autocast with a scaler"):
        amp.train_amp(split, LossScaler(), dtype="float32", steps=2, step_fn=mine)
    with pytest.raises(TypeError, match="step_fn must be a function"):
        amp.train_amp(split, LossScaler(), steps=2, step_fn=3)


def test_an_update_rule_runs_inside_labkits_scaler(split, torch_run):
    """Exercise 8.3's function (scale, found_inf, good_steps, growth_interval) trains the
    network through LossScaler, equal to GradScaler too."""
    rule = amp.train_amp(split, gradscaler_step, **FORCED, **RUN)
    assert amp.first_difference(torch_run, rule) is None


def test_wrong_scalers_are_caught_at_their_first_wrong_step(split, torch_run):
    def quarter(scale, found_inf, good_steps, growth_interval):     # backs off by 4
        if found_inf:
            return scale * 0.25, 0, True
        return gradscaler_step(scale, found_inf, good_steps, growth_interval)
    d = amp.first_difference(torch_run, amp.train_amp(split, quarter, **FORCED, **RUN))
    assert (d.step, d.what, d.a, d.b) == (0, "scale", 2.0 ** 23, 2.0 ** 22)

    class NoSkip(LossScaler):                     # steps on inf gradients
        def step(self, optimizer):
            if self.found_inf is None:
                self.unscale_(optimizer)
            return optimizer.step()
    d = amp.first_difference(torch_run, amp.train_amp(split, NoSkip(**FORCED), **RUN))
    assert (d.step, d.what, d.a, d.b) == (0, "skipped", True, False)

    class HalfUnscale(LossScaler):                # divides the gradients by S/2
        def unscale_(self, optimizer):
            super().unscale_(optimizer)
            for p in optimizer.param_groups[0]["params"]:
                p.grad.mul_(2.0)
    d = amp.first_difference(torch_run, amp.train_amp(split, HalfUnscale(**FORCED), **RUN))
    # at the first step taken (5). Adam is almost invariant to a gradient's scale (only its
    # epsilon sees it), so the parameters differ by far less than one step's lr = 3e-3
    assert d.what == "parameters" and d.step == 5 and 0 < abs(d.a - d.b) < 1e-4


def test_bf16_needs_no_loss_scaling_fp16_and_fp32_train(split):
    """bf16 has fp32's range: under the same forced scale it never overflows, and the scale
    only grows; each precision trains the MLP."""
    bf = amp.train_amp(split, LossScaler(**FORCED), dtype="bfloat16", steps=150)
    assert bf.n_skipped == 0
    assert bf.scales.tolist() == [2.0 ** (24 + (t + 1) // 20) for t in range(150)]
    for run in (bf, amp.train_amp(split, None, dtype="float32", steps=150),
                amp.train_amp(split, None, dtype="float16", steps=150)):
        assert run.accuracy > 0.9 and run.losses[-20:].mean() < run.losses[:20].mean() / 3
        assert (run.scales == 1.0).all() or run is bf


def test_first_difference_reports_the_first_step():
    base = amp.AmpRun("float16", np.ones(4), np.zeros(4, bool), np.zeros(4),
                      np.zeros((4, 3), np.float32), 0.5)
    params = base.params.copy()
    params[2, 1] = 1e-3
    other = dataclasses.replace(base, params=params)
    d = amp.first_difference(base, other)
    assert (d.step, d.what, d.a, d.b) == (2, "parameters", 0.0, pytest.approx(1e-3))
    assert str(d) == "step 2: parameters differ by up to 0.001"
    assert amp.first_difference(base, other, atol=1e-2) is None
    nan = params.copy()
    nan[3] = np.nan
    assert amp.first_difference(dataclasses.replace(base, params=nan),
                                dataclasses.replace(base, params=nan.copy()), atol=1e-2) is None
    skipped = dataclasses.replace(other, skipped=np.array([False, True, False, False]))
    assert amp.first_difference(base, skipped).step == 1
    assert str(amp.first_difference(base, dataclasses.replace(base, scales=np.arange(4.0)))) \
        == "step 0: scale 1.0 vs 0.0"
    with pytest.raises(ValueError, match="same steps"):
        amp.first_difference(base, dataclasses.replace(base, params=np.zeros((3, 3))))
    with pytest.raises(TypeError, match="b must be an AmpRun"):
        amp.first_difference(base, {})


def test_loss_scaler_methods():
    s = LossScaler(init_scale=8.0, growth_interval=2)
    assert float(s.scale(torch.tensor(1.5))) == 12.0 and s.get_scale() == 8.0
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = torch.tensor([8.0, -16.0])
    s.unscale_(opt)
    assert p.grad.tolist() == [1.0, -2.0] and s.found_inf is False
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_(opt)
    s.step(opt)
    assert p.detach().tolist() == [-1.0, 2.0]
    s.update()
    p.grad = torch.tensor([np.inf, 0.0])
    s.step(opt)                                   # skipped: p unchanged
    assert p.detach().tolist() == [-1.0, 2.0] and s.found_inf is True
    s.update()
    assert s.get_scale() == 4.0 and s.good_steps == 0
    with pytest.raises(RuntimeError, match="update\\(\\) before step\\(\\)"):
        s.update()
    big = LossScaler(init_scale=2.0 ** 127, growth_interval=1)    # 2^128 is inf in float32
    big.found_inf = False
    big.update()
    assert big.get_scale() == 2.0 ** 127          # as torch._amp_update_scale_: not taken
    with pytest.raises(TypeError, match="rule must be a function"):
        LossScaler(rule=3)
    with pytest.raises(ValueError, match="backoff_factor"):
        LossScaler(backoff_factor=1.0)


def test_bad_arguments(split):
    with pytest.raises(ValueError, match="dtype must be one of"):
        amp.train_amp(split, None, dtype="float64")
    with pytest.raises(TypeError, match=r"missing: scale, step, update, get_scale"):
        amp.train_amp(split, 3)
    with pytest.raises(ValueError, match="init_scale and growth_interval apply"):
        amp.train_amp(split, LossScaler(), init_scale=4.0)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        amp.train_amp(split, None, steps=0)
