"""The grader's time limits count CPU seconds (labkit.grade.limits): a computing run is
stopped by the CPU it used, whatever else shares the core; a waiting one as idle; the
watchdog applies both to nbval's waits and still sees a dead kernel at once."""
import json
import os
import subprocess
import sys
import time
from queue import Empty

import pytest

from labkit.grade import limits, watchdog

BUSY = "while True: pass"
SLEEP = "import time\nprint('ready', flush=True)\ntime.sleep(60)"


def spawn(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], **kw)


def until_spent(budget: limits.Budget, cap: float = 30.0) -> str | None:
    end = time.monotonic() + cap
    while time.monotonic() < end:
        if spent := budget.spent():
            return spent
        time.sleep(0.05)
    return None


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_a_computing_run_is_stopped_by_its_cpu_time(procs):
    procs.append(p := spawn(BUSY))
    b = limits.Budget(p.pid, 0.5)
    assert until_spent(b) == limits.CPU
    assert 0.5 <= b.used < 1.5


def test_a_sleeping_run_is_stopped_as_idle_after_the_limit(procs):
    """The budget starts once the sleeper has started: Python's own start-up (0.06 s of
    CPU in CI, stop 30) would otherwise count as work."""
    procs.append(p := spawn(SLEEP, stdout=subprocess.PIPE, text=True))
    assert p.stdout.readline() == "ready\n"
    b = limits.Budget(p.pid, 0.6)
    assert until_spent(b) == limits.IDLE
    assert b.elapsed >= 0.6 and b.used < 0.02


THREADED = ("import threading\n"
            "def spin():\n    while True: pass\n"
            "t = threading.Thread(target=spin)\nt.start()\nt.join()")


def test_a_run_starved_of_cpu_is_never_idle(procs):
    """Twelve busy loops on the run's core: it gets about a thirteenth of it, under
    IDLE_SHARE (CI at load 15 stopped busy loops as idle when idleness was "under a tenth
    of a core"), and its CPU time grows over ten times slower than the clock: a wall-clock
    limit (the grader's first rule) would stop it long before. Its computing thread is not
    its main one, which waits in join as the tracer's does: the thread stays runnable, so
    the run ends by its CPU time only."""
    core = {min(os.sched_getaffinity(0))}
    pin = lambda: os.sched_setaffinity(0, core)          # noqa: E731
    for _ in range(12):
        procs.append(spawn(BUSY, preexec_fn=pin))
    procs.append(p := spawn(THREADED, preexec_fn=pin))
    b = limits.Budget(p.pid, 0.25)
    assert until_spent(b, cap=60) == limits.CPU
    assert b.waited < 0.25 and b.elapsed > 5 * b.used, (b.waited, b.elapsed, b.used)


def test_children_count_so_a_parent_waiting_on_its_worker_is_not_idle(procs):
    parent = ("import subprocess, sys\n"
              f"subprocess.run([sys.executable, '-c', {BUSY!r}])")
    procs.append(p := spawn(parent, start_new_session=True))
    b = limits.Budget(p.pid, 0.8)
    assert until_spent(b) == limits.CPU
    os.killpg(p.pid, 9)


def test_a_process_that_cannot_be_read_falls_back_to_the_clock():
    b = limits.Budget(None, 0.2)
    assert b.spent() is None
    time.sleep(0.25)
    assert b.spent() == limits.IDLE


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_the_limit_must_be_positive(bad):
    with pytest.raises(ValueError, match="limit must be > 0"):
        limits.Budget(None, bad)


def test_communicate_within_stops_a_sleeper_and_keeps_its_output():
    p = spawn("import time\nprint('started', flush=True)\ntime.sleep(60)",
              stdout=subprocess.PIPE, text=True, start_new_session=True)
    out, budget, spent = limits.communicate_within(p, 0.8, lambda q: os.killpg(q.pid, 9))
    assert spent == limits.IDLE and "started" in out and p.poll() is not None


def test_communicate_within_returns_a_finished_run():
    p = spawn("print(6 * 7)", stdout=subprocess.PIPE, text=True)
    out, _, spent = limits.communicate_within(p, 30, lambda q: q.kill())
    assert (out.strip(), spent) == ("42", None)


class _Channel:
    """A kernel client whose channels never deliver (nbval's get_message raises Empty)."""

    def get_shell_msg(self, timeout=None):
        time.sleep(timeout or 0)
        raise Empty

    get_iopub_msg = get_shell_msg


class _Kernel:
    def __init__(self, pid, alive=True):
        self.kc = _Channel()
        self.km = type("KM", (), {"provisioner": type("P", (), {"pid": pid})()})()
        self.alive = alive

    def is_alive(self):
        return self.alive


@pytest.fixture
def patched(monkeypatch, tmp_path):
    from nbval.kernel import RunningKernel

    monkeypatch.setattr(RunningKernel, "get_message", RunningKernel.get_message)  # restored
    monkeypatch.setattr(watchdog, "POLL_S", 0.05)
    log = tmp_path / "limits.jsonl"
    monkeypatch.setenv(watchdog.LOG_ENV, str(log))
    watchdog._patch()
    return RunningKernel.get_message, log


@pytest.mark.parametrize("code, want", [(BUSY, "cpu"), (SLEEP, "idle")])
def test_the_watchdog_ends_a_wait_by_the_kernels_cpu_or_idleness(patched, procs, code, want):
    get_message, log = patched
    procs.append(p := spawn(code))
    with pytest.raises(Empty):
        get_message(_Kernel(p.pid), "shell", timeout=0.5)
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["spent"] == want and entry["stream"] == "shell" and entry["limit"] == 0.5


def test_the_watchdog_reports_a_dead_kernel_at_once(patched):
    get_message, _ = patched
    start = time.monotonic()
    with pytest.raises(watchdog.KernelDied):
        get_message(_Kernel(None, alive=False), "iopub", timeout=60)
    assert time.monotonic() - start < 5
