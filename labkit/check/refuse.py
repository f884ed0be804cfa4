"""Refuse labkit's own implementation of an answer.

A check that labkit's implementation passes teaches the import. Each exercise lists the
objects that compute its answer: its reference and the library functions (or classes) that
do the same work (``answers=`` in :func:`labkit.check.core.exercise`). An answer is labkit's
when

* it *is* one of them, a subclass of a listed class, a ``functools.partial`` or bound method
  of one, or reaches one through ``__wrapped__`` (``functools.wraps``);
* its code is one of theirs: the same code object (``types.FunctionType(ref.__code__, ...)``),
  a code object made from theirs (``code.replace(...)`` keeps the file and first line), or,
  for code of more than :data:`MIN_INSTRUCTIONS` instructions, the same bytecode, constants
  and names (a copy of the source with its variables renamed compiles to the same bytecode);
* while the check runs it, it calls one of them (:class:`watch`, a profile hook on this
  thread and on threads started meanwhile, as the tracer's are).

:func:`mentions` reads an answer's source for imports of, and attribute access to, a
listed object: the grader applies it to the learner's cell text, which no code of the
learner's can change.
"""
from __future__ import annotations

import ast
import dis
import functools
import importlib
import inspect
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Iterable

from labkit._code import _codes_of, _name, resolve  # noqa: F401  (resolve: used by checks)

MIN_INSTRUCTIONS = 80      # shorter code (a formula, a few lines) is written the same way by anyone


def _own_codes(obj: Any) -> list[types.CodeType]:
    """The answer's own top-level code: a function's, a class's methods', not nested code
    (a learner's helper that happens to equal one of labkit's is not the answer)."""
    if isinstance(obj, functools.partial):
        return _own_codes(obj.func)
    if inspect.ismethod(obj):
        return _own_codes(obj.__func__)
    if inspect.isfunction(obj):
        return [obj.__code__]
    if inspect.isclass(obj):
        out = []
        for value in vars(obj).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value):
                out.append(value.__code__)
        return out
    return []


@functools.lru_cache(maxsize=8192)
def _instructions(code: types.CodeType) -> int:
    """Instructions of ``code`` (cached: the call watch asks for every call it sees)."""
    return sum(1 for ins in dis.get_instructions(code)
               if ins.opname not in ("CACHE", "RESUME", "NOP", "EXTENDED_ARG"))


@functools.lru_cache(maxsize=8192)
def _shape(code: types.CodeType) -> tuple:
    consts = tuple(_shape(c) if isinstance(c, types.CodeType) else repr(c)
                   for c in code.co_consts)
    return code.co_code, consts, code.co_names


_SHAPES: dict[types.CodeType, tuple | bool] = {}   # code -> its shape (False: too short)


def _where(code: types.CodeType) -> tuple[str, int]:
    return code.co_filename, code.co_firstlineno


@dataclass
class Refused:
    """The objects whose use counts as labkit's implementation, with their code."""
    objects: list[Any]
    codes: dict[int, str] = field(default_factory=dict)        # id(code) -> owner's name
    places: dict[tuple[str, int], str] = field(default_factory=dict)
    shapes: dict[tuple, str] = field(default_factory=dict)
    _keep: list[types.CodeType] = field(default_factory=list)   # keeps ids valid

    @classmethod
    def of(cls, items: Iterable[Any]) -> "Refused":
        objects = [resolve(i) for i in items if i is not None]
        out = cls(objects)
        for obj in objects:
            for code in _codes_of(obj):
                name = _name(obj)
                out._keep.append(code)
                out.codes[id(code)] = name
                out.places[_where(code)] = name
                if _instructions(code) >= MIN_INSTRUCTIONS:
                    out.shapes[_shape(code)] = name
        return out

    def match_code(self, code: types.CodeType) -> str | None:
        """Called for every function call the watch sees: dictionary lookups first; the
        bytecode comparison only for code long enough (its cost cached per code object)."""
        name = self.codes.get(id(code)) or self.places.get(_where(code))
        if name is None and self.shapes and len(code.co_code) >= 2 * MIN_INSTRUCTIONS:
            key = _SHAPES.get(code)
            if key is None:
                key = _SHAPES[code] = (_shape(code) if _instructions(code) >= MIN_INSTRUCTIONS
                                       else False)
            if key:
                name = self.shapes.get(key)
        return name

    def __bool__(self) -> bool:
        return bool(self.objects)


