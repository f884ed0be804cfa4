"""Find each learner's notebooks in what an instructor downloaded.

Three layouts are accepted (and may be mixed):

* one folder per learner: ``submissions/ada/02_autodiff.ipynb``;
* an LMS bulk download, as a flat folder or a ``.zip``: Canvas names each file
  ``<name>[_LATE]_<user id>_<submission id>_<file>`` (and appends ``-1``, ``-2`` to a
  resubmitted file's name), Moodle ``<Full Name>_<participant id>_assignsubmission_file_<file>``
  (sometimes as a folder of that name holding the file); any ``<name>_<id>_<file>`` works;
* a zip of either.

A notebook is matched to a graded notebook by its name, and — when the name differs
(``02_autodiff (1).ipynb``, ``Copy of 02_autodiff.ipynb``, ``02_autodiff-1.ipynb``) — by its
cells: the one whose cell ids it shares most (at least half of the solution's code cells)
is graded, with a note. When a learner has two files for one notebook, the exact name
wins, else the newest; the others are noted.

When a notebook was submitted comes from ``submitted.csv`` in the submissions folder
(columns ``learner,notebook,submitted_at``; ``notebook`` may be empty for all of a
learner's files) — the LMS's record — or else the file's modification time.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from labkit.course import CHAPTERS
from labkit.grade.config import parse_time

CANVAS = re.compile(r"^(?P<name>[^_]+?)(?P<late>_LATE)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+)$")
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_\w+?_(?P<file>.*)$")
GENERIC = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_(?P<file>.+)$")
RESUBMITTED = re.compile(r"-\d+(?=\.ipynb$)")


@dataclass
class Learner:
    name: str                                   # the folder name, or the LMS file's name part
    student_id: str = ""                        # from the LMS file name (the roster may add one)
    files: dict[str, Path] = field(default_factory=dict)        # graded notebook -> file
    submitted_at: dict[str, datetime] = field(default_factory=dict)
    late_flag: set[str] = field(default_factory=set)            # Canvas marked it LATE
    notes: list[str] = field(default_factory=list)
    candidates: list[Path] = field(default_factory=list)        # every .ipynb found


@dataclass
class Intake:
    learners: dict[str, Learner]
    notes: list[str]
    _tmp: list[str] = field(default_factory=list)

    def close(self) -> None:
        for t in self._tmp:
            shutil.rmtree(t, ignore_errors=True)


def _safe_extract(zip_path: Path, dest: Path) -> None:
    with zipfile.ZipFile(zip_path) as zf:
        for member in zf.infolist():
            target = (dest / member.filename).resolve()
            if dest.resolve() not in target.parents and target != dest.resolve():
                raise ValueError(f"{zip_path.name}: refuses the path {member.filename!r} "
                                 f"(it points outside the archive)")
        zf.extractall(dest)


def parse_lms_name(filename: str) -> tuple[str, str, str, bool] | None:
    """(name, id, original file name, marked late) of an LMS bulk-download file, or None."""
    for pattern in (MOODLE, CANVAS, GENERIC):
        m = pattern.match(filename)
        if m and m.group("file"):
            late = bool(m.groupdict().get("late"))
            return m.group("name"), m.group("id"), m.group("file"), late
    return None


def _code_sources(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return set()
    cells = data.get("cells", []) if isinstance(data, dict) else []
    out = set()
    for c in cells:
        if isinstance(c, dict) and c.get("cell_type") == "code":
            src = c.get("source", "")
            out.add(("".join(src) if isinstance(src, list) else str(src)).strip())
    return out


def identify(path: Path, solutions: dict) -> tuple[str | None, float]:
    """The graded notebook whose canonical code cells (those without a solution region)
    ``path`` holds most, and that share."""
    from labkit.grade.generate import BEGIN  # deferred: nbformat

    have = _code_sources(path)
    best, share = None, 0.0
    for name, nb in solutions.items():
        canon = {c.source.strip() for c in nb.cells
                 if c.cell_type == "code" and BEGIN not in c.source and c.source.strip()}
        if canon:
            s = len(canon & have) / len(canon)
            if s > share:
                best, share = name, s
    return best, share


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _assign_files(learner: Learner, solutions: dict) -> None:
    """Map a learner's .ipynb files to the graded notebooks."""
    by_notebook: dict[str, list[tuple[int, Path]]] = {}

    course = {ch.filename for ch in CHAPTERS}
    for path in learner.candidates:
        base = RESUBMITTED.sub("", path.name)
        if base in course and base not in solutions:
            continue                       # another chapter's notebook: not graded now
        if base in solutions:
            rank = 0 if path.name == base else 1
            by_notebook.setdefault(base, []).append((rank, path))
            continue
        name, share = identify(path, solutions)
        if name and share >= 0.5:
            by_notebook.setdefault(name, []).append((2, path))
        else:
            learner.notes.append(f"ignored {path.name}: not a notebook of this assignment "
                                 f"(its cells match none of {', '.join(solutions)})")
    for nb_name, found in by_notebook.items():
        found.sort(key=lambda rp: (rp[0], -rp[1].stat().st_mtime))
        chosen = found[0][1]
        learner.files[nb_name] = chosen
        if chosen.name != nb_name and RESUBMITTED.sub("", chosen.name) != nb_name:
            learner.notes.append(f"{nb_name}: graded {chosen.name} (its cells are this "
                                 f"notebook's; name it {nb_name})")
        for _, other in found[1:]:
            learner.notes.append(f"{nb_name}: also found {other.name}; graded {chosen.name}")


