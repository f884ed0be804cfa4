"""A DistributedDataParallel training script: torchrun, labkit's launcher, or a cluster.

    torchrun --standalone --nproc_per_node=2 -m labkit.parallel.ddp_train --steps 20
    torchrun --nnodes=2 --node_rank=0 --master_addr=HOST --master_port=PORT \\
             --nproc_per_node=8 -m labkit.parallel.ddp_train          # multi-node, unchanged
    python -m labkit.parallel.ddp_train                                # one process, no DDP

The task: an MLP classifying scikit-learn's 8×8 digits. Every step draws one global batch
(seeded, the same on every rank); rank r trains on rows [r·b, (r+1)·b) with b = global
batch / world. DDP averages gradients over ranks, so the mean of the per-rank mean losses
is the global mean loss and the parameters after each step equal those of one process
training on the whole global batch (the test the CS336 assignment uses).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 20
    global_batch: int = 64
    hidden: int = 64
    lr: float = 0.1
    seed: int = 0
    dtype: str = "float64"
    bucket_cap_mb: float = 25.0
    warmup_steps: int = 0      # untimed steps before the clock starts

    def validate(self, world: int) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.global_batch < world or self.global_batch % world:
            raise ValueError(f"global_batch must be a positive multiple of world={world}, "
                             f"got {self.global_batch}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps), got {self.warmup_steps}")


def load_digits_tensors(dtype: str = "float64"):
    """scikit-learn digits scaled to [0, 1]: X (1797, 64), y (1797,)."""
    import torch
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=getattr(torch, dtype))
    return x, torch.tensor(d.target, dtype=torch.long)


def make_model(cfg: TrainConfig):
    import torch
    from torch import nn
    torch.manual_seed(cfg.seed)
    model = nn.Sequential(nn.Linear(64, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 10))
    return model.to(getattr(torch, cfg.dtype))


def global_batch_indices(step: int, cfg: TrainConfig, n: int) -> np.ndarray:
    """The rows of step ``step``'s global batch: the same on every rank."""
    return np.random.default_rng([cfg.seed, step]).choice(n, cfg.global_batch, replace=False)


def train(rank: int, world: int, cfg: TrainConfig, device: str = "cpu") -> dict:
    """Train; with world > 1 the process group must already be initialised.

    Returns the final parameters (numpy), the loss of each step (global mean), wall
    seconds of the timed steps and samples per second over them.
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    cfg.validate(world)
    x, y = load_digits_tensors(cfg.dtype)
    x, y = x.to(device), y.to(device)
    model = make_model(cfg).to(device)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[device] if device.startswith("cuda") else None,
                    bucket_cap_mb=cfg.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    loss_fn = nn.CrossEntropyLoss()
    b = cfg.global_batch // world
    losses = []
    start = time.perf_counter()
    for step in range(cfg.steps):
        if step == cfg.warmup_steps:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
        idx = torch.from_numpy(global_batch_indices(step, cfg, len(x))[rank * b:(rank + 1) * b])
        idx = idx.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses.append(float(mean))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    timed = cfg.steps - cfg.warmup_steps
    inner = model.module if world > 1 else model
    params = [p.detach().cpu().numpy().copy() for p in inner.parameters()]
    return {"params": params, "losses": losses, "seconds": seconds,
            "samples_per_s": timed * cfg.global_batch / seconds, "world": world}


def ddp_worker(rank: int, world: int, cfg: TrainConfig) -> dict:
    """Entry point for :func:`labkit.parallel.launch.launch` (process group is up)."""
    import torch
    device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() and \
        torch.distributed.get_backend() == "nccl" else "cpu"
    return train(rank, world, cfg, device)


def run_ddp(world: int, cfg: TrainConfig, backend: str | None = None) -> dict:
    """Train with ``world`` local processes (world 1: in this process, no DDP); rank 0's result."""
    if world == 1:
        import torch
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return train(0, 1, cfg)
        finally:
            torch.set_num_threads(threads)
    from labkit.parallel.launch import launch
    return launch(ddp_worker, world, cfg, backend=backend)[0]


def main(argv: list[str] | None = None) -> int:
    """Command line: reads torchrun's RANK/WORLD_SIZE/LOCAL_RANK; none means one process."""
    import torch
    import torch.distributed as dist
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f, v in asdict(TrainConfig()).items():
        p.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)
    p.add_argument("--out", default="", help="write rank 0's parameters here (.npz)")
    a = p.parse_args(argv)
    cfg = TrainConfig(**{f: getattr(a, f) for f in asdict(TrainConfig())})
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = "cpu"
    if world > 1:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)
            device = f"cuda:{local}"
        dist.init_process_group(backend, init_method="env://")
    try:
        res = train(rank, world, cfg, device)
        if world > 1:
            dist.barrier()   # tear down together: gloo can abort a rank whose peer left first
    finally:
        if world > 1:
            dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"world": world, "final_loss": res["losses"][-1],
                          "samples_per_s": res["samples_per_s"]}))
        if a.out:
            np.savez(a.out, *res["params"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
