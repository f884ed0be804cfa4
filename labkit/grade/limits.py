"""The grader's time limits, counted in CPU seconds so that a verdict does not depend on load.

A cell (``--cell-timeout``) or an exercise's answer (``--exercise-timeout``) is stopped when
the processes it runs in (the kernel or the answer process, and every process they started)
have used ``limit`` CPU seconds since it began. On a machine shared by many graders, or by
a test suite, a process gets a fraction of a core: the same work then takes longer by the
wall clock but about the same CPU time, so whether it stays within the limit does not
depend on what else runs. (CI once failed a correct notebook whose ``import torch`` cell ran
past a 10 s wall-clock limit under load: its imports use about 5 s of CPU.)

Work that waits instead of computing (``time.sleep``, a blocked pipe, a lost message) uses
no CPU. It is stopped as *idle* once ``limit`` wall-clock seconds have passed while it has
used under ``IDLE_SHARE`` of a core on average: a sleeping cell stops when the old
wall-clock limit would have stopped it, and a computing one, unless it gets under a tenth
of a core, only by its CPU time. Either way a run ends within ``limit / IDLE_SHARE``
wall-clock seconds.
"""
from __future__ import annotations

import subprocess
import threading
import time

import psutil

IDLE_SHARE = 0.1
POLL_S = 0.25
CPU, IDLE = "cpu", "idle"


def tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid``, its reaped children and its live
    descendants; None when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        t = root.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        kids = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    for kid in kids:
        try:
            k = kid.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue        # it ended between the listing and the reading
        total += k.user + k.system
    return total


class Budget:
    """``limit`` CPU seconds of process ``pid``'s tree from now (see the module docstring).

    ``spent()`` is None while the run may go on, else why it must stop: CPU (it used
    ``limit`` CPU seconds) or IDLE (``limit`` wall-clock seconds passed and it used under
    ``IDLE_SHARE`` of a core). When the tree's CPU time cannot be read, ``limit`` is a
    wall-clock limit and running out of it counts as IDLE."""

    def __init__(self, pid: int | None, limit: float):
        if not limit > 0:
            raise ValueError(f"limit must be > 0 seconds, got {limit!r}")
        self.pid, self.limit = pid, float(limit)
        self.started = time.monotonic()
        self.cpu0 = tree_cpu_seconds(pid) if pid is not None else None
        self.used = 0.0
        self.elapsed = 0.0

    def spent(self) -> str | None:
        self.elapsed = time.monotonic() - self.started
        now = tree_cpu_seconds(self.pid) if self.cpu0 is not None else None
        if now is not None:
            self.used = now - self.cpu0
            if self.used >= self.limit:
                return CPU
            if self.elapsed >= self.limit and self.used < IDLE_SHARE * self.elapsed:
                return IDLE
            return None
        return IDLE if self.elapsed >= self.limit else None


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