def _manifest(folder: Path) -> dict[tuple[str, str], datetime]:
    path = folder / "submitted.csv"
    if not path.exists():
        return {}

    out = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            learner = (row.get("learner") or "").strip()
            if not learner or not row.get("submitted_at"):
                raise ValueError(f"{path}: each row needs learner and submitted_at")
            nb = (row.get("notebook") or "").strip()
            if nb and not nb.endswith(".ipynb"):
                nb += ".ipynb"
            out[(learner, nb)] = parse_time(row["submitted_at"], f"{path.name} submitted_at")
    return out


def collect(submissions: Path, solutions: dict) -> Intake:
    """Every learner found under ``submissions`` (a folder or a .zip) with their files."""
    submissions = Path(submissions)
    tmp: list[str] = []
    notes: list[str] = []
    if submissions.is_file() and submissions.suffix.lower() == ".zip":
        root = Path(tempfile.mkdtemp(prefix="labkit-intake-"))
        tmp.append(str(root))
        _safe_extract(submissions, root)
        submissions_dir = root
    elif submissions.is_dir():
        submissions_dir = submissions
    else:
        raise ValueError(f"submissions must be a folder (one folder per learner, or an LMS "
                         f"bulk download) or a .zip of one; {submissions} is neither")
    learners: dict[str, Learner] = {}
    staging = Path(tempfile.mkdtemp(prefix="labkit-intake-"))
    tmp.append(str(staging))

    def learner(name: str, student_id: str = "") -> Learner:
        if name not in learners:
            learners[name] = Learner(name, student_id)
        elif student_id and not learners[name].student_id:
            learners[name].student_id = student_id
        return learners[name]

    for entry in sorted(submissions_dir.iterdir()):
        if entry.name.startswith(".") or entry.name == "submitted.csv":
            continue
        if entry.is_file() and entry.suffix.lower() == ".zip":
            inner = Path(tempfile.mkdtemp(prefix="labkit-intake-"))
            tmp.append(str(inner))
            _safe_extract(entry, inner)
            for path in sorted(inner.rglob("*.ipynb")):
                _add_lms_file(path, path.name, learner, notes, staging)
            continue
        parsed = parse_lms_name(entry.name)
        if entry.is_dir() and parsed and "assignsubmission" in entry.name:
            who = learner(parsed[0], parsed[1])        # Moodle: a folder per submission
            who.candidates += sorted(entry.rglob("*.ipynb"))
        elif entry.is_dir():
            who = learner(entry.name)
            who.candidates += sorted(p for p in entry.rglob("*.ipynb")
                                     if ".ipynb_checkpoints" not in p.parts)
            for other in sorted(entry.iterdir()):
                if other.is_file() and other.suffix.lower() != ".ipynb" \
                        and other.suffix.lower() in (".json", ".txt", ".py"):
                    who.notes.append(f"ignored {other.name}: not a notebook")
        elif entry.is_file() and entry.suffix.lower() == ".ipynb":
            _add_lms_file(entry, entry.name, learner, notes, staging)
        elif entry.is_file():
            notes.append(f"ignored {entry.name}: put each learner's notebooks in a folder "
                         f"named after the learner, or give the LMS's bulk download")
    if not learners:
        for t in tmp:
            shutil.rmtree(t, ignore_errors=True)
        raise ValueError(f"no learner folders found in {submissions}: put each learner's "
                         f"notebooks in a folder named after the learner "
                         f"({submissions}/ada/02_autodiff.ipynb, ...), or give the LMS's "
                         f"bulk download")
    manifest = _manifest(submissions_dir)
    for who in learners.values():
        _assign_files(who, solutions)
        for nb_name, path in who.files.items():
            when = manifest.get((who.name, nb_name)) or manifest.get((who.name, ""))
            who.submitted_at[nb_name] = when or _mtime(path)
    return Intake(learners, notes, tmp)


def _add_lms_file(path: Path, filename: str, learner, notes: list[str], staging: Path) -> None:
    """An LMS download's file, copied under its original name into a staging folder of its
    learner (the submissions folder is never written to)."""
    parsed = parse_lms_name(filename)
    if parsed is None:
        notes.append(f"ignored {filename}: a notebook outside a learner's folder whose name "
                     f"is not an LMS download's (<name>_<id>_<file>)")
        return
    name, student_id, original, late = parsed
    who = learner(name, student_id)
    folder = staging / f"{name}_{student_id}"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / original
    k = 1
    while target.exists():
        target = folder / f"{Path(original).stem}-{k}{Path(original).suffix}"
        k += 1
    shutil.copy2(path, target)
    who.candidates.append(target)
    if late:
        who.late_flag.add(original)
