"""Every widget builds, draws, and its first control changes what it shows."""
import matplotlib
import pytest

from labkit.autograd import widgets

matplotlib.use("Agg")


def outputs(w, capsys):
    w.update()
    return capsys.readouterr().out


@pytest.mark.parametrize("name", ["graph_pass_widget", "precision_widget", "mode_cost_widget"])
def test_first_slider_changes_output(name, capsys):
    w = getattr(widgets, name)()
    before = outputs(w, capsys)
    slider = w.children[0]
    slider.value = slider.value + slider.step
    after = outputs(w, capsys)
    assert before and after and before != after
    matplotlib.pyplot.close("all")


def test_other_widgets_build(capsys):
    for name in ("leak_widget", "batch_sweep_widget"):
        w = getattr(widgets, name)()
        assert outputs(w, capsys)
    matplotlib.pyplot.close("all")
