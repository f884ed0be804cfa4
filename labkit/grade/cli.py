"""``labkit-grade``: grade learners' notebooks, keep a gradebook, write reports and exports.

    labkit-grade SUBMISSIONS [--out DIR] [--notebooks NAME ...] [--chapters N ...]
                 [--assignment NAME] [--config grading.toml] [--roster roster.csv]
                 [--learners NAME ...] [--feedback DIR] [--answers DIR] [--seed N] ...
    labkit-grade import-points POINTS.csv [--out DIR] [--config grading.toml]
    labkit-grade export [--out DIR] [--config grading.toml] [--feedback DIR]

SUBMISSIONS holds one folder per learner, or an LMS bulk download (a flat folder or a
zip; see :mod:`labkit.grade.intake`). Every run adds to ``DIR/gradebook.sqlite`` (a regrade
of ``--learners`` merges) and rewrites, from the gradebook, ``grades.csv``, ``grades.md``,
``grades.html`` and the LMS exports ``lms.csv``, ``canvas.csv``, ``moodle.csv``. Exits 2
with one line on stderr when the arguments are wrong.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from labkit.grade import config as cfg, gradebook, report
from labkit.grade.generate import SOLUTIONS, NotebookFormatError
from labkit.grade.runner import Assignment, GradingCompromised, grade_class


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


def seed_value(text: str) -> int:
    """argparse type: an integer in [0, 2**63)."""
    if not text.isdigit() or int(text) >= 2 ** 63:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number in [0, 2**63)")
    return int(text)


def chapter(text: str) -> int:
    """argparse type: a chapter number such as 2 or 02."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a chapter number (e.g. 2 or 02)")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="labkit-grade",
        description="Grade learners' notebooks (one folder per learner under SUBMISSIONS, or "
                    "an LMS bulk download), keep a gradebook and write the reports.")
    p.add_argument("submissions", type=Path, help="folder (or zip) of the submissions")
    p.add_argument("--notebooks", nargs="+", default=[], metavar="NAME",
                   help="grade only these notebooks (e.g. 02_autodiff 05_fast_kernels)")
    p.add_argument("--chapters", nargs="+", type=chapter, default=[], metavar="N",
                   help="grade only these chapters (e.g. 2 5)")
    p.add_argument("--assignment", metavar="NAME",
                   help="grade the notebooks of one [[assignment]] of --config")
    p.add_argument("--out", type=Path, default=Path("grades"), help="folder for the reports")
    p.add_argument("--solutions", type=Path, default=SOLUTIONS)
    p.add_argument("--config", type=Path, help="grading.toml: points, assignments, due dates, "
                                               "late policy (see labkit/grade/config.py)")
    p.add_argument("--roster", type=Path, help="CSV: learner,student_id[,name,email,section,"
                                               "sis_login_id]")
    p.add_argument("--learners", nargs="+", default=[], metavar="NAME",
                   help="regrade only these learners; merged into the gradebook")
    p.add_argument("--feedback", type=Path, metavar="DIR",
                   help="write one feedback file (HTML and Markdown) per learner")
    p.add_argument("--answers", type=Path, metavar="DIR",
                   help="write the written answers and predictions side by side, and "
                        "points.csv to fill in")
    p.add_argument("--timeout", type=seconds, default=300.0,
                   help="CPU seconds allowed per notebook run (default 300; see "
                        "labkit.grade.limits)")
    p.add_argument("--cell-timeout", type=seconds, default=120.0,
                   help="CPU seconds allowed per cell (default 120); a cell that waits without "
                        "working is stopped after as many wall-clock seconds")
    p.add_argument("--exercise-timeout", type=seconds, default=120.0,
                   help="CPU seconds allowed for one exercise's answer cells (default 120)")
    p.add_argument("--jobs", type=count, default=1, help="notebooks graded at once")
    p.add_argument("--seed", type=seed_value, default=None,
                   help="the checks' inputs (default: drawn for this run and reported)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _select(args, config) -> Assignment:
    assignment = Assignment.load(args.solutions)
    notebooks, chapters = list(args.notebooks), list(args.chapters)
    if args.assignment:
        spec = next((a for a in config.assignments if a.name == args.assignment), None)
        if spec is None:
            names = ", ".join(a.name for a in config.assignments) or "none in --config"
            raise ValueError(f"--assignment: no assignment {args.assignment!r} ({names})")
        notebooks += [n for n in spec.notebooks]
        chapters += list(spec.chapters)
    return assignment.select(notebooks, chapters)


def _reports(db, assignment, config, out, notes=(), feedback=None):
    view = report.from_current(gradebook.current(db), assignment, config=config, notes=notes)
    paths = report.write_class(view, out) + report.write_lms(view, out)
    if feedback is not None:
        paths += report.write_feedback(view, feedback)[:2]
    return view, paths


def grade(argv: list[str]) -> int:
    from labkit.grade import answers  # deferred: nbformat

    args = parser().parse_args(argv)
    try:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out must be a folder for the reports; {args.out} is a file")
        config = cfg.load(args.config)
        assignment = _select(args, config)
        run = grade_class(args.submissions, assignment, timeout=args.timeout,
                          cell_timeout=args.cell_timeout, jobs=args.jobs,
                          progress=not args.quiet, seed=args.seed,
                          exercise_timeout=args.exercise_timeout, config=config,
                          learners=args.learners)
        db = gradebook.connect(args.out)
        if args.roster:
            gradebook.load_roster(db, args.roster)
        for g in run.grades:
            if g.student_id:
                gradebook.set_student_id(db, g.learner, g.student_id)
        gradebook.record(db, run.grades, seed=run.seed, command=" ".join(["labkit-grade", *argv]))
        view, paths = _reports(db, assignment, config, args.out, run.notes, args.feedback)
        if args.answers is not None:
            paths += answers.write_answers(args.answers, assignment.solutions, run.files,
                                           written_points=config.written_points)[:2]
        db.close()
        run.close()
    except (ValueError, NotebookFormatError, OSError, GradingCompromised) as exc:
        print(f"labkit-grade: error: {exc}", file=sys.stderr)
        return 2
    print(report.summary(view))
    print(f"inputs drawn from seed {run.seed} (--seed {run.seed} draws them again); "
          f"{len(run.grades)} notebooks graded ({run.distinct} distinct files) in "
          f"{run.seconds:.0f} s")
    for n in run.notes:
        print("note:", n)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


def _gradebook_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The options of the subcommands that work on an existing gradebook."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--out", type=Path, default=Path("grades"))
    p.add_argument("--solutions", type=Path, default=SOLUTIONS)
    p.add_argument("--config", type=Path)
    return p


