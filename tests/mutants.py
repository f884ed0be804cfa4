"""Wrong answers written as "the reference with this one change" (mutation testing).

``mutant(reference, old, new)`` reads the reference's source (``inspect.getsource``),
asserts that ``old`` occurs exactly ``count`` times, replaces it with ``new`` and compiles
the result where the reference was defined: in the reference's module globals (``math``,
``cuda`` helpers ...) and with the reference's closure values (``block``, ``tile`` ... of a
cached kernel factory such as ``library.reduce_shared(64)``). The mutant is a plain
function, like one a learner writes: a ``fn(cuda)`` factory stays a factory whose inner
``kernel`` carries the change, so it runs under labkit's tracer and Numba's simulator as a
hand-written one does. A test that states the mutation cannot drift from the reference:
when the reference changes so that ``old`` is gone, the test fails and says so.

An ``old`` without a newline is replaced where it stands in its line (``"t >= d"`` ->
``"t > d"``); lines after the first of ``new`` take the indentation of that line. An
``old`` with newlines (a triple-quoted block, at any indentation) is matched as whole lines
at any one indentation and replaced by ``new``'s lines, ``new``'s first line standing where
``old``'s first line stood (blank lines around either are dropped; each is dedented).
Docstrings are neither searched nor changed. The mutant's source is kept in ``linecache``,
so tracebacks show the changed lines and a mutant can be mutated again.
"""
from __future__ import annotations

import __future__
import ast
import inspect
import itertools
import linecache
import textwrap
from typing import Callable

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag
_SERIAL = itertools.count(1)
_SCOPE = "__mutant_scope__"


def _indent_of(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _short(text: str, width: int = 40) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 3] + "..."


def _docstring_lines(src: str) -> set[int]:
    """The line numbers of the docstrings in ``src`` (never mutated, never counted)."""
    skip: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                ast.get_docstring(node, clean=False) is not None):
            doc = node.body[0]
            skip.update(range(doc.lineno, doc.end_lineno + 1))
    return skip


def _replace_inline(src: str, old: str, new: str) -> tuple[str, list[int]]:
    """Replace every occurrence of the one-line ``old``; return the text and their lines."""
    skip = _docstring_lines(src)
    out, lines, pos, done = [], [], 0, 0
    while (hit := src.find(old, pos)) >= 0:
        pos = hit + len(old)
        line = src.count("\n", 0, hit) + 1
        if line in skip:
            continue
        indent = _indent_of(src[src.rfind("\n", 0, hit) + 1:hit])
        out += [src[done:hit], ("\n" + indent).join(new.split("\n"))]
        lines.append(line)
        done = pos
    return "".join(out) + src[done:], lines


def _lines(text: str) -> list[str]:
    """``text`` dedented, split into lines, without blank lines before and after."""
    lines = textwrap.dedent(text).split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _replace_block(src: str, old: str, new: str) -> tuple[str, list[int]]:
    """Replace every run of whole lines equal to the dedented ``old`` at one indentation;
    ``new``'s first line takes the indentation of ``old``'s first line."""
    want, repl = _lines(old), _lines(new)
    have = src.split("\n")
    skip = _docstring_lines(src)
    out, lines, k = [], [], 0
    lead = _indent_of(want[0])      # old may start deeper than its later lines
    shift = _indent_of(repl[0]) if repl else ""
    while k < len(have):
        indent = _indent_of(have[k])
        indent = indent[:len(indent) - len(lead)] if indent.endswith(lead) else None
        window = have[k:k + len(want)]
        if indent is not None and len(window) == len(want) and not skip & set(
                range(k + 1, k + 1 + len(want))) and all(
                h.rstrip() == ((indent + w).rstrip() if w.strip() else "")
                for h, w in zip(window, want)):
            first = indent + lead          # where old's first line stood
            if not first.endswith(shift):
                raise ValueError(f"new's first line is indented deeper than old's first "
                                 f"line (source line {k + 1}) allows")
            base = first[:len(first) - len(shift)]
            out += [base + r if r.strip() else "" for r in repl]
            lines.append(k + 1)
            k += len(want)
        else:
            out.append(have[k])
            k += 1
    return "\n".join(out), lines


def mutant(reference: Callable, old: str, new: str, count: int = 1) -> Callable:
    """The function ``reference`` with ``old`` replaced by ``new`` in its source.

    ``reference`` is a function (a plain function, a ``fn(cuda)`` kernel factory, the
    factory a cached builder returned, or an earlier mutant). ``old`` must occur exactly
    ``count`` times (ValueError otherwise, naming the reference and where ``old`` stood);
    every occurrence is replaced. Decorators are not applied again.
    """
    if not isinstance(old, str) or not isinstance(new, str):
        raise TypeError("old and new must be strings")
    if not old.strip():
        raise ValueError("old must not be blank")
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    fn = inspect.unwrap(reference)
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TypeError(f"reference must be a Python function, got {type(reference).__name__}")
    where = f"{fn.__module__}.{fn.__qualname__}"
    src = textwrap.dedent(inspect.getsource(fn))
    if "\n" in old:
        changed, lines = _replace_block(src, old, new)
    else:
        changed, lines = _replace_inline(src, old, "\n".join(_lines(new)))
    if len(lines) != count:
        at = f" (source lines {lines})" if lines else ""
        raise ValueError(f"{old!r} occurs {len(lines)} times in the source of {where}{at}, "
                         f"expected {count}: did the reference change? Quote more of the "
                         "line to name one place, or pass count=")
    if changed == src:
        raise ValueError(f"replacing {old!r} by {new!r} leaves {where} unchanged")

    tree = ast.parse(changed)
    (made,) = tree.body
    if not isinstance(made, ast.FunctionDef):
        raise TypeError(f"the source of {where} is not a single function definition")
    made.decorator_list = []
    # wrap the def in a function whose parameters are the reference's free variables, so
    # they are closure cells of the mutant exactly as of the reference
    free = list(code.co_freevars)
    scope = ast.FunctionDef(
        name=_SCOPE, args=ast.arguments(posonlyargs=[], args=[ast.arg(v) for v in free],
                                        kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[made, ast.Return(ast.Name(made.name, ast.Load()))], decorator_list=[],
        returns=None, **({"type_params": []} if "type_params" in ast.FunctionDef._fields
                         else {}))
    tree.body = [ast.fix_missing_locations(ast.copy_location(scope, made))]
    ast.fix_missing_locations(tree)

    filename = f"<mutant {next(_SERIAL)} of {where}>"
    linecache.cache[filename] = (len(changed), None, changed.splitlines(True), filename)
    compiled = compile(tree, filename, "exec", flags=code.co_flags & _FUTURE_FLAGS,
                       dont_inherit=True)
    namespace: dict = {}
    exec(compiled, fn.__globals__, namespace)  # noqa: S102 - the reference's own source
    values = [cell.cell_contents for cell in (fn.__closure__ or ())]
    result = namespace[_SCOPE](*values)
    result.__name__ = f"{fn.__name__}_mutant"
    result.__qualname__ = f"{fn.__qualname__} with {_short(old)!r} -> {_short(new)!r}"
    result.__doc__ = fn.__doc__
    result.__mutation__ = (old, new)
    return result
