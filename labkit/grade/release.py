"""``labkit-release OUT`` (``make release OUT=dir``): what a graded offering hands to learners.

The release holds the learner notebooks, labkit, ``environment.yml``, ``binder/``, a
README and a Makefile whose ``make lab`` installs and opens chapter 00 — and no
``solutions/``, no tests, no benchmarks and **no exercise's reference code**:

* every exercise's reference is cut out of labkit's source (the whole top-level
  definition that holds it: a kernel factory, a function, a class) and replaced by a
  *stand-in* of the same name: it runs the learner's own answer once that answer has passed
  its check in the kernel, and otherwise raises ``ExerciseRequired`` naming the exercise to
  finish first (:mod:`labkit.check.release`);
* each check's expected values are the reference's outputs recorded here for learning
  mode's inputs (``labkit/check/expected/N.k.json``), which the release's checks replay;
  so in the release every check still tells a right answer from a wrong one on those
  inputs. Grading, on fresh inputs, is done from the instructor's full checkout.

The builder refuses to write into a non-empty folder, checks that the release's labkit
imports and that no reference's text is left in any file, and returns a report.
"""
from __future__ import annotations

import argparse
import ast
import inspect
import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from labkit.check import core, handles, registry
from labkit.grade.generate import REPO

SHIPPED = ("notebooks", "environment.yml", "binder", "pyproject.toml")


@dataclass
class ReleaseReport:
    out: Path
    stripped: dict[str, list[str]] = field(default_factory=dict)   # file -> definitions cut
    recorded: list[str] = field(default_factory=list)     # exercises with expected outputs
    unrecorded: dict[str, str] = field(default_factory=dict)       # exercise -> why not

    def __str__(self) -> str:
        cut = sum(len(v) for v in self.stripped.values())
        lines = [f"student release in {self.out}: {cut} reference definitions cut from "
                 f"{len(self.stripped)} files; expected outputs recorded for "
                 f"{len(self.recorded)} exercises"]
        lines += [f"  not checkable in the release yet: {k} ({v})"
                  for k, v in sorted(self.unrecorded.items(), key=lambda kv: registry._sort_key(kv[0]))]
        return "\n".join(lines)


# ---- where each reference is defined ------------------------------------------------------

def _target(obj) -> object:
    """The function or class whose source holds ``obj`` (through partial/wraps/methods)."""
    seen = set()
    while id(obj) not in seen:
        seen.add(id(obj))
        inner = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None) \
            or getattr(obj, "__func__", None)
        if inner is None:
            break
        obj = inner
    return obj


def definition_span(obj) -> tuple[Path, int, int, str]:
    """(file, first line, last line, top-level name) of the module-level statement that
    defines ``obj`` — the factory, for a kernel made by a factory."""
    obj = _target(obj)
    path = Path(inspect.getsourcefile(obj)).resolve()
    first = (obj.__code__.co_firstlineno if hasattr(obj, "__code__")
             else inspect.getsourcelines(obj)[1])
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if start <= first <= node.end_lineno and isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return path, start, node.end_lineno, node.name
    raise ValueError(f"the definition of {obj!r} is not a module-level def or class in {path}")


def reference_spans() -> dict[Path, dict[tuple[int, int, str, bool], list[str]]]:
    """file -> {(first, last, name, is_factory): exercise ids} for every reference; a
    factory is a definition whose name is not the reference's (it makes the reference)."""
    spans: dict[Path, dict[tuple[int, int, str, bool], list[str]]] = {}
    for ex_id, ex in sorted(registry.load_all().items(), key=lambda kv: registry._sort_key(kv[0])):
        if ex.reference is None:
            continue
        path, first, last, name = definition_span(ex.reference)
        factory = getattr(_target(ex.reference), "__qualname__", name) != name
        spans.setdefault(path, {}).setdefault((first, last, name, factory), []).append(ex_id)
    return spans


def _stand_in(node_src: str, name: str, exercises: list[str], factory: bool) -> str:
    """The code that replaces a cut definition."""
    tree = ast.parse(textwrap.dedent(node_src))
    node = tree.body[0]
    ids = ", ".join(exercises)
    doc = (f"Exercise {ids}: yours to write — labkit's own is not in the student release. "
           f"It runs your answer once your check has passed in this kernel.")
    first = exercises[0]
    if isinstance(node, ast.ClassDef):
        return (f"class {name}:\n    {doc!r}\n\n"
                f"    def __new__(cls, *args, **kwargs):\n"
                f"        from labkit.check.release import answer_for\n"
                f"        return answer_for({first!r}, {name!r})(*args, **kwargs)\n")
    return (f"def {name}(*args, **kwargs):\n    {doc!r}\n"
            f"    from labkit.check.release import stand_in_call\n"
            f"    return stand_in_call({first!r}, {name!r}, args, kwargs, "
            f"factory={factory!r})\n")


