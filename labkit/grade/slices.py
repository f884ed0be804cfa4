"""Which cells an exercise's verdict runs: its answer cells and what they need.

The grader does not decide a verdict from the learner's whole notebook run (any cell of it
could rewrite labkit). For each exercise it runs, in a fresh process, only a *slice*: the
cells that define the names the check cell hands to ``check`` (``check("2.3",
softmax_backward)``: the expression ``softmax_backward``), and, transitively, the names
those cells use — found by reading the cells (AST), walking back from the check cell.

* A cell that holds a solution region in ``solutions/`` (an answer cell), and a cell the
  learner added, runs as the learner wrote it.
* Every other cell runs as the solution has it (the canonical text: imports, data,
  scaffolding), whatever the learner's notebook says; a canonical cell the learner deleted
  is put back where it was.
* Check cells, predictions and cells that build widgets never run in a slice.

Matching a learner's cell to the solution's goes by cell id, then by identical text (an
old notebook without ids), then — for an answer cell — by the name it defines.
"""
from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass

import nbformat

from labkit.grade.generate import BEGIN, CHECK_CALL, CHECK_TAG

CANONICAL, ANSWER, ADDED = "canonical", "answer", "added"
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__", "display", "get_ipython", "In",
                                  "Out", "exit", "quit"}
_NEVER = ("predict(", "reveal(", "_widget(", "check(")


@dataclass(frozen=True)
class SliceCell:
    id: str
    source: str
    kind: str                 # canonical / answer / added


@dataclass(frozen=True)
class Slice:
    exercise: str
    answer: str               # the expression the check cell passes to check(...)
    cells: tuple[SliceCell, ...]

    @property
    def learner_source(self) -> str:
        """Everything the learner wrote that this slice runs (what mentions are read in)."""
        return "\n\n".join(c.source for c in self.cells if c.kind != CANONICAL)


def python_of(source: str) -> str:
    """A cell's text as plain Python (IPython magics and ``!`` lines made calls)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # deferred: IPython
    except ImportError:              # pragma: no cover - IPython comes with the kernel
        return source
    return TransformerManager().transform_cell(source)


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(python_of(source))
    except SyntaxError:
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, defs, classes, imports, for/with)."""
    tree = _parse(source)
    if tree is None:
        return set()
    out: set[str] = set()

    def targets(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    out.add("*")
                else:
                    out.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                targets(t)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.If,
                               ast.While, ast.Try)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    out.add(sub.name)
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    out.add(sub.id)
        elif isinstance(node, ast.Expr):
            for sub in ast.walk(node):
                if isinstance(sub, ast.NamedExpr):
                    out.add(sub.target.id)
    return out


def used_names(source: str) -> set[str]:
    """Global names a cell reads — at top level, and inside its functions and classes
    (read when they are called) — less the names it binds itself and builtins."""
    try:
        table = symtable.symtable(python_of(source), "<cell>", "exec")
    except SyntaxError:
        return set()
    out: set[str] = set()

    def visit(t, top: bool):
        for sym in t.get_symbols():
            if not sym.is_referenced():
                continue
            if top or sym.is_global() or (sym.is_declared_global()):
                out.add(sym.get_name())
        for child in t.get_children():
            visit(child, False)

    visit(table, True)
    return out - defined_names(source) - _BUILTINS


def answer_expression(check_source: str) -> str:
    """The second argument of the check cell's ``check("N.k", <expr>)``."""
    tree = _parse(check_source)
    if tree is not None:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check"
                    and len(node.args) >= 2):
                return ast.unparse(node.args[1])
    return "None"


def _is_check(cell) -> bool:
    return cell.cell_type == "code" and (CHECK_TAG in cell.metadata.get("tags", [])
                                         or bool(CHECK_CALL.search(cell.source)))


def _runs_in_slices(source: str) -> bool:
    return not any(token in source for token in _NEVER)


CHECK = "check"


