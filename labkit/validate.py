"""Argument checks for labkit's public entry points: one error style everywhere.

Every check names the parameter, the value it got and what is allowed::

    n = integer("n", n, low=1)                  # 7.0 -> 7; True, 2.5, "7", nan -> error
    t = number("t_forward", t, low=0, low_open=True)
    kind = one_of("kind", kind, ("gpipe", "1f1b", "interleaved"))
    x = array("x", x, ndim=2)

A config dataclass states each field's check where it declares the field and runs them all
in ``__post_init__`` (:func:`checked`, :func:`check_fields`)::

    @dataclass(frozen=True)
    class Run:
        steps: int = checked(30, integer, low=1)    # integer("steps", steps, low=1)
        lr: float = checked(0.05, positive)

        def __post_init__(self):
            check_fields(self)                      # steps=7.0 -> 7; steps=0 -> error

Rules (issue 16): ``bool`` is not a number; a float with an integral value is accepted
where a count is expected (``7.5e9`` is how people type 7.5 billion); NaN and ±inf are
rejected unless ``finite=False``; a string where a number belongs is a ``TypeError`` that
says so; a number out of range is a ``ValueError``.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np


def _range_text(low, high, low_open=False, high_open=False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high}"
    return "any value"


def _is_real(value: Any) -> bool:
    return isinstance(value, (numbers.Real, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


def integer(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in [low, high]; an integral float (7.0, 7.5e9) is accepted."""
    if isinstance(value, (bool, np.bool_)) or not _is_real(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{name} must be an integer {_range_text(low, high)}, got {value!r}")
    out = int(value)
    if (low is not None and out < low) or (high is not None and out > high):
        raise ValueError(f"{name} must be an integer {_range_text(low, high)}, got {value!r}")
    return out


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, finite: bool = True) -> float:
    """``value`` as a float in the given range; NaN is always rejected, ±inf unless
    ``finite=False``."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    out = float(value)
    if math.isnan(out) or (finite and math.isinf(out)):
        raise ValueError(f"{name} must be a finite number {_range_text(low, high, low_open, high_open)}"
                         f", got {value!r}")
    bad = ((low is not None and (out < low or (low_open and out == low)))
           or (high is not None and (out > high or (high_open and out == high))))
    if bad:
        raise ValueError(f"{name} must be {_range_text(low, high, low_open, high_open)}, "
                         f"got {value!r}")
    return out


def positive(name: str, value: Any) -> float:
    """A finite number > 0 (a time, a rate, a bandwidth)."""
    return number(name, value, low=0, low_open=True)


def nonnegative(name: str, value: Any) -> float:
    """A finite number >= 0."""
    return number(name, value, low=0)


def fraction(name: str, value: Any) -> float:
    """A number in [0, 1]."""
    return number(name, value, low=0, high=1)


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def function(name: str, value: Any) -> Any:
    """``value`` if it can be called (a function, a kernel factory ``fn(cuda)``)."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")
    return value


def path(name: str, value: Any) -> Path:
    """``value`` (a str or an ``os.PathLike``) as a :class:`~pathlib.Path`."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {type(value).__name__} {value!r}")
    return Path(value)


def one_of(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value`` if it is one of ``options`` (compared with ==, types must match for str)."""
    options = tuple(options)
    try:
        ok = value in options and any(type(value) is type(o) or
                                      (_is_real(value) and _is_real(o)) for o in options
                                      if o == value)
    except (TypeError, ValueError):     # unhashable, incomparable, an array's truth value
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value


def power_of_two(name: str, value: Any, *, low: int = 1, high: int | None = None) -> int:
    out = integer(name, value, low=low, high=high)
    if out & (out - 1):
        raise ValueError(f"{name} must be a power of two {_range_text(low, high)}, got {value!r}")
    return out


def divides(name: str, value: int, of_name: str, of_value: int) -> None:
    """Raise unless ``value`` divides ``of_value`` (tensor parallelism and heads, say)."""
    if of_value % value:
        raise ValueError(f"{name}={value} must divide {of_name}={of_value}")


def array(name: str, value: Any, *, ndim: int | Sequence[int] | None = None,
          shape: tuple[int | None, ...] | None = None, dtype: Any = np.float64,
          allow_empty: bool = False, finite: bool = False) -> np.ndarray:
    """``value`` as a numeric numpy array (copy only when needed).

    Rejects None, strings, ragged lists, object and bool arrays (unless ``dtype=bool``),
    a wrong ``ndim`` or ``shape`` (``None`` in ``shape`` matches any length) and, with
    ``allow_empty=False``, empty arrays.
    """
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array, got {type(value).__name__} {value!r}")
    try:
        arr = np.asarray(value)
    except ValueError as exc:            # ragged nested lists
        raise ValueError(f"{name} must be a rectangular numeric array ({exc})") from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind == "b" and np.dtype(dtype).kind != "b":
        raise TypeError(f"{name} must be a numeric array, got booleans")
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimension(s), "
                             f"got shape {arr.shape}")
    if shape is not None:
        if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
            want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    if finite and arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must hold finite numbers (no NaN or inf)")
    return arr


def dims(name: str, value: Any, *, most: int = 3) -> tuple[int, ...]:
    """A CUDA launch dimension: a positive int or a tuple of 1 to ``most`` positive ints."""
    if isinstance(value, (str, bytes)) or not (np.isscalar(value) or hasattr(value, "__len__")):
        raise TypeError(f"{name} must be a positive int or a tuple of 1 to {most} positive ints, "
                        f"got {value!r}")
    out = (value,) if np.isscalar(value) else tuple(value)
    if not 1 <= len(out) <= most:
        raise ValueError(f"{name} must be a positive int or a tuple of 1 to {most} positive ints, "
                         f"got {value!r}")
    return tuple(integer(name, d, low=1) for d in out)


def instances(name: str, values: Iterable[Any], kind: type, noun: str = "rows") -> list:
    """``values`` as a list, every item a ``kind`` (a table's rows): a ``TypeError``
    "``name`` must hold ``Kind`` ``noun``, got ``type``" otherwise."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of {kind.__name__} {noun}, got "
                        f"{type(values).__name__}")
    out = list(values)
    for item in out:
        if not isinstance(item, kind):
            raise TypeError(f"{name} must hold {kind.__name__} {noun}, got {type(item).__name__}")
    return out


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for non-negative ints (blocks that cover ``a`` items, ``b`` per block)."""
    return -(-a // b)


def checked(default: Any, check: Callable[..., Any], **limits: Any) -> Any:
    """A dataclass field with ``default`` that :func:`check_fields` checks with
    ``check(name, value, **limits)`` (``checked(48, integer, low=1)``, ``checked(0.25,
    positive)``, ``checked("float64", one_of, options=DTYPES)``): the allowed values stand
    beside the field, written once."""
    function("check", check)
    return dataclasses.field(default=default, metadata={"check": (check, limits)})


def check_fields(config: Any) -> None:
    """Check every :func:`checked` field of the dataclass instance ``config``, in the order
    of declaration, and keep what its check returns (``7.0`` -> ``7`` for an
    :func:`integer`; a frozen dataclass too): the first line of its ``__post_init__``."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config must be a dataclass instance, got {type(config).__name__}")
    for f in dataclasses.fields(config):
        if "check" in f.metadata:
            check, limits = f.metadata["check"]
            object.__setattr__(config, f.name, check(f.name, getattr(config, f.name), **limits))
