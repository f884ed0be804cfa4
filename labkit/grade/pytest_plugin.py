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
