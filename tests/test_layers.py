"""labkit's layers, enforced: every module's imports are read with ``ast`` (imports inside
functions included) and checked against the one layer order below, which CONTRIBUTING's
"Layers" section states in words.

* A unit (``labkit.X`` and everything under it; ``labkit`` itself is the root package) may
  import its own modules and units of *lower* layers only: not a unit of a higher layer, and
  not another unit of its own layer (units of one layer know nothing of each other).
* No import cycle between modules, counting imports inside functions.
* An import inside a function body is allowed only where it defers a heavy import — a module
  of :data:`HEAVY`, or a labkit module that imports one when it is imported — and it says so
  in a comment containing "deferred" (on its line, or on the line above its group of
  imports). Anything else is imported at the top of the module.
"""
from __future__ import annotations

import ast
import io
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "labkit"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("validate", "_device", "_code"),          # no labkit import at all
    ("stats", "numerics", "torch_models", "controls", "show", "course", "env"),
    ("timing",),                               # the clock, torch's and numba's CUDA events
    ("hardware",),                             # data sheets, links, roofline, this machine
    ("grid",),
    ("autograd", "kernels", "memory", "data", "dataload"),   # the systems, independent
    ("perf",),                                 # the stack and evaluation, measuring those
    ("compress", "training", "cluster"),       # chapters 03, 08, 11 (they measure with perf)
    ("parallel",),                             # chapters 09, 10: uses memory and compress
    ("check",),                                # every chapter's exercise checks
    ("grade",),                                # the grader and the release
    ("labkit",),                               # the root package: labkit/__init__.py
)
"""Lowest first. Why this order: ``timing`` sits below ``hardware`` because measuring this
machine's roofline times a matmul; ``perf`` sits above the systems it profiles (autograd,
kernels, memory) and below the chapters that measure with it (``compress``'s deployed int8
models, ``training``'s accuracy); ``parallel`` uses ``memory``'s estimator and
``compress``'s quantizers (gradient compression); the root package runs before any
submodule, so it imports nothing but ``_device`` at its top."""

HEAVY = {
    # third-party modules worth deferring: seconds of import time measured on this machine
    # (python -X importtime), or optional (dev-only) tools
    "torch": "1.7 s", "numba": "0.4 s", "matplotlib": "0.3 s (pyplot 0.6 s)",
    "jax": "1.9 s", "jaxlib": "with jax", "scipy": "0.2 s (scipy.stats 1.3 s)",
    "sklearn": "1.5 s", "onnx": "1.5 s", "onnxruntime": "0.25 s", "onnxscript": "with onnx",
    "nbformat": "1.8 s", "nbclient": "with nbformat", "nbval": "pytest's plugin machinery",
    "jupytext": "1.2 s, and a dev-only tool", "ipywidgets": "0.2 s", "IPython": "0.1 s",
    "playwright": "dev-only", "cloudpickle": "only the worker processes need it",
    "resource": "Unix only: importing it on Windows fails",
    "cuda": "optional: numba-cuda's cuda.pathfinder is absent without a CUDA toolchain",
}

ROOT_DEFERRED = {"labkit.check.progress"}
"""``labkit.progress()`` imports the checks when called: the root package runs before every
submodule, so importing them at its top would import every chapter's checks for
``import labkit.validate``."""

PENDING: dict[str, str] = {
    # module -> the branch that edits it now; its violations are tolerated until that branch
    # lands (then delete the entry: a stale entry fails)
}


PENDING_CYCLES: list[set[str]] = [
    # import cycles tolerated until the branch that edits their modules lands
]


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "labkit"


LAYER_OF = {u: i for i, layer in enumerate(LAYERS) for u in layer}


def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


MODULES = modules()


def _targets(module: str, package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement imports (``from m import name`` is ``m.name`` when
    that is a labkit module, else ``m``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".")[: len(module.split(".")) - (node.level - (1 if package else 0))]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in MODULES else prefix
            for a in node.names]


class Import:
    __slots__ = ("module", "target", "line", "in_function", "deferred")

    def __init__(self, module, target, line, in_function, deferred):
        self.module, self.target, self.line = module, target, line
        self.in_function, self.deferred = in_function, deferred

    def __repr__(self) -> str:
        where = "in a function" if self.in_function else "at module level"
        return f"{self.module}:{self.line} imports {self.target} ({where})"


def _comments(source: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _deferred(node: ast.stmt, body: list[ast.stmt], comments: dict[int, str]) -> bool:
    """A "deferred" comment on the statement's lines, or above the group of imports that
    holds it (consecutive import statements of one block)."""
    i = next(k for k, s in enumerate(body) if s is node)
    first = i
    while first > 0 and isinstance(body[first - 1], (ast.Import, ast.ImportFrom)):
        first -= 1
    last = i
    while last + 1 < len(body) and isinstance(body[last + 1], (ast.Import, ast.ImportFrom)):
        last += 1
    lines = range(body[first].lineno - 1, body[last].end_lineno + 1)
    return any("deferred" in comments.get(n, "") for n in lines)


def imports() -> list[Import]:
    out = []
    for module, (path, package) in MODULES.items():
        source = path.read_text(encoding="utf-8")
        comments = _comments(source)

        def walk(node, in_function):
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for child in block:
                    if isinstance(child, (ast.Import, ast.ImportFrom)):
                        deferred = in_function and _deferred(child, block, comments)
                        for target in _targets(module, package, child):
                            out.append(Import(module, target, child.lineno, in_function,
                                              deferred))
                    inner = in_function or isinstance(child, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))
                    walk(child, inner)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.With, ast.AsyncWith, ast.match_case)) \
                        and child not in getattr(node, "body", ()):
                    walk(child, in_function)

        walk(ast.parse(source), False)
    return out


