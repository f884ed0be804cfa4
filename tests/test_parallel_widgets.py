"""Chapter 09 widgets validate before they build, their first slider changes what they
show, and the printed numbers are the model's.

``interactive`` / ``interactive_output`` run their function when built and on every
control change; outside a kernel the prints reach stdout, which the tests read."""
import matplotlib
import pytest

matplotlib.use("Agg")

from labkit.parallel import cost, dp_sim, widgets  # noqa: E402
from widget_checks import first_slider_test  # noqa: E402

pytest.importorskip("ipywidgets")


test_first_slider_changes_output = first_slider_test(
    {"collective_widget": lambda: widgets.collective_widget(4, "ring"),
     "cost_widget": lambda: widgets.cost_widget("all_reduce"),
     "scaling_widget": widgets.scaling_widget}, steps=2)


def test_collective_numbers(capsys):
    widgets.show_collective(4, "ring", 0)
    # ring on 4 ranks: 2(p-1) = 6 steps, 4 messages of one 2-float chunk (8 bytes) each
    assert "step 0/6, 4 message(s), 32 bytes this step; 24 messages" in capsys.readouterr().out
    widgets.show_collective(4, "ring", 99)                      # clipped to the end
    assert "step 6/6, 0 message(s)" in capsys.readouterr().out
    matplotlib.pyplot.close("all")


def test_cost_numbers(capsys):
    widgets.show_cost("all_reduce", 3.0, 8, 5.0, 25.0)
    out = capsys.readouterr().out
    ring = cost.collective_time("all_reduce", "ring", 1e3, 8, alpha=5e-6, beta=1 / 25e9)
    tree = cost.collective_time("all_reduce", "tree", 1e3, 8, alpha=5e-6, beta=1 / 25e9)
    assert f"ring {ring * 1e6:.4g} µs" in out and tree < ring        # small: latency wins
    # with p a power of two, recursive halving/doubling has the ring's bytes and the
    # tree's step count: in the α-β model it is fastest at every size
    assert "fastest: recursive_halving_doubling" in out
    widgets.show_cost("all_reduce", 9.0, 8, 5.0, 25.0)
    assert "fastest: recursive_halving_doubling" in capsys.readouterr().out
    assert cost.best_algorithm("all_reduce", 1e9, 6, alpha=5e-6, beta=1 / 25e9) == "ring"
    matplotlib.pyplot.close("all")


def test_scaling_numbers(capsys):
    widgets.show_scaling(32, 25.0, 0.0, "8× A100 PCIe 4.0", "ResNet-50")
    out = capsys.readouterr().out
    hw, m = dp_sim.HARDWARE["8× A100 PCIe 4.0"], dp_sim.MODELS["ResNet-50"]
    ddp = dp_sim.scaling(m, hw, (1, 8), "ddp").efficiency[1]
    assert f"ddp {ddp:.3f}" in out
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("call, exc, name", [
    (lambda: widgets.collective_widget(world=0), ValueError, "world"),
    (lambda: widgets.collective_widget(world=100), ValueError, "world"),
    (lambda: widgets.collective_widget(world=True), TypeError, "world"),
    (lambda: widgets.collective_widget(world=2.5), ValueError, "world"),
    (lambda: widgets.collective_widget(algorithm="butterfly"), ValueError, "algorithm"),
    (lambda: widgets.cost_widget(op="gather"), ValueError, "op"),
    (lambda: widgets.cost_widget(op=None), ValueError, "op"),
    (lambda: widgets.cost_widget(world=1), ValueError, r"world must be an integer in \[2, 64\]"),
    (lambda: widgets.cost_widget(log10_bytes=11), ValueError, "log10_bytes"),
    (lambda: widgets.cost_widget(bandwidth_gbs="fast"), TypeError, "bandwidth_gbs"),
    (lambda: widgets.scaling_widget(per_gpu_batch=0), ValueError, "per_gpu_batch"),
    (lambda: widgets.scaling_widget(jitter=0.6), ValueError, "jitter"),
    (lambda: widgets.scaling_widget(hardware="TPU pod"), ValueError, "hardware"),
    (lambda: widgets.scaling_widget(model="GPT-5"), ValueError, "model"),
    (lambda: widgets.scaling_widget(real=([1, 2], [1.0])), ValueError, "real"),
    (lambda: widgets.scaling_widget(real="yes"), TypeError, "real"),
    (lambda: widgets.scaling_widget(real=([1, 2], [1.0, float("nan")])), ValueError, "real"),
])
def test_builders_validate_before_building(call, exc, name):
    with pytest.raises(exc, match=name):
        call()
