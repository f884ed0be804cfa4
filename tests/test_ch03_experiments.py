"""The measurements chapter 03 shows: labkit's counters agree with PyTorch's tools."""
import matplotlib
import numpy as np
import pytest
import torch

from labkit.training import plots
from labkit.training.inference import batch_sweep, precision_effect
from labkit.training.modes import batchnorm_eval, forgot_eval_experiment, inverted_dropout
from labkit.training.phases import labkit_phase_costs, torch_phase_costs

matplotlib.use("Agg")


@pytest.mark.parametrize("sizes,batch", [((64, 256, 256, 10), 64), ((7, 5, 3), 9)])
def test_flops_and_saved_bytes_agree_with_torch(sizes, batch):
    lab, tor = labkit_phase_costs(sizes, batch), torch_phase_costs(sizes, batch)
    assert lab.matmul_forward_flops == tor.matmul_forward_flops
    assert lab.matmul_backward_flops == tor.matmul_backward_flops
    mm = sum(2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:]))
    assert lab.matmul_forward_flops == mm
    assert lab.matmul_backward_flops == 2 * mm - 2 * batch * sizes[0] * sizes[1]
    assert lab.saved_bytes_train == 4 * batch * sum(sizes)
    # torch also saves nll_loss's int64 targets and its 0-d float32 total_weight
    assert tor.saved_bytes_train - lab.saved_bytes_train == 8 * batch + 4
    assert lab.saved_bytes_inference == tor.saved_bytes_inference == 0
    plots.plot_phase_costs(lab)
    with pytest.raises(ValueError, match="batch"):
        labkit_phase_costs(sizes, 0)


def test_batch_sweep_shapes_and_errors():
    s = batch_sweep((1, 8), width=16, depth=1, repeats=2)
    assert [p.batch for p in s.points] == [1, 8]
    assert all(p.throughput == pytest.approx(p.batch / p.latency_s) for p in s.points)
    plots.plot_batch_sweep(s)
    with pytest.raises(ValueError, match="batches"):
        batch_sweep((0,))


def test_precision_ordering_and_overflow():
    r = precision_effect(width=64, scale=1.0)
    e = {k: v.max() for k, v in r.errors.items()}
    assert e["float32"] < 1e-5 < e["float16"] < e["bfloat16"] < 0.05
    assert all(v == 0 for v in r.overflow.values())
    big = precision_effect(width=64, scale=1e5)
    assert big.overflow["float16"] > 0 and big.overflow["bfloat16"] == 0
    plots.plot_precision(big)
    with pytest.raises(ValueError, match="scale"):
        precision_effect(scale=0)


def test_mode_functions_and_forgotten_eval():
    rng = np.random.default_rng(0)
    bn = torch.nn.BatchNorm1d(3).double()
    bn.running_mean.fill_(0.5)
    bn.running_var.fill_(2.0)
    bn.eval()
    x = rng.normal(size=(4, 3))
    want = bn(torch.tensor(x)).detach().numpy()
    got = batchnorm_eval(x, bn.running_mean.numpy(), bn.running_var.numpy(),
                         bn.weight.detach().numpy(), bn.bias.detach().numpy())
    np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError, match="p must"):
        inverted_dropout(x, x, 1.0)
    r = forgot_eval_experiment(0.5, batch_sizes=(2, 64))
    assert len(set(r.acc_eval_mode)) == 1 and r.acc_eval_mode[0] > 0.95
    assert r.acc_train_mode[0] < r.acc_eval_mode[0] - 0.2   # batch 2 in train mode is poor
    plots.plot_mode_accuracy(r)
    with pytest.raises(ValueError, match="batch_sizes"):
        forgot_eval_experiment(0.5, batch_sizes=(1,))
    matplotlib.pyplot.close("all")


def test_latency_fit_recovers_a_known_line():
    from labkit.training.inference import BatchPoint, BatchSweep, fit_latency, weight_reuse
    t0, t1 = 2e-4, 3e-6
    pts = tuple(BatchPoint(b, t0 + b * t1, b / (t0 + b * t1)) for b in (1, 4, 16, 64, 256))
    fit = fit_latency(BatchSweep(pts, 16, 1))
    assert fit.overhead_s == pytest.approx(t0) and fit.per_sample_s == pytest.approx(t1)
    assert fit.half_batch == pytest.approx(t0 / t1) and fit.max_throughput == pytest.approx(1 / t1)
    assert weight_reuse(64, 4) == 32.0 and weight_reuse(1, 2) == 1.0
    with pytest.raises(ValueError, match="two batch"):
        fit_latency(BatchSweep(pts[:1], 16, 1))


def test_moved_experiments_left_no_shim():
    """Issue 9: the chapter-03 experiments live in labkit.training, not in the engine."""
    import importlib
    for name in ("phases", "modes", "inference", "leak", "train"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"labkit.autograd.{name}")
        importlib.import_module(f"labkit.training.{name}")


@pytest.mark.parametrize("sizes,batch", [((64, 256, 256, 10), 64), ((7, 5, 3), 9)])
def test_what_torch_saves_beyond_labkit_is_nll_loss_target_and_total_weight(sizes, batch):
    """derivatives.yaml: nll_loss_forward(...) -> (Tensor output, Tensor total_weight), whose
    backward reads self, target, weight and total_weight (NllLossBackward0._saved_*)."""
    from labkit.training.phases import (format_saved_beyond, saved_beyond_labkit,
                                        torch_saved_tensors)

    rows = torch_saved_tensors(sizes, batch)
    names = {(r.node, r.name) for r in rows}
    assert {("NllLossBackward0", "target"), ("NllLossBackward0", "total_weight")} <= names
    assert sum(r.nbytes for r in rows) == torch_phase_costs(sizes, batch).saved_bytes_train
    extra = saved_beyond_labkit(sizes, batch)
    assert [(r.name, r.dtype, r.shape, r.nbytes) for r in extra] == [
        ("target", "int64", (batch,), 8 * batch), ("total_weight", "float32", (), 4)]
    text = format_saved_beyond(extra, labkit_phase_costs(sizes, batch),
                               torch_phase_costs(sizes, batch)).splitlines()
    assert text[1] == "torch also saves NllLossBackward0.total_weight: float32 [], 4 bytes"
    assert text[-1] == (f"together {8 * batch + 4} bytes; measured difference torch - labkit: "
                        f"{8 * batch + 4} bytes")


def test_best_batch_on_runs_a_rule_on_plain_points():
    from labkit.training.inference import best_batch_on

    points = [(1, 1e-4), (8, 2e-4), (64, 9e-4)]
    assert best_batch_on(lambda s, b: max(p.batch for p in s.points if p.latency_s <= b),
                         points, 5e-4) == 8
    assert best_batch_on(lambda s, b: None, points, 1.0) is None
    assert best_batch_on(lambda s, b: s.points[0], points, 1.0).startswith("BatchPoint")
    assert best_batch_on(lambda s, b: s.points[2].throughput, points, 1.0).startswith("float")
