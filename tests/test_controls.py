"""labkit.controls: a control checks its value against the range it then gives the widget."""
import math

import pytest

from labkit.controls import (checkbox, choice_slider, dropdown, fixed, float_slider,
                             int_slider, interactive, log_slider)


def test_sliders_span_the_range_they_validate():
    s = int_slider("jobs", 40, 20, 3000, "jobs", step=20).build()
    assert (s.value, s.min, s.max, s.step, s.description) == (40, 20, 3000, 20, "jobs")
    assert s.continuous_update is True
    assert int_slider("n", 3, 1, 9, "n", continuous_update=False).build().continuous_update is False
    f = float_slider("p", 0.05, 0, 0.5, 0.01, "P").build()
    assert (f.value, f.min, f.max, f.step) == (0.05, 0, 0.5, 0.01)
    g = log_slider("mtbf_hours", 8.0, 0.5, 200, 0.05, "MTBF").build()
    assert g.value == 8.0 and g.base == 10
    assert math.isclose(10 ** g.min, 0.5) and math.isclose(10 ** g.max, 200)


def test_choices():
    d = dropdown("gpu", "H100", {"A100": 1, "H100": 2}, "GPU").build()
    assert list(d.options) == ["A100", "H100"] and d.value == "H100"
    c = choice_slider("scale", 10.0, (0.1, 1.0, 10.0), "scale").build()
    assert list(c.options) == [0.1, 1.0, 10.0] and c.value == 10.0
    assert checkbox("backward", False, "call backward()").build().value is False
    assert fixed(300).build().value == 300


@pytest.mark.parametrize("make, exc, word", [
    (lambda: int_slider("workers", 0, 1, 256, ""), ValueError, "workers"),
    (lambda: int_slider("workers", 2.5, 1, 256, ""), ValueError, "workers"),
    (lambda: int_slider("workers", "8", 1, 256, ""), TypeError, "workers"),
    (lambda: float_slider("load", 1.3, 0.3, 1.2, 0.05, ""), ValueError,
     r"load must be in \[0.3, 1.2\]"),
    (lambda: log_slider("mtbf_hours", 0.4, 0.5, 200, 0.05, ""), ValueError, "mtbf_hours"),
    (lambda: dropdown("placement", "random", ("pack", "spread"), ""), ValueError, "placement"),
    (lambda: choice_slider("p", 0.3, (0.0, 0.2, 0.5), ""), ValueError, "p must be one of"),
    (lambda: checkbox("backward", 1, ""), TypeError, "backward"),
])
def test_a_bad_value_is_named(make, exc, word):
    with pytest.raises(exc, match=word):
        make()


def test_interactive_wires_controls_in_order(capsys):
    w = interactive(lambda b, a, k: print(f"{a}+{b}={a + b} {k}"),
                    b=int_slider("b", 2, 0, 9, "b"), a=float_slider("a", 1.0, 0, 5, 0.5, "a"),
                    k=fixed("ok"))
    assert [c.description for c in w.children[:-1]] == ["b", "a"]
    assert "1.0+2=3.0 ok" in capsys.readouterr().out
    w.children[0].value = 5
    assert "1.0+5=6.0 ok" in capsys.readouterr().out