def _rewrite_from_gradebook(args, update=None, feedback=None) -> int:
    """Rewrite ``--out``'s reports from its gradebook, after ``update(db)`` (which returns
    what it did, for the line printed). Exits 2 with one line on stderr when there is no
    gradebook yet or the arguments are wrong."""
    try:
        if not (args.out / gradebook.FILE).exists():
            raise ValueError(f"--out: no gradebook in {args.out} (grade first)")
        config = cfg.load(args.config)
        db = gradebook.connect(args.out)
        done = update(db) if update is not None else ""
        graded = {r["notebook"] for r in gradebook.current(db).notebooks}
        assignment = Assignment.load(args.solutions).select(sorted(graded))
        _, paths = _reports(db, assignment, config, args.out, feedback=feedback)
        db.close()
    except (ValueError, NotebookFormatError, OSError) as exc:
        print(f"labkit-grade: error: {exc}", file=sys.stderr)
        return 2
    print(f"{done}wrote {', '.join(str(p) for p in paths)}")
    return 0


def import_points(argv: list[str]) -> int:
    p = _gradebook_parser("labkit-grade import-points",
                          "Read the instructor's points for written answers into the "
                          "gradebook and rewrite the reports.")
    p.add_argument("points", type=Path)
    args = p.parse_args(argv)
    return _rewrite_from_gradebook(
        args, update=lambda db: f"imported {gradebook.import_points(db, args.points)} points; ")


def export(argv: list[str]) -> int:
    p = _gradebook_parser("labkit-grade export",
                          "Rewrite the reports and LMS exports from the gradebook.")
    p.add_argument("--feedback", type=Path)
    args = p.parse_args(argv)
    return _rewrite_from_gradebook(args, feedback=args.feedback)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "import-points":
        return import_points(argv[1:])
    if argv and argv[0] == "export":
        return export(argv[1:])
    return grade(argv)


if __name__ == "__main__":
    sys.exit(main())
