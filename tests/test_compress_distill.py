"""Distillation's loss against a hand computation and torch, and the controls run."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from labkit.compress import distill
from labkit.compress.model import kd_loss as kd_loss_numpy
from test_compress_train import trained  # noqa: F401  (a fixture)


def test_kd_loss_by_hand():
    """Student logits 0 (uniform q = 1/3); teacher logits 2·ln(1, 2, 1) at T = 2 give
    p = (1/4, 1/2, 1/4): KL(p ‖ q) = Σ p ln(3p) = ½ ln(3/4) + ½ ln(3/2) = ½ ln(9/8); the CE
    of label 1 under the uniform q is ln 3. L = α T² KL + (1 − α) CE."""
    s = torch.zeros(1, 3)
    t = 2.0 * torch.log(torch.tensor([[1.0, 2.0, 1.0]]))
    kl = 0.25 * math.log(0.75) + 0.5 * math.log(1.5) + 0.25 * math.log(0.75)
    assert kl == pytest.approx(0.5 * math.log(9 / 8))
    got = distill.kd_loss(s, t, torch.tensor([1]), T=2.0, alpha=0.5)
    assert float(got) == pytest.approx(0.5 * 4 * kl + 0.5 * math.log(3), rel=1e-6)


def test_kd_loss_against_torch_kl_div_and_numpy():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(6, 10, generator=g, dtype=torch.float64), 3 * torch.randn(6, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (6,), generator=g)
    T, a = 3.0, 0.7
    p_t = F.softmax(t / T, dim=1)
    kl = F.kl_div(F.log_softmax(s / T, dim=1), p_t, reduction="sum") / 6     # probabilities in
    want = a * T * T * kl + (1 - a) * F.cross_entropy(s, y)
    assert float(distill.kd_loss(s, t, y, T, a)) == pytest.approx(float(want), rel=1e-12)
    assert float(distill.kd_loss(s, t, y, T, a)) == pytest.approx(
        kd_loss_numpy(s.numpy(), t.numpy(), y.numpy(), T, a), rel=1e-12)
    # no label: the CE term averages over the labelled rows only
    y2 = y.clone()
    y2[3:] = distill.NO_LABEL
    ce = F.cross_entropy(s[:3], y[:3])
    assert float(distill.kd_loss(s, t, y2, T, a)) == pytest.approx(
        float(a * T * T * kl + (1 - a) * ce), rel=1e-12)


def test_t_squared_keeps_the_soft_gradient_as_t_grows():
    """Hinton et al. §2.1 eq. 4: for T large against the logits (zero-meaned), ∂KL/∂z_i ≈
    (z_i − v_i) / (N T²); times T² the soft term's gradient tends to (z − v)/N, whatever T."""
    g = torch.Generator().manual_seed(1)
    z0, v = torch.randn(1, 10, generator=g, dtype=torch.float64), torch.randn(1, 10, generator=g, dtype=torch.float64)
    z0, v = z0 - z0.mean(), v - v.mean()
    grads = {}
    for T in (20.0, 200.0):
        z = z0.clone().requires_grad_()
        distill.kd_loss(z, v, torch.tensor([0]), T=T, alpha=1.0).backward()
        grads[T] = z.grad
    limit = (z0 - v) / 10
    assert torch.allclose(grads[200.0], limit, rtol=0.02, atol=1e-4)
    assert torch.allclose(grads[20.0], grads[200.0], rtol=0.1, atol=1e-3)
    # without the T² the gradient shrinks 100× from T = 20 to T = 200
    assert (grads[200.0] / 200.0 ** 2).abs().max() < (grads[20.0] / 20.0 ** 2).abs().max() / 50


def test_hard_targets_are_kd_at_t1_with_a_one_hot_teacher():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(5, 4, generator=g, dtype=torch.float64)
    pseudo = torch.tensor([0, 3, 1, 1, 2])
    y = torch.tensor([0, distill.NO_LABEL, 2, distill.NO_LABEL, 2])
    one_hot = F.one_hot(pseudo, 4).double() * 1e4          # softmax: exactly one-hot
    assert float(distill.hard_target_loss(s, pseudo, y, 0.8)) == pytest.approx(
        float(distill.kd_loss(s, one_hot, y, T=1.0, alpha=0.8)), rel=1e-12)




