"""Chapter 08's checkers: a right answer written independently of the reference passes;
missing, wrong and the named shortcut answers fail with their hints; labkit's and torch's
own scalers are refused."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from labkit.check import ERROR, FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch08  # noqa: F401
from labkit.compress.loss_scaling import LossScaler
from labkit.compress.model import kd_loss as kd_loss_numpy
from labkit.compress.model import magnitude_mask

ALL = ["8.1", "8.2", "8.3", "8.4", "8.5", "8.6", "8.7", "8.8", "8.9"]


@pytest.mark.parametrize("ex", ALL)
def test_checkers_take_handles_and_missing_is_missing(ex):
    assert get(ex).handles
    assert evaluate(ex, None).status == MISSING


def _fails(ex, answer, hint, **kw):
    v = evaluate(ex, answer, **kw)
    assert v.status == FAIL and hint in v.message, v
    return v


# ---- 8.1 --------------------------------------------------------------------------------

def right_8_1(x, bits):
    lo, hi = min(np.min(x), 0.0), max(np.max(x), 0.0)
    s = (hi - lo) / (2 ** bits - 1)
    return s, int(np.rint(-lo / s))


def _no_zero(x, b):
    s = (x.max() - x.min()) / (2 ** b - 1)
    return s, int(round(-x.min() / s))


def _pow2(x, b):
    lo, hi = min(x.min(), 0), max(x.max(), 0)
    s = (hi - lo) / 2 ** b
    return s, int(round(-lo / s))


def _unrounded(x, b):
    lo, hi = min(x.min(), 0), max(x.max(), 0)
    s = (hi - lo) / (2 ** b - 1)
    return s, -lo / s


def test_8_1_right_answer_passes_on_other_seeds_too():
    for seed in (None, 1, 2):
        assert evaluate("8.1", right_8_1, seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [(_no_zero, "include 0"), (_pow2, "2^b - 1"),
                                         (_unrounded, "integer")])
def test_8_1_rejects(wrong, hint):
    _fails("8.1", wrong, hint)


def test_8_1_refuses_qparams():
    from labkit.compress import model as cm

    def via_labkit(x, bits):
        qp = cm.qparams(x, bits)
        return float(qp.scale), int(qp.zero_point)
    _fails("8.1", via_labkit, "labkit's implementation")


# ---- 8.2 --------------------------------------------------------------------------------

def right_8_2(w, b):
    top = 2 ** (b - 1) - 1
    s = np.max(np.abs(w), axis=1) / top
    return np.clip(np.rint(w / s[:, None]), -top, top), s


def _per_tensor(w, b):
    s = np.abs(w).max() / (2 ** (b - 1) - 1)
    return np.round(w / s), np.full(w.shape[0], s)


def _cols(w, b):
    s = np.abs(w).max(axis=0) / (2 ** (b - 1) - 1)
    return np.round(w / s), s


def _pow2_scale(w, b):
    s = np.abs(w).max(axis=1) / 2 ** (b - 1)
    return np.clip(np.round(w / s[:, None]), -(2 ** (b - 1) - 1), 2 ** (b - 1) - 1), s


def _no_clip(w, b):
    s = np.abs(w).max(axis=1) / 2 ** (b - 1)
    return np.round(w / s[:, None]), s


def test_8_2_right_answer_passes():
    for seed in (None, 3):
        assert evaluate("8.2", right_8_2, seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [(_per_tensor, "per-tensor"), (_cols, "wrong axis"),
                                         (_pow2_scale, "2^(b-1) - 1"), (_no_clip, "clip")])
def test_8_2_rejects(wrong, hint):
    _fails("8.2", wrong, hint)


# ---- 8.3 --------------------------------------------------------------------------------

def right_8_3(scale, found_inf, good, interval):
    if found_inf:
        return scale / 2, 0, True
    good = good + 1
    return (scale * 2, 0, False) if good == interval else (scale, good, False)


def _no_skip(s, inf, g, gi):
    return (s / 2, 0, False) if inf else right_8_3(s, inf, g, gi)


def _keep_count(s, inf, g, gi):
    return (s / 2, g, True) if inf else right_8_3(s, inf, g, gi)


def _off_by_one(s, inf, g, gi):
    if inf:
        return s / 2, 0, True
    return (s * 2, 0, False) if g >= gi else (s, g + 1, False)


def _grow_on_overflow(s, inf, g, gi):
    return (s * 2, 0, True) if inf else right_8_3(s, inf, g, gi)


def test_8_3_right_answer_passes():
    for seed in (None, 4):
        assert evaluate("8.3", right_8_3, seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [(_no_skip, "skip"), (_keep_count, "resets"),
                                         (_off_by_one, "count this good step first"),
                                         (_grow_on_overflow, "halve")])
def test_8_3_rejects(wrong, hint):
    _fails("8.3", wrong, hint)


# ---- 8.4 and 8.8 ------------------------------------------------------------------------

def right_8_4(w, sp):
    drop = np.argsort(np.sqrt((w ** 2).sum(axis=1)), kind="stable")[:int(round(sp * len(w)))]
    mask = np.ones_like(w, dtype=bool)
    mask[drop] = False
    return mask


def _rows_by(norm, count=lambda sp, n: int(round(sp * n)), strongest=False):
    def mask(w, sp):
        order = np.argsort(norm(w), kind="stable")
        drop = (order[::-1] if strongest else order)[:count(sp, len(w))]
        keep = np.ones(len(w), bool)
        keep[drop] = False
        return np.repeat(keep[:, None], w.shape[1], 1)
    return mask


L2 = lambda w: np.linalg.norm(w, axis=1)  # noqa: E731


def test_8_4_right_answer_passes():
    for seed in (None, 5):
        assert evaluate("8.4", right_8_4, seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (magnitude_mask, "single weights"),
    (_rows_by(L2, strongest=True), "smallest L2"),
    (_rows_by(L2, count=lambda sp, n: int(sp * n)), "round"),
    (_rows_by(lambda w: np.abs(w).min(axis=1)), "smallest L2"),        # smallest entry
    (_rows_by(lambda w: np.linalg.norm(w, ord=np.inf, axis=1)), "smallest L2"),
    (_rows_by(lambda w: np.linalg.norm(w, ord=1, axis=1)), "smallest L2"),
])
def test_8_4_rejects(wrong, hint):
    _fails("8.4", wrong, hint)


def right_8_8(w, sp):
    flat = np.abs(w).reshape(-1)
    mask = np.ones(flat.shape, dtype=bool)
    mask[np.argsort(flat, kind="stable")[:int(round(sp * flat.size))]] = False
    return mask.reshape(w.shape)


def _per_row_8_8(w, sp):
    k = int(round(sp * w.shape[1]))
    mask = np.ones(w.shape, bool)
    for i in range(len(w)):
        mask[i, np.argsort(np.abs(w[i]))[:k]] = False
    return mask


def _signed_8_8(w, sp):
    mask = np.ones(w.size, bool)
    mask[np.argsort(w.reshape(-1))[:int(round(sp * w.size))]] = False
    return mask.reshape(w.shape)


def _threshold_8_8(w, sp):          # a quantile threshold: the count drifts from round(sp·n)
    return np.abs(w) > np.quantile(np.abs(w), sp)


def test_8_8_right_answer_passes():
    for seed in (None, 6):
        assert evaluate("8.8", right_8_8, seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (lambda w, sp: ~right_8_8(w, sp), "inverted"),
    (_per_row_8_8, "same share of every row"),
    (_signed_8_8, "most negative"),
    (_threshold_8_8, "round(sparsity · size)"),
    (lambda w, sp: np.ones_like(w), "round(sparsity · size)"),
])
def test_8_8_rejects(wrong, hint):
    _fails("8.8", wrong, hint)


# ---- 8.5 --------------------------------------------------------------------------------

def test_8_5_right_answer_passes():
    def right(k, m, n, f):
        return m * (k * k + n), m * (k * k + n) * f * f
    assert evaluate("8.5", right).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (lambda k, m, n, f: (k * k * m, k * k * m * f * f), "pointwise"),
    (lambda k, m, n, f: (k * k * m * n + m * n, k * k * m * n * f * f + m * n * f * f), "one input"),
    (lambda k, m, n, f: (k * k * m + m * n, k * k * m + m * n), "all D_F²"),
    (lambda k, m, n, f: (k * k * m * n, k * k * m * n * f * f), "expected"),
])
def test_8_5_rejects(wrong, hint):
    _fails("8.5", wrong, hint)


# ---- 8.6 a loss scaler ------------------------------------------------------------------

class RightScaler:
    """A loss scaler written from GradScaler's documentation, not from labkit's."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
        self.S, self.up, self.down, self.every = init_scale, growth_factor, backoff_factor, \
            growth_interval
        self.streak, self.bad = 0, None

    def get_scale(self):
        return self.S

    def scale(self, loss):
        return loss * self.S

    def unscale_(self, optimizer):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None]
        self.bad = any(not torch.isfinite(g).all() for g in grads)
        for g in grads:
            g.mul_(1.0 / self.S)

    def step(self, optimizer):              # GradScaler returns what optimizer.step() does
        if self.bad is None:
            self.unscale_(optimizer)
        return None if self.bad else optimizer.step()

    def update(self):
        self.streak = 0 if self.bad else self.streak + 1
        if self.bad:
            self.S *= self.down
        elif self.streak == self.every:
            self.S, self.streak = self.S * self.up, 0
        self.bad = None

    KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")

    def state_dict(self):
        return dict(zip(self.KEYS, (self.S, self.up, self.down, self.every, self.streak)))

    def load_state_dict(self, state):
        self.S, self.up, self.down, self.every, self.streak = (state[k] for k in self.KEYS)