def canonical_merge(learner: nbformat.NotebookNode, solution: nbformat.NotebookNode
                    ) -> list[tuple[str, str, str]]:
    """The learner's code cells in the learner's order as ``(id, source, kind)``, with every
    canonical cell's text taken from the solution and deleted canonical cells put back;
    check cells stay as markers ``(exercise id, "", "check")``."""
    sol_cells = [c for c in solution.cells if c.cell_type == "code"]
    sol_by_id = {c.get("id"): c for c in sol_cells}
    answer_ids = {c.get("id") for c in sol_cells if BEGIN in c.source}
    canon_by_text = {c.source.strip(): c.get("id") for c in sol_cells
                     if c.get("id") not in answer_ids and not _is_check(c)}
    merged: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for i, cell in enumerate(learner.cells):
        if cell.cell_type != "code":
            continue
        if _is_check(cell):
            ex = cell.metadata.get("labkit", {}).get("exercise")
            calls = CHECK_CALL.findall(cell.source)
            merged.append((ex or (calls[0] if calls else "?"), "", CHECK))
            continue
        cid = cell.get("id") or f"#{i}"
        if cid not in sol_by_id:
            cid = canon_by_text.get(cell.source.strip(), cid)
        if cid in sol_by_id and cid not in seen:
            seen.add(cid)
            if cid in answer_ids:
                merged.append((cid, cell.source, ANSWER))
            else:
                merged.append((cid, sol_by_id[cid].source, CANONICAL))
        else:
            merged.append((cid, cell.source, ADDED))
    # canonical cells the learner deleted go back after their nearest surviving predecessor
    order = [c.get("id") for c in sol_cells]
    for k, cid in enumerate(order):
        if cid in seen or cid in answer_ids or _is_check(sol_by_id[cid]):
            continue
        at = 0
        for prev in reversed(order[:k]):
            pos = next((j for j, m in enumerate(merged) if m[0] == prev), None)
            if pos is not None:
                at = pos + 1
                break
        merged.insert(at, (cid, sol_by_id[cid].source, CANONICAL))
        seen.add(cid)
    return merged


def build_slice(learner: nbformat.NotebookNode, solution: nbformat.NotebookNode,
                exercise_id: str, merged: list[tuple[str, str, str]] | None = None) -> Slice:
    """The slice of ``exercise_id`` (whose canonical check cell is in ``solution``; the
    learner's notebook has the canonical check cells restored)."""
    check_cell = next(c for c in solution.cells if _is_check(c)
                      and c.metadata.get("labkit", {}).get("exercise") == exercise_id)
    expression = answer_expression(check_cell.source)
    merged = canonical_merge(learner, solution) if merged is None else merged
    solution_source = {c.get("id"): c.source for c in solution.cells if c.cell_type == "code"}
    at = next((j for j, m in enumerate(merged) if m[2] == CHECK and m[0] == exercise_id),
              len(merged))
    needed = used_names(expression) if expression != "None" else set()
    chosen: list[int] = []
    for j in range(at - 1, -1, -1):
        if not needed:
            break
        cid, source, kind = merged[j]
        if kind == CHECK or (kind == CANONICAL and not _runs_in_slices(source)):
            continue
        names = defined_names(source)
        if not names and kind == ANSWER and _parse(source) is None:
            # the learner's answer cell does not parse: it stands for what the solution's
            # cell defines, so that its SyntaxError is what the verdict reports
            names = defined_names(solution_source.get(cid, ""))
        if not (names & needed) and "*" not in names:
            continue
        chosen.append(j)
        needed -= names
        needed |= used_names(source) - names
    cells = tuple(SliceCell(*merged[j]) for j in sorted(chosen))
    return Slice(exercise_id, expression, cells)


def build_slices(learner: nbformat.NotebookNode, solution: nbformat.NotebookNode,
                 exercise_ids) -> dict[str, Slice]:
    merged = canonical_merge(learner, solution)
    return {ex: build_slice(learner, solution, ex, merged) for ex in exercise_ids}


def cells_feeding(nb: nbformat.NotebookNode, index: int) -> list[int]:
    """Indices of the code cells above cell ``index`` that define, transitively, the names it
    uses — with the notebook's first code cell (its imports and set-up) always — and
    ``index`` itself: what a reader runs to reach one cell (the browser test reaches each
    chapter's widget this way, without the labs in between). A check cell counts as defining
    its answer's name as well (a missing answer is rebound to labkit's reference there, so
    that later cells run), after the cell that wrote it."""
    code = [j for j, c in enumerate(nb.cells[:index]) if c.cell_type == "code"]
    need = used_names(nb.cells[index].source)
    chosen = set(code[:1])
    for j in reversed(code):
        source = nb.cells[j].source
        if _is_check(nb.cells[j]):
            if used_names(answer_expression(source)) & need:
                chosen.add(j)
                need |= used_names(source)
            continue
        names = defined_names(source)
        if j in chosen or names & need or "*" in names:
            chosen.add(j)
            need = (need - names) | (used_names(source) - names)
    return sorted(chosen) + [index]
