"""Bad input everywhere (issue 16): one table of public entry points, every numeric or
named parameter fed the values a hostile but fair user would try.

Each row names a callable, arguments that work, and the parameters to sweep. For each
parameter and each bad value the call must raise ``ValueError`` or ``TypeError`` whose
message names the parameter — or, where the row lists the value as accepted, return
normally. A deep error (ZeroDivisionError, AttributeError, OverflowError, numpy's dtype
errors) or a silent nonsense result fails the row.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

BAD_NUMBERS = (None, "abc", "3", True, math.nan, math.inf, -math.inf, 0, -1, 2.5, [], {})
BAD_ARRAYS = (None, "abc", [], [[1.0, 2.0], [3.0]], np.array(["a", "b"]), object())


@dataclass(frozen=True)
class Row:
    target: str                          # "module:function"
    kwargs: dict                         # arguments that work
    sweep: tuple[str, ...]               # parameters to feed bad values
    accepted: dict = field(default_factory=dict)   # param -> bad values that are valid
    arrays: tuple[str, ...] = ()         # parameters swept with BAD_ARRAYS instead

    def fn(self) -> Callable[..., Any]:
        module, name = self.target.split(":")
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


MiB = 1 << 20
ROWS: list[Row] = [
    # labkit.memory
    Row("labkit.memory.allocator:CachingAllocator", {"capacity": 1 << 30},
        ("capacity", "max_split_size_mb", "max_non_split_rounding_mb",
         "garbage_collection_threshold"),
        accepted={"capacity": (None,), "max_split_size_mb": (None,),
                  "max_non_split_rounding_mb": (None,), "garbage_collection_threshold": (None,)}),
    Row("labkit.memory.allocator:round_size", {"size": 1000}, ("size",)),
    Row("labkit.memory.allocator:allocation_size", {"rounded_size": 4 * MiB}, ("rounded_size",)),
    Row("labkit.memory.allocator:pool_of", {"rounded_size": 4 * MiB}, ("rounded_size",)),
    Row("labkit.memory.allocator:roundup_power2_next_division", {"size": 1200, "divisions": 4},
        ("size", "divisions")),
    # labkit.hardware
    Row("labkit.hardware:gpu", {"key": "H100"}, ("key",)),
    # labkit.validate's own helpers
    Row("labkit.validate:ceil_div", {"a": 10, "b": 3}, ()),
]


def _cases():
    for row in ROWS:
        for param in row.sweep:
            values = BAD_ARRAYS if param in row.arrays else BAD_NUMBERS
            for bad in values:
                if any(_same(bad, ok) for ok in row.accepted.get(param, ())):
                    continue
                yield pytest.param(row, param, bad, id=f"{row.target}-{param}-{bad!r:.12}")


@pytest.mark.parametrize("row, param, bad", list(_cases()))
def test_bad_value_gets_a_clear_error(row, param, bad):
    fn = row.fn()
    kwargs = dict(row.kwargs, **{param: bad})
    try:
        fn(**kwargs)
    except (ValueError, TypeError) as exc:
        assert param in str(exc), f"{row.target}({param}={bad!r}) said {exc!r}"
        return
    except Exception as exc:  # noqa: BLE001 — the point is to catch the deep ones
        pytest.fail(f"{row.target}({param}={bad!r}) raised {type(exc).__name__}: {exc}")
    pytest.fail(f"{row.target}({param}={bad!r}) returned without a word")


@pytest.mark.parametrize("row", ROWS, ids=[r.target for r in ROWS])
def test_good_arguments_work(row):
    row.fn()(**row.kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20),
                 st.text(max_size=4), st.booleans(), st.none()))
def test_validate_integer_never_fails_deep(value):
    from labkit import validate
    try:
        out = validate.integer("n", value, low=1)
    except (ValueError, TypeError) as exc:
        assert "n must" in str(exc)
    else:
        assert isinstance(out, int) and out >= 1 and out == value
