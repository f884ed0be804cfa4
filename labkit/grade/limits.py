"""The grader's time limits, counted in CPU seconds so that a verdict does not depend on load.

A cell (``--cell-timeout``) or an exercise's answer (``--exercise-timeout``) is stopped when
the processes it runs in (the kernel or the answer process, and every process they started)
have used ``limit`` CPU seconds since it began. On a machine shared by many graders, or by
a test suite, a process gets a fraction of a core: the same work then takes longer by the
wall clock but about the same CPU time, so whether it stays within the limit does not
depend on what else runs. (CI once failed a correct notebook whose ``import torch`` cell ran
past a 10 s wall-clock limit under load: its imports use about 5 s of CPU.)

Work that waits instead of computing (``time.sleep``, a blocked pipe, a lost message) uses
no CPU. It is stopped as *idle* once it has waited ``limit`` wall-clock seconds: a stretch
between two readings counts as waiting when no thread of the tree was runnable at the
reading (Linux's state ``R``, running or queued for a core, or ``D``, in the disk) and the
tree used under ``IDLE_SHARE`` of a core over it. A computing process starved by load stays
runnable, so it is never idle however little CPU it gets (CI once stopped busy loops as
idle on a machine at load 15, when idleness was "under a tenth of a core on average"): its
end is its CPU time alone.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time

import psutil

IDLE_SHARE = 0.1
POLL_S = 0.25
CPU, IDLE = "cpu", "idle"


def _runnable(proc: psutil.Process) -> bool:
    """Whether a thread of ``proc`` is running, queued for a core or in the disk (R or D in
    /proc/PID/task/TID/stat; the process's own state is only its first thread's)."""
    try:
        tids = os.listdir(f"/proc/{proc.pid}/task")
    except OSError:
        try:
            return proc.status() in (psutil.STATUS_RUNNING, psutil.STATUS_DISK_SLEEP)
        except psutil.Error:
            return False
    for tid in tids:
        try:
            with open(f"/proc/{proc.pid}/task/{tid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue        # the thread ended between the listing and the reading
        if state in (b"R", b"D"):
            return True
    return False


def tree_reading(pid: int) -> tuple[float, bool] | None:
    """(user + system CPU seconds of process ``pid``, its reaped children and its live
    descendants; whether any of their threads is runnable), or None when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        t = root.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        kids = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    runnable = _runnable(root)
    for kid in kids:
        try:
            k = kid.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue        # it ended between the listing and the reading
        total += k.user + k.system
        runnable = runnable or _runnable(kid)
    return total, runnable


def tree_cpu_seconds(pid: int) -> float | None:
    """The CPU seconds of :func:`tree_reading`; None when ``pid`` is gone."""
    reading = tree_reading(pid)
    return None if reading is None else reading[0]


class Budget:
    """``limit`` CPU seconds of process ``pid``'s tree from now (see the module docstring).

    ``spent()`` is None while the run may go on, else why it must stop: CPU (it used
    ``limit`` CPU seconds) or IDLE (it waited ``limit`` wall-clock seconds: ``waited``).
    When the tree cannot be read, ``limit`` is a wall-clock limit and running out of it
    counts as IDLE."""

    def __init__(self, pid: int | None, limit: float):
        if not limit > 0:
            raise ValueError(f"limit must be > 0 seconds, got {limit!r}")
        self.pid, self.limit = pid, float(limit)
        self.started = self._last = time.monotonic()
        self.cpu0 = tree_cpu_seconds(pid) if pid is not None else None
        self._cpu = self.cpu0
        self.used = self.elapsed = self.waited = 0.0

    def spent(self) -> str | None:
        now = time.monotonic()
        self.elapsed = now - self.started
        reading = tree_reading(self.pid) if self.cpu0 is not None else None
        if reading is None:
            return IDLE if self.elapsed >= self.limit else None
        cpu, runnable = reading
        self.used = cpu - self.cpu0
        if self.used >= self.limit:
            return CPU
        step = now - self._last
        if not runnable and cpu - self._cpu < IDLE_SHARE * step:
            self.waited += step
        self._last, self._cpu = now, cpu
        return IDLE if self.waited >= self.limit else None


def communicate_within(proc: subprocess.Popen, limit: float, stop) -> tuple[str, Budget, str | None]:
    """``proc.communicate()`` under a Budget of its process tree: (output, the budget, None),
    or, when the budget ran out, ``stop(proc)`` is called and (the output so far, the budget,
    CPU or IDLE)."""
    budget = Budget(proc.pid, limit)
    box: dict = {}
    reader = threading.Thread(target=lambda: box.update(out=proc.communicate()[0]),
                              daemon=True)
    reader.start()
    spent = None
    while reader.is_alive():
        reader.join(POLL_S)
        if reader.is_alive() and (spent := budget.spent()):
            stop(proc)
            reader.join()
            break
    return box.get("out") or "", budget, spent
