"""Chapter 01 and 12 plots draw the result they are given."""
import matplotlib
import numpy as np
import pytest

from labkit.perf import plots, stack
from labkit.perf.deploy import Budget, Variant, fits
from labkit.stats import noise_estimates

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close():
    yield
    matplotlib.pyplot.close("all")


def test_cnn_batch_plot_draws_the_curve_the_point_and_the_cpu_runs():
    curve = stack.predict_cnn_curve("H100", batches=(1, 8, 64))
    cpu = (stack.CnnRun("cpu", 4, 0.5, 0.0, 1e6, 1e-5, 0.4, True, 1),
           stack.CnnRun("cpu", 16, 1.0, 0.0, 4e6, 4e-5, 0.9, True, 1))
    fig = plots.plot_cnn_batch(curve, curve[1], cpu, "H100")
    pred, point, measured = fig.axes[0].get_lines()
    assert list(pred.get_xdata()) == [1, 8, 64]
    np.testing.assert_allclose(pred.get_ydata(), [r.samples_per_s for r in curve])
    assert list(point.get_ydata()) == [curve[1].samples_per_s]
    np.testing.assert_allclose(measured.get_ydata(), [8.0, 16.0])
    assert len(plots.plot_cnn_batch(curve, curve[0]).axes[0].get_lines()) == 2


def test_noise_plot_marks_mean_median_and_interval():
    e = noise_estimates(50, interference=0.3, jitter=0.05)
    ax = plots.plot_noise(e).axes[0]
    mean, median = ax.get_lines()
    assert mean.get_xdata()[0] == pytest.approx(e.mean * 1e3)
    assert median.get_xdata()[0] == pytest.approx(e.median * 1e3)
    assert sum(p.get_height() for p in ax.patches[:40]) == 50


def test_deploy_plot_scales_latency_to_the_target():
    variants = [Variant("a", 40_000, 5e-5, 0.9), Variant("b", 10_000, 8e-5, 0.9)]
    budget = Budget("t", 30e3, 1e-3, slowdown=10)
    ax = plots.plot_deploy(fits(variants, budget), budget).axes[0]
    a, b, vline, hline = ax.get_lines()
    assert (a.get_xdata()[0], a.get_ydata()[0]) == pytest.approx((40.0, 0.5))
    assert a.get_marker() == "x" and b.get_marker() == "o"      # a too big; b fits
    assert vline.get_xdata()[0] == 30.0 and hline.get_ydata()[0] == 1.0


def test_amdahl_plot_draws_ideal_curve_and_ceiling():
    from labkit.perf import amdahl_curve, plot_amdahl
    assert plot_amdahl is plots.plot_amdahl
    curve = amdahl_curve(0.9, 16)
    ax = plots.plot_amdahl(curve).axes[0]
    ideal, speedup, ceiling = ax.get_lines()
    assert list(ideal.get_ydata()) == [1, 2, 4, 8, 16]
    np.testing.assert_allclose(speedup.get_ydata(), 1 / (0.1 + 0.9 / np.array([1, 2, 4, 8, 16])))
    assert ceiling.get_ydata()[0] == pytest.approx(10.0)
    assert len(plots.plot_amdahl(amdahl_curve(1.0, 16)).axes[0].get_lines()) == 2  # no ceiling


def test_framework_rows_plot_draws_both_bars_per_row():
    from labkit.perf.frameworks import FrameworkRow
    rows = [FrameworkRow("numpy", 2e-4, (1e-4, 3e-4), 5e-5),
            FrameworkRow("onnx", None, None, 1e-5)]
    ax = plots.plot_rows(rows).axes[0]
    widths = [p.get_width() for p in ax.patches]
    assert widths == pytest.approx([200.0, 0.0, 50.0, 10.0])     # training bars, then inference
    assert [t.get_text() for t in ax.get_yticklabels()] == ["numpy", "onnx"]