class FixedFactors(RightScaler):            # GradScaler's defaults typed in
    def update(self):
        self.up, self.down = 2.0, 0.5
        super().update()


class NoSkip(RightScaler):
    def step(self, optimizer):
        if self.bad is None:
            self.unscale_(optimizer)
        optimizer.step()


class NoUnscale(RightScaler):               # checks the gradients but never divides by S
    def unscale_(self, optimizer):
        self.bad = any(not torch.isfinite(p.grad).all() for g in optimizer.param_groups
                       for p in g["params"] if p.grad is not None)


class GrowTooSoon(RightScaler):             # compares before counting this step
    def update(self):
        if not self.bad and self.streak + 1 == self.every - 1:
            self.streak = self.every - 1
        super().update()


class KeepStreak(RightScaler):              # an overflow does not reset the count
    def update(self):
        if self.bad:
            self.S *= self.down
            self.bad = None
            return
        super().update()


class NoTracker(RightScaler):               # a checkpoint without the count of good steps
    def state_dict(self):
        return {k: v for k, v in super().state_dict().items() if k != "_growth_tracker"}


class ScaleOnlyLoad(RightScaler):           # restores the scale, keeps its own factors
    def load_state_dict(self, state):
        self.S = state["scale"]


class SubGrad(torch.amp.GradScaler):
    def __init__(self, **kw):
        super().__init__("cpu", **kw)


