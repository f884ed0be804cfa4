"""Where a learner's verdicts are kept (``~/.labkit/progress.json``, or ``$LABKIT_PROGRESS``):
every check records its verdict here while learning; :mod:`labkit.check.progress` reads them
back for ``labkit.progress()``."""
from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from labkit import validate

PROGRESS_ENV = "LABKIT_PROGRESS"


def progress_path() -> Path:
    """Where this learner's verdicts are kept."""
    env = os.environ.get(PROGRESS_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".labkit" / "progress.json"


def load(path: Path | None = None) -> dict[str, dict]:
    """The recorded verdicts by exercise id ({} when there is no file or it is unreadable)."""
    path = progress_path() if path is None else validate.path("path", path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    exercises = data.get("exercises") if isinstance(data, dict) else None
    return {k: v for k, v in exercises.items() if isinstance(v, dict)} \
        if isinstance(exercises, dict) else {}


def record(verdict, title: str = "", path: Path | None = None) -> bool:
    """Add one verdict (a :class:`labkit.check.core.Verdict`) to the learner's file; False (and nothing else) if it cannot be written:
    a check cell must never fail because the home folder is read-only."""
    path = progress_path() if path is None else Path(path)
    entries = load(path)
    before = entries.get(verdict.exercise, {})
    entries[verdict.exercise] = {
        "status": verdict.status, "title": title,
        "passed": bool(before.get("passed")) or verdict.passed,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp",
                                         encoding="utf-8") as fh:
            json.dump({"exercises": entries}, fh, indent=1, sort_keys=True)
        os.replace(fh.name, path)
    except OSError:
        return False
    return True
