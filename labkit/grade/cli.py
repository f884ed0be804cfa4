"""``labkit-grade SUBMISSIONS [--out DIR]``: grade every learner's notebooks.

SUBMISSIONS holds one folder per learner with that learner's notebooks (named as in
``solutions/``). Writes ``grades.csv`` and ``grades.md`` to ``--out`` and prints a summary.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from labkit.grade.generate import SOLUTIONS, NotebookFormatError
from labkit.grade.report import summary, write_reports
from labkit.grade.runner import Assignment, grade_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labkit-grade", description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path, help="folder with one folder per learner")
    parser.add_argument("--out", type=Path, default=Path("grades"), help="where reports go")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS)
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds allowed per notebook (default 300)")
    parser.add_argument("--cell-timeout", type=float, default=120,
                        help="seconds allowed per cell (default 120)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        assignment = Assignment.load(args.solutions)
        grades, notes = grade_all(args.submissions, assignment, timeout=args.timeout,
                                  cell_timeout=args.cell_timeout, jobs=args.jobs,
                                  progress=not args.quiet)
    except (ValueError, NotebookFormatError) as exc:
        print(f"labkit-grade: error: {exc}", file=sys.stderr)
        return 2
    csv_path, md_path = write_reports(grades, assignment, args.out, notes)
    print(summary(grades, assignment))
    for n in notes:
        print("note:", n)
    print(f"wrote {csv_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
