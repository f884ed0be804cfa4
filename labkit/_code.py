"""Objects named by ``"package.module:qualname"`` and every code object they hold.

The refusal of labkit's own implementations (:mod:`labkit.check.refuse`) compares code
objects; so does the watch that chapter 10's real runs keep in their worker processes
(:mod:`labkit.parallel.mp_labs`), which sits below the checks and so takes these from here.
:func:`by_value` ships a learner's code to another process (chapters 09-11's real runs).
Standard library only, and cloudpickle when :func:`by_value` is called.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from typing import Any


def resolve(item: Any) -> Any:
    """An object, or ``"package.module:qualname"`` imported and looked up."""
    if not isinstance(item, str):
        return item
    module, _, qualname = item.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _name(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or "?"
    return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', repr(obj)))}"


def _codes_of(obj: Any, seen: set[int] | None = None) -> list[types.CodeType]:
    """Every code object of a function, method, partial or class (methods, nested code)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    out: list[types.CodeType] = []
    if isinstance(obj, functools.partial):
        return _codes_of(obj.func, seen)
    if isinstance(obj, (staticmethod, classmethod)):
        return _codes_of(obj.__func__, seen)
    if isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                out += _codes_of(f, seen)
        return out
    if inspect.ismethod(obj):
        return _codes_of(obj.__func__, seen)
    if isinstance(obj, types.CodeType):
        out.append(obj)
        for const in obj.co_consts:
            if isinstance(const, types.CodeType):
                out += _codes_of(const, seen)
        return out
    if inspect.isfunction(obj):
        out += _codes_of(obj.__code__, seen)
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            out += _codes_of(wrapped, seen)
        return out
    if inspect.isclass(obj):
        for value in vars(obj).values():
            out += _codes_of(value, seen)
        return out
    call = getattr(type(obj), "__call__", None)
    if call is not None and getattr(call, "__module__", "").startswith("labkit"):
        out += _codes_of(call, seen)
    return out


def by_value(obj: Any) -> bytes:
    """``obj`` (a learner's class or function, typically from a notebook cell) serialised
    with cloudpickle so that a fresh process (a spawned rank, a pool worker, a torchrun
    worker) can rebuild it without importing the module it was defined in: code from
    ``__main__`` and from a module outside labkit travels by value, labkit's and the
    libraries' (torch, numpy) by reference (they are importable everywhere)."""
    import cloudpickle  # deferred: cloudpickle
    module = getattr(obj, "__module__", "__main__") or "__main__"
    mod = sys.modules.get(module)
    by_val = mod is not None and module != "__main__" and not module.startswith("labkit.") \
        and module.split(".")[0] not in ("torch", "numpy", "builtins")
    if by_val:
        cloudpickle.register_pickle_by_value(mod)
    try:
        return cloudpickle.dumps(obj)
    finally:
        if by_val:
            cloudpickle.unregister_pickle_by_value(mod)
