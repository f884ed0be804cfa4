"""Grade learners' notebooks: restore checks, run nbval in grading mode, collect verdicts.

Each notebook runs in its own process (pytest + nbval, ``LABKIT_GRADE=1``) in a temporary
copy, under a wall-clock limit; the check cells append their verdicts to a log file that is
the source of the score. What goes wrong around a notebook (not JSON, missing, too slow,
kernel crash, checks that never ran) becomes a note and an ``error`` status, not a traceback.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from labkit.check.core import ERROR, GRADE_ENV, LOG_ENV, MISSING
from labkit.grade.generate import SOLUTIONS, check_cells
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


@dataclass(frozen=True)
class Assignment:
    """The solution notebooks that define what is graded, with their exercise ids."""
    solutions: dict[str, nbformat.NotebookNode]
    exercises: dict[str, list[str]]       # notebook name -> exercise ids in order

    @classmethod
    def load(cls, folder: Path = SOLUTIONS) -> "Assignment":
        if not folder.is_dir():
            raise ValueError(f"solutions folder {folder} does not exist")
        sols, exs = {}, {}
        for path in sorted(folder.glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            ids = list(check_cells(nb))
            if ids:
                sols[path.name], exs[path.name] = nb, ids
        if not sols:
            raise ValueError(f"no solution notebook with checks in {folder}")
        return cls(sols, exs)


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
    return learners, notes


def grade_notebook(learner: str, path: Path, name: str, assignment: Assignment, *,
                   timeout: float, cell_timeout: float) -> NotebookGrade:
    ids = assignment.exercises[name]
    grade = NotebookGrade(learner, name, {i: ERROR for i in ids})
    if not path.exists():
        grade.statuses = {i: MISSING for i in ids}
        grade.notes.append(f"{name}: notebook not submitted")
        return grade
    try:
        submission = nbformat.read(path, as_version=4)
    except Exception as exc:  # not JSON, not a notebook: one clear line
        grade.notes.append(f"{name}: not a valid notebook ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:120] if str(exc) else ''})")
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
    crashed = any(s in output for s in ("DeadKernelError", "Kernel died", "kernel died",
                                         "Failed to interrupt kernel"))
    if crashed:
        grade.notes.append(f"{name}: the kernel crashed or stopped responding")
    elif "seconds exceeded" in output:
        grade.notes.append(f"{name}: a cell ran past the cell time limit of {cell_timeout:g} s")
    never = [i for i in ids if i not in verdicts]
    if never and not any("time limit" in n or "crash" in n for n in grade.notes):
        grade.notes.append(f"{name}: checks {', '.join(never)} never ran")
    return grade


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
    """The last verdict per exercise (a check cell runs once; a re-run counts once)."""
    verdicts: dict[str, dict] = {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            verdicts[entry["exercise"]] = entry
    return verdicts


def grade_all(submissions: Path, assignment: Assignment, *, timeout: float = 300,
              cell_timeout: float = 120, jobs: int = 1,
              progress: bool = True) -> tuple[list[NotebookGrade], list[str]]:
    """Grade every learner folder against every solution notebook with checks."""
    if timeout <= 0 or cell_timeout <= 0:
        raise ValueError("timeout and cell_timeout must be positive numbers of seconds")
    if jobs < 1:
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