def implementation(answer: Any, refused: Refused) -> str | None:
    """The name of the listed object ``answer`` is (or wraps, or copies), or None."""
    if not refused:
        return None
    for obj in refused.objects:
        if answer is obj:
            return _name(obj)
        if inspect.isclass(obj) and inspect.isclass(answer):
            try:
                if issubclass(answer, obj):
                    return _name(obj)
            except TypeError:
                pass
    seen: set[int] = set()
    target = answer
    while target is not None and id(target) not in seen:
        seen.add(id(target))
        for obj in refused.objects:
            if target is obj:
                return _name(obj)
        if isinstance(target, functools.partial):
            target = target.func
        elif inspect.ismethod(target):
            target = target.__func__
        else:
            target = getattr(target, "__wrapped__", None)
    for code in _own_codes(answer):
        name = refused.match_code(code)
        if name:
            return name
    return None


_THREADING_SETPROFILE = threading.setprofile.__code__


class watch:
    """``with watch(refused) as w: answer(...)``; afterwards ``w.hit`` names the first listed
    object called meanwhile (or None) and ``w.switched_off`` says whether the answer removed
    the hook (``sys.setprofile(None)`` or another profiler)."""

    def __init__(self, refused: Refused):
        self.refused = refused
        self.hit: str | None = None
        self.switched_off = False
        self._armed = False

    def _hook(self, frame, event, arg):
        if not self._armed:
            return
        if event == "call":
            if self.hit is None:
                name = self.refused.match_code(frame.f_code)
                if name:
                    self.hit = name
            if frame.f_code is _THREADING_SETPROFILE:
                self.switched_off = True
        elif event == "c_call" and arg is sys.setprofile:
            self.switched_off = True      # even if the answer puts the hook back afterwards

    def __enter__(self) -> "watch":
        if not self.refused:
            return self
        self._old = sys.getprofile()
        self._old_threading = threading.getprofile()
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        self._armed = True
        return self

    def __exit__(self, *exc) -> None:
        if not self.refused:
            return
        self._armed = False
        if sys.getprofile() != self._hook:
            self.switched_off = True
        sys.setprofile(self._old)
        threading.setprofile(self._old_threading)


def mentions(source: str, refused: Refused) -> str | None:
    """The first listed object that ``source`` imports from labkit or reaches as an
    attribute of a labkit module (``labkit.grid.blocks_needed``, ``from labkit.grid import
    blocks_needed as b``, ``getattr(grid, "blocks_needed")``), or None. A function the
    learner defines under the same name is not a mention."""
    if not refused:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    wanted: dict[tuple[str, str], str] = {}
    names: dict[str, str] = {}
    for obj in refused.objects:
        module, name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
        if module and name:
            wanted[(module, name)] = _name(obj)
            names[name] = _name(obj)
    modules: dict[str, str] = {}               # local name -> labkit module path
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labkit"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if alias.name in names and _same_object(node.module, alias.name, names):
                    return names[alias.name]
                modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("labkit"):
                    modules[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                return names[node.attr]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            return names[node.args[1].value]
    return None


def _same_object(module: str, name: str, names: dict[str, str]) -> bool:
    """Whether ``from module import name`` gives a listed object (a re-export counts)."""
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception:
        return False
    return _name(obj) == names[name] or any(
        _name(obj) == n for n in names.values())
