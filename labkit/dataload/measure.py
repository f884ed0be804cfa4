"""A real training loop behind a real ``torch.utils.data.DataLoader``, timed step by step.

Each step: ``wait`` = time to get the next batch from the loader's iterator (the data
stall), ``compute`` = the copy to the model's device and one SGD step of an MLP on the
flattened images. The training process uses one intra-op thread (``torch.set_num_threads``)
so that "a step holds one core", as the simulator assumes; it is restored afterwards.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from labkit import validate as V
from labkit.dataload.model import EncodedImages
from labkit.dataload.sim import PipelineConfig, decode_share


@dataclass(frozen=True)
class LoaderRun:
    num_workers: int
    batch_size: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    wait_s: np.ndarray        # per step
    compute_s: np.ndarray     # per step
    epoch_first_batch_s: tuple[float, ...]   # iter() to first batch, per epoch
    cpu_s: float = 0.0        # CPU time of the training process over the loop
    wall_s: float = 0.0       # wall time of the loop

    @property
    def cpu_share(self) -> float:
        """CPU time / wall time of the training process: about 1 when it had a core to
        itself whenever it was runnable, less when other processes took turns on it."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady(self) -> slice:
        return slice(len(self.wait_s) // 4, None)     # drop the warm-up quarter

    @property
    def samples_per_s(self) -> float:
        s = self.steady
        return self.batch_size * len(self.wait_s[s]) / float(self.wait_s[s].sum() + self.compute_s[s].sum())

    @property
    def wait_fraction(self) -> float:
        s = self.steady
        return float(self.wait_s[s].sum() / (self.wait_s[s].sum() + self.compute_s[s].sum()))


def mlp_step_fn(in_features: int, hidden: int = 256, seed: int = 0):
    """A closure doing one SGD step of a 2-layer MLP on (x, y); returns the loss."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_features, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def measure_loader(dataset: EncodedImages, *, batch_size: int = 32, num_workers: int = 0,
                   prefetch_factor: int | None = None, pin_memory: bool = False,
                   persistent_workers: bool = False, epochs: int = 1, hidden: int = 256,
                   steps: int | None = None) -> LoaderRun:
    """Train for ``epochs`` over ``dataset`` behind a DataLoader with these settings."""
    import torch
    from torch.utils.data import DataLoader

    batch_size = V.integer("batch_size", batch_size, low=1)
    num_workers = V.integer("num_workers", num_workers, low=0, high=64)
    epochs = V.integer("epochs", epochs, low=1)
    if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
        raise ValueError("prefetch_factor and persistent_workers need num_workers > 0")
    x0, _ = dataset[0]
    step = mlp_step_fn(int(np.prod(x0.shape)), hidden)
    kw = dict(batch_size=batch_size, num_workers=num_workers, shuffle=False, pin_memory=pin_memory,
              persistent_workers=persistent_workers, drop_last=True)
    if prefetch_factor is not None:
        kw["prefetch_factor"] = V.integer("prefetch_factor", prefetch_factor, low=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    waits, computes, firsts = [], [], []
    c0, w0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        # torch warns when num_workers exceeds the cores; measuring that is the point here,
        # and pin_memory without an accelerator is ignored with a warning
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        loader = DataLoader(dataset, **kw)
        _loop(dataset, loader, step, epochs, steps, waits, computes, firsts, torch, threads)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return LoaderRun(num_workers, batch_size, prefetch_factor, pin_memory, persistent_workers,
                     np.array(waits), np.array(computes), tuple(firsts), cpu, wall)


def sweep_loader(dataset: EncodedImages, workers=(0, 1, 2, 3), *, known=None,
                 **kw) -> dict[int, LoaderRun]:
    """:func:`measure_loader` once per worker count (same other settings ``kw``);
    ``known`` maps worker counts already measured to their runs, which are reused."""
    known = dict(known or {})
    return {int(w): known[w] if w in known else measure_loader(dataset, num_workers=int(w), **kw)
            for w in workers}


def _loop(dataset, loader, step, epochs, steps, waits, computes, firsts, torch, threads):
    try:
        for epoch in range(epochs):
            dataset.epoch = epoch
            t0 = time.perf_counter()
            it = iter(loader)
            n = 0
            while True:
                t = time.perf_counter()
                try:
                    x, y = next(it)
                except StopIteration:
                    break
                t1 = time.perf_counter()
                if n == 0:
                    firsts.append(t1 - t0)
                step(x, y)
                waits.append(t1 - t)
                computes.append(time.perf_counter() - t1)
                n += 1
                if steps is not None and n >= steps:
                    break
            del it
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class StageCosts:
    decode_s: float      # per sample
    augment_s: float     # per sample
    compute_s: float     # per batch

    @property
    def decode_share(self) -> float:
        """decode / (decode + augment): the share of a sample's CPU work a cache of decoded
        pixels removes (:func:`labkit.dataload.sim.decode_share`)."""
        return decode_share(self.decode_s, self.augment_s)

    def batch_load_s(self, batch_size: int) -> float:
        """CPU seconds to load a batch: batch_size × (decode + augment)."""
        return V.integer("batch_size", batch_size, low=1) * (self.decode_s + self.augment_s)


def measure_stage_costs(dataset: EncodedImages, batch_size: int = 32, hidden: int = 256,
                        repeats: int = 5) -> StageCosts:
    """Median per-sample decode and augment times and per-batch step time, in this process,
    one thread — the inputs the simulator needs."""
    import torch

    from labkit.dataload.model import augment, decode
    from labkit.perf.timing import benchmark

    n = min(len(dataset.blobs), 64)
    rng = np.random.default_rng(0)
    imgs = [decode(b) for b in dataset.blobs[:n]]
    t_dec = benchmark(lambda: [decode(b) for b in dataset.blobs[:n]], repeats=repeats).median / n
    t_aug = benchmark(lambda: [augment(im, rng, blur=dataset.blur) for im in imgs],
                      repeats=repeats).median / n
    x, y = dataset.load_batch(range(batch_size))
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    step = mlp_step_fn(int(np.prod(x.shape[1:])), hidden)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t_step = benchmark(lambda: step(x, y), repeats=repeats, warmup=2).median
    finally:
        torch.set_num_threads(threads)
    return StageCosts(t_dec, t_aug, t_step)


def background_processes(cpu_share: float, cores: int) -> int:
    """Other CPU-bound processes implied by a CPU-bound process getting ``cpu_share`` of a
    core: with b others on c cores a fair scheduler gives each c / (b + 1) when b + 1 > c,
    so b = c / share − 1 (0 when the share is near 1)."""
    share = V.number("cpu_share", cpu_share, low=0, high=1.5, low_open=True)
    cores = V.integer("cores", cores, low=1)
    if share >= 0.9:
        return 0
    return max(0, int(round(cores / share - 1)))


def calibrated_config(run0: LoaderRun, costs: StageCosts, *, cores: int | None = None,
                      shared: bool = True, quantum_s: float = 0.002, **kw) -> PipelineConfig:
    """The simulator calibrated on the ``num_workers=0`` run only.

    That run's median wait is the wall time to load a batch (it includes collation and
    Python overheads the stage timings miss; split between decode and augment in the
    measured ratio) and its median step the compute. With ``shared`` the machine's other
    users are modelled too: the run's CPU share s (CPU time / wall time) gives the number of
    other CPU-bound processes, :func:`background_processes`, and the stage costs become CPU
    costs (wall × s), the slowdown being reproduced by the simulated competition.
    ``cores`` defaults to the CPUs this process may run on."""
    import os

    if run0.num_workers != 0:
        raise ValueError("calibrate on a run with num_workers=0")
    B = run0.batch_size
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    load = float(np.median(run0.wait_s[run0.steady]))
    step = float(np.median(run0.compute_s[run0.steady]))
    background, s = 0, 1.0
    if shared and run0.wall_s > 0:
        background = background_processes(min(run0.cpu_share, 1.0), cores)
        if background:
            s = min(run0.cpu_share, 1.0)
    share = costs.decode_share
    extra = dict(background=background, quantum_s=quantum_s) if background else {}
    return PipelineConfig(batch_size=B, cores=cores, decode_s=load * s * share / B,
                          augment_s=load * s * (1 - share) / B, compute_s=step * s,
                          **extra, **kw)

