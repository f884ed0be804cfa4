"""The first-slider helper every widget test uses (``tests/widget_checks.py``) finds the
slider the browser test moves and moves every kind of slider, also from its maximum."""
import ipywidgets as W
import pytest

from widget_checks import first_slider, move_slider


def test_first_slider_is_found_depth_first_past_other_controls():
    s = W.IntSlider(value=3, min=0, max=10)
    box = W.VBox([W.HBox([W.Dropdown(options=[1, 2]), W.Checkbox()]), W.HBox([s, W.Play()])])
    assert first_slider(box) is s
    assert first_slider(W.VBox([W.Dropdown(options=[1])])) is None


@pytest.mark.parametrize("build, steps, moves", [
    (lambda: W.IntSlider(value=3, min=0, max=10), 4, [7, 10, 6]),    # clamped, then back
    (lambda: W.FloatSlider(value=0.5, min=0, max=1, step=0.25), 1, [0.75, 1.0, 0.75]),
    (lambda: W.FloatLogSlider(value=10, min=0, max=3, step=0.5), 2, [100, 1000, 100]),
    (lambda: W.SelectionSlider(options=["a", "b", "c"], value="a"), 1, ["b", "c", "b"]),
    (lambda: W.SelectionSlider(options=["a", "b", "c"], value="b"), 4, ["c", "a", "c"]),
])
def test_move_slider_steps_up_then_back_from_the_maximum(build, steps, moves):
    slider, seen = build(), []
    for _ in moves:
        move_slider(slider, steps)
        seen.append(slider.value)
    assert seen == (moves if isinstance(moves[0], str) else pytest.approx(moves))
