"""Grade learners' notebooks: restore checks, run each notebook, decide each verdict apart.

For each notebook, in a temporary copy with the canonical check cells restored:

1. **The notebook run** (pytest + nbval, in its own process group, under limits counted in
   CPU seconds: :mod:`labkit.grade.limits`), as the learner would run it: checks print, never raise. It tells which cells
   fail and with what, and a watch in the kernel (an IPython startup file) notes any cell
   that replaces a function of labkit, numpy, torch or the standard library. Nothing it
   writes is a grade: the verdict log it leaves is a hint.
2. **The verdicts** (:mod:`labkit.grade.verdicts`): each exercise's answer cells run again
   in a fresh process, on inputs drawn from this run's seed, and the checker decides in
   the grader's own process on the plain data they produced.

What goes wrong around a notebook (not JSON, missing, too slow, kernel crash) becomes a
note, not a traceback. The grader becomes the reaper of every process a notebook starts
(``PR_SET_CHILD_SUBREAPER``), kills those left over, and checks that no file of labkit or
of the installed packages changed while it graded.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import nbformat
from tqdm.auto import tqdm

from labkit.check.core import ERROR, GRADE_ENV, LOG_ENV, MISSING, get
from labkit.grade import intake as _intake, limits as _limits, verdicts as _verdicts
from labkit.grade.config import GradingConfig
from labkit.grade.generate import SOLUTIONS, NotebookFormatError, check_cells
from labkit.grade.processes import (become_subreaper, changed_files, descendants,
                                    installed_files, kill_group, reap_leftovers)
from labkit.grade.restore import restore_checks
from labkit.grade.watchdog import LOG_ENV as LIMITS_ENV

WATCH_ENV = "LABKIT_WATCH_LOG"


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
    seed: int | None = None
    untrusted: list[str] = field(default_factory=list)   # decided in the answer process
    tracebacks: dict[str, str] = field(default_factory=dict)  # exercise -> learner's lines
    student_id: str = ""
    submitted_at: str = ""              # ISO time: the LMS's record, or the file's mtime
    graded_at: str = ""
    late_days: int = 0
    late_factor: float = 1.0            # the fraction of its points the late policy keeps
    points: dict[str, float] = field(default_factory=dict)       # earned, per exercise
    max_points: dict[str, float] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)

    def apply_points(self, config, due=None) -> None:
        """Points per exercise from ``config`` (a pass earns the exercise's points, times
        the late policy's factor); lateness from ``submitted_at`` and ``due``."""
        submitted = datetime.fromisoformat(self.submitted_at) if self.submitted_at else None
        self.late_days = config.late.days_late(submitted, due)
        self.late_factor = config.late.factor(submitted, due)
        for ex, status in self.statuses.items():
            top = config.points_for(ex)
            self.max_points[ex] = top
            self.points[ex] = top * self.late_factor if status == "pass" else 0.0
            try:
                self.titles[ex] = get(ex).title
            except ValueError:
                self.titles[ex] = ""
        if self.late_days:
            self.notes.append(f"{self.notebook}: submitted {self.late_days} day"
                              f"{'s' * (self.late_days != 1)} late: "
                              f"{self.late_factor:.0%} of its points kept")


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


WATCH_STARTUP = """\
# Written by labkit-grade: note every cell that replaces a function of labkit, numpy,
# torch or the standard library (a hint for the grader's notes, never a grade).
import json as _lk_json, os as _lk_os


def _lk_watch():
    from labkit.grade import sandbox as _sb
    state = {"before": _sb.snapshot(), "count": 0}
    log = _lk_os.environ.get("LABKIT_WATCH_LOG")

    def post(result):
        state["count"] += 1
        after = _sb.snapshot()
        notes = _sb.relevant(_sb.altered(state["before"], after))
        state["before"] = after
        if notes and log:
            cell = getattr(getattr(result, "info", None), "cell_id", None)
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(_lk_json.dumps({"cell": cell, "count": state["count"],
                                         "notes": notes}) + "\\n")
    get_ipython().events.register("post_run_cell", post)


_lk_watch()
del _lk_watch
"""


def grade_notebook(learner: str, path: Path, name: str, assignment: Assignment, *,
                   timeout: float, cell_timeout: float, seed: int | None = None,
                   exercise_timeout: float = 120.0) -> NotebookGrade:
    """One learner's notebook: the notebook run (notes), then the verdicts (see the module
    docstring). ``seed`` picks the check's inputs (None: a fresh one)."""
    ids = assignment.exercises[name]
    seed = secrets.randbelow(2 ** 31) if seed is None else seed
    grade = NotebookGrade(learner, name, {i: ERROR for i in ids}, seed=seed,
                          graded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if path is None or not Path(path).exists():
        grade.statuses = {i: MISSING for i in ids}
        grade.messages = {i: "not submitted" for i in ids}
        grade.submitted = False
        where = Path(path).parent if path is not None else None
        grade.notes.append(f"{name}: notebook not submitted"
                           f"{_near_match(where, name) if where else ''}")
        return grade
    path = Path(path)
    try:
        submission = read_submission(path)
    except ValueError as exc:  # not JSON, not a notebook: one clear line
        grade.notes.append(f"{name}: {exc}")
        return grade
    restored = restore_checks(submission, assignment.solutions[name])
    grade.notes += [f"{name}: {n}" for n in merge_restore_notes(restored.notes)]

    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        tmpdir = Path(tmp)
        start = time.perf_counter()
        output, hints, watched, failed, limits = _run_notebook(
            restored.notebook, name, tmpdir, timeout=timeout, cell_timeout=cell_timeout,
            grade=grade)
        answers = tmpdir / "answers"
        answers.mkdir()
        results = _verdicts.decide(restored.notebook, assignment.solutions[name], ids,
                                   seed=seed, timeout=exercise_timeout, workdir=answers)
        grade.seconds = time.perf_counter() - start
    timed_out = any(t in output for t in ("seconds exceeded", "Failed to interrupt kernel",
                                            "Timeout waiting for"))
    crashed = not timed_out and any(t in output for t in (
        "DeadKernelError", "Kernel died", "Kernel dead", "kernel died"))
    failed = [cid for cid in failed if not cid.startswith("check-")]
    if crashed or timed_out:
        grade.failed_cells = failed[:1]
        what = "the kernel died" if crashed else _limit_note(cell_timeout, limits, output)
        where = f" in {failed[0]}" if failed else ""
        rest = f"; the {len(failed) - 1} cells after it did not run" if len(failed) > 1 else ""
        grade.notes.append(f"{name}: {what}{where}{rest}")
    else:
        grade.failed_cells = failed
        if failed:
            grade.notes.append(f"{name}: cells other than checks failed: {', '.join(failed)}")
    code_ids = [c.get("id", f"#{i}") for i, c in enumerate(restored.notebook.cells)
                if c.cell_type == "code"]
    for entry in watched:
        cell = entry.get("cell") or (code_ids[entry["count"] - 1]
                                     if 0 < entry.get("count", 0) <= len(code_ids) else "?")
        grade.notes.append(f"{name}: {'; '.join(entry['notes'][:3])} in {cell}")
    for ex_id in ids:
        r = results[ex_id]
        grade.statuses[ex_id], grade.messages[ex_id] = r.status, r.message
        if r.traceback:
            grade.tracebacks[ex_id] = r.traceback
        if not r.trusted:
            grade.untrusted.append(ex_id)
        grade.notes += [f"{name}: {n}" for n in r.notes if n not in grade.notes]
        if r.status != "pass" and any(h.get("status") == "pass"
                                      for h in hints.get(ex_id, [])):
            grade.notes.append(f"{name}: the notebook's verdict log holds a pass for {ex_id} "
                               f"that the grader's verdict ({r.status}) does not confirm "
                               f"(the log is a hint, never the grade)")
    return grade


def merge_restore_notes(notes: list[str]) -> list[str]:
    """"check 2.1 was edited; restored" × n → one note listing the exercises."""
    edited = [n.split()[1] for n in notes if n.endswith("was edited; restored")]
    deleted = [n.split()[1] for n in notes if n.endswith("was deleted; restored")]
    out = [n for n in notes if not n.endswith(("was edited; restored", "was deleted; restored"))]
    for ids, what in ((edited, "edited"), (deleted, "deleted")):
        if len(ids) == 1:
            out.append(f"check {ids[0]} was {what}; restored")
        elif ids:
            out.append(f"checks {', '.join(ids)} were {what}; restored")
    return out


def _run_notebook(nb: nbformat.NotebookNode, name: str, tmpdir: Path, *, timeout: float,
                  cell_timeout: float, grade: NotebookGrade
                  ) -> tuple[str, dict[str, dict], list[dict], list[str]]:
    """The notebook run: output, the hint verdicts, the watch's notes, failed cell ids."""
    nb_path = tmpdir / name
    nbformat.write(nb, nb_path)
    (tmpdir / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    startup = tmpdir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-labkit-watch.py").write_text(WATCH_STARTUP, encoding="utf-8")
    log, watch = tmpdir / "verdicts.jsonl", tmpdir / "watch.jsonl"
    env = dict(os.environ, **{LOG_ENV: str(log), WATCH_ENV: str(watch),
                               "IPYTHONDIR": str(tmpdir / "ipython"),
                               "LABKIT_PROGRESS": str(tmpdir / "progress.json"),
                               "MPLBACKEND": "Agg", LIMITS_ENV: str(tmpdir / "limits.jsonl")})
    env.pop(GRADE_ENV, None)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env",
           "-p", "labkit.grade.watchdog",
           f"--nbval-cell-timeout={cell_timeout:g}", "-p", "no:xdist", "-p", "no:timeout",
           "-p", "no:hypothesispytest",   # Hypothesis's plugin costs a second per start
           "-W", "ignore", "--junitxml=results.xml", nb_path.name]
    proc = subprocess.Popen(cmd, cwd=tmpdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output, budget, spent = _limits.communicate_within(proc, timeout, kill_group)
    if spent == _limits.CPU:
        grade.notes.append(f"{name}: stopped after the time limit of {timeout:g} s of CPU "
                           f"time for the notebook")
    elif spent:
        grade.notes.append(f"{name}: stopped after {budget.elapsed:.0f} s without working "
                           f"(it had used {budget.used:.1f} s of CPU time; the limit for the "
                           f"notebook is {timeout:g} s of CPU time)")
    kill_group(proc)
    watched = [e for e in _read_jsonl(watch) if isinstance(e.get("notes"), list)]
    limits = _read_jsonl(tmpdir / "limits.jsonl")
    return (output, _read_log(log), watched, _failed_code_cells(tmpdir / "results.xml", nb),
            limits)


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
    return out


def _limit_note(cell_timeout: float, limits: list[dict], output: str) -> str:
    """Why a cell was stopped: the first wait the watchdog ended (labkit.grade.limits)."""
    first = limits[0] if limits else {}
    limit = float(first.get("limit", cell_timeout))
    if first.get("spent") == "idle":
        what = (f"a cell waited without working: after {float(first.get('elapsed', 0)):.0f} s "
                f"it had used {float(first.get('used', 0)):.1f} s of CPU time (the cell time "
                f"limit is {limit:g} s of CPU time; a sleep, a blocked read, a lost message?)")
    elif first.get("stream") == "iopub":
        what = f"a cell's output did not come within {limit:g} s of CPU time"
    else:
        what = f"a cell ran past the cell time limit of {limit:g} s of CPU time"
    return what + (" (an interrupt did not stop it)" if "Failed to interrupt" in output else "")


def file_digest(path: Path | None) -> str | None:
    """The SHA-256 of a submitted file's bytes; None where there is no readable file."""
    try:
        return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def read_submission(path: Path) -> nbformat.NotebookNode:
    """A learner's notebook as nbformat 4, or ValueError with one plain line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a notebook (not a text file)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a valid notebook (not JSON: {exc.msg}, line {exc.lineno} "
                         f"column {exc.colno})") from None
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

    code_ids = [c.get("id", f"#{i}") for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    failed = []
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("name", "")
        bad = case.find("failure") is not None or case.find("error") is not None
        if bad and name.startswith("Cell ") and name[5:].isdigit() and int(name[5:]) < len(code_ids):
            failed.append(code_ids[int(name[5:])])
    return failed


def _read_log(log: Path) -> dict[str, list[dict]]:
    """Every verdict the notebook run logged, by exercise (a hint: the notebook's own code
    can write this file); predictions and anything malformed are skipped."""
    verdicts: dict[str, list[dict]] = {}
    # the log also holds predictions ({"prediction": ..., "guess": ...}): not graded
    for entry in _read_jsonl(log):
        if {"exercise", "status", "message"} <= entry.keys():
            verdicts.setdefault(str(entry["exercise"]), []).append(entry)
    return verdicts


class GradingCompromised(RuntimeError):
    """labkit or an installed package changed on disk while submissions were graded."""


@dataclass
class GradingRun:
    grades: list[NotebookGrade]
    notes: list[str]
    seed: int
    files: dict[str, dict[str, Path]]        # every learner found -> notebook -> file
    seconds: float = 0.0
    intake: object = None                    # keeps LMS files staged until close()
    distinct: int = 0                        # files graded (byte-identical ones once)

    def close(self) -> None:
        if self.intake is not None:
            self.intake.close()


def grade_class(submissions: Path, assignment: Assignment, *, timeout: float = 300,
                cell_timeout: float = 120, jobs: int = 1, progress: bool = True,
                seed: int | None = None, exercise_timeout: float = 120.0, config=None,
                learners: Sequence[str] = ()) -> GradingRun:
    """Grade every learner found in ``submissions`` (:mod:`labkit.grade.intake`: folders,
    an LMS bulk download or a zip) against every notebook of ``assignment``; points and the
    late policy from ``config`` (:mod:`labkit.grade.config`); only ``learners`` if given.

    ``seed`` picks every check's inputs (None: one drawn now, the same for every learner
    of this run, and recorded in each grade)."""
    config = config or GradingConfig()
    for what, value in (("timeout", timeout), ("cell_timeout", cell_timeout),
                        ("exercise_timeout", exercise_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed < 2 ** 63):
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    seed = secrets.randbelow(2 ** 31) if seed is None else seed
    found = _intake.collect(Path(submissions), assignment.solutions)
    try:
        people = found.learners
        if learners:
            unknown = [n for n in learners if n not in people]
            if unknown:
                raise ValueError(f"--learners: no submissions from {', '.join(unknown)} "
                                 f"(found: {', '.join(sorted(people)) or 'none'})")
            people = {n: people[n] for n in learners}
        notes = list(found.notes)
        work = [(who, who.files.get(name), name) for who in people.values()
                for name in assignment.exercises]
        become_subreaper()
        already = set(descendants())
        before = installed_files()
        bar = tqdm(total=len(work), desc="grading", unit="notebook", disable=not progress)
        compromised: list[str] = []

        def graded(item) -> NotebookGrade:
            who, path, name = item
            result = grade_notebook(who.name, path, name, assignment, timeout=timeout,
                                    cell_timeout=cell_timeout, seed=seed,
                                    exercise_timeout=exercise_timeout)
            if jobs == 1:
                changed = changed_files(before, installed_files())
                if changed and not compromised:
                    compromised.append(f"{who.name}/{name} changed {', '.join(changed[:5])}")
            bar.update()
            return result

        # byte-identical files (untouched notebooks, copies) are graded once: with one seed
        # for the run, the grade of a file depends on its bytes alone
        keys = [(name, file_digest(path)) for _, path, name in work]
        first = {}
        for key, item in zip(keys, work):
            if key[1] is not None:
                first.setdefault(key, item)
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = dict(zip(first, pool.map(graded, first.values())))
        grades = []
        for key, item in zip(keys, work):
            who, path, name = item
            if key[1] is None:
                result = graded(item)
            else:
                result = copy.deepcopy(done[key])
                result.learner = who.name
                if first[key] is not item:
                    bar.update()
                    if any(s != MISSING for s in result.statuses.values()):
                        notes.append(f"{who.name}/{name}: the same file as "
                                     f"{first[key][0].name}'s (graded once)")
            result.student_id = who.student_id
            if name in who.submitted_at:
                result.submitted_at = who.submitted_at[name].isoformat(timespec="seconds")
            result.notes[:0] = [n for n in who.notes if n.startswith(f"{name}:")]
            result.apply_points(config, config.due_of(name))
            grades.append(result)
        bar.close()
        for who in people.values():
            notes += [f"{who.name}: {n}" for n in who.notes if not any(
                n.startswith(f"{nb}:") for nb in assignment.exercises)]
        left = reap_leftovers(keep=already)
        if left:
            notes.append(f"killed {left} process(es) that submissions left running")
        changed = changed_files(before, installed_files())
        if changed:
            who = compromised[0] if compromised else "a submission (grade with --jobs 1 to tell which)"
            raise GradingCompromised(
                f"files of labkit or of the installed packages changed while grading: "
                f"{', '.join(changed[:5])}{' …' if len(changed) > 5 else ''}; first seen after "
                f"{who}. Reinstall (make clean-venv, git checkout labkit) and grade again.")
        files = {who.name: dict(who.files) for who in found.learners.values()}
        return GradingRun(grades, notes, seed, files, time.perf_counter() - start, found,
                          len(first))
    except BaseException:
        found.close()
        raise


def grade_all(submissions: Path, assignment: Assignment, *, timeout: float = 300,
              cell_timeout: float = 120, jobs: int = 1, progress: bool = True,
              seed: int | None = None, exercise_timeout: float = 120.0
              ) -> tuple[list[NotebookGrade], list[str]]:
    """:func:`grade_class` without a config: its grades and notes."""
    run = grade_class(submissions, assignment, timeout=timeout, cell_timeout=cell_timeout,
                      jobs=jobs, progress=progress, seed=seed, exercise_timeout=exercise_timeout)
    run.close()
    return run.grades, run.notes
