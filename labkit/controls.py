"""Widget controls that check their value: a builder states each control's range once.

A ``*_widget`` builder (``labkit/<package>/widgets.py``) validates its arguments before it
builds anything, and its sliders span the same ranges. Written twice — once for
:mod:`labkit.validate`, once for the slider — the two drift apart; here one call does both::

    return interactive(show_stragglers,
                       workers=int_slider("workers", workers, 1, 256, "workers N"),
                       p=float_slider("p", p, 0, 0.5, 0.01, "P(straggle)"))

Each helper checks the value at once (a ``ValueError``/``TypeError`` naming the parameter
and the allowed range) and returns a :class:`Control`, a description of the ipywidget;
:func:`interactive` builds the widgets only after every argument of the call has been
checked, and wires them to the function with ``ipywidgets.interactive``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from labkit import validate as V


@dataclass(frozen=True)
class Control:
    """An ipywidgets class name and its keyword arguments, built by :meth:`build`."""
    kind: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self):
        import ipywidgets as w  # deferred: ipywidgets
        return getattr(w, self.kind)(**self.options)


def int_slider(name: str, value: Any, low: int, high: int, description: str,
               step: int = 1, continuous_update: bool = True) -> Control:
    """An IntSlider over [low, high] starting at ``value`` (an integer in that range);
    ``continuous_update=False`` redraws only when the slider is released (a slow view)."""
    value = V.integer(name, value, low=low, high=high)
    return Control("IntSlider", dict(value=value, min=low, max=high, step=step,
                                     description=description,
                                     continuous_update=continuous_update))


def float_slider(name: str, value: Any, low: float, high: float, step: float,
                 description: str) -> Control:
    """A FloatSlider over [low, high] starting at ``value`` (a number in that range)."""
    value = V.number(name, value, low=low, high=high)
    return Control("FloatSlider", dict(value=value, min=low, max=high, step=step,
                                       description=description))


def log_slider(name: str, value: Any, low: float, high: float, step: float,
               description: str) -> Control:
    """A FloatLogSlider (base 10) over [low, high] > 0; ``step`` is in decades."""
    value = V.number(name, value, low=low, high=high)
    return Control("FloatLogSlider", dict(value=value, base=10, min=math.log10(low),
                                          max=math.log10(high), step=step,
                                          description=description))


def dropdown(name: str, value: Any, options: Iterable[Any], description: str) -> Control:
    """A Dropdown of ``options`` showing ``value`` (one of them)."""
    options = tuple(options)
    value = V.one_of(name, value, options)
    return Control("Dropdown", dict(options=list(options), value=value,
                                    description=description))


def choice_slider(name: str, value: Any, options: Iterable[Any], description: str) -> Control:
    """A SelectionSlider over ``options`` (in order) starting at ``value`` (one of them)."""
    options = tuple(options)
    value = V.one_of(name, value, options)
    return Control("SelectionSlider", dict(options=list(options), value=value,
                                           description=description))


def checkbox(name: str, value: Any, description: str) -> Control:
    """A Checkbox, ticked when ``value`` (True or False) is True."""
    return Control("Checkbox", dict(value=V.boolean(name, value), description=description))


def fixed(value: Any) -> Control:
    """A value passed to the function unchanged, with no control (``ipywidgets.fixed``)."""
    return Control("fixed", dict(value=value))


def interactive(fn: Callable[..., Any], **controls: Control):
    """``ipywidgets.interactive(fn, ...)`` with each control built; controls appear in the
    order given (the first is the one the tests and the browser test move)."""
    import ipywidgets as w  # deferred: ipywidgets
    return w.interactive(fn, **{name: c.build() for name, c in controls.items()})