class WrapGrad:
    def __init__(self, **kw):
        self.inner = torch.amp.GradScaler("cpu", **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class SubLabkit(LossScaler):
    pass


class WrapLabkit(RightScaler):
    def update(self):
        rule = LossScaler(self.S, self.up, self.down, self.every)
        rule.good_steps, rule.found_inf = self.streak, bool(self.bad)
        rule.update()
        self.S, self.streak, self.bad = rule.get_scale(), rule.good_steps, None


class Unwritten(RightScaler):
    def __init__(self, *a, **k):
        raise NotImplementedError("write this, then run the check below")


def test_8_6_right_scaler_equals_gradscaler():
    assert evaluate("8.6", RightScaler).status == PASS
    assert evaluate("8.6", Unwritten).status == MISSING


@pytest.mark.parametrize("wrong, hint", [
    (FixedFactors, "backoff_factor = "),
    (NoSkip, "yours took the step"),
    (NoUnscale, "parameters differ"),
    (GrowTooSoon, "Count this step first"),
    (KeepStreak, "reset the count to 0"),
])
def test_8_6_names_the_first_step_that_differs(wrong, hint):
    v = _fails("8.6", wrong, hint)
    assert "first differ at step" in v.message


@pytest.mark.parametrize("wrong, hint", [(NoTracker, "GradScaler's five entries"),
                                         (ScaleOnlyLoad, "restore every entry")])
def test_8_6_checkpoints_are_gradscalers(wrong, hint):
    _fails("8.6", wrong, hint)


@pytest.mark.parametrize("cls", [SubGrad, WrapGrad, SubLabkit, WrapLabkit, LossScaler])
def test_8_6_refuses_torchs_and_labkits_scalers(cls):
    _fails("8.6", cls, "labkit's implementation")


# ---- 8.7 a mixed-precision step ---------------------------------------------------------

def right_step(model, optimizer, scaler, x, y, dtype):
    for p in model.parameters():
        p.grad = None
    with torch.autocast(device_type="cpu", dtype=dtype):
        out = model(x)
        loss = F.cross_entropy(out, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def _step(zero=True, autocast=True, scaled=True, via_scaler=True, update=True,
          return_scaled=False, dtype=None):
    def step(model, optimizer, scaler, x, y, d):
        if zero:
            optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype or d, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        big = scaler.scale(loss)
        (big if scaled else loss).backward()
        if via_scaler:
            scaler.step(optimizer)
        else:
            scaler.unscale_(optimizer)
            optimizer.step()
        if update:
            scaler.update()
        return big if return_scaled else loss
    return step


class _NoScale:                      # backward on the loss, scale() never called
    def __init__(self, scaler):
        self.scaler = scaler

    def scale(self, loss):
        return loss

    def __getattr__(self, name):
        return getattr(self.scaler, name)


def test_8_7_right_step_passes():
    assert evaluate("8.7", right_step).status == PASS
    assert evaluate("8.7", _step()).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (_step(zero=False), "zero_grad"),
    (_step(autocast=False), "torch.autocast"),
    (_step(via_scaler=False), "not optimizer.step()"),
    (_step(scaled=False), "backward on scaler.scale(loss)"),
    (lambda m, o, sc, x, y, d: _step()(m, o, _NoScale(sc), x, y, d), "GradScaler checks the order"),
    (_step(update=False), "GradScaler checks the order"),
    (_step(return_scaled=True), "not scaler.scale(loss)"),
    (_step(dtype=torch.float16), "with the dtype given"),
])
def test_8_7_rejects(wrong, hint):
    _fails("8.7", wrong, hint)


