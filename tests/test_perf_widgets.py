"""Chapter 01 and 12 widgets build, validate, and their first slider changes the output."""
import matplotlib
import pytest

from labkit.perf import widgets
from labkit.perf.deploy import Variant
from labkit.hardware import Roofline
from widget_checks import first_slider_test

matplotlib.use("Agg")

ROOF = Roofline("test machine", 1e11, 2e10, "test", True)
VARIANTS = (Variant("fp32 eager", 40_000, 5e-5, 0.95), Variant("int8 dynamic", 13_000, 9e-5, 0.95))


test_first_slider_changes_output = first_slider_test(
    {"roofline_widget": lambda: widgets.roofline_widget(ROOF),
     "cnn_batch_widget": lambda: widgets.cnn_batch_widget(()),
     "noise_widget": widgets.noise_widget,
     "deploy_widget": lambda: widgets.deploy_widget(VARIANTS)}, steps=8)


def test_widgets_validate_before_building():
    with pytest.raises(TypeError, match="machine must be a labkit.perf.Roofline"):
        widgets.roofline_widget("cpu")
    with pytest.raises(TypeError, match="cpu_runs must hold CnnRun"):
        widgets.cnn_batch_widget([1])
    with pytest.raises(TypeError, match="variants must be a non-empty list"):
        widgets.deploy_widget([])


@pytest.mark.parametrize("build, param", [
    (lambda: widgets.roofline_widget(ROOF, batch=0), "batch"),
    (lambda: widgets.roofline_widget(ROOF, gpu="V100"), "gpu"),
    (lambda: widgets.roofline_widget(ROOF, precision="fp16"), "precision"),
    (lambda: widgets.cnn_batch_widget((), host_us=-1.0), "host_us"),
    (lambda: widgets.noise_widget(interference=0.7), "interference"),
    (lambda: widgets.deploy_widget(VARIANTS, slowdown=0.5), "slowdown"),
])
def test_builders_check_their_ranges_before_building(build, param):
    with pytest.raises(ValueError, match=param):
        build()


def test_roofline_and_deploy_numbers(capsys):
    widgets.show_roofline(5, "H100", "fp32", ROOF)
    out = capsys.readouterr().out
    assert "ridge 20.0 FLOP/byte → memory-bound" in out and "17,653 FLOPs" in out
    widgets.show_deploy(30.0, 1.0, 10.0, VARIANTS)
    out = capsys.readouterr().out
    assert "✘ fp32 eager" in out and "✔ int8 dynamic" in out
    matplotlib.pyplot.close("all")
