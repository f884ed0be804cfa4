"""Chapter 10 widgets build, validate their arguments first, and their first slider changes
what they show."""
import matplotlib
import pytest

from labkit.parallel import mp_widgets
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    mp_widgets, ["schedule_widget", "zero_widget", "planner_widget"], steps=2)


def test_schedule_numbers(capsys):
    mp_widgets.show_schedule(4, 8, "1f1b", 2, 1.0, 2.0)
    out = capsys.readouterr().out
    assert "bubble fraction 0.3750 (paper: 0.3750)" in out and "[4, 3, 2, 1]" in out
    mp_widgets.show_schedule(4, 8, "interleaved", 2, 1.0, 2.0)
    assert "bubble fraction 0.1875" in capsys.readouterr().out
    mp_widgets.show_schedule(3, 8, "interleaved", 2, 1.0, 2.0)
    assert "multiple of stages" in capsys.readouterr().out
    matplotlib.pyplot.close("all")


def test_zero_and_planner_numbers(capsys):
    mp_widgets.show_zero(9.0, 8)
    out = capsys.readouterr().out
    assert "ddp        16.00 GB" in out and "zero3       2.00 GB" in out and "2.625 Ψ" in out
    mp_widgets.show_plans(1, "GPT 1T (Table 1)", "A100")
    out = capsys.readouterr().out
    assert "nothing fits" in out and "add GPUs, or use a GPU with more memory" in out
    # 127 nodes: every plan fails a divisibility test, none fails on memory
    mp_widgets.show_plans(127, "GPT-3 175B (Brown et al. 2020)", "A100")
    out = capsys.readouterr().out
    assert "nothing fits" in out and "rejected (memory)" not in out
    assert "memory is not the problem" in out and "add GPUs" not in out
    mp_widgets.show_plans(16, "GPT-3 175B (Brown et al. 2020)", "A100")
    out = capsys.readouterr().out
    assert "#1 " in out and "rejected (memory)" in out and "MFU" in out
    matplotlib.pyplot.close("all")


def test_chunks_slider_acts_only_on_the_interleaved_schedule(capsys):
    w = mp_widgets.schedule_widget(kind="1f1b")
    by = {c.description: c for c in w.kwargs_widgets}
    kind, chunks = by["schedule"], by["chunks v"]
    assert chunks.disabled
    kind.value = "interleaved"
    assert not chunks.disabled
    kind.value = "gpipe"
    assert chunks.disabled
    assert not mp_widgets.schedule_widget(kind="interleaved").kwargs_widgets[3].disabled
    # and what it shows says so: for 1F1B the chunks value changes nothing
    mp_widgets.show_schedule(4, 8, "1f1b", 3, 1.0, 2.0)
    out = capsys.readouterr().out
    assert "v=1" in out and "chunks v = 3 is ignored" in out
    mp_widgets.show_schedule(4, 8, "interleaved", 2, 1.0, 2.0)
    assert "ignored" not in capsys.readouterr().out
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("call, word", [
    (lambda: mp_widgets.schedule_widget(stages=0), "stages"),
    (lambda: mp_widgets.schedule_widget(kind="zb"), "kind"),
    (lambda: mp_widgets.zero_widget(dp=0), "dp"),
    (lambda: mp_widgets.planner_widget(model="GPT-5"), "model"),
    (lambda: mp_widgets.planner_widget(gpu="V100"), "gpu"),
])
def test_builders_validate_first(call, word):
    with pytest.raises(ValueError, match=word):
        call()
