"""Every widget builds, draws, and its first control changes what it shows.

``interactive`` runs its function once when it is built and once per control change, so
each test reads the output of those runs instead of calling ``update()`` again."""
import matplotlib
import pytest

from labkit.autograd import widgets

matplotlib.use("Agg")


@pytest.mark.parametrize("name", ["graph_pass_widget", "precision_widget", "mode_cost_widget"])
def test_first_slider_changes_output(name, capsys):
    w = getattr(widgets, name)()
    before = capsys.readouterr().out
    slider = w.children[0]
    slider.value = slider.value + slider.step
    after = capsys.readouterr().out
    assert before and after and before != after
    matplotlib.pyplot.close("all")


def test_other_widgets_build(capsys):
    for name in ("leak_widget", "batch_sweep_widget"):
        getattr(widgets, name)()
        assert capsys.readouterr().out
    matplotlib.pyplot.close("all")