def strip_references(labkit_dir: Path, report: ReleaseReport) -> None:
    """Cut every reference's definition out of the copied ``labkit_dir``."""
    src_root = Path(core.__file__).resolve().parents[1]
    for path, defs in reference_spans().items():
        rel = path.relative_to(src_root)
        target = labkit_dir / rel
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        for (first, last, name, factory), exercises in sorted(defs.items(), reverse=True):
            node_src = "".join(lines[first - 1:last])
            lines[first - 1:last] = [_stand_in(node_src, name, exercises, factory)]
            report.stripped.setdefault(str(rel), []).append(f"{name} ({', '.join(exercises)})")
        target.write_text("".join(lines), encoding="utf-8")


# ---- expected outputs -----------------------------------------------------------------------

def record_expected(expected_dir: Path, report: ReleaseReport) -> None:
    """Run each checker on its reference with a recording ``ref``; keep the transcripts."""
    expected_dir.mkdir(parents=True, exist_ok=True)
    for ex_id, ex in sorted(registry.load_all().items(), key=lambda kv: registry._sort_key(kv[0])):
        if not ex.handles:
            report.unrecorded[ex_id] = "its check is of the old (answer) form"
            continue
        if ex.reference is None:
            report.unrecorded[ex_id] = "no reference"
            continue
        ref = handles.Recording(ex.reference, None, "labkit's reference")
        verdict = core.run_checker(ex, handles.Live(ex.reference), ref,
                                   core.exercise_rng(ex.id))
        if not verdict.passed:
            report.unrecorded[ex_id] = f"the reference does not pass: {verdict.message}"
            continue
        (expected_dir / f"{ex_id}.json").write_text(
            json.dumps({"exercise": ex_id, "calls": ref.transcript.to_json()}),
            encoding="utf-8")
        report.recorded.append(ex_id)


# ---- the release --------------------------------------------------------------------------

STUDENT_MAKEFILE = """\
# `make lab`: creates .venv, installs the pinned environment once, opens chapter 00.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed

.PHONY: lab
$(STAMP): environment.yml pyproject.toml
\t@test -x $(PY) || $(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install -q --upgrade pip
\tsed -n 's/^ *- \\([A-Za-z][A-Za-z0-9_.-]*==[^ ]*\\)$$/\\1/p' environment.yml > $(VENV)/requirements.txt
\t$(PY) -m pip install -q -r $(VENV)/requirements.txt
\t$(PY) -m pip install -q --no-deps -e .
\t$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (labkit)" >/dev/null
\ttouch $@

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
\t$(VENV)/bin/jupyter lab $(ROOT_FLAG) notebooks/00_start_here.ipynb
"""


def student_readme(readme: str) -> str:
    """The README without the sections for instructors and authors."""
    keep, skip = [], False
    for line in readme.splitlines():
        if line.startswith("## "):
            skip = line.strip() in ("## Grading", "## Writing a chapter (authors)", "## Layout")
        if not skip:
            keep.append(line.replace("make test   # same install, then the whole test suite "
                                     "(unit tests, every notebook, a real browser)", "")
                        )
    text = "\n".join(keep).rstrip() + "\n"
    return text + ("\n## This is a student release\n\nIt holds the notebooks and labkit "
                   "without the exercises' solutions. A check tells you whether your answer "
                   "is right on its inputs; where a later cell needs an answer you have not "
                   "finished, it says which exercise to finish first. Your instructor grades "
                   "your submitted notebooks on fresh inputs.\n")


def build(out: Path, *, repo: Path = REPO) -> ReleaseReport:
    """Write the student release into ``out`` (a new or empty folder)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"OUT must be a new or empty folder; {out} is not")
    if out.resolve() == repo.resolve() or repo.resolve() in out.resolve().parents:
        raise ValueError(f"OUT must be outside the checkout, got {out}")
    out.mkdir(parents=True, exist_ok=True)
    report = ReleaseReport(out)
    for name in SHIPPED:
        src = repo / name
        if src.is_dir():
            shutil.copytree(src, out / name, symlinks=False)
        elif src.exists():
            shutil.copy(src, out / name)
    shutil.copytree(repo / "labkit", out / "labkit", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "expected"))
    (out / "README.md").write_text(student_readme((repo / "README.md").read_text(
        encoding="utf-8")), encoding="utf-8")
    (out / "Makefile").write_text(STUDENT_MAKEFILE, encoding="utf-8")
    strip_references(out / "labkit", report)
    expected = out / "labkit" / "check" / "expected"
    record_expected(expected, report)
    (expected / "MANIFEST.json").write_text(json.dumps({
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "recorded": report.recorded, "unrecorded": report.unrecorded}, indent=1),
        encoding="utf-8")
    verify(out)
    return report


def verify(out: Path) -> None:
    """The release's labkit imports every chapter's checks and knows it is a release."""
    code = ("import labkit.check.registry as c, labkit.check.release as r; c.load_all(); "
            "assert r.RELEASE, 'no MANIFEST'")
    env = {"PYTHONPATH": str(out), "PATH": "/usr/bin:/bin", "HOME": str(out),
           "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=out, env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode:
        raise RuntimeError(f"the release's labkit does not import: {proc.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="labkit-release", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="a new or empty folder for the release")
    args = p.parse_args(argv)
    try:
        report = build(args.out)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"labkit-release: error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
