"""The grader's hold on processes and files: the processes a submission started (found
from ``/proc``, killed when it is graded), and the installed files it must not change.

Only the standard library: :mod:`labkit.grade.sandbox` uses :func:`installed_roots` inside
the learner's kernel too."""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
import sysconfig


@functools.lru_cache(maxsize=2)
def installed_roots(stdlib: bool = True) -> tuple[str, ...]:
    """Where installed code lives: the standard library (unless ``stdlib`` is False),
    site-packages, labkit's package; none inside another. A file anywhere else (ipykernel's
    cell files, a module the learner wrote) is the learner's, wherever the checkout or the
    temporary folder happens to be."""
    paths = sysconfig.get_paths()
    keys = ("stdlib", "platstdlib", "purelib", "platlib") if stdlib else ("purelib", "platlib")
    roots = {os.path.join(os.path.realpath(paths[k]), "") for k in keys if k in paths}
    roots.add(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ""))
    return tuple(sorted(r for r in roots if not any(r != o and r.startswith(o) for o in roots)))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it was started in a session of its own) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()



def become_subreaper() -> bool:
    """Make this process the parent of every orphan among its descendants (Linux), so that
    a notebook's process that double-forks out of its group is still ours to kill."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0          # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def descendants(root: int | None = None) -> list[int]:
    """Pids of every living descendant of ``root`` (default: this process), from /proc."""
    root = os.getpid() if root is None else root
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if fields[0] != b"Z":
                parent[int(entry)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    out, frontier = [], [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        frontier += kids
    return out


def own_workers() -> set[int]:
    """Pids of this process's own helpers: the shared gloo pools of
    :mod:`labkit.parallel.launch` (a check may have started one while grading)."""
    launch = sys.modules.get("labkit.parallel.launch")
    pools = getattr(launch, "_POOLS", {}) if launch else {}
    return {p.pid for pool in list(pools.values()) for p in pool.procs if p.pid}


def reap_leftovers(keep: set[int] = frozenset()) -> int:
    """Kill every descendant still alive (a learner's background process) except ``keep``
    (those that were there before grading began) and this process's own worker pools;
    their count. Killing and reaping a pool's worker would leave ``multiprocessing``
    believing it alive, and the next job would wait for it forever."""
    spare = set(keep) | own_workers()
    spare |= {d for w in spare for d in descendants(w)}
    pids = [p for p in descendants() if p not in spare]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return len(pids)


def installed_files() -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of labkit and of the installed packages: a submission
    that rewrites one of them while it is graded is caught by comparing before and after.
    (Not the standard library's 34,000 files: reading them too doubles the 0.3 s a reading
    takes, and it is read after each notebook when grading one at a time. The bytecode
    caches are not entered at all: listing them took 0.2 of 0.48 s.)"""
    out: dict[str, tuple[int, int]] = {}
    for root in installed_roots(stdlib=False):
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                if f.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(dirpath, f)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                out[full] = (st.st_size, st.st_mtime_ns)
    return out


def changed_files(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
                  ) -> list[str]:
    """The files whose (size, mtime) differ between two :func:`installed_files` readings."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
