"""Grade learners' notebooks: restore checks, run nbval in grading mode, collect verdicts.

Each notebook runs in its own process (pytest + nbval, ``LABKIT_GRADE=1``) in a temporary
copy, under a wall-clock limit; the check cells append their verdicts to a log file that is
the source of the score. What goes wrong around a notebook (not JSON, missing, too slow,
kernel crash, checks that never ran) becomes a note and an ``error`` status, not a traceback.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import nbformat

from labkit.check.core import ERROR, GRADE_ENV, LOG_ENV, MISSING
from labkit.grade.generate import SOLUTIONS, NotebookFormatError, check_cells
from labkit.grade.restore import restore_checks


@dataclass
class NotebookGrade:
    learner: str
    notebook: str
    statuses: dict[str, str]              # exercise id -> pass/fail/missing/error
    messages: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed_cells: list[str] = field(default_factory=list)  # ids of non-check cells that failed
    seconds: float = 0.0
    submitted: bool = True


@dataclass(frozen=True)
class Assignment:
    """The solution notebooks that define what is graded, with their exercise ids."""
    solutions: dict[str, nbformat.NotebookNode]
    exercises: dict[str, list[str]]       # notebook name -> exercise ids in order

    @classmethod
    def load(cls, folder: Path = SOLUTIONS) -> "Assignment":
        folder = Path(folder)
        if not folder.is_dir():
            raise ValueError(f"solutions folder {folder} does not exist")
        sols, exs = {}, {}
        for path in sorted(folder.glob("*.ipynb")):
            try:
                nb = nbformat.read(path, as_version=4)
                ids = list(check_cells(nb))
            except NotebookFormatError as exc:
                raise NotebookFormatError(f"solution notebook {path}: {exc}") from None
            except Exception as exc:  # not JSON, not a notebook
                raise ValueError(f"solution notebook {path} cannot be read: "
                                 f"{_first_line(exc)}") from None
            if ids:
                sols[path.name], exs[path.name] = nb, ids
        if not sols:
            raise ValueError(f"no solution notebook with checks in {folder}")
        return cls(sols, exs)

    def select(self, notebooks: Sequence[str] = (), chapters: Sequence[int] = ()) -> "Assignment":
        """Only the named notebooks (``02_autodiff`` or ``02_autodiff.ipynb``) and the
        notebooks of the given chapter numbers; everything when both are empty."""
        if not notebooks and not chapters:
            return self
        chosen: list[str] = []
        for name in notebooks:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"--notebooks takes notebook names, got {name!r}")
            base = Path(name.strip()).name          # "notebooks/02_autodiff.ipynb" works too
            file = base if base.endswith(".ipynb") else f"{base}.ipynb"
            if file not in self.exercises:
                near = difflib.get_close_matches(file, list(self.exercises), n=2, cutoff=0.5)
                hint = f"; did you mean {' or '.join(n[:-6] for n in near)}?" if near else ""
                raise ValueError(f"--notebooks: no graded notebook {name!r}{hint} "
                                 f"(graded: {', '.join(n[:-6] for n in self.exercises)})")
            chosen.append(file)
        for number in chapters:
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"--chapters takes chapter numbers such as 2, got {number!r}")
            files = [n for n in self.exercises if n[:2].isdigit() and int(n[:2]) == number]
            if not files:
                have = sorted({int(n[:2]) for n in self.exercises if n[:2].isdigit()})
                raise ValueError(f"--chapters: chapter {number} has no graded notebook "
                                 f"(chapters with checks: {', '.join(map(str, have))})")
            chosen += files
        keep = [n for n in self.exercises if n in chosen]   # solutions' order, no repeats
        return Assignment({n: self.solutions[n] for n in keep},
                          {n: self.exercises[n] for n in keep})


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:160] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def find_learners(submissions: Path) -> tuple[dict[str, Path], list[str]]:
    """Learner folders under ``submissions`` and notes on anything else found there."""
    if not submissions.is_dir():
        raise ValueError(f"submissions must be a folder with one sub-folder per learner; "
                         f"{submissions} is not a folder")
    learners, notes = {}, []
    for entry in sorted(submissions.iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            learners[entry.name] = entry
        elif entry.is_file():
            notes.append(f"ignored {entry.name}: put each learner's notebooks in a folder "
                         f"named after the learner")
    if not learners:
        raise ValueError(f"no learner folders found in {submissions}: put each learner's "
                         f"notebooks in a folder named after the learner "
                         f"({submissions}/ada/02_autodiff.ipynb, ...)")
    return learners, notes


def grade_notebook(learner: str, path: Path, name: str, assignment: Assignment, *,
                   timeout: float, cell_timeout: float) -> NotebookGrade:
    ids = assignment.exercises[name]
    grade = NotebookGrade(learner, name, {i: ERROR for i in ids})
    if not path.exists():
        grade.statuses = {i: MISSING for i in ids}
        grade.submitted = False
        grade.notes.append(f"{name}: notebook not submitted{_near_match(path.parent, name)}")
        return grade
    try:
        submission = read_submission(path)
    except ValueError as exc:  # not JSON, not a notebook: one clear line
        grade.notes.append(f"{name}: {exc}")
        return grade
    restored = restore_checks(submission, assignment.solutions[name])
    grade.notes += [f"{name}: {n}" for n in restored.notes]

    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        tmpdir = Path(tmp)
        nb_path = tmpdir / name
        nbformat.write(restored.notebook, nb_path)
        (tmpdir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        log = tmpdir / "verdicts.jsonl"
        env = dict(os.environ, **{GRADE_ENV: "1", LOG_ENV: str(log)})
        env.pop("PYTEST_ADDOPTS", None)
        cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env",
               "-p", "labkit.grade.watchdog",
               f"--nbval-cell-timeout={cell_timeout:g}", "-p", "no:xdist", "-p", "no:timeout",
               "-W", "ignore", "--junitxml=results.xml", nb_path.name]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=tmpdir, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output = ""
            grade.notes.append(f"{name}: stopped after the time limit of {timeout:g} s")
        grade.seconds = time.perf_counter() - start
        verdicts = _read_log(log)
        failed = _failed_code_cells(tmpdir / "results.xml", restored.notebook)
    grade.failed_cells = [cid for cid in failed if not cid.startswith("check-")]
    if grade.failed_cells:
        grade.notes.append(f"{name}: cells other than checks failed: "
                           f"{', '.join(grade.failed_cells)}")

    for ex_id in ids:
        if ex_id in verdicts:
            grade.statuses[ex_id] = verdicts[ex_id]["status"]
            grade.messages[ex_id] = verdicts[ex_id]["message"]
        else:
            grade.messages[ex_id] = "the check never ran"
    crashed = any(s in output for s in ("DeadKernelError", "Kernel died", "Kernel dead",
                                         "kernel died",
                                         "Failed to interrupt kernel"))
    if crashed:
        grade.notes.append(f"{name}: the kernel crashed or stopped responding")
    elif "seconds exceeded" in output:
        grade.notes.append(f"{name}: a cell ran past the cell time limit of {cell_timeout:g} s")
    never = [i for i in ids if i not in verdicts]
    if never and not any("time limit" in n or "crash" in n for n in grade.notes):
        grade.notes.append(f"{name}: checks {', '.join(never)} never ran")
    return grade


def read_submission(path: Path) -> nbformat.NotebookNode:
    """A learner's notebook as nbformat 4, or ValueError with one plain line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a notebook (not a text file)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a valid notebook (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or "nbformat" not in data or not (
            "cells" in data or "worksheets" in data):
        kind = type(data).__name__ if not isinstance(data, dict) else "object without cells"
        raise ValueError(f"not a notebook (a JSON {kind}, not a Jupyter notebook)")
    try:
        return nbformat.reads(json.dumps(data), as_version=4)
    except Exception as exc:
        raise ValueError(f"not a valid notebook ({_first_line(exc)})") from None


