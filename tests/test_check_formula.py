"""labkit.check.formula: a numeric answer passes on every case or is named by its shortcut."""
import math

import pytest

from labkit.check import get
from labkit.check.core import Wrong
from labkit.check.formula import check_formula, equals, formula_exercise, scaled


def _area(r, n):
    """n regular polygons' worth of a circle: n π r²."""
    return n * math.pi * r * r


SHORTCUTS = [(equals(lambda r, n: n * 2 * math.pi * r), "that is the circumference."),
             (lambda got, r, n: n == 0, "no circles, no area.")]


def _check(answer, **kw):
    check_formula(answer, _area, [(1.0, 1), (2.5, 3), (1.0, 0)],
                  call=lambda r, n: f"area(r={r}, n={n})", shortcuts=SHORTCUTS,
                  hint="A = n·π·r².", **kw)


def test_the_reference_and_a_reordered_formula_pass():
    _check(_area)
    _check(lambda r, n: math.pi * (r ** 2) * n)


@pytest.mark.parametrize("answer, message", [
    (lambda r, n: n * 2 * math.pi * r,
     "area(r=1.0, n=1) = 6.28319, expected 3.14159: that is the circumference."),
    (lambda r, n: max(n, 1) * math.pi * r * r,             # right unless n = 0
     "area(r=1.0, n=0) = 3.14159, expected 0: no circles, no area."),
    (lambda r, n: n * 3.14 * r * r, "area(r=1.0, n=1) = 3.14, expected 3.14159: A = n·π·r²."),
])
def test_a_wrong_answer_gets_the_first_matching_hint(answer, message):
    with pytest.raises(Wrong) as e:
        _check(answer)
    assert str(e.value) == message


def test_equals_names_any_of_several_wrong_formulas():
    test = equals(lambda r, n: n * 2 * math.pi * r, lambda r, n: n * math.pi * r)
    assert test(6 * math.pi, 3.0, 1) and test(3 * math.pi, 3.0, 1)
    assert not test(_area(3.0, 1), 3.0, 1)
    assert equals(lambda r, n: r, rtol=0.1)(1.05, 1.0, 1)
    with pytest.raises(TypeError, match="at least one"):
        equals()


def test_scaled_matches_k_times_the_formula_for_one_of_the_factors():
    test = scaled(_area, 8, 1 / 8)
    assert test(8 * math.pi, 1.0, 1) and test(math.pi / 8, 1.0, 1)
    assert not test(math.pi, 1.0, 1) and not test(2 * math.pi, 1.0, 1)
    assert not scaled(_area, 100)(math.pi * (100 + 1e-6), 1.0, 1)      # rtol 1e-9
    assert scaled(_area, 100, rtol=1e-6)(math.pi * (100 + 1e-6), 1.0, 1)
    with pytest.raises(TypeError, match="at least one factor"):
        scaled(_area)
    with pytest.raises(Wrong, match="= 25.1327, expected 3.14159: bits, not bytes"):
        check_formula(lambda r, n: 8 * _area(r, n), _area, [(1.0, 1)], call=lambda r, n: f"a({r})",
                      shortcuts=[(scaled(_area, 8, 1 / 8), "bits, not bytes")], hint="")


def test_tolerances():
    with pytest.raises(Wrong):
        _check(lambda r, n: _area(r, n) * (1 + 1e-7))
    _check(lambda r, n: _area(r, n) * (1 + 1e-7), rtol=1e-6)
    with pytest.raises(Wrong, match="no circles"):
        _check(lambda r, n: _area(r, n) + 1e-9)
    _check(lambda r, n: _area(r, n) + 1e-9, rtol=1e-6, atol=1e-8)


def test_formula_exercises_are_registered_as_their_chapters():
    e = get("11.2")
    assert e.binds == "daly_interval" and e.checker.__module__ == "labkit.check.ch11"
    assert get("9.2").binds == "ring_allreduce_time"
    with pytest.raises(ValueError, match="registered twice"):     # another module, same id
        formula_exercise("11.2", "circles", _area, [(1.0, 1)], call=str, hint="")
    # a reference from elsewhere in labkit (12.2's is labkit.perf.metrics') still counts
    # as the chapter's: every exercise belongs to the module of its chapter
    import importlib
    from labkit.check.core import REGISTRY
    for ch in range(13):
        importlib.import_module(f"labkit.check.ch{ch:02d}")
    assert get("12.2").reference.__module__ != "labkit.check.ch12"
    assert {k: e.checker.__module__ for k, e in REGISTRY.items()} == {
        k: f"labkit.check.ch{int(k.split('.')[0]):02d}" for k in REGISTRY}
