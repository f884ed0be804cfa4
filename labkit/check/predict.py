"""Predict, then look: the learner commits to a guess before a widget or an experiment.

    guess = 0.3                       # the learner types a number (or one of the choices)
    predict("10.bubble", guess, "bubble fraction of GPipe with p=4, m=8")
    ... run the experiment ...
    reveal("10.bubble", result.bubble_fraction)

``predict`` records the guess (in this kernel, and as a JSON line in ``LABKIT_GRADE_LOG``
when grading) and never raises: a guess is not graded. With no guess yet (``None``) it
asks for one. ``reveal`` prints the guess beside the computed value and how far off it was,
so the result confirms or corrects it. A ``choices`` prediction is compared for equality.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Sequence

from labkit.check.core import LOG_ENV


@dataclass(frozen=True)
class Prediction:
    key: str
    question: str
    guess: Any
    choices: tuple | None = None


PREDICTIONS: dict[str, Prediction] = {}


def predict(key: str, guess: Any, question: str = "", *, choices: Sequence | None = None) -> None:
    """Record ``guess`` for ``key`` (a number, or one of ``choices``); print what was recorded."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"key must be a non-empty string, got {key!r}")
    choices = tuple(choices) if choices is not None else None
    label = f" ({question})" if question else ""
    if guess is None or guess is Ellipsis:
        options = f" one of {', '.join(map(repr, choices))}" if choices else " a number"
        print(f"✎ Prediction {key}{label}: type your guess ({options.strip()}) in the cell "
              f"above before you run the experiment.")
        PREDICTIONS.pop(key, None)
        return
    if choices is not None and guess not in choices:
        print(f"✎ Prediction {key}: {guess!r} is not one of {', '.join(map(repr, choices))}; "
              f"pick one of them.")
        PREDICTIONS.pop(key, None)
        return
    if choices is None and not _is_number(guess):
        print(f"✎ Prediction {key}: {guess!r} is not a number; type a number.")
        PREDICTIONS.pop(key, None)
        return
    PREDICTIONS[key] = Prediction(key, question, guess, choices)
    print(f"✎ Prediction {key}{label} recorded: {guess!r}. Now run the experiment.")
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"prediction": key, "guess": _jsonable(guess)}) + "\n")


def reveal(key: str, actual: Any, *, unit: str = "") -> None:
    """Print the recorded guess beside ``actual``, with how far off it was. Nothing is
    returned, so a ``reveal`` on a cell's last line prints its line once (a returned string
    would be shown a second time, as the cell's value)."""
    unit_s = f" {unit}" if unit else ""
    shown = _fmt(actual) + unit_s
    if key not in PREDICTIONS:
        print(f"◆ {key}: the result is {shown} (no prediction was recorded).")
        return
    p = PREDICTIONS[key]
    if p.choices is not None or not _is_number(actual):
        verdict = "right" if p.guess == actual else "not quite"
        line = f"◆ {key}: you predicted {p.guess!r}; the result is {shown} — {verdict}."
    else:
        guess, act = float(p.guess), float(actual)
        if act == 0:
            off = "exactly" if guess == 0 else f"off by {abs(guess):.3g}{unit_s}"
        else:
            ratio = guess / act
            off = ("within 10 %" if abs(ratio - 1) <= 0.10 else
                   f"{ratio:.2g}× the result" if ratio > 0 else "the wrong sign")
        line = f"◆ {key}: you predicted {_fmt(guess)}{unit_s}; the result is {shown} ({off})."
    print(line)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _fmt(x: Any) -> str:
    if _is_number(x):
        x = float(x)
        return f"{x:.4g}" if x != int(x) or abs(x) >= 1e6 else f"{int(x)}"
    return repr(x)


def _jsonable(x: Any) -> Any:
    return float(x) if _is_number(x) else str(x)