# ---- 8.9 the distillation loss ----------------------------------------------------------

def right_kd(s, t, y, T, alpha):
    """By hand: KL of the softened distributions, CE over the labelled rows."""
    log_q = torch.log_softmax(s / T, dim=1)
    log_p = torch.log_softmax(t / T, dim=1)
    kl = (log_p.exp() * (log_p - log_q)).sum(dim=1).mean()
    has = y >= 0
    ce = -torch.log_softmax(s[has], dim=1).gather(1, y[has][:, None]).mean()
    return alpha * T ** 2 * kl + (1 - alpha) * ce


def right_kd_kl_div(s, t, y, T, alpha):
    kl = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean")
    return alpha * T * T * kl + (1 - alpha) * F.cross_entropy(s, y)


def _kd(kl=lambda s, t, T: F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1),
                                    reduction="batchmean"),
        t2=True, ce=lambda s, y, T: F.cross_entropy(s, y)):
    def kd(s, t, y, T, alpha):
        return alpha * (T * T if t2 else 1.0) * kl(s, t, T) + (1 - alpha) * ce(s, y, T)
    return kd


def _manual_ce(s, y, T):            # gathers every row, -100 included
    return -torch.log_softmax(s, 1).gather(1, y[:, None]).mean()


def test_8_9_right_losses_pass():
    assert evaluate("8.9", right_kd).status == PASS
    assert evaluate("8.9", right_kd_kl_div, seed=7).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (_kd(t2=False), "multiplied by T²"),
    (_kd(kl=lambda s, t, T: F.kl_div(F.log_softmax(t / T, 1), F.softmax(s / T, 1),
                                     reduction="batchmean")), "direction is swapped"),
    (_kd(kl=lambda s, t, T: F.kl_div(F.softmax(s / T, 1), F.softmax(t / T, 1),
                                     reduction="batchmean")), "log-probabilities"),
    (_kd(kl=lambda s, t, T: F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1),
                                     reduction="mean")), "batchmean"),
    (_kd(ce=lambda s, y, T: F.cross_entropy(s / T, y)), "T = 1"),
    (_kd(ce=_manual_ce), "Labels −100"),
    (lambda s, t, y, T, a: kd_loss_numpy(s.detach().numpy(), t.numpy(),
                                         np.where(y.numpy() < 0, 0, y.numpy()), T, a),
     "labkit's implementation"),
    (lambda s, t, y, T, a: float(right_kd(s, t, y, T, a)), "torch scalar"),
    (lambda s, t, y, T, a: right_kd(s.detach(), t, y, T, a), "no gradient reaches"),
])
@pytest.mark.filterwarnings("ignore::UserWarning")      # the wrong answers' own warnings
def test_8_9_rejects(wrong, hint):
    _fails("8.9", wrong, hint)


