"""Every widget builds, draws, and its first control changes what it shows.

``interactive`` runs its function once when it is built and once per control change, so
each test reads the output of those runs instead of calling ``update()`` again."""
import matplotlib
import pytest

from labkit.autograd import widgets
from labkit.training import widgets as twidgets
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    {"graph_pass_widget": widgets.graph_pass_widget, "mode_cost_widget": widgets.mode_cost_widget,
     "precision_widget": twidgets.precision_widget, "kv_cache_widget": twidgets.kv_cache_widget},
    steps=1)


def test_other_widgets_build(capsys):
    for name in ("leak_widget", "batch_sweep_widget"):
        getattr(twidgets, name)()
        assert capsys.readouterr().out
    matplotlib.pyplot.close("all")


def test_widgets_share_the_one_show():
    from labkit import show
    assert widgets._show is show.show and twidgets._show is show.show


@pytest.mark.parametrize("call, param", [
    (lambda: twidgets.kv_cache_widget(max_seq=0), "max_seq"),
    (lambda: twidgets.kv_cache_widget(max_seq="long"), "max_seq"),
    (lambda: twidgets.kv_cache_widget(model="GPT-5"), "model"),
    (lambda: widgets.mode_cost_widget(n_max=100), "n_max"),
    (lambda: widgets.graph_pass_widget(graph_pass="inline"), "graph_pass"),
    (lambda: twidgets.precision_widget(scale=3.0), "scale"),
    (lambda: twidgets.forgot_eval_widget(p=0.9), "p"),
    (lambda: twidgets.leak_widget(backward="yes"), "backward"),
])
def test_builders_validate_before_building(call, param):
    with pytest.raises((TypeError, ValueError), match=param):
        call()
