"""The first-slider helper every widget test uses (``tests/widget_checks.py``) finds the
slider the browser test moves and moves every kind of slider, also from its maximum."""
import ipywidgets as W
import pytest

from widget_checks import first_slider, first_slider_test, move_slider


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


def _printing_slider():
    """An ``interactive`` with one slider that prints its value, as a builder returns."""
    return W.interactive(lambda x: print(f"x = {x}"), x=W.IntSlider(value=2, min=0, max=5))


def test_first_slider_test_takes_a_dict_of_builders_or_a_module_and_names(capsys):
    import types

    test = first_slider_test({"printing": _printing_slider}, steps=1)
    marks = [m for m in test.pytestmark if m.name == "parametrize"]
    assert marks[0].args == ("name", ["printing"])
    test("printing", capsys)                                  # builds it, moves the slider
    module = types.SimpleNamespace(printing_widget=_printing_slider)
    test = first_slider_test(module, ["printing_widget"])
    test("printing_widget", capsys)
    # a builder whose slider changes nothing fails the test
    silent = {"silent": lambda: W.interactive(lambda x: print("same"), x=W.IntSlider())}
    with pytest.raises(AssertionError):
        first_slider_test(silent)("silent", capsys)
    with pytest.raises(TypeError, match="names go with a module"):
        first_slider_test({"printing": _printing_slider}, ["printing"])
    with pytest.raises(TypeError, match="at least one builder"):
        first_slider_test({})
    with pytest.raises(AttributeError):
        first_slider_test(module, ["missing_widget"])