IMPORTS = imports()


def _heavy_modules() -> dict[str, str]:
    """labkit module -> the heavy module it imports when imported (through its module-level
    imports and its parent packages'), for the labkit modules that do."""
    edges = defaultdict(set)
    for imp in IMPORTS:
        if not imp.in_function:
            edges[imp.module].add(imp.target)
    for module in MODULES:
        parts = module.split(".")
        edges[module].update(".".join(parts[:k]) for k in range(1, len(parts)))
    heavy: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for module in MODULES:
            if module in heavy:
                continue
            for target in edges[module]:
                why = (target.split(".")[0] if target.split(".")[0] in HEAVY
                       else heavy.get(target) if target.startswith("labkit") else None)
                if why:
                    heavy[module] = why
                    changed = True
                    break
    return heavy


HEAVY_LABKIT = _heavy_modules()


def _labkit(target: str) -> str | None:
    """The labkit module an import target names (a module, or a name in a package)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def violations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for imp in IMPORTS:
        target = _labkit(imp.target) if imp.target.split(".")[0] == "labkit" else None
        if target is not None and unit(target) != unit(imp.module):
            a, b = LAYER_OF[unit(imp.module)], LAYER_OF[unit(target)]
            if unit(imp.module) == "labkit" and imp.in_function and target in ROOT_DEFERRED:
                continue
            if b > a:
                found[imp.module].append(f"{imp}: {unit(target)} is in a higher layer")
            elif a == b:
                found[imp.module].append(f"{imp}: {unit(target)} is a unit of the same layer")
        if imp.in_function and not (unit(imp.module) == "labkit" and target in ROOT_DEFERRED):
            heavy = (HEAVY_LABKIT.get(target) if target is not None
                     else imp.target.split(".")[0] if imp.target.split(".")[0] in HEAVY
                     else None)
            if heavy is None:
                found[imp.module].append(f"{imp}: not heavy: import it at the top")
            elif not imp.deferred:
                found[imp.module].append(f"{imp}: defers {heavy}: say so (# deferred: ...)")
    return found


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), every import
    counted (a cycle closed inside a function is still a cycle)."""
    graph = defaultdict(set)
    for imp in IMPORTS:
        target = _labkit(imp.target) if imp.target.startswith("labkit") else None
        if target is not None and target != imp.module:
            graph[imp.module].add(target)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer():
    units = {unit(m) for m in MODULES}
    assert sorted(units - set(LAYER_OF)) == [], "add these to LAYERS (and CONTRIBUTING)"
    assert sorted(set(LAYER_OF) - units) == [], "LAYERS names units that do not exist"


def test_no_import_cycle_between_modules():
    found = [c for c in cycles() if set(c) not in PENDING_CYCLES]
    assert found == []
    stale = [c for c in PENDING_CYCLES if sorted(c) not in cycles()]
    assert stale == [], "these cycles are gone: delete them from PENDING_CYCLES"


def test_imports_go_down_the_layers_and_inside_functions_only_defer_heavy_ones():
    found = {m: v for m, v in violations().items() if m not in PENDING}
    assert found == {}, "\n".join(line for v in found.values() for line in v)


def test_pending_modules_are_still_pending():
    """An entry of PENDING whose module now follows the rules is stale: delete it."""
    found = violations()
    stale = sorted(m for m in PENDING if m not in found or m not in MODULES)
    assert stale == [], "these follow the rules now: delete them from PENDING"


def test_the_checker_finds_what_it_must():
    """The rules fail where they must: a made-up upward import, a same-layer import, a light
    import inside a function and an undeclared deferral are each reported."""
    code = ("import labkit.check\nfrom labkit.kernels import ops\n"
            "def f():\n    from labkit import validate\n    import torch\n"
            "def g():\n    import torch  # deferred: torch is heavy\n")
    tree = ast.parse(code)
    comments = _comments(code)
    f, g = tree.body[2], tree.body[3]
    assert not _deferred(f.body[1], f.body, comments) and _deferred(g.body[0], g.body, comments)
    assert LAYER_OF["check"] > LAYER_OF["memory"] and LAYER_OF["kernels"] == LAYER_OF["memory"]
    assert "torch" in HEAVY and "labkit.validate" not in HEAVY_LABKIT
    assert _labkit("labkit.kernels.ops.matmul_launch") == "labkit.kernels.ops"


@pytest.mark.parametrize("doc", ["CONTRIBUTING.md"])
def test_contributing_states_the_same_order(doc):
    text = (REPO / doc).read_text(encoding="utf-8")
    section = text[text.index("## Layers"):]
    section = section[: section.index("\n## ", 4)]
    positions = [min(section.index(f"`{u}`") for u in layer) for layer in LAYERS]
    assert positions == sorted(positions), "CONTRIBUTING lists the layers in another order"
