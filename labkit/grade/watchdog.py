"""pytest plugin the grader loads (``-p labkit.grade.watchdog``): a dead kernel fails fast.

nbval waits for a cell's reply for the whole cell time limit even when the kernel process
has already exited (a learner cell calling ``os._exit(0)``), so a crash used to be reported
only when that limit ran out. Here every wait is cut into short slices; between slices the
kernel process is asked whether it is alive, and a dead one raises :class:`KernelDied` at
once ("Kernel died" is what the grader looks for in the output).
"""
from __future__ import annotations

import time
from queue import Empty

POLL_S = 0.5


class KernelDied(RuntimeError):
    """The notebook's kernel process exited while a cell was running."""


def _patch() -> None:
    from nbval.kernel import RunningKernel  # deferred: nbval

    if getattr(RunningKernel.get_message, "__labkit_watchdog__", False):
        return
    original = RunningKernel.get_message

    def get_message(self, stream, timeout=None):
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            step = POLL_S if left is None else max(0.0, min(POLL_S, left))
            try:
                return original(self, stream, timeout=step)
            except Empty:
                if not self.is_alive():
                    raise KernelDied("Kernel died while running a cell (the process exited)")
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    get_message.__labkit_watchdog__ = True
    RunningKernel.get_message = get_message


def pytest_configure(config) -> None:
    _patch()
