"""What the tests of whole grading runs share (test_grade_class, test_grade_samples,
test_grade_cheats; test_grade_report for the browser): a course folder with its solutions, a
learner's notebook with one cell rewritten or one cell added, the submissions written out as
a class hands them in, the grading command run as an instructor runs it, its grades.csv
read back, and a headless Chromium page for the rendered reports."""
from __future__ import annotations

import contextlib
import copy
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

ZERO = "00_start_here.ipynb"
ANSWER_CELL = "cell-013"            # chapter 00's answer cell: def blocks_needed(...)
RIGHT = "def blocks_needed(n, threads_per_block):\n    return -(-n // threads_per_block)\n"
WRONG = "def blocks_needed(n, threads_per_block):\n    return n // threads_per_block\n"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(tempfile.gettempdir()) / "labkit-browser-screenshots"


def course(tmp_path_factory, name: str) -> tuple[Path, Path]:
    """A fresh folder ``name`` and its empty ``solutions`` folder."""
    root = tmp_path_factory.mktemp(name)
    sols = root / "solutions"
    sols.mkdir()
    return root, sols


def with_cell(nb, cell_id: str, source: str):
    """A copy of ``nb`` whose cell ``cell_id`` holds ``source`` (dedented)."""
    nb = copy.deepcopy(nb)
    next(c for c in nb.cells if c.get("id") == cell_id).source = textwrap.dedent(source)
    return nb


def with_answer(nb, source: str):
    """A copy of chapter 00's notebook ``nb`` whose answer cell holds ``source``."""
    return with_cell(nb, ANSWER_CELL, source)


def with_new_cell(nb, source: str, *, before: str | None = None, after: str | None = None):
    """A copy of ``nb`` with a code cell of the learner's own (``source``, dedented) just
    before the cell of id ``before``, just after the cell of id ``after``, or else just
    after the first code cell (before any exercise)."""
    nb = copy.deepcopy(nb)
    ids = [c.get("id") for c in nb.cells]
    if before is not None:
        at = ids.index(before)
    elif after is not None:
        at = ids.index(after) + 1
    else:
        at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code") + 1
    nb.cells.insert(at, nbformat.v4.new_code_cell(textwrap.dedent(source)))
    return nb


def hand_in(folder: Path, submissions: dict) -> Path:
    """Write ``{learner: notebook}`` or ``{learner: {file name: notebook}}`` as a class hands
    it in: a folder per learner (a bare notebook is saved as chapter 00's)."""
    for who, files in submissions.items():
        (folder / who).mkdir(parents=True)
        bare = isinstance(files, nbformat.NotebookNode)
        for fname, nb in ([(ZERO, files)] if bare else files.items()):
            nbformat.write(nb, folder / who / fname)
    return folder


def grade_command(folder: Path, out: Path, sols: Path, *options: str) -> list[str]:
    """The grading command an instructor types, with ``options`` after the folders."""
    return [sys.executable, "-m", "labkit.grade.cli", str(folder), "--out", str(out),
            "--solutions", str(sols), *options]


def run_grading(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd``, which must succeed; its process, output read."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def grade_rows(out: Path) -> dict[str, dict[str, str]]:
    """grades.csv in ``out``: learner -> row."""
    with (out / "grades.csv").open() as fh:
        return {r["learner"]: r for r in csv.DictReader(fh)}


@contextlib.contextmanager
def chromium_page(viewport: dict):
    """A page of Debian's headless Chromium (the test is skipped without it or playwright)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make test installs it as root)")
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        try:
            yield browser.new_page(viewport=viewport)
        finally:
            browser.close()