def test_8_9_hand_computation_agrees_with_torch():
    rng = np.random.default_rng(0)
    s, t = rng.normal(size=(6, 10)), 3 * rng.normal(size=(6, 10))
    y = np.array([1, -100, 4, -100, 9, 0])
    hand = ch08.kd_by_hand(s, t, y, 3.0, 0.7)
    ts, tt, ty = torch.tensor(s), torch.tensor(t), torch.tensor(y)
    assert hand["right"] == pytest.approx(float(right_kd_kl_div(ts, tt, ty, 3.0, 0.7)), rel=1e-12)
    assert hand["swapped"] == pytest.approx(float(
        0.7 * 9 * F.kl_div(F.log_softmax(tt / 3, 1), F.softmax(ts / 3, 1), reduction="batchmean")
        + 0.3 * F.cross_entropy(ts, ty)), rel=1e-12)


def test_8_7_refuses_labkits_training_step():
    from labkit.compress import amp

    _fails("8.7", lambda m, o, sc, x, y, d: amp.autocast_step(m, o, sc, x, y, d),
           "labkit's implementation")


# ---- as in the student release -----------------------------------------------------------

def test_the_trained_checks_run_no_reference_on_the_answers_side(monkeypatch):
    """As in the student release, which cuts 8.6's, 8.7's, 8.3's and 8.9's references out of
    labkit: the answer's training runs use train_amp's own step, and the baselines come
    from labkit's side (recorded), so each check passes a right answer and fails a wrong
    one without them."""
    from labkit.compress import amp, distill, loss_scaling
    from replayed import replayed

    cut = [(amp, "amp_step"), (amp, "LossScaler"), (loss_scaling, "LossScaler"),
           (loss_scaling, "gradscaler_step"), (distill, "kd_loss")]
    for ex, right, wrong, hint in [("8.6", RightScaler, NoSkip, "yours took the step"),
                                   ("8.7", right_step, _step(zero=False), "zero_grad"),
                                   ("8.9", right_kd, _kd(t2=False), "multiplied by T²")]:
        with monkeypatch.context() as m:
            good, bad = replayed(ex, [right, wrong], m, cut)
        assert good.status == PASS, (ex, good.message)
        assert bad.status == FAIL and hint in bad.message, (ex, bad.message)


def test_an_error_in_the_answer_is_an_error_not_a_pass():
    def broken(s, t, y, T, alpha):
        raise ValueError("oops")
    v = evaluate("8.9", broken)
    assert v.status == ERROR and "oops" in v.message
