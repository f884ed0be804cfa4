"""A fault-tolerant training script: checkpoint, get killed, restart, finish bit-identical.

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 \\
        -m labkit.cluster.ft_train --dir RUN --steps 30 --ckpt-every 5 --kill-at 17
    python -m labkit.cluster.ft_train --dir RUN --steps 30 --kill-at 17   # one process

A tiny MLP with dropout trains on generated data with SGD + momentum
(DistributedDataParallel over gloo when torchrun starts several workers). Every step's batch
is drawn with ``torch.randperm`` and dropout draws its masks, both from torch's global
generator, which every rank seeds alike and draws from alike — so the generator's state,
like the weights, the optimizer's momentum and the step, is part of what a restart must
restore. Every ``--ckpt-every`` steps rank 0 saves through a :class:`Checkpoint` (or the
class cloudpickled in ``--impl``: chapter 11's lab), which writes ``RUN/ckpt.pt``
atomically (:func:`save_atomic`: a temporary file, fsync, ``os.replace``, fsync of the
directory), so a crash mid-write leaves the previous checkpoint intact. On start every
rank resumes from ``RUN/ckpt.pt`` when it exists.

``--kill-at K`` makes rank ``--kill-rank`` send itself SIGKILL after step K, but only in
the first attempt (``TORCHELASTIC_RESTART_COUNT`` is 0 or unset) and only when that
attempt did not itself start from a checkpoint beyond K. torchrun's agent sees the dead
worker, stops the others and starts the whole group again (``--max-restarts``, PyTorch
"torchrun (Elastic Launch)" docs); the new workers find the checkpoint and redo the steps
since it. With the whole state restored and the same arithmetic, the final parameters
equal those of an uninterrupted run bit for bit (:func:`reference_params` computes that
run in one process).

:func:`run_torchrun` and :func:`run_single` drive the script in subprocesses and return
the final parameters and the timings.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit import validate as v
from labkit._code import by_value
from labkit.torch_models import torch_mlp


@dataclass(frozen=True)
class FTConfig:
    steps: int = v.checked(30, v.integer, low=1)
    ckpt_every: int = v.checked(5, v.integer, low=1)
    hidden: int = v.checked(32, v.integer, low=1)
    features: int = v.checked(16, v.integer, low=1)
    samples: int = v.checked(512, v.integer, low=1)
    batch: int = 64            # global batch (at most samples), split over the workers
    lr: float = v.checked(0.05, v.positive)
    seed: int = v.checked(0, v.integer, low=0)
    dropout: float = v.checked(0.1, v.fraction)

    def __post_init__(self):
        v.check_fields(self)
        object.__setattr__(self, "batch", v.integer("batch", self.batch, low=1,
                                                    high=self.samples))

    def validate(self, world: int = 1) -> "FTConfig":
        """The checks that need the world size: ``batch`` splits evenly over it."""
        if self.batch % world:
            raise ValueError(f"batch={self.batch} must be divisible by the world size {world}")
        return self


def _data(cfg: FTConfig):
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.samples, cfg.features, generator=g)
    w = torch.randn(cfg.features, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(cfg.samples, 1, generator=g)
    return x, y


def _model(cfg: FTConfig):
    """The MLP, initialised from torch's global generator seeded with ``cfg.seed`` (which
    it leaves at the same state on every rank): Linear → tanh → dropout → Linear."""
    return torch_mlp((cfg.features, cfg.hidden, 1), cfg.seed, activation="tanh",
                     dropout=cfg.dropout)


def _global_batch(cfg: FTConfig):
    """This step's rows, drawn from torch's global generator (the same on every rank)."""
    import torch  # deferred: torch
    return torch.randperm(cfg.samples)[:cfg.batch]


def save_atomic(state: dict, path: Path) -> None:
    """Write ``state`` so that ``path`` always holds a whole checkpoint: torch.save to a
    temporary file in the same directory, flush and fsync it, ``os.replace`` it over
    ``path``, fsync the directory.

    POSIX ``rename()`` (The Open Group Base Specifications, Issue 7): when ``new`` exists,
    "a link named new shall remain visible to other threads throughout the renaming
    operation and refer either to the file referred to by new or old before the operation
    began" — a reader, or a restarted job, sees the old checkpoint or the new one, never a
    torn one (within one file system; across file systems rename fails with EXDEV). fsync(2)
    (Linux man-pages): it flushes the file's data and metadata to the device, but "does not
    necessarily ensure that the entry in the directory containing the file has also reached
    disk. For that an explicit fsync() on a file descriptor for the directory is also
    needed": the first fsync makes sure the renamed file holds its data after a power loss,
    the second that the rename itself survives."""
    import torch  # deferred: torch
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
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Checkpoint:
    """What a worker saves and how it resumes (the reference of chapter 11's lab).

    ``save`` writes everything the next steps depend on — the weights, the optimizer's
    state (SGD's momentum buffers), the step and torch's global generator (the batches and
    the dropout masks) — with :func:`save_atomic`; ``resume`` loads all of it back into a
    freshly built model and optimizer and returns the step to continue from (0 when there
    is no checkpoint yet)."""

    def __init__(self, path):
        self.path = Path(path)

    def save(self, model, optimizer, step: int) -> None:
        import torch  # deferred: torch
        save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "step": step, "rng": torch.get_rng_state()}, self.path)

    def resume(self, model, optimizer) -> int:
        import torch  # deferred: torch
        if not self.path.exists():
            return 0
        state = torch.load(self.path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        return int(state["step"])


def _setup(cfg: FTConfig):
    """A fresh worker's model (seeded), SGD with momentum, and the data."""
    import torch  # deferred: torch
    model = _model(cfg)
    return model, torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9), _data(cfg)


def train_steps(cfg: FTConfig, model, net, opt, data, start: int, stop: int, *,
                rank: int = 0, world: int = 1, on_step=None) -> list[float]:
    """Steps ``start`` .. ``stop`` − 1: the batch from the global generator, rank ``rank``'s
    share of it, forward (``net``: the model or its DDP wrapper), backward, SGD. After each
    step ``on_step(done)`` (checkpointing, the kill). Returns the losses."""
    import torch  # deferred: torch
    x, y = data
    per = cfg.batch // world
    losses = []
    for step in range(start, stop):
        idx = _global_batch(cfg)[rank * per:(rank + 1) * per]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.detach().item())
        if on_step is not None:
            on_step(step + 1)
    return losses


