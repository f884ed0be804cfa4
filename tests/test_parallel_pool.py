"""labkit.parallel.launch's worker pool: one gloo group kept up for many jobs, closed (and
started again by the next job) when a job fails, and never shared with a forked child."""
import os

import pytest

from labkit._code import by_value
from labkit.parallel import launch


def _sum_ranks(rank, world, extra):
    import torch
    import torch.distributed as dist
    t = torch.tensor([float(rank + extra)])
    dist.all_reduce(t)
    return float(t), os.getpid()


def _rank1_fails(rank, world):
    import torch
    import torch.distributed as dist
    if rank == 1:
        raise ValueError("rank 1 gives up")
    dist.all_reduce(torch.ones(1))


def _calls(rank, world, payload):
    import pickle
    fn = pickle.loads(payload)
    return fn(rank)


@pytest.mark.slow
def test_jobs_share_the_workers_and_a_failure_restarts_them():
    first = launch.pool_run(_sum_ranks, 2, 1)
    assert [v for v, _ in first] == [3.0, 3.0]          # (0 + 1) + (1 + 1)
    again = launch.pool_run(_sum_ranks, 2, 2)
    assert [v for v, _ in again] == [5.0, 5.0]
    assert [p for _, p in again] == [p for _, p in first]      # the same two processes
    with pytest.raises(RuntimeError, match="rank 1 gives up"):
        launch.pool_run(_rank1_fails, 2, timeout_s=30)
    after = launch.pool_run(_sum_ranks, 2, 0)
    assert [v for v, _ in after] == [1.0, 1.0]
    assert {p for _, p in after}.isdisjoint({p for _, p in first})   # a new pool


@pytest.mark.slow
def test_by_value_ships_a_function_defined_outside_labkit():
    def square_plus(rank):           # a closure: only by value can it travel
        return rank * rank + offset

    offset = 10
    assert launch.pool_run(_calls, 2, by_value(square_plus)) == [10, 11]


def test_a_forked_child_does_not_use_its_parents_pool():
    pool = launch.pool_start(2)
    pid = os.fork()
    if pid == 0:                     # the child: the pool is its parent's, not alive here
        os._exit(0 if not pool.alive else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="world"):
        launch.pool_run(_sum_ranks, 0, 1)
    with pytest.raises(TypeError, match="fn"):
        launch.pool_start(2).run("not a function")
    with pytest.raises(ValueError, match="timeout_s"):
        launch.pool_run(_sum_ranks, 2, 1, timeout_s=-1)


def test_the_graders_reaping_spares_the_pool_and_what_was_there_before():
    """labkit-grade kills what submissions left running (processes.reap_leftovers). It used to
    kill every descendant, the pool's workers too, and reap them, so ``multiprocessing``
    believed them alive and the next job waited 120 s for nothing (CI, stop 28)."""
    import subprocess
    import sys

    from labkit.grade import processes
    first = launch.pool_run(_sum_ranks, 2, 1)
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    already = set(processes.descendants())
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert processes.reap_leftovers(keep=already) == 1
        assert left.poll() is not None and before.poll() is None
        again = launch.pool_run(_sum_ranks, 2, 2, timeout_s=30)
        assert [p for _, p in again] == [p for _, p in first]
    finally:
        for p in (before, left):
            p.kill()
            p.wait()


KILLED_OWNER = """
import os, sys
from labkit.parallel import launch
pool = launch.WorkerPool(2)
print(*[p.pid for p in pool.procs], flush=True)
sys.stdin.read()                      # until the test kills this process
"""


@pytest.mark.slow
def test_workers_end_when_the_process_that_started_them_is_killed():
    """A notebook or grader killed with its pool up leaves no rank running: the ranks are
    forks of a fork server, and notice the owner gone (the server ends with it)."""
    import signal
    import subprocess
    import sys
    import time
    owner = subprocess.Popen([sys.executable, "-c", KILLED_OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        ranks = [int(p) for p in owner.stdout.readline().split()]
        assert len(ranks) == 2
        for pid in ranks:
            os.kill(pid, 0)                               # both up
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 30
        alive = ranks
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in ranks if _running(p)]
        assert alive == [], f"ranks {alive} outlived their owner"
    finally:
        owner.kill()
        owner.wait()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
