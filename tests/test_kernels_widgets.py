"""Chapter 04/05 widgets build, validate before building, and their first slider changes
what they show. ``interactive`` runs its function when built and on every change; the tests
read the printed output of those runs."""
import labkit  # noqa: F401
import matplotlib
import pytest

from labkit.kernels import widgets

matplotlib.use("Agg")

BUILDERS = ["occupancy_widget", "coalescing_widget", "bank_conflict_widget",
            "tensorcore_widget", "reduction_widget", "roofline_widget", "ladder_widget"]


@pytest.mark.parametrize("name", BUILDERS)
def test_first_slider_changes_output(name, capsys):
    w = getattr(widgets, name)()
    before = capsys.readouterr().out
    slider = w.children[0]
    step = slider.step if name != "reduction_widget" else 40
    slider.value = min(slider.max, slider.value + 2 * step)
    after = capsys.readouterr().out
    assert before and after and before != after
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("name,kwargs,param", [
    ("occupancy_widget", dict(gpu="TPU"), "gpu"),
    ("occupancy_widget", dict(threads_per_block=0), "threads_per_block"),
    ("coalescing_widget", dict(stride=0), "stride"),
    ("bank_conflict_widget", dict(stride=2.5), "stride"),
    ("tensorcore_widget", dict(distribution="cauchy"), "distribution"),
    ("reduction_widget", dict(variant="magic"), "variant"),
    ("reduction_widget", dict(n=10_000), "n"),
    ("roofline_widget", dict(precision="fp16 tensor core"), "precision"),
    ("roofline_widget", dict(hw="TPU"), "hw"),
    ("ladder_widget", dict(gpu="V100"), "gpu"),
])
def test_builders_validate_before_building(name, kwargs, param):
    with pytest.raises((ValueError, TypeError), match=param):
        getattr(widgets, name)(**kwargs)


def test_views_compute_what_they_draw(capsys):
    assert widgets.occupancy_view(128, 37, 0, "V100").blocks_per_sm == 12
    assert widgets.coalescing_view(8).sectors == 32 + 4
    assert widgets.bank_conflict_view(32).max_conflict_ways == 32
    # requests on this machine vs modelled DRAM bytes on an H100
    h100 = widgets.roofline_view(12, "H100", "matmul tiled 32")
    assert h100.intensity > 20                       # right of the FP32 ridge (67/3.35)
    out = capsys.readouterr().out
    assert "compute-bound" in out and "modelled DRAM bytes" in out
    preds = widgets.ladder_view(12, "H200")
    assert [p.variant for p in preds] == list(widgets.LADDER)
    assert "PREDICTION" in capsys.readouterr().out
    widgets.roofline_view(10, "this machine", "matmul naive", "bf16")
    assert "no bf16 rate: showing fp32" in capsys.readouterr().out
    matplotlib.pyplot.close("all")
