"""Real faults: a torchrun job whose worker is SIGKILLed restarts from its checkpoint and
ends bit-identical to an uninterrupted run; so does a single process killed and resumed."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from labkit.cluster import ft_train as ft

CFG = ft.FTConfig(steps=12, ckpt_every=4)


def test_single_process_kill_and_resume_is_bit_identical(tmp_path):
    clean = ft.run_in_process(CFG)
    resumed, killed_s = ft.run_single(CFG, kill_at=10, run_dir=tmp_path / "run")
    assert resumed.returncodes == [-signal.SIGKILL, 0]
    assert resumed.resumed_from == 8 and killed_s > 0
    assert ft.identical(clean.params, resumed.params)
    # the killed attempt and the resumed one both logged themselves
    assert [a["resumed_from"] for a in resumed.attempts] == [0, 8]
    # a different run (other seed) is not identical: the comparison can fail
    other = ft.run_in_process(ft.FTConfig(steps=12, ckpt_every=4, seed=1))
    assert not ft.identical(clean.params, other.params)


@pytest.mark.slow
def test_torchrun_restart_is_bit_identical():
    clean = ft.run_torchrun(CFG, world=2)
    hit = ft.run_torchrun(CFG, world=2, kill_at=10, kill_rank=1, max_restarts=1)
    assert clean.restarts == 0 and clean.returncodes == [0]
    assert hit.restarts == 1 and hit.returncodes == [0] and hit.resumed_from == 8
    assert sorted((a["attempt"], a["rank"], a["resumed_from"]) for a in hit.attempts) == \
        [(0, 0, 0), (0, 1, 0), (1, 0, 8), (1, 1, 8)]
    assert ft.identical(clean.params, hit.params)
    # the one-process emulation of the 2-worker DDP run is bit for bit the real one
    assert ft.identical(ft.reference_params(CFG, 2), clean.params)
    assert not ft.identical(ft.reference_params(CFG, 1), clean.params)


def test_the_generators_state_is_part_of_the_run(tmp_path):
    """Batches and dropout masks come from torch's global generator: a resume that does not
    restore it is not bit-identical (and the reference class does restore it)."""
    class NoRng(ft.Checkpoint):
        def resume(self, model, optimizer):
            state = torch.get_rng_state()
            step = super().resume(model, optimizer)
            torch.set_rng_state(state)
            return step
    clean = ft.run_in_process(CFG)
    assert ft.identical(clean.params, ft.reference_params(CFG, 1))
    d = tmp_path / "run"
    ft.run_in_process(ft.FTConfig(steps=9, ckpt_every=4), run_dir=d)   # checkpoint at 8
    (d / "final.pt").unlink()
    resumed = ft.run_in_process(CFG, run_dir=d)
    assert resumed.resumed_from == 8 and ft.identical(resumed.params, clean.params)
    d2 = tmp_path / "run2"
    ft.run_in_process(ft.FTConfig(steps=9, ckpt_every=4), run_dir=d2)
    bad = ft.run_in_process(CFG, run_dir=d2, impl=NoRng)
    assert bad.resumed_from == 8 and not ft.identical(bad.params, clean.params)
    before = torch.get_rng_state()
    ft.reference_params(CFG, 2)
    assert torch.equal(before, torch.get_rng_state())          # this process's is left alone


def test_atomic_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    ft.save_atomic({"step": 1}, path)

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        ft.save_atomic({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["step"] == 1
    assert os.listdir(tmp_path) == ["ckpt.pt"]



def test_atomic_save_fsyncs_file_then_directory(tmp_path, monkeypatch):
    calls = []
    real = os.fsync

    def spy(fd):
        calls.append(os.path.isdir(f"/proc/self/fd/{fd}"))
        return real(fd)
    monkeypatch.setattr(os, "fsync", spy)
    ft.save_atomic({"step": 3}, tmp_path / "ckpt.pt")
    assert calls == [False, True]          # the file, then its directory


def test_identical_and_config_errors():
    a = {"w": np.array([1.0, 2.0], np.float32)}
    assert ft.identical(a, {"w": a["w"].copy()})
    assert not ft.identical(a, {"w": np.nextafter(a["w"], 3).astype(np.float32)})
    assert not ft.identical(a, {"w": a["w"].astype(np.float64)})
    with pytest.raises(ValueError, match="divisible"):
        ft.FTConfig(batch=63).validate(2)
    with pytest.raises(ValueError, match="kill_at"):
        ft.run_single(CFG, kill_at=99)


# ---- a timeout stops the whole process tree ------------------------------------------------

# a launcher that starts two sleeping workers each in a session of its own, as torchrun does
# (subprocess_handler.py: start_new_session=True), then sleeps itself
LAUNCHER = """
import subprocess, sys, time
worker = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
for i in range(2):
    subprocess.Popen([sys.executable, "-c", worker, sys.argv[1] + f"/worker{i}.pid"],
                     start_new_session=True)
time.sleep(120)
"""
SLEEPER = """
import os, sys, time
open(os.path.join(sys.argv[1], os.environ["RANK"] + ".pid"), "w").write(str(os.getpid()))
time.sleep(120)
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"     # a zombie is dead
    except OSError:
        return False


def _pids(d, n):
    files = sorted(d.glob("*.pid"))
    assert len(files) == n, f"only {len(files)} of {n} workers started before the timeout"
    return [int(f.read_text()) for f in files]


def _all_dead(pids, within=5.0):
    end = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_timeout_kills_workers_in_their_own_sessions(tmp_path):
    (tmp_path / "launch.py").write_text(LAUNCHER)
    cmd = [sys.executable, str(tmp_path / "launch.py"), str(tmp_path)]
    # what subprocess.run(timeout=...) did: it kills the launcher, its workers live on
    old = tmp_path / "old"
    old.mkdir()
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([*cmd[:2], str(old)], timeout=4, capture_output=True)
    orphans = _pids(old, 2)
    try:
        assert all(_alive(p) for p in orphans)
    finally:
        for p in orphans:                    # ours: started by this test
            os.kill(p, signal.SIGKILL)
    with pytest.raises(subprocess.TimeoutExpired):
        ft.run_group(cmd, timeout_s=4, grace_s=1)
    assert _all_dead(_pids(tmp_path, 2))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_torchrun_timeout_leaves_no_worker(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "--monitor-interval", "0.1", str(tmp_path / "sleeper.py"), str(tmp_path)]
    with pytest.raises(subprocess.TimeoutExpired):
        ft.run_group(cmd, env=ft._env(), timeout_s=12, grace_s=5)
    assert _all_dead(_pids(tmp_path, 2))


def test_run_group_returns_output_and_validates():
    done = ft.run_group([sys.executable, "-c", "print('hi')"], timeout_s=30)
    assert done.returncode == 0 and done.stdout.strip() == "hi"
    with pytest.raises(ValueError, match="timeout_s"):
        ft.run_group([sys.executable, "-c", "pass"], timeout_s=0)
