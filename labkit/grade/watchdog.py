"""pytest plugin the grader loads (``-p labkit.grade.watchdog``): a dead kernel fails fast,
and a cell's time limit is counted in CPU seconds (:mod:`labkit.grade.limits`).

nbval waits for each message from the kernel with ``--nbval-cell-timeout`` (a cell's reply)
or 5 s (its outputs) by the wall clock, and waits the whole time even when the kernel
process has already exited (a learner cell calling ``os._exit(0)``). Here every wait is cut
into short slices. Between slices the kernel is asked whether it is alive (a dead one raises
:class:`KernelDied` at once; "Kernel died" is what the grader looks for in the output), and
the wait ends (``queue.Empty``, as nbval expects) only when the kernel's process tree has
used the wait's seconds of CPU time, or has been idle that long. Which limit
ended a wait is appended to the file named by ``$LABKIT_WATCHDOG_LOG``, one JSON line each.
"""
from __future__ import annotations

import json
import os
from queue import Empty

from labkit.grade.limits import Budget

POLL_S = 0.5
LOG_ENV = "LABKIT_WATCHDOG_LOG"


class KernelDied(RuntimeError):
    """The notebook's kernel process exited while a cell was running."""


def _kernel_pid(running) -> int | None:
    provisioner = getattr(getattr(running, "km", None), "provisioner", None)
    pid = getattr(provisioner, "pid", None)
    return pid if isinstance(pid, int) else None


def _log(entry: dict) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def _patch() -> None:
    from nbval.kernel import RunningKernel  # deferred: nbval

    if getattr(RunningKernel.get_message, "__labkit_watchdog__", False):
        return
    original = RunningKernel.get_message

    def get_message(self, stream, timeout=None):
        budget = None if timeout is None else Budget(_kernel_pid(self), float(timeout))
        while True:
            try:
                return original(self, stream, timeout=POLL_S)
            except Empty:
                if not self.is_alive():
                    raise KernelDied("Kernel died while running a cell (the process exited)")
                spent = budget.spent() if budget is not None else None
                if spent:
                    _log({"stream": stream, "limit": budget.limit, "spent": spent,
                          "elapsed": round(budget.elapsed, 2), "used": round(budget.used, 2)})
                    raise

    get_message.__labkit_watchdog__ = True
    RunningKernel.get_message = get_message


def pytest_configure(config) -> None:
    _patch()
