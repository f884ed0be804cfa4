"""The one roofline model and its one plot: presets and data-sheet rooflines agree with
labkit.hardware, the per-precision table goes through the same formulas, the plot draws
what the model computes."""
import matplotlib
import numpy as np
import pytest

from labkit.hardware import GPUS
from labkit.kernels import roofline
from labkit.kernels.plots import plot_roofline
from labkit.kernels.roofline import Hardware, Roofline, datasheet

matplotlib.use("Agg")


@pytest.mark.parametrize("key", ["A100", "H100", "H200"])
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_preset_and_datasheet_are_one_roofline(key, precision):
    hw, roof = roofline.PRESETS[key], datasheet(key, precision)
    assert hw.roofline(precision).peak == roof.peak == GPUS[key].peak(precision)
    assert hw.roofline(precision).bandwidth == roof.bandwidth == GPUS[key].hbm_bandwidth
    assert hw.ridge(precision) == roof.ridge == pytest.approx(GPUS[key].ridge(precision))
    for i in (0.5, roof.ridge, 4 * roof.ridge):
        assert roofline.attainable(hw, i, precision) == roof.attainable(i)
        assert roofline.bound(hw, i, precision) == roof.bound(i)


def test_a_gpus_ridge_is_its_own_numbers():
    """A replace()d data sheet (a 40 GB A100's 1.555 TB/s) has its own ridge, not the preset's."""
    from dataclasses import replace

    a100_40 = replace(GPUS["A100"], hbm_bandwidth=1555e9)
    assert GPUS["A100"].ridge("bf16") == pytest.approx(312e12 / 2039e9)
    assert a100_40.ridge("bf16") == pytest.approx(312e12 / 1555e9)       # 200.6, not 153.0


def test_the_ridge_point_is_where_the_roofs_meet():
    r = datasheet("H100", "fp32")                   # 67 TFLOP/s over 3.35 TB/s: 20 FLOP/B
    assert r.ridge == pytest.approx(20.0)
    assert r.attainable(r.ridge) == pytest.approx(r.peak)
    assert r.attainable(r.ridge / 2) == pytest.approx(r.peak / 2)
    assert r.bound(19.99) == "memory-bound" and r.bound(20.01) == "compute-bound"
    assert r.bound(r.ridge) == "compute-bound" and not r.measured     # the ridge: compute
    np.testing.assert_allclose(r.attainable(np.array([1.0, 1e4])), [3.35e12, 67e12])


def test_h100_data_sheet_values_and_the_time_bound():
    # NVIDIA H100 SXM data sheet, dense: 67 TFLOP/s FP32, 494.5 TF32, 989.5 BF16; 3.35 TB/s
    h100 = roofline.hardware("H100")
    assert h100 is roofline.PRESETS["H100"] and h100.ridge() == pytest.approx(67e12 / 3.35e12)
    assert h100.peak("bf16") == pytest.approx(989.5e12) and h100.peak("tf32") == 494.5e12
    assert roofline.PRESETS["H200"].bandwidth > h100.bandwidth      # same chip, more HBM
    # intensity 100 is past the FP32 ridge (20) but below the BF16 one (~295)
    assert roofline.bound(h100, 100.0) == "compute-bound"
    assert roofline.bound(h100, 100.0, "bf16") == "memory-bound"
    r = Roofline("toy", peak=100.0, bandwidth=10.0)
    assert r.min_time(1000, 10) == 10.0 and r.min_time(10, 1000) == 100.0   # max(F/P, Q/B)
    with pytest.raises(ValueError, match="hardware must be one of"):
        roofline.hardware("TPU")
    with pytest.raises(ValueError, match="precision"):
        h100.peak("int8")


def test_a_missing_precision_is_refused_not_substituted():
    cpu = Hardware("cpu", {"fp32": 1e12}, 1e11, measured=True)
    assert cpu.roofline().measured and cpu.roofline().ridge == 10.0
    with pytest.raises(ValueError, match="cpu has no bf16 rate"):
        cpu.roofline("bf16")
    with pytest.raises(ValueError, match="precision"):
        roofline.bound(roofline.PRESETS["H100"], 10.0, "fp8")


@pytest.mark.parametrize("kwargs, param", [(dict(peak=0.0), "peak"),
                                           (dict(bandwidth=-1.0), "bandwidth"),
                                           (dict(peak=float("nan")), "peak")])
def test_a_roofline_needs_positive_roofs(kwargs, param):
    with pytest.raises(ValueError, match=param):
        Roofline(**dict(dict(name="x", peak=1e12, bandwidth=1e11), **kwargs))


def test_bound_and_attainable_reject_a_non_positive_intensity():
    r = datasheet("A100")
    with pytest.raises(ValueError, match="intensity"):
        r.bound(0.0)
    with pytest.raises(ValueError, match="intensity"):
        roofline.bound(roofline.PRESETS["A100"], -1.0)
    with pytest.raises(ValueError, match="intensity must be > 0"):
        r.attainable(np.array([1.0, np.inf]))


def test_plot_draws_each_roof_and_puts_points_on_the_first():
    here = Roofline("here", 1e11, 2e10, "test", measured=True)
    gpu = datasheet("H100", "bf16")
    fig = plot_roofline([gpu, here], [("step", 3.0)], title="bf16 vs fp32")
    ax = fig.axes[0]
    roofs = [ln for ln in ax.lines if len(ln.get_xdata()) > 1]
    assert [ln.get_linestyle() for ln in roofs] == ["--", "-"]   # data sheet, measured
    x, y = roofs[1].get_xdata(), roofs[1].get_ydata()
    np.testing.assert_allclose(y, here.attainable(x) / 1e12)
    star = next(ln for ln in ax.lines if ln.get_marker() == "*")
    assert star.get_xdata()[0] == 3.0
    assert star.get_ydata()[0] == pytest.approx(gpu.attainable(3.0) / 1e12)
    ridges = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [ln.get_xdata()[0] for ln in ridges] == [gpu.ridge, here.ridge]
    assert ax.get_title() == "bf16 vs fp32"
    assert ax.get_legend_handles_labels()[1] == [f"H100 bf16 (data sheet) (ridge {gpu.ridge:.3g} "
                                                 "FLOP/B)", "here (ridge 5 FLOP/B)"]
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="at least one Roofline"):
        plot_roofline([])
