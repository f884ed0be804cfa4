"""Chapter 08's dynamic loss scaling run: the rule step by step, and against torch's GradScaler."""
import inspect

import numpy as np
import pytest

from labkit.compress import loss_scaling
from labkit.compress.model import update_loss_scale
from labkit.numerics import FORMATS


def test_scale_halves_on_overflow_and_doubles_after_the_interval():
    # σ = 0: every gradient maximum is exactly 4, so 4·S overflows fp16 (65504) for S >= 2^14
    r = loss_scaling.simulate(steps=60, growth_interval=50, init_scale=2.0 ** 16,
                              grad_sigma=0.0)
    assert np.flatnonzero(r.skipped).tolist() == [0, 1, 2, 53]
    assert r.scales[:3].tolist() == [2.0 ** 15, 2.0 ** 14, 2.0 ** 13]
    # steps 3..52 are the 50 good steps at 2^13: the 50th doubles the scale, the next
    # step overflows at 2^14 and halves it again
    assert (r.scales[3:52] == 2.0 ** 13).all() and r.scales[52] == 2.0 ** 14
    assert (r.scales[53:] == 2.0 ** 13).all()
    assert r.n_skipped == 4 and r.final_scale == 2.0 ** 13 and r.steps == 60


def test_no_overflow_grows_every_interval():
    r = loss_scaling.simulate(steps=30, growth_interval=10, init_scale=1.0, grad_sigma=0.0)
    assert r.n_skipped == 0
    np.testing.assert_array_equal(r.scales, 2.0 ** (np.arange(1, 31) // 10))


def test_overflow_is_the_formats_largest_number():
    r = loss_scaling.simulate(steps=1, init_scale=FORMATS["fp16"].max / 4.0, grad_sigma=0.0)
    assert r.n_skipped == 0                      # 4 · S equals fp16's max: finite
    r = loss_scaling.simulate(steps=1, init_scale=2.0 ** 14, grad_sigma=0.0, fmt="bf16")
    assert r.n_skipped == 0                      # 65536 fits bf16's range


def test_seeded_and_the_learners_rule_is_used():
    a, b = loss_scaling.simulate(seed=3), loss_scaling.simulate(seed=3)
    np.testing.assert_array_equal(a.scales, b.scales)
    assert not np.array_equal(a.grad_max, loss_scaling.simulate(seed=4).grad_max)
    calls = []

    def never_skip(scale, found_inf, good_steps, growth_interval):
        calls.append(found_inf)
        return scale, good_steps, False
    r = loss_scaling.simulate(steps=5, grad_sigma=0.0, update=never_skip)
    assert calls == [True] * 5 and r.n_skipped == 0 and r.final_scale == 2.0 ** 16


def test_chapter_run_backs_off_then_probes():
    """The chapter's run (400 steps, growth interval 50): the scale falls from 2^16 to where
    4·exp(N(0, 0.5²))·S fits fp16, then probes upward once per 50 good steps."""
    r = loss_scaling.simulate()
    assert r.n_skipped == 10 and r.final_scale == 2.0 ** 12
    assert r.skipped[:3].all()                   # 2^16, 2^15, 2^14 all overflow at g ≈ 4
    assert (r.grad_max[r.skipped] * (r.scales[r.skipped] * 2) > FORMATS["fp16"].max).all()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"growth_interval": 0}, ValueError, "growth_interval must be an integer >= 1"),
    ({"fmt": "fp8"}, ValueError, "fmt must be one of"),
    ({"init_scale": 0}, ValueError, "init_scale must be > 0"),
    ({"grad_sigma": -1.0}, ValueError, "grad_sigma must be >= 0"),
    ({"update": 2}, TypeError, "update must be a function")])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        loss_scaling.simulate(**kwargs)


def test_defaults_are_torch_gradscalers():
    """PyTorch docs, torch.amp.GradScaler: init_scale 2^16, growth_factor 2, backoff_factor
    0.5, growth_interval 2000."""
    torch = pytest.importorskip("torch")
    ours = inspect.signature(update_loss_scale).parameters
    theirs = inspect.signature(torch.amp.GradScaler.__init__).parameters
    for name in ("growth_factor", "backoff_factor", "growth_interval"):
        assert ours[name].default == theirs[name].default, name
    assert inspect.signature(loss_scaling.simulate).parameters["init_scale"].default == \
        theirs["init_scale"].default == 2.0 ** 16


def test_same_scales_and_skips_as_torch_gradscaler_on_cpu():
    """Feed torch.amp.GradScaler("cpu") the simulated gradients, cast to fp16 as an fp16
    backward would produce them (inf where they overflow): same scale after every update,
    and it skips the optimizer step exactly where the simulation does."""
    torch = pytest.importorskip("torch")
    r = loss_scaling.simulate(steps=120, growth_interval=20)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=20)
    scales, skipped = [], []
    for g in r.grad_max:
        opt.zero_grad()
        scaler.scale(p.sum()).backward()          # creates the scale; the gradient is replaced
        p.grad = torch.tensor([g * scaler.get_scale()]).to(torch.float16).float()
        before = p.detach().clone()
        scaler.step(opt)
        scaler.update()
        skipped.append(bool(torch.equal(before, p.detach())))
        scales.append(scaler.get_scale())
    np.testing.assert_array_equal(scales, r.scales)
    assert skipped == r.skipped.tolist() and 0 < r.n_skipped < 120
