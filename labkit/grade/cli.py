"""``labkit-grade SUBMISSIONS [--notebooks NAME ...] [--chapters N ...] [--out DIR]``: grade
learners' notebooks.

SUBMISSIONS holds one folder per learner with that learner's notebooks (named as in
``solutions/``). ``--notebooks 02_autodiff`` or ``--chapters 2 5`` grade only those
notebooks (only their columns and notes appear). Writes ``grades.csv``, ``grades.md`` and
``grades.html`` (the table with a pass-rate chart and a score histogram) to ``--out`` and
prints a summary. Exits 2 with one line on stderr when the arguments are wrong.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from labkit.grade.generate import SOLUTIONS, NotebookFormatError
from labkit.grade.report import summary, write_reports
from labkit.grade.runner import Assignment, grade_all


def seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive, finite number of seconds")
    return value


def count(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return value


def chapter(text: str) -> int:
    """argparse type: a chapter number such as 2 or 02."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a chapter number (e.g. 2 or 02)")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labkit-grade",
        description="Grade learners' notebooks (one folder per learner under SUBMISSIONS) and "
                    "write grades.csv, grades.md and grades.html.")
    p.add_argument("submissions", type=Path, help="folder with one folder per learner")
    p.add_argument("--notebooks", nargs="+", default=[], metavar="NAME",
                   help="grade only these notebooks (e.g. 02_autodiff 05_fast_kernels)")
    p.add_argument("--chapters", nargs="+", type=chapter, default=[], metavar="N",
                   help="grade only these chapters (e.g. 2 5)")
    p.add_argument("--out", type=Path, default=Path("grades"), help="folder for the reports")
    p.add_argument("--solutions", type=Path, default=SOLUTIONS)
    p.add_argument("--timeout", type=seconds, default=300.0,
                   help="seconds allowed per notebook (default 300)")
    p.add_argument("--cell-timeout", type=seconds, default=120.0,
                   help="seconds allowed per cell (default 120)")
    p.add_argument("--jobs", type=count, default=1, help="notebooks graded at once")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out must be a folder for the reports; {args.out} is a file")
        assignment = Assignment.load(args.solutions).select(args.notebooks, args.chapters)
        grades, notes = grade_all(args.submissions, assignment, timeout=args.timeout,
                                  cell_timeout=args.cell_timeout, jobs=args.jobs,
                                  progress=not args.quiet)
        paths = write_reports(grades, assignment, args.out, notes)
    except (ValueError, NotebookFormatError, OSError) as exc:
        print(f"labkit-grade: error: {exc}", file=sys.stderr)
        return 2
    print(summary(grades, assignment))
    for n in notes:
        print("note:", n)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
