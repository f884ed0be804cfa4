"""The one first-slider check every package's widget test uses.

``ipywidgets.interactive`` runs its function when built and on every control change; the
check reads what those runs print."""
import matplotlib
import pytest


def first_slider_changes_output(widget, capsys, steps: int = 4) -> tuple[str, str]:
    """Move the widget's first slider ``steps`` steps; assert the printed output changed."""
    before = capsys.readouterr().out
    slider = widget.children[0]
    slider.value = slider.value + steps * slider.step
    after = capsys.readouterr().out
    assert before and after and before != after, (before, after)
    matplotlib.pyplot.close("all")
    return before, after


def first_slider_test(module, names, steps: int = 4):
    """A test, parametrized over ``names``, that builds ``getattr(module, name)()`` with its
    defaults and checks that its first slider changes the output
    (``test_first_slider_changes_output = first_slider_test(widgets, [...])``)."""
    @pytest.mark.parametrize("name", names)
    def test_first_slider_changes_output(name, capsys):
        first_slider_changes_output(getattr(module, name)(), capsys, steps=steps)
    return test_first_slider_changes_output
