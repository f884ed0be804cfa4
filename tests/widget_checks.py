"""The one first-slider check every package's widget test uses.

``ipywidgets.interactive`` runs its function when built and on every control change; the
check reads what those runs print. "The first slider" is the one the real-browser test
moves (``tests/test_browser.py`` takes the first ``.widget-slider``): the first slider met
depth-first through the widget's boxes, dropdowns and checkboxes skipped."""
import math

import matplotlib
import pytest


def first_slider(widget):
    """The first slider (Int/Float/FloatLog/Selection) depth-first under ``widget``."""
    import ipywidgets as w
    sliders = (w.IntSlider, w.FloatSlider, w.FloatLogSlider, w.SelectionSlider)
    if isinstance(widget, sliders):
        return widget
    for child in getattr(widget, "children", ()):
        found = first_slider(child)
        if found is not None:
            return found
    return None


def _moved(position: float, low: float, high: float, by: float) -> float:
    """``position + by`` clamped to [low, high]; from ``high`` itself, ``position - by``
    (clamped to ``low``), so a slider that starts at its maximum still moves."""
    if position >= high:
        return max(low, position - by)
    return min(high, position + by)


def move_slider(slider, steps: int = 4) -> None:
    """Move ``slider`` up by ``steps`` of its steps (a SelectionSlider: ``steps`` options;
    a FloatLogSlider: ``steps`` steps of its exponent), clamped at the maximum; a slider
    already at its maximum moves down instead."""
    import ipywidgets as w
    if isinstance(slider, w.SelectionSlider):
        options = list(slider.options)
        index = _moved(options.index(slider.value), 0, len(options) - 1, steps)
        slider.value = options[int(index)]
    elif isinstance(slider, w.FloatLogSlider):
        exponent = round(math.log(slider.value, slider.base), 12)     # log10(1000) < 3
        exponent = _moved(exponent, slider.min, slider.max, steps * slider.step)
        slider.value = slider.base ** exponent
    else:
        slider.value = _moved(slider.value, slider.min, slider.max, steps * slider.step)


def first_slider_changes_output(widget, capsys, steps: int = 4) -> tuple[str, str]:
    """Move the widget's first slider (:func:`first_slider`) by ``steps`` steps
    (:func:`move_slider`); assert that it moved and that the printed output changed."""
    before = capsys.readouterr().out
    slider = first_slider(widget)
    assert slider is not None, f"{type(widget).__name__} holds no slider"
    old = slider.value
    move_slider(slider, steps)
    assert slider.value != old, f"{slider.description!r} did not move from {old!r}"
    after = capsys.readouterr().out
    assert before and after and before != after, (before, after)
    matplotlib.pyplot.close("all")
    return before, after


def first_slider_test(builders, names=(), steps: int = 4):
    """A test, parametrized over the builders, that builds each widget and checks that its
    first slider changes the output (:func:`first_slider_changes_output`).

    ``builders`` is a dict ``{id: zero-argument builder}`` (a builder with arguments:
    ``{"machine_widget": lambda: widgets.machine_widget(config)}``), or a module whose
    builders ``names`` are built with their defaults
    (``test_first_slider_changes_output = first_slider_test(widgets, [...])``)."""
    if isinstance(builders, dict):
        if names:
            raise TypeError("names go with a module; a dict already names its builders")
        table = dict(builders)
    else:
        table = {name: getattr(builders, name) for name in names}
    if not table or not all(callable(b) for b in table.values()):
        raise TypeError("first_slider_test needs at least one builder, each callable")

    @pytest.mark.parametrize("name", list(table))
    def test_first_slider_changes_output(name, capsys):
        first_slider_changes_output(table[name](), capsys, steps=steps)
    return test_first_slider_changes_output
