"""pytest plugin (loaded from pyproject's addopts).

* Notebooks under ``solutions/`` run in grading mode, so a solution whose check fails is a
  failing test; ``notebooks/`` run in learning mode, where checks never raise.
* In a shipped learner notebook (``notebooks/``) every check cell must report its exercise
  as not answered yet (⬜). With nbval's own learning-mode run, which already fails on any
  other cell that raises, this proves what grading the blank notebook would (each exercise
  "missing", nothing but the checks fails: in grading mode the same check cells raise and
  nothing else changes, because both modes rebind the reference), without running every
  notebook a second time. tests/test_grade_samples.py grades chapter 00's blank notebook
  end to end.
* Learners' progress files (``check`` records verdicts) go to a temporary file, never to
  the developer's ``~/.labkit``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from labkit.check.core import GRADE_ENV, SYMBOL, MISSING

_TMP: list[str] = []


def pytest_configure(config) -> None:
    tmp = tempfile.mkdtemp(prefix="labkit-progress-")
    _TMP.append(tmp)
    os.environ["LABKIT_PROGRESS"] = os.path.join(tmp, "progress.json")


def pytest_unconfigure(config) -> None:
    while _TMP:
        shutil.rmtree(_TMP.pop(), ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    path = Path(str(item.fspath))
    if path.suffix != ".ipynb":
        return
    if path.parent.name == "solutions":
        os.environ[GRADE_ENV] = "1"
    else:
        os.environ.pop(GRADE_ENV, None)


def learner_check_problem(cell, outputs) -> str | None:
    """Why a check cell of a shipped learner notebook is wrong, or None when it printed
    "⬜ Exercise N.k ...: not answered yet" (its stub counts as missing)."""
    if "check" not in cell.get("metadata", {}).get("tags", []):
        return None
    text = "".join(o.get("text", "") for o in outputs or () if o.get("output_type") == "stream")
    exercise = cell.get("metadata", {}).get("labkit", {}).get("exercise", "?")
    if text.lstrip().startswith(SYMBOL[MISSING]):
        return None
    first = text.strip().splitlines()[0] if text.strip() else "(no output)"
    return (f"shipped learner notebook: check {exercise} should report the exercise as not "
            f"answered yet (its stub must count as missing), but printed: {first}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or not hasattr(item, "test_outputs"):
        return
    path = Path(str(item.fspath))
    if path.suffix != ".ipynb" or path.parent.name != "notebooks":
        return
    problem = learner_check_problem(item.cell, item.test_outputs)
    if problem:
        report.outcome = "failed"
        report.longrepr = f"{path.name}: {problem}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """List the screenshots the browser test saved (``record_property("screenshot", path)``);
    works under xdist, where a test's own prints never reach this terminal."""
    shots = [value for report in terminalreporter.stats.get("passed", [])
             + terminalreporter.stats.get("failed", [])
             for name, value in getattr(report, "user_properties", []) if name == "screenshot"]
    if shots:
        terminalreporter.write_sep("-", "browser screenshots")
        for shot in sorted(set(shots)):
            terminalreporter.write_line(str(shot))
