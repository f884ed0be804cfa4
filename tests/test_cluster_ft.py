"""Real faults: a torchrun job whose worker is SIGKILLed restarts from its checkpoint and
ends bit-identical to an uninterrupted run; so does a single process killed and resumed."""
import os
import signal

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


def test_identical_and_config_errors():
    a = {"w": np.array([1.0, 2.0], np.float32)}
    assert ft.identical(a, {"w": a["w"].copy()})
    assert not ft.identical(a, {"w": np.nextafter(a["w"], 3).astype(np.float32)})
    assert not ft.identical(a, {"w": a["w"].astype(np.float64)})
    with pytest.raises(ValueError, match="divisible"):
        ft.FTConfig(batch=63).validate(2)
    with pytest.raises(ValueError, match="kill_at"):
        ft.run_single(CFG, kill_at=99)
