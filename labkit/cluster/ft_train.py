"""A fault-tolerant training script: checkpoint, get killed, restart, finish bit-identical.

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 \\
        -m labkit.cluster.ft_train --dir RUN --steps 30 --ckpt-every 5 --kill-at 17
    python -m labkit.cluster.ft_train --dir RUN --steps 30 --kill-at 17   # one process

A tiny MLP trains on generated data with SGD + momentum (DistributedDataParallel over gloo
when torchrun starts several workers). Every ``--ckpt-every`` steps rank 0 writes the model,
the optimizer and the step to ``RUN/ckpt.pt`` atomically (write a temporary file, fsync,
``os.replace``), so a crash mid-write leaves the previous checkpoint intact. On start the
script resumes from ``RUN/ckpt.pt`` when it exists.

``--kill-at K`` makes rank ``--kill-rank`` send itself SIGKILL after step K, but only in
the first attempt (``TORCHELASTIC_RESTART_COUNT`` is 0 or unset) and only when that
attempt did not itself start from a checkpoint beyond K. torchrun's agent sees the dead
worker, stops the others and starts the whole group again (``--max-restarts``, PyTorch
"torchrun (Elastic Launch)" docs); the new workers find the checkpoint and redo the steps
since it. Because the batch of step s is a function of s alone and the arithmetic is the
same, the final parameters equal those of an uninterrupted run bit for bit.

:func:`run_torchrun` and :func:`run_single` drive the script in subprocesses and return
the final parameters and the timings.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


from labkit import validate as v


@dataclass(frozen=True)
class FTConfig:
    steps: int = 30
    ckpt_every: int = 5
    hidden: int = 32
    features: int = 16
    samples: int = 512
    batch: int = 64            # global batch, split over the workers
    lr: float = 0.05
    seed: int = 0

    def validate(self, world: int = 1) -> "FTConfig":
        v.integer("steps", self.steps, low=1)
        v.integer("ckpt_every", self.ckpt_every, low=1)
        v.integer("hidden", self.hidden, low=1)
        v.integer("features", self.features, low=1)
        v.integer("samples", self.samples, low=1)
        v.integer("batch", self.batch, low=1, high=self.samples)
        v.positive("lr", self.lr)
        v.integer("seed", self.seed, low=0)
        if self.batch % world:
            raise ValueError(f"batch={self.batch} must be divisible by the world size {world}")
        return self


def _data(cfg: FTConfig):
    import torch
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.samples, cfg.features, generator=g)
    w = torch.randn(cfg.features, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(cfg.samples, 1, generator=g)
    return x, y


def _model(cfg: FTConfig):
    import torch
    torch.manual_seed(cfg.seed)
    return torch.nn.Sequential(torch.nn.Linear(cfg.features, cfg.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(cfg.hidden, 1))


def _batch(step: int, cfg: FTConfig, rank: int, world: int):
    import torch
    g = torch.Generator().manual_seed(cfg.seed * 100_003 + step)
    idx = torch.randperm(cfg.samples, generator=g)[:cfg.batch]
    per = cfg.batch // world
    return idx[rank * per:(rank + 1) * per]


def save_atomic(state: dict, path: Path) -> None:
    """torch.save to a temporary file in the same directory, fsync, then rename over
    ``path`` (rename is atomic on POSIX), so ``path`` always holds a whole checkpoint."""
    import torch
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def train(cfg: FTConfig, run_dir: Path, *, kill_at: int | None = None, kill_rank: int = 0) -> int:
    """The training loop of one worker (rank and world from torchrun's environment)."""
    import torch
    import torch.distributed as dist
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    cfg.validate(world)
    torch.set_num_threads(1)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    if world > 1:
        dist.init_process_group("gloo")
    model = _model(cfg)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    x, y = _data(cfg)
    ckpt = run_dir / "ckpt.pt"
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    with open(run_dir / "attempts.jsonl", "a") as fh:
        fh.write(json.dumps({"attempt": attempt, "rank": rank, "world": world,
                             "resumed_from": start, "time": t_start,
                             "pid": os.getpid()}) + "\n")
    losses = []
    for step in range(start, cfg.steps):
        idx = _batch(step, cfg, rank, world)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.detach().item())
        done = step + 1
        if done % cfg.ckpt_every == 0 and rank == 0:
            save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(),
                         "step": done}, ckpt)
        if kill_at is not None and done == kill_at and rank == kill_rank and attempt == 0 \
                and start < kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    if world > 1:
        dist.barrier()
    if rank == 0:
        save_atomic({"model": model.state_dict(), "step": cfg.steps}, run_dir / "final.pt")
        with open(run_dir / "done.json", "w") as fh:
            json.dump({"attempt": attempt, "resumed_from": start, "losses": losses,
                       "end": time.time()}, fh)
    if world > 1:
        dist.destroy_process_group()
    return 0


