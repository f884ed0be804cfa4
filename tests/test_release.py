"""The student release (issue 21): no solutions, no reference's text anywhere in it, and
every check in it passes a right answer and fails a wrong one, from what ships."""
import inspect
import json
import subprocess
import sys
import textwrap

import nbformat
import pytest

from labkit.check import core, registry
from labkit.grade import release
from labkit.grade.generate import SOLUTIONS, check_cells
from labkit.grade.slices import build_slices

PROBE = textwrap.dedent("""
    import json, linecache, sys, types
    from IPython.core.inputtransformer2 import TransformerManager
    from labkit.check import core, release
    assert release.RELEASE
    quiet = types.SimpleNamespace(run_line_magic=lambda *a, **k: None,
                                  run_cell_magic=lambda *a, **k: None, system=lambda *a: None)
    spaces = {}                      # one namespace per notebook, as in a kernel of its own
    out, answers = {}, {}
    for item in json.load(sys.stdin):
        ns = spaces.setdefault(item["notebook"], {"get_ipython": lambda: quiet,
                                                  "__name__": "__main__"})
        for k, cell in enumerate(item["cells"]):
            code = TransformerManager().transform_cell(cell)
            name = f"<cell {item['exercise']}-{k}>"    # in linecache, as IPython's cells are:
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # the tracer reads kernels' source
            try:
                exec(compile(code, name, "exec"), ns)
            except Exception as exc:
                print("cell failed:", item["exercise"], type(exc).__name__, exc,
                      file=sys.stderr)
        answers[item["exercise"]] = eval(item["answer"], ns)
    # a check may need another exercise's answer (labkit's is not shipped): evaluate until
    # nothing more passes, as a learner who finishes them in any order would
    todo = list(answers)
    while todo:
        progress = False
        for ex_id in list(todo):
            right = core.evaluate(ex_id, answers[ex_id])
            out[ex_id] = [right.status, right.message,
                          core.evaluate(ex_id, lambda *a, **k: 0).status]
            if right.passed:             # as check() does: later labkit cells may use it
                release.remember(core.get(ex_id), answers[ex_id])
                todo.remove(ex_id)
                progress = True
        if not progress:
            break
    # a library stand-in: before and after its exercise has passed (forget the answers
    # the loop above remembered: 0.1's among them)
    release.PASSED.clear()
    import labkit.grid as grid
    try:
        grid.blocks_needed(10, 4)
        before = "ran"
    except core.ExerciseRequired as exc:
        before = str(exc)
    core.check("0.1", lambda n, t: -(-n // t))
    out["stand-in"] = [before, grid.blocks_needed(10, 4)]
    ns = {"check": core.check, "blocks_needed": lambda n, t: n // t}
    exec('check("0.1", blocks_needed)', ns)
    try:
        ns["blocks_needed"](10, 4)
        out["rebound"] = "ran"
    except core.ExerciseRequired as exc:
        out["rebound"] = str(exc)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "course"
    report = release.build(out)
    return out, report


def test_the_release_ships_notebooks_and_labkit_but_no_solutions(built):
    out, report = built
    assert (out / "notebooks" / "00_start_here.ipynb").exists()
    assert (out / "labkit" / "check" / "expected" / "MANIFEST.json").exists()
    for absent in ("solutions", "tests", "benchmarks", ".ci", "CONTRIBUTING.md"):
        assert not (out / absent).exists(), absent
    assert "## Grading" not in (out / "README.md").read_text()
    assert "make lab" in (out / "Makefile").read_text()
    assert sum(len(v) for v in report.stripped.values()) >= len(
        [e for e in registry.load_all().values() if e.reference is not None]) // 2


def _body_lines(obj) -> list[str]:
    path, first, last, _ = release.definition_span(obj)
    src = "".join(path.read_text(encoding="utf-8").splitlines(True)[first - 1:last])
    tree = __import__("ast").parse(textwrap.dedent(src))
    doc_lines = set()
    for node in __import__("ast").walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], __import__("ast").Expr) \
                and isinstance(getattr(body[0], "value", None), __import__("ast").Constant) \
                and isinstance(body[0].value.value, str):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = textwrap.dedent(src).splitlines()
    return [ln.strip() for k, ln in enumerate(lines, 1)
            if k not in doc_lines and ln.strip() and not ln.strip().startswith(("#", "@"))
            and k > 1]


def _shingles(lines: list[str], window: int) -> set[tuple[str, ...]]:
    return {tuple(lines[i:i + window]) for i in range(len(lines) - window + 1)}


def _checkout_lines() -> dict[str, list[str]]:
    root = release.REPO / "labkit"
    return {str(p): [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines()
                     if ln.strip()] for p in root.rglob("*.py")}


def test_no_reference_text_is_left_in_any_file(built):
    """Every run of four lines of a reference's body that is its own — found nowhere else in
    the checkout's labkit (not the boilerplate its kernel shares with the ladder's others) —
    is absent from every file of the release."""
    out, _ = built
    files = {}
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".json", ".txt", ".yml"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".ipynb":
                nb = nbformat.reads(text, as_version=4)
                text = "\n".join(c.source for c in nb.cells)
            files[path] = [ln.strip() for ln in text.splitlines() if ln.strip()]
    checkout = _checkout_lines()
    shingled: dict[tuple[str, int], set] = {}    # (path, window) -> its shingles, made once

    def shingles_of(path, lines, window):
        if (path, window) not in shingled:
            shingled[path, window] = _shingles(lines, window)
        return shingled[path, window]

    found, checked = [], 0
    for ex_id, ex in registry.load_all().items():
        if ex.reference is None:
            continue
        body = _body_lines(ex.reference)
        window = min(4, len(body))
        own = {s for s in _shingles(body, window) if sum(map(len, s)) >= 40}
        home = str(release.definition_span(ex.reference)[0])
        for path, lines in checkout.items():
            shared = own & shingles_of(path, lines, window)
            if path == home:      # the reference's own file: only what occurs twice there
                shared = {s for s in shared if sum(
                    lines[i:i + window] == list(s) for i in range(len(lines))) > 1}
            own -= shared
        checked += bool(own)
        for path, lines in files.items():
            hit = own & shingles_of(path, lines, window)
            if hit:
                found.append(f"{ex_id}: {path.relative_to(out)}: {next(iter(hit))}")
    assert checked >= 40, checked
    assert not found, "\n".join(found[:20])


def test_every_check_in_the_release_passes_right_and_fails_wrong(built):
    out, report = built
    items = []
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        sol = nbformat.read(path, as_version=4)
        ids = [i for i in check_cells(sol) if i in report.recorded]
        for ex_id, sl in build_slices(sol, sol, ids).items():
            items.append({"exercise": ex_id, "answer": sl.answer, "notebook": path.name,
                          "cells": [c.source for c in sl.cells]})
    assert items
    env = {"PYTHONPATH": str(out), "PATH": "/usr/bin:/bin", "HOME": str(out),
           "MPLBACKEND": "Agg", "LABKIT_PROGRESS": str(out / "progress.json")}
    proc = subprocess.run([sys.executable, "-c", PROBE], input=json.dumps(items), cwd=out,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {k: v for k, v in got.items() if k not in ("stand-in", "rebound")
           and (v[0] != "pass" or v[2] == "pass")}
    assert not bad, bad
    before, after = got["stand-in"]
    assert "exercise 0.1" in before and "not in the student release" in before and after == 3
    assert "finish" in got["rebound"].lower() and "0.1" in got["rebound"]


def test_build_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "x").write_text("1")
    with pytest.raises(ValueError, match="new or empty folder"):
        release.build(tmp_path)


def test_every_reference_has_a_definition_to_cut():
    for ex in registry.load_all().values():
        if ex.reference is not None:
            path, first, last, name = release.definition_span(ex.reference)
            assert first <= last and path.suffix == ".py" and inspect.isfunction(
                ex.reference) or inspect.isclass(ex.reference) or callable(ex.reference)