def test_controls_run_seeded_with_the_learners_loss(trained):
    split, teacher = trained
    calls = []

    def spy(s, t, y, T, alpha):
        calls.append(T)
        return distill.kd_loss(s, t, y, T, alpha)
    kw = {"seeds": (0, 1, 2), "steps": 120}
    table = distill.distill_controls(split, teacher, loss=spy, **kw)
    names = [r.condition for r in table.rows]
    assert names == ["labelled only", "soft, T = 4", "soft, T = 1", "teacher argmax",
                     "all true labels"]
    assert sorted(set(calls)) == [1.0, 4.0] and len(calls) == 2 * 3 * 120
    assert all(len(r.accuracies) == 3 for r in table.rows)
    assert (table.labelled, table.transfer) == (60, len(split.y_train) - 60)
    again = distill.distill_controls(split, teacher, **kw)
    assert [r.accuracies for r in again.rows] == [r.accuracies for r in table.rows]
    # the teacher's labels on 1,288 more images are worth more than 60 labels alone
    lab, arg = table.row("labelled only"), table.row("teacher argmax")
    assert arg.mean > lab.mean + 3 * max(lab.std, arg.std)
    r = table.row("soft, T = 4")
    assert r.std == pytest.approx(np.std(r.accuracies, ddof=1))
    text = distill.format_distill(table)
    for name in names:
        assert name in text
    assert f"{r.mean:.3f} ± {r.std:.3f}" in text and f"teacher {table.teacher_accuracy:.3f}" in text
    assert table.better("teacher argmax", "labelled only") == "teacher argmax"
    assert table.better("labelled only", "teacher argmax") == "teacher argmax"
    assert table.better("soft, T = 1", "soft, T = 1") == "equal within the spread"


def test_better_compares_means_against_the_spread():
    def table(a, b):
        return distill.DistillTable((distill.DistillRow("a", a), distill.DistillRow("b", b)),
                                    0.9, 60, 100, 10, 4.0, 0.9, (0, 1, 2))
    # means 0.90 and 0.94, standard deviations 0.01 each: 0.04 > 0.02
    assert table((0.89, 0.90, 0.91), (0.93, 0.94, 0.95)).better("a", "b") == "b"
    # the same means, standard deviations 0.03 each: 0.04 < 0.06
    assert table((0.87, 0.90, 0.93), (0.91, 0.94, 0.97)).better("a", "b") == \
        "equal within the spread"
    with pytest.raises(ValueError, match="condition must be one of"):
        table((0.9,), (0.9,)).better("a", "c")


def test_a_wrong_kd_loss_trains_a_different_student(trained):
    split, teacher = trained
    def no_t2(s, t, y, T, a):       # the soft term without its T²: the CE term weighs 16× more
        soft = F.kl_div(F.log_softmax(s / T, 1), F.log_softmax(t / T, 1), log_target=True,
                        reduction="batchmean")
        return a * soft + (1 - a) * F.cross_entropy(s, y)
    kw = {"seeds": (0,), "steps": 60}
    right = distill.distill_controls(split, teacher, **kw).row("soft, T = 4").accuracies
    wrong = distill.distill_controls(split, teacher, loss=no_t2, **kw).row("soft, T = 4").accuracies
    assert right != wrong


def test_bad_arguments(trained):
    split, teacher = trained
    with pytest.raises(TypeError, match="teacher must be a torch.nn.Module"):
        distill.distill_controls(split, lambda x: x)
    with pytest.raises(TypeError, match="loss must be a function"):
        distill.distill_controls(split, teacher, loss=1)
    with pytest.raises(ValueError, match="labelled_per_batch must be an integer"):
        distill.distill_controls(split, teacher, labelled=8, labelled_per_batch=16)
    with pytest.raises(ValueError, match="seeds must list at least one seed"):
        distill.distill_controls(split, teacher, seeds=())
    with pytest.raises(TypeError, match="table must be a DistillTable"):
        distill.format_distill([])