@dataclass
class FTRun:
    params: dict                      # name -> numpy array (final)
    wall_s: float                     # whole run, including restarts
    returncodes: list                 # of each process/launcher invoked
    attempts: list = field(default_factory=list)   # attempts.jsonl records
    resumed_from: int = 0             # the step the last attempt started from
    log: str = ""

    @property
    def restarts(self) -> int:
        return max((a["attempt"] for a in self.attempts), default=0)


def _read_run(run_dir: Path, t0: float, codes: list, log: str) -> FTRun:
    import torch
    wall = time.perf_counter() - t0
    final = run_dir / "final.pt"
    if not final.exists():
        raise RuntimeError(f"the run did not finish (return codes {codes}):\n{log[-3000:]}")
    state = torch.load(final, weights_only=True)["model"]
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    done = json.loads((run_dir / "done.json").read_text())
    return FTRun({k: t.numpy().copy() for k, t in state.items()}, wall, codes, attempts,
                 int(done["resumed_from"]), log)


def _args(cfg: FTConfig, run_dir: Path, kill_at, kill_rank) -> list[str]:
    a = ["--dir", str(run_dir)]
    for k, val in asdict(cfg).items():
        a += [f"--{k.replace('_', '-')}", str(val)]
    if kill_at is not None:
        a += ["--kill-at", str(kill_at), "--kill-rank", str(kill_rank)]
    return a


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # torchrun shares its rendezvous TCPStore with the workers by default; after a restart
    # the new workers can then read the old attempt's gloo addresses and fail to connect
    # (pytorch/pytorch#135712); a store of their own avoids it
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env.pop("TORCHELASTIC_RESTART_COUNT", None)
    return env


def run_torchrun(cfg: FTConfig = FTConfig(), world: int = 2, *, kill_at: int | None = None,
                 kill_rank: int = 1, max_restarts: int = 1, run_dir: str | Path | None = None,
                 timeout_s: float = 180.0) -> FTRun:
    """``torchrun --standalone --nproc-per-node world --max-restarts N -m
    labkit.cluster.ft_train ...`` in a subprocess (gloo on CPU; ``--standalone`` starts the
    rendezvous on a free port)."""
    world = v.integer("world", world, low=1)
    cfg.validate(world)
    if kill_at is not None:
        v.integer("kill_at", kill_at, low=1, high=cfg.steps)
        v.integer("kill_rank", kill_rank, low=0, high=world - 1)
    v.integer("max_restarts", max_restarts, low=0)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
        d.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(world), "--max-restarts", str(max_restarts),
               "--monitor-interval", "0.1", "-m", "labkit.cluster.ft_train",
               *_args(cfg, d, kill_at, kill_rank)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout_s)
        return _read_run(d, t0, [p.returncode], p.stdout + p.stderr)


def run_in_process(cfg: FTConfig = FTConfig(), *, run_dir: str | Path | None = None) -> FTRun:
    """Train (or resume from ``run_dir``'s checkpoint) in this process, world size 1:
    the same code and arithmetic as ``python -m labkit.cluster.ft_train``."""
    import torch
    cfg.validate(1)
    threads = torch.get_num_threads()
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT")
             if k in os.environ}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
            t0 = time.perf_counter()
            train(cfg, d)
            return _read_run(d, t0, [0], "")
    finally:
        os.environ.update(saved)
        torch.set_num_threads(threads)


def run_single(cfg: FTConfig = FTConfig(), *, kill_at: int = 17, run_dir: str | Path | None = None,
               timeout_s: float = 120.0) -> tuple[FTRun, float]:
    """One process trains and SIGKILLs itself after step ``kill_at`` (return code −9); this
    process then resumes from its checkpoint. Returns the resumed run and the killed
    process's wall time."""
    cfg.validate(1)
    kill_at = v.integer("kill_at", kill_at, low=1, high=cfg.steps)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "labkit.cluster.ft_train",
                            *_args(cfg, d, kill_at, 0)], env=_env(), capture_output=True,
                           text=True, timeout=timeout_s)
        killed_s = time.perf_counter() - t0
        if p.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the first process should have been killed (return code "
                               f"{-signal.SIGKILL}), it returned {p.returncode}:\n"
                               f"{(p.stdout + p.stderr)[-3000:]}")
        run = run_in_process(cfg, run_dir=d)
        run.returncodes = [p.returncode, 0]
        run.wall_s += killed_s
        return run, killed_s


def identical(a: dict, b: dict) -> bool:
    """Bit-identical parameters: same names, shapes, dtypes and bytes."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and
        a[k].tobytes() == b[k].tobytes() for k in a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    for k, val in asdict(FTConfig()).items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(val), default=val)
    ap.add_argument("--kill-at", type=int, default=None)
    ap.add_argument("--kill-rank", type=int, default=0)
    a = ap.parse_args(argv)
    cfg = FTConfig(**{k: getattr(a, k) for k in asdict(FTConfig())})
    return train(cfg, Path(a.dir), kill_at=a.kill_at, kill_rank=a.kill_rank)


if __name__ == "__main__":
    sys.exit(main())
