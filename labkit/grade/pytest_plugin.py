"""pytest plugin (loaded from pyproject's addopts): notebooks under ``solutions/`` run in
grading mode, so a solution whose check fails is a failing test; ``notebooks/`` run in
learning mode, where checks never raise."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from labkit.check.core import GRADE_ENV


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    path = Path(str(item.fspath))
    if path.suffix != ".ipynb":
        return
    if path.parent.name == "solutions":
        os.environ[GRADE_ENV] = "1"
    else:
        os.environ.pop(GRADE_ENV, None)


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
