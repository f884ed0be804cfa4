"""The gradebook: every graded notebook of every run, in SQLite (``gradebook.sqlite``).

Each run of ``labkit-grade`` adds a run and its notebooks and exercises; nothing is
overwritten, so a regrade of some learners (``--learners ada bob``) merges: the current
grade of a learner's notebook is the one from the latest run that graded it. Written-answer
points that the instructor fills in (``labkit-grade import-points``) live in ``manual``;
the roster (``--roster``) in ``learners``. Every report is made from :func:`current`.

Tables::

    runs(run, started, seed, labkit_version, command)
    notebooks(run, learner, notebook, submitted, submitted_at, graded_at, seconds, seed,
              late_days, late_factor, notes)                       -- notes: a JSON list
    exercises(run, learner, notebook, exercise, title, status, message, points,
              max_points, traceback)
    manual(learner, item, points, max_points, comment, imported_at)
    learners(learner, student_id, name, email, section, sis_login_id)
"""
from __future__ import annotations

import csv
import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs(run INTEGER PRIMARY KEY AUTOINCREMENT, started TEXT,
    seed INTEGER, labkit_version TEXT, command TEXT);
CREATE TABLE IF NOT EXISTS notebooks(run INTEGER, learner TEXT, notebook TEXT,
    submitted INTEGER, submitted_at TEXT, graded_at TEXT, seconds REAL, seed INTEGER,
    late_days INTEGER, late_factor REAL, notes TEXT,
    PRIMARY KEY(run, learner, notebook));
CREATE TABLE IF NOT EXISTS exercises(run INTEGER, learner TEXT, notebook TEXT,
    exercise TEXT, title TEXT, status TEXT, message TEXT, points REAL, max_points REAL,
    traceback TEXT, PRIMARY KEY(run, learner, notebook, exercise));
CREATE TABLE IF NOT EXISTS manual(learner TEXT, item TEXT, points REAL, max_points REAL,
    comment TEXT, imported_at TEXT, PRIMARY KEY(learner, item));
CREATE TABLE IF NOT EXISTS learners(learner TEXT PRIMARY KEY, student_id TEXT, name TEXT,
    email TEXT, section TEXT, sis_login_id TEXT);
"""
FILE = "gradebook.sqlite"
ROSTER_COLUMNS = ("learner", "student_id", "name", "email", "section", "sis_login_id")


def connect(out: Path) -> sqlite3.Connection:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(out / FILE)
    db.executescript(SCHEMA)
    return db


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def labkit_version() -> str:
    try:
        return version("labkit")
    except Exception:                       # noqa: BLE001 - not installed: unknown
        return "unknown"


def record(db: sqlite3.Connection, grades, *, seed: int | None, command: str = "") -> int:
    """Add one run with its graded notebooks (``NotebookGrade``s); its run number."""
    with db:
        cur = db.execute("INSERT INTO runs(started, seed, labkit_version, command) "
                         "VALUES (?, ?, ?, ?)", (_now(), seed, labkit_version(), command))
        run = cur.lastrowid
        for g in grades:
            db.execute("INSERT INTO notebooks VALUES (?,?,?,?,?,?,?,?,?,?,?)", (
                run, g.learner, g.notebook, int(g.submitted), g.submitted_at, g.graded_at,
                g.seconds, g.seed, g.late_days, g.late_factor, json.dumps(g.notes)))
            for ex, status in g.statuses.items():
                db.execute("INSERT INTO exercises VALUES (?,?,?,?,?,?,?,?,?,?)", (
                    run, g.learner, g.notebook, ex, g.titles.get(ex, ""), status,
                    g.messages.get(ex, ""), g.points.get(ex, 0.0),
                    g.max_points.get(ex, 1.0), g.tracebacks.get(ex, "")))
    return run


def load_roster(db: sqlite3.Connection, path: Path) -> int:
    """Read a roster CSV (``learner,student_id[,name,email,section,sis_login_id]``; the
    learner column is the submissions folder name or the LMS file's name part)."""
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise ValueError(f"--roster: no file {path}") from None
    with fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"learner", "student_id"} <= set(reader.fieldnames):
            raise ValueError(f"--roster: {path} needs the columns learner and student_id "
                             f"(optional: name, email, section, sis_login_id); it has "
                             f"{reader.fieldnames}")
        rows = [{k: (r.get(k) or "").strip() for k in ROSTER_COLUMNS} for r in reader]
    with db:
        for r in rows:
            if r["learner"]:
                db.execute("INSERT OR REPLACE INTO learners VALUES (?,?,?,?,?,?)",
                           tuple(r[k] for k in ROSTER_COLUMNS))
    return len(rows)


def set_student_id(db: sqlite3.Connection, learner: str, student_id: str) -> None:
    """An id found in an LMS file name, kept unless the roster gives one."""
    with db:
        db.execute("INSERT OR IGNORE INTO learners(learner, student_id) VALUES (?, ?)",
                   (learner, student_id))


@dataclass
class Current:
    """The gradebook now: per learner and notebook the latest grade, and manual points."""
    notebooks: list[dict] = field(default_factory=list)
    exercises: list[dict] = field(default_factory=list)
    manual: list[dict] = field(default_factory=list)
    learners: dict[str, dict] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)


def current(db: sqlite3.Connection) -> Current:
    db.row_factory = sqlite3.Row
    latest = """SELECT learner, notebook, MAX(run) AS run FROM notebooks
                GROUP BY learner, notebook"""
    nbs = [dict(r) for r in db.execute(
        f"SELECT n.* FROM notebooks n JOIN ({latest}) l USING (learner, notebook, run) "
        f"ORDER BY n.learner, n.notebook")]
    exs = [dict(r) for r in db.execute(
        f"SELECT e.* FROM exercises e JOIN ({latest}) l USING (learner, notebook, run) "
        f"ORDER BY e.learner, e.notebook")]
    manual = [dict(r) for r in db.execute("SELECT * FROM manual ORDER BY learner, item")]
    learners = {r["learner"]: dict(r) for r in db.execute("SELECT * FROM learners")}
    runs = [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY run")]
    db.row_factory = None
    for n in nbs:
        n["notes"] = json.loads(n["notes"] or "[]")
    return Current(nbs, exs, manual, learners, runs)


def import_points(db: sqlite3.Connection, path: Path) -> int:
    """Read the instructor's filled-in points CSV (``learner,item,points,max_points,comment``:
    what ``--answers`` wrote); rows with no points are skipped. Their count."""
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise ValueError(f"import-points: no file {path}") from None
    count = 0
    with fh:
        reader = csv.DictReader(fh)
        need = {"learner", "item", "points"}
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise ValueError(f"import-points: {path} needs the columns learner, item, points "
                             f"(and max_points, comment); it has {reader.fieldnames}")
        rows = []
        for k, r in enumerate(reader, start=2):
            text = (r.get("points") or "").strip()
            if not text:
                continue
            try:
                points = float(text)
                top = float((r.get("max_points") or "").strip() or "nan")
            except ValueError:
                raise ValueError(f"import-points: {path} line {k}: points must be a number, "
                                 f"got {text!r}") from None
            if points < 0 or (top == top and points > top):
                raise ValueError(f"import-points: {path} line {k}: points {points:g} outside "
                                 f"[0, {top:g}]")
            rows.append((r["learner"].strip(), r["item"].strip(), points,
                         top if top == top else points, (r.get("comment") or "").strip()))
    with db:
        for row in rows:
            db.execute("INSERT OR REPLACE INTO manual VALUES (?,?,?,?,?,?)", (*row, _now()))
            count += 1
    return count
