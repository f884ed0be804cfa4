"""Chapter 04/05 widgets build, validate before building, and their first slider changes
what they show. ``interactive`` runs its function when built and on every change; the tests
read the printed output of those runs."""
import labkit  # noqa: F401
import matplotlib
import pytest

from labkit.hardware import SM_LIMITS
from labkit.kernels import widgets
from widget_checks import first_slider_test

matplotlib.use("Agg")

BUILDERS = ["occupancy_widget", "coalescing_widget", "bank_conflict_widget",
            "tensorcore_widget", "reduction_widget", "roofline_widget", "ladder_widget"]

test_first_slider_changes_output = first_slider_test(widgets, BUILDERS, steps=2)


@pytest.mark.parametrize("name,kwargs,param", [
    ("occupancy_widget", dict(gpu="TPU"), "gpu"),
    ("occupancy_widget", dict(threads_per_block=0), "threads_per_block"),
    ("occupancy_widget", dict(shared_kb=228), "shared_kb"),
    ("occupancy_widget", dict(registers_per_thread=256), "registers_per_thread"),
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


def test_occupancy_ranges_come_from_the_sm_limits(capsys):
    w = widgets.occupancy_widget()
    assert w.children[2].max == max(s.max_shared_per_block for s in SM_LIMITS.values()) // 1024
    assert w.children[2].max == 227                 # H100/H200: 227 KB per block (opt-in)
    assert w.children[1].max == 255
    capsys.readouterr()
    # 160 KB fits a block on an A100 (163 KB) but not on a V100 (96 KB): capped, and said so
    assert widgets.occupancy_view(256, 32, 160, "A100").shared_per_block == 160 * 1024
    occ = widgets.occupancy_view(256, 32, 160, "V100")
    assert occ.shared_per_block == 96 * 1024 and occ.blocks_per_sm == 1
    assert "at most 96 KB" in capsys.readouterr().out
    matplotlib.pyplot.close("all")