def _near_match(folder: Path, name: str) -> str:
    """' (found 00_Start_Here.ipynb: rename it to 00_start_here.ipynb)' or ''."""
    if not folder.is_dir():
        return ""
    files = [p.name for p in folder.iterdir() if p.suffix.lower() == ".ipynb"]
    same = [f for f in files if f.lower() == name.lower()]
    near = same or difflib.get_close_matches(name, files, n=1, cutoff=0.75)
    if not near:
        near = [f for f in files if f[:3] == name[:3] and f[:2].isdigit()][:1]
    return f" (found {near[0]}: rename it to {name})" if near else ""


def _failed_code_cells(junit: Path, nb: nbformat.NotebookNode) -> list[str]:
    """Ids of the code cells nbval reported as failed (nbval names them "Cell <k>", k
    counting code cells only)."""
    if not junit.exists():
        return []
    import xml.etree.ElementTree as ET

    code_ids = [c.get("id", f"#{i}") for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    failed = []
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("name", "")
        bad = case.find("failure") is not None or case.find("error") is not None
        if bad and name.startswith("Cell ") and name[5:].isdigit() and int(name[5:]) < len(code_ids):
            failed.append(code_ids[int(name[5:])])
    return failed


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_log(log: Path) -> dict[str, dict]:
    """The last verdict per exercise (a check cell runs once; a re-run counts once);
    predictions and anything malformed in the log are skipped."""
    verdicts: dict[str, dict] = {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            # the log also holds predictions ({"prediction": ..., "guess": ...}): not graded
            if isinstance(entry, dict) and {"exercise", "status", "message"} <= entry.keys():
                verdicts[entry["exercise"]] = entry
    return verdicts


def grade_all(submissions: Path, assignment: Assignment, *, timeout: float = 300,
              cell_timeout: float = 120, jobs: int = 1,
              progress: bool = True) -> tuple[list[NotebookGrade], list[str]]:
    """Grade every learner folder against every solution notebook with checks."""
    for what, value in (("timeout", timeout), ("cell_timeout", cell_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    learners, notes = find_learners(submissions)
    work = [(learner, folder / name, name) for learner, folder in learners.items()
            for name in assignment.exercises]
    from tqdm.auto import tqdm

    bar = tqdm(total=len(work), desc="grading", unit="notebook", disable=not progress)

    def one(item: tuple[str, Path, str]) -> NotebookGrade:
        result = grade_notebook(*item, assignment, timeout=timeout, cell_timeout=cell_timeout)
        bar.update()
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        grades = list(pool.map(one, work))
    bar.close()
    return grades, notes