def reference_params(cfg: FTConfig, world: int = 1) -> dict:
    """The final parameters of an uninterrupted run on ``world`` (1 or 2) workers, computed
    in this process, bit for bit what the DDP run gives: each rank's share of the batch
    with the generator as every rank has it, gradients divided by the world size and summed
    (DDP's reducer multiplies each gradient by 1/world size as it fills the bucket,
    ``torch/csrc/distributed/c10d/reducer.cpp``; gloo's sum of two ranks is one IEEE
    addition, and addition commutes)."""
    import torch  # deferred: torch
    world = v.integer("world", world, low=1, high=2)
    cfg.validate(world)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            model, opt, (x, y) = _setup(cfg)
            per = cfg.batch // world
            for _ in range(cfg.steps):
                idx = _global_batch(cfg)
                at = torch.get_rng_state()
                grads = []
                for rank in range(world):
                    torch.set_rng_state(at)
                    model.zero_grad(set_to_none=True)
                    part = idx[rank * per:(rank + 1) * per]
                    torch.nn.functional.mse_loss(model(x[part]), y[part]).backward()
                    grads.append([p.grad.clone() for p in model.parameters()])
                for p, gs in zip(model.parameters(), zip(*grads)):
                    p.grad = gs[0] if world == 1 else gs[0] * (1 / world) + gs[1] * (1 / world)
                opt.step()
            return {k: t.detach().numpy().copy() for k, t in model.state_dict().items()}
    finally:
        torch.set_num_threads(threads)


