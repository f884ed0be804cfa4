"""Real torch.distributed runs on this machine (gloo, 2 processes) and the α-β fit.

Each spawn costs seconds here, so there are few: one all-reduce run, one DDP run via the
launcher, one via torchrun.
"""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from labkit.parallel.cost import collective_time
from labkit.parallel.ddp_train import TrainConfig, run_ddp
from labkit.parallel.launch import fit_alpha_beta, free_port, launch, measure_allreduce


@pytest.fixture(scope="module")
def measured():
    return measure_allreduce(2, sizes=(1 << 8, 1 << 12, 1 << 16, 1 << 19), repeats=5,
                             backend="gloo")


def test_gloo_all_reduce_two_processes_is_the_sum(measured):
    assert measured.backend == "gloo" and measured.world == 2
    np.testing.assert_allclose(measured.result, measured.expected, rtol=1e-5, atol=1e-5)
    assert measured.max_error < 1e-5
    assert np.all(measured.seconds > 0) and measured.nbytes.tolist() == [1024, 16384,
                                                                          262144, 2097152]


def test_fit_reproduces_the_measured_times(measured):
    fit = fit_alpha_beta(measured.nbytes, measured.seconds, 2)
    # β > 0 on a quiet machine; under heavy outside load the times can come out flat and
    # the constrained fit puts β on its bound 0 — the optimality conditions below hold either way
    assert fit.alpha >= 0 and fit.beta >= 0 and fit.alpha + fit.beta > 0
    pred = fit.predict(measured.nbytes)
    # the weighted least-squares optimality conditions hold on the data it was fitted on
    terms = np.c_[np.full(len(pred), 2.0), measured.nbytes * 1.0]
    resid = (pred - measured.seconds) / measured.seconds
    w = terms / measured.seconds[:, None]
    active = [i for i, v in enumerate((fit.alpha, fit.beta)) if v > 0]
    np.testing.assert_allclose((w[:, active] * resid[:, None]).sum(0)
                               / np.abs(w[:, active]).sum(0), 0, atol=1e-6)
    assert np.median(np.abs(fit.relative_errors)) < 0.6


def test_fit_recovers_known_alpha_beta_exactly():
    n = np.geomspace(1e3, 1e8, 7)
    for p, a, b in ((2, 2e-5, 1e-9), (8, 5e-6, 1 / 150e9), (5, 1e-4, 3e-10)):
        t = np.array([collective_time("all_reduce", "ring", x, p, alpha=a, beta=b) for x in n])
        fit = fit_alpha_beta(n, t, p)
        assert fit.alpha == pytest.approx(a, rel=1e-6)
        assert fit.beta == pytest.approx(b, rel=1e-6)
        np.testing.assert_allclose(fit.predict(n), t, rtol=1e-6)


def test_fit_errors():
    with pytest.raises(ValueError, match="length >= 2"):
        fit_alpha_beta([1.0], [1.0], 2)
    with pytest.raises(ValueError, match="world must be >= 2"):
        fit_alpha_beta([1.0, 2.0], [1.0, 2.0], 1)
    with pytest.raises(ValueError, match="seconds must be > 0"):
        fit_alpha_beta([1.0, 2.0], [0.0, 2.0], 2)


def test_ddp_two_gloo_processes_match_single_process():
    cfg = TrainConfig(steps=6, global_batch=32, hidden=16, lr=0.5)
    ref = run_ddp(1, cfg)
    ddp = run_ddp(2, cfg, backend="gloo")
    assert ddp["world"] == 2
    for a, b in zip(ref["params"], ddp["params"]):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ddp["losses"], ref["losses"], rtol=1e-10)
    moved = sum(np.abs(a).sum() for a in ref["params"])
    assert ref["losses"][-1] < ref["losses"][0] and moved > 0


@pytest.mark.slow
def test_ddp_train_runs_under_torchrun(tmp_path):
    cfg = TrainConfig(steps=3, global_batch=16, hidden=8)
    out = tmp_path / "params.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "labkit.parallel.ddp_train", "--steps", "3", "--global-batch", "16",
           "--hidden", "8", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"world": 2' in proc.stdout
    got = np.load(out)
    ref = run_ddp(1, cfg)
    for i, a in enumerate(ref["params"]):
        np.testing.assert_allclose(got[f"arr_{i}"], a, rtol=1e-10, atol=1e-12)


def test_free_port_and_launch_errors():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))          # really free
    with pytest.raises(ValueError, match="world must be"):
        launch(print, 0)
    with pytest.raises(ValueError, match="backend must be"):
        launch(print, 2, backend="mpi")
    with pytest.raises(ValueError, match="global_batch must be a positive multiple"):
        TrainConfig(global_batch=5).validate(2)


def test_unweighted_fit_is_polyfit_and_may_go_negative():
    # p = 2 ring: t = 2α + nβ, so plain least squares is np.polyfit's line with α = A / 2
    n = np.array([256.0, 4096, 32768, 262144, 1048576])
    t = np.array([30e-6, 30e-6, 32e-6, 40e-6, 400e-6])   # 2α ≈ 30 µs, the largest one noisy
    B, A = np.polyfit(n, t, 1)
    plain = fit_alpha_beta(n, t, 2, weighted=False)
    assert plain.alpha == pytest.approx(A / 2, rel=1e-9)
    assert plain.beta == pytest.approx(B, rel=1e-9)
    # the weighted fit keeps α near the small messages' 15 µs; the plain one lets the
    # megabyte message set the line and its α drops to a third of that
    assert fit_alpha_beta(n, t, 2).alpha == pytest.approx(13.9e-6, rel=0.01)
    assert plain.alpha == pytest.approx(5.09e-6, rel=0.01)
    # an exact line with a negative intercept: plain α is negative, the weighted one clamped
    big = np.array([32768.0, 262144, 1048576])
    line = big * 1e-9 - 10e-6
    assert fit_alpha_beta(big, line, 2, weighted=False).alpha == pytest.approx(-5e-6)
    assert fit_alpha_beta(big, line, 2).alpha >= 0
    with pytest.raises(TypeError, match="weighted"):
        fit_alpha_beta(n, t, 2, weighted="no")