def load_impl(path) -> type:
    """The checkpointing class a run uses: :class:`Checkpoint`, or the one cloudpickled
    (:func:`labkit._code.by_value`) into ``path``."""
    if path is None:
        return Checkpoint
    with open(path, "rb") as fh:
        return pickle.load(fh)


def train(cfg: FTConfig, run_dir: Path, *, kill_at: int | None = None, kill_rank: int = 0,
          impl: str | None = None) -> int:
    """The training loop of one worker (rank and world from torchrun's environment)."""
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch
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
    model, opt, data = _setup(cfg)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    ckpt = load_impl(impl)(run_dir / "ckpt.pt")
    start = int(ckpt.resume(model, opt))
    with open(run_dir / "attempts.jsonl", "a") as fh:
        fh.write(json.dumps({"attempt": attempt, "rank": rank, "world": world,
                             "resumed_from": start, "time": t_start,
                             "pid": os.getpid()}) + "\n")

    def after(done: int) -> None:
        if done % cfg.ckpt_every == 0 and rank == 0:
            ckpt.save(model, opt, done)
        if kill_at is not None and done == kill_at and rank == kill_rank and attempt == 0 \
                and start < kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    losses = train_steps(cfg, model, net, opt, data, start, cfg.steps, rank=rank,
                         world=world, on_step=after)
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
    import torch  # deferred: torch
    wall = time.perf_counter() - t0
    final = run_dir / "final.pt"
    if not final.exists():
        raise RuntimeError(f"the run did not finish (return codes {codes}):\n{log[-3000:]}")
    state = torch.load(final, weights_only=True)["model"]
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    done = json.loads((run_dir / "done.json").read_text())
    return FTRun({k: t.numpy().copy() for k, t in state.items()}, wall, codes, attempts,
                 int(done["resumed_from"]), log)


def _args(cfg: FTConfig, run_dir: Path, kill_at, kill_rank, impl=None) -> list[str]:
    a = ["--dir", str(run_dir)]
    if impl is not None:
        (run_dir / "impl.pkl").write_bytes(by_value(impl))
        a += ["--impl", str(run_dir / "impl.pkl")]
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


def _descendants(pid: int) -> list[int]:
    """Live descendants of ``pid``, children first (Linux ``/proc``; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in (os.listdir("/proc") if os.path.isdir("/proc") else []):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out += kids
        todo += kids
    return out


def _signal_tree(root: int, tree: list[int], sig: int) -> None:
    """Send ``sig`` to ``root``'s process group and to each process of ``tree`` (the
    descendants found while ``root`` lived) and its group — never to this process's own
    group, and only to groups led by one of them (torchrun starts every worker in a
    session of its own, so its group is not ``root``'s)."""
    own = os.getpgrp()
    for pid in [root, *tree]:
        try:
            pgid = os.getpgid(pid)
            if pgid != own and pgid in (root, pid):
                os.killpg(pgid, sig)
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run_group(cmd: list[str], *, timeout_s: float, env: dict | None = None,
              grace_s: float = 5.0) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a session of its own and return its CompletedProcess (text output).
    On a timeout stop the whole tree it started, not only ``cmd``: SIGTERM to its process
    group (torchrun's agent then stops its workers), ``grace_s`` seconds later SIGKILL to
    the group and to every descendant and its group — torchrun starts each worker with
    ``start_new_session=True`` (``torch/distributed/elastic/multiprocessing/
    subprocess_handler/subprocess_handler.py``), so killing torchrun alone, as
    ``subprocess.run(timeout=...)`` does, leaves the workers running. Then raise
    ``subprocess.TimeoutExpired``."""
    timeout_s = v.positive("timeout_s", timeout_s)
    grace_s = v.nonnegative("grace_s", grace_s)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(cmd, p.returncode, out, err)
    except subprocess.TimeoutExpired:
        tree = _descendants(p.pid)
        _signal_tree(p.pid, [], signal.SIGTERM)
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            tree += [q for q in _descendants(p.pid) if q not in tree]
        _signal_tree(p.pid, tree, signal.SIGKILL)
        out, err = p.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=out, stderr=err) from None


def run_torchrun(cfg: FTConfig = FTConfig(), world: int = 2, *, kill_at: int | None = None,
                 kill_rank: int = 1, max_restarts: int = 1, run_dir: str | Path | None = None,
                 timeout_s: float = 180.0, impl: type | None = None) -> FTRun:
    """``torchrun --standalone --nproc-per-node world --max-restarts N -m
    labkit.cluster.ft_train ...`` in a subprocess (gloo on CPU; ``--standalone`` starts the
    rendezvous on a free port). ``impl``: the checkpointing class the workers use (default
    :class:`Checkpoint`), shipped by value. On a timeout no worker outlives it
    (:func:`run_group`)."""
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
               *_args(cfg, d, kill_at, kill_rank, impl)]
        t0 = time.perf_counter()
        p = run_group(cmd, env=_env(), timeout_s=timeout_s)
        return _read_run(d, t0, [p.returncode], p.stdout + p.stderr)


def run_in_process(cfg: FTConfig = FTConfig(), *, run_dir: str | Path | None = None,
                   impl: type | None = None) -> FTRun:
    """Train (or resume from ``run_dir``'s checkpoint) in this process, world size 1:
    the same code and arithmetic as ``python -m labkit.cluster.ft_train`` (this process's
    random generator is left as it was)."""
    import torch  # deferred: torch
    cfg.validate(1)
    threads = torch.get_num_threads()
    saved = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT")
             if k in os.environ}
    try:
        with tempfile.TemporaryDirectory() as tmp, torch.random.fork_rng(devices=[]):
            d = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
            d.mkdir(parents=True, exist_ok=True)
            if impl is not None:
                (d / "impl.pkl").write_bytes(by_value(impl))
            t0 = time.perf_counter()
            train(cfg, d, impl=None if impl is None else str(d / "impl.pkl"))
            return _read_run(d, t0, [0], "")
    finally:
        os.environ.update(saved)
        torch.set_num_threads(threads)


def run_single(cfg: FTConfig = FTConfig(), *, kill_at: int = 17, run_dir: str | Path | None = None,
               timeout_s: float = 120.0, impl: type | None = None) -> tuple[FTRun, float]:
    """One process trains and SIGKILLs itself after step ``kill_at`` (return code −9); this
    process then resumes from its checkpoint. Returns the resumed run and the killed
    process's wall time."""
    cfg.validate(1)
    kill_at = v.integer("kill_at", kill_at, low=1, high=cfg.steps)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(run_dir) if run_dir is not None else Path(tmp) / "run"
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        p = run_group([sys.executable, "-m", "labkit.cluster.ft_train",
                       *_args(cfg, d, kill_at, 0, impl)], env=_env(), timeout_s=timeout_s)
        killed_s = time.perf_counter() - t0
        if p.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the first process should have been killed (return code "
                               f"{-signal.SIGKILL}), it returned {p.returncode}:\n"
                               f"{(p.stdout + p.stderr)[-3000:]}")
        run = run_in_process(cfg, run_dir=d, impl=impl)
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
    ap.add_argument("--impl", default=None, help="a cloudpickled checkpointing class")
    a = ap.parse_args(argv)
    cfg = FTConfig(**{k: getattr(a, k) for k in asdict(FTConfig())})
    return train(cfg, Path(a.dir), kill_at=a.kill_at, kill_rank=a.kill_rank, impl=a.impl)


if __name__ == "__main__":
    sys.exit(main())
