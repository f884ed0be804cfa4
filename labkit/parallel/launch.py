"""Real ``torch.distributed`` runs: N local processes, all-reduce timing, α-β fit.

:func:`launch` starts ``world`` processes (forks of a fork server that imported torch
once: :func:`_context`), sets the same environment ``torchrun`` sets (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), initialises a process group (gloo on CPU, NCCL
when every rank can have its own GPU) on a port the operating system picked as free (bind
port 0), calls ``fn(rank, world, *args)`` in each and returns the per-rank results. ``fn``
must be importable (defined in a module, not in a notebook cell), because the ranks import
it by name.

:class:`WorkerPool` keeps such a group alive and runs one job after another in it, so a
notebook pays the start (seconds: the fork server importing torch, the ranks joining a
process group) once, not once per real run; :func:`pool_run` uses one shared pool per world
size. A learner's class or function (defined in a notebook cell) travels to the workers as
:func:`labkit._code.by_value` bytes.
"""
from __future__ import annotations

import atexit
import importlib
import os
import pickle
import queue as queue_mod
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Sequence

import numpy as np

from labkit import validate as V
from labkit.parallel.cost import collective_time, cost_terms


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now: bind port 0 and read what the OS gave us."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def default_backend(world: int = 1) -> str:
    """"nccl" when there is a CUDA GPU for each of ``world`` ranks (NCCL refuses two ranks
    on one GPU) and NCCL is built in, else "gloo"."""
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch
    if torch.cuda.is_available() and dist.is_nccl_available() and \
            torch.cuda.device_count() >= world:
        return "nccl"
    return "gloo"


def _join_group(rank: int, world: int, port: int, backend: str, threads: int,
                timeout_s: float) -> None:
    """In a rank: the environment ``torchrun`` sets, ``threads`` torch threads, this
    rank's GPU (NCCL), then the process group."""
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))


def _worker(rank: int, world: int, port: int, backend: str, threads: int, timeout_s: float,
            fn: Callable, args: tuple, queue) -> None:
    try:
        import torch.distributed as dist  # deferred: torch
        _join_group(rank, world, port, backend, threads, timeout_s)
        try:
            result = fn(rank, world, *args)
            dist.barrier()   # tear down together: gloo can abort a rank whose peer left first
        finally:
            dist.destroy_process_group()
        queue.put((rank, True, result))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))


def launch(fn: Callable, world: int, *args: Any, backend: str | None = None,
           threads: int = 1, timeout_s: float = 60.0, retries: int = 1) -> list[Any]:
    """Run ``fn(rank, world, *args)`` in ``world`` processes joined by a process group.

    Returns the results in rank order. A rank that raises makes this raise RuntimeError
    with that rank's traceback. ``threads`` is each process's torch thread count (keep
    world × threads <= cores). If the free port is taken before rank 0 binds it (a race
    with other programs) or no result comes within ``timeout_s`` + 30 s, the processes are
    killed and the launch is retried ``retries`` times on a new port.
    """
    import torch.multiprocessing as mp  # deferred: torch
    world = V.integer("world", world, low=1)
    threads = V.integer("threads", threads, low=1)
    timeout_s = V.positive("timeout_s", timeout_s)
    retries = V.integer("retries", retries, low=0)
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    backend = backend or default_backend(world)
    V.one_of("backend", backend, ("gloo", "nccl"))
    if backend == "nccl":
        import torch  # deferred: torch
        if torch.cuda.device_count() < world:
            raise ValueError(f"backend 'nccl' needs one CUDA GPU per rank (world={world}, "
                             f"GPUs={torch.cuda.device_count()}); use backend='gloo'")
    ctx = _context(mp)
    for attempt in range(retries + 1):
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=_worker, args=(r, world, port, backend, threads, timeout_s,
                                                  fn, args, q), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = time.monotonic() + timeout_s + 30
        while len(results) + len(errors) < world:
            try:
                rank, ok, value = q.get(timeout=0.5)
                (results if ok else errors)[rank] = value
                continue
            except queue_mod.Empty:
                pass
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)
                    and r not in results and r not in errors]
            if dead and q.empty():
                for r in dead:
                    errors[r] = f"process exited with code {procs[r].exitcode} before " \
                                f"reporting (is fn importable? is the caller guarded by " \
                                f"if __name__ == '__main__'?)"
                break
            if time.monotonic() > deadline:
                errors[-1] = f"no result within {timeout_s + 30:.0f} s"
                break
        for p in procs:
            p.join(timeout=0 if errors else 30)
            if p.is_alive():
                p.terminate()
                p.join()
        if not errors:
            return [results[r] for r in range(world)]
        text = "\n".join(f"rank {r}:\n{e}" for r, e in sorted(errors.items()))
        port_trouble = "address already in use" in text.lower() or -1 in errors
        if attempt < retries and port_trouble:
            continue
        raise RuntimeError(f"distributed run failed ({backend}, world={world}):\n{text}")
    raise AssertionError("unreachable")


# ---- a pool of workers that stays up ------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """Exit when the process that started this worker is gone: a pool left behind by a
    killed notebook or grader must not outlive it. The worker's own parent is the fork
    server (:func:`_context`), which exits when ``parent`` does, so either a new parent
    (this worker was orphaned) or ``parent`` no longer running ends it."""
    server = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != server or not _running(parent):
            os._exit(1)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _preload(modules) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass


def _pool_worker(rank: int, world: int, port: int, backend: str, threads: int,
                 timeout_s: float, inbox, outbox, parent: int, preload=()) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        import torch.distributed as dist  # deferred: torch
        _join_group(rank, world, port, backend, threads, timeout_s)
        outbox.put((None, rank, True, "ready"))
        if preload:         # imported while the worker waits for its first job
            threading.Thread(target=_preload, args=(tuple(preload),), daemon=True).start()
    except BaseException:
        outbox.put((None, rank, False, traceback.format_exc()))
        return
    while True:
        item = inbox.get()
        if item is None:
            break
        job, payload = item
        try:
            fn, args = pickle.loads(payload)
            result = fn(rank, world, *args)
            dist.barrier()
            outbox.put((job, rank, True, result))
        except BaseException:
            outbox.put((job, rank, False, traceback.format_exc()))
            break           # the group may be half-way through a collective: stop
    try:
        dist.destroy_process_group()
    except Exception:
        pass


# what every rank imports first: loaded once, in the fork server, instead of in each rank
PRELOAD = ["torch", "torch.distributed", "labkit.parallel.launch", "labkit._code"]


def _context(mp):
    """The ``forkserver`` start method, its server preloaded with torch: a rank is a fork
    of one clean process that imported torch once (a fresh interpreter per rank, the
    ``spawn`` method, costs its two seconds of CPU importing torch every time). Like
    ``spawn``, and unlike a plain ``fork`` of this process, a rank inherits no threads, no
    process group and no state of the caller; what it runs arrives pickled."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


class WorkerPool:
    """``world`` processes joined by one process group, kept alive to run many jobs.

    :meth:`run` sends ``fn(rank, world, *args)`` to every rank (``fn`` importable, ``args``
    picklable: ship a learner's code as :func:`labkit._code.by_value` bytes) and returns the per-rank
    results. A job that raises, or gives no result within its time limit, closes the pool
    (a rank may be stuck in a collective) and raises RuntimeError; the next
    :func:`pool_run` starts a new one. Workers exit on their own when this process ends.
    """

    def __init__(self, world: int = 2, backend: str = "gloo", threads: int = 1,
                 timeout_s: float = 60.0, start_timeout_s: float = 120.0, *,
                 wait: bool = True, preload=()):
        import torch.multiprocessing as mp  # deferred: torch
        self.world = V.integer("world", world, low=1)
        self.backend = V.one_of("backend", backend, ("gloo",))
        threads = V.integer("threads", threads, low=1)
        timeout_s = V.positive("timeout_s", timeout_s)
        ctx = _context(mp)
        self.inbox = [ctx.Queue() for _ in range(self.world)]
        self.outbox = ctx.Queue()
        self.jobs = 0
        self.owner = os.getpid()
        port = free_port()
        self.procs = [ctx.Process(target=_pool_worker,
                                  args=(r, self.world, port, backend, threads, timeout_s,
                                        self.inbox[r], self.outbox, os.getpid(),
                                        tuple(preload)),
                                  daemon=True) for r in range(self.world)]
        for p in self.procs:
            p.start()
        self.ready = False
        self.start_timeout_s = start_timeout_s
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until every worker has joined the process group (RuntimeError if one
        failed to, after closing the pool)."""
        if self.ready:
            return
        try:
            self._collect(None, self.start_timeout_s)
        except RuntimeError:
            self.close()
            raise
        self.ready = True

    @property
    def alive(self) -> bool:
        """Every worker is running (False in a forked child: the pool is its parent's)."""
        return self.owner == os.getpid() and all(p.is_alive() for p in self.procs)

    def _collect(self, job, timeout_s: float) -> list[Any]:
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = time.monotonic() + timeout_s
        while len(results) + len(errors) < self.world:
            try:
                got, rank, ok, value = self.outbox.get(timeout=0.2)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(self.procs) if not p.is_alive()
                        and r not in results and r not in errors]
                if dead and self.outbox.empty():
                    for r in dead:
                        errors[r] = f"process exited with code {self.procs[r].exitcode}"
                    break
                if time.monotonic() > deadline:
                    errors[-1] = f"no result within {timeout_s:.0f} s"
                    break
                continue
            if got != job:
                continue                    # a late reply to an earlier job
            (results if ok else errors)[rank] = value
        if errors:
            text = "\n".join(f"rank {r}:\n{e}" for r, e in sorted(errors.items()))
            raise RuntimeError(f"distributed run failed ({self.backend}, "
                               f"world={self.world}):\n{text}")
        return [results[r] for r in range(self.world)]

    def run(self, fn: Callable, *args: Any, timeout_s: float = 60.0) -> list[Any]:
        """``fn(rank, world, *args)`` on every rank; the results in rank order."""
        if not callable(fn):
            raise TypeError(f"fn must be a function, got {type(fn).__name__}")
        timeout_s = V.positive("timeout_s", timeout_s)
        if not self.alive:
            raise RuntimeError("the worker pool is closed")
        self.wait_ready()
        self.jobs += 1
        payload = pickle.dumps((fn, args))
        for q in self.inbox:
            q.put((self.jobs, payload))
        try:
            return self._collect(self.jobs, timeout_s)
        except RuntimeError:
            self.close()
            raise

    def close(self) -> None:
        if self.owner != os.getpid():
            return
        for q in self.inbox:
            try:
                q.put(None)
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()


_POOLS: dict[int, WorkerPool] = {}


def pool_start(world: int, preload=()) -> WorkerPool:
    """This process's shared pool of ``world`` gloo ranks, started in the background if there
    is none (the workers then import ``preload`` while they wait); returns at once."""
    world = V.integer("world", world, low=1)
    pool = _POOLS.get(world)
    if pool is None or not pool.alive:
        pool = _POOLS[world] = WorkerPool(world, wait=False, preload=preload)
    return pool


def pool_run(fn: Callable, world: int, *args: Any, timeout_s: float = 60.0) -> list[Any]:
    """``fn(rank, world, *args)`` in this process's shared gloo pool of ``world`` ranks
    (started on first use, restarted after a failed job); the results in rank order."""
    pool = pool_start(world)
    try:
        pool.wait_ready()
    except RuntimeError as exc:                     # the free port was taken: once more
        _POOLS.pop(pool.world, None)
        if "address already in use" not in str(exc).lower():
            raise
        pool = pool_start(world)
    try:
        return pool.run(fn, *args, timeout_s=timeout_s)
    except RuntimeError:
        _POOLS.pop(pool.world, None)
        raise


def close_pools() -> None:
    """Stop every shared pool (also done when this process exits)."""
    while _POOLS:
        _POOLS.popitem()[1].close()


atexit.register(close_pools)


# ---- all-reduce: correctness and timing ------------------------------------------------

def allreduce_worker(rank: int, world: int, sizes: Sequence[int], repeats: int,
                     seed: int) -> dict:
    """Inside a process group: check one all_reduce against numpy, then time each size.

    Sizes are float32 element counts. Each timing sample is the slowest rank's time
    (an all-reduce is done when the last rank is done), median over ``repeats``; one warm-up
    all-reduce per size first.
    """
    import torch  # deferred: torch
    import torch.distributed as dist  # deferred: torch
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    n = int(sizes[0])
    mine = np.random.default_rng(seed + rank).standard_normal(n).astype(np.float32)
    want = sum(np.random.default_rng(seed + r).standard_normal(n).astype(np.float64)
               for r in range(world))
    t = torch.from_numpy(mine).to(device)
    dist.all_reduce(t)
    got = t.cpu().numpy().astype(np.float64)
    error = float(np.max(np.abs(got - want)))
    bufs = [torch.ones(int(size), dtype=torch.float32, device=device) for size in sizes]
    for x in bufs:
        dist.all_reduce(x)
    samples = [[] for _ in sizes]
    # sizes interleaved within each repeat, so a burst of outside load hits all of them
    for _ in range(repeats):
        for i, x in enumerate(bufs):
            dist.barrier()
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.all_reduce(x)
            if device == "cuda":
                torch.cuda.synchronize()
            # on the rank's device: NCCL reduces only CUDA tensors
            dt = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                              device=device)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            samples[i].append(float(dt))
    medians = [float(np.median(s)) for s in samples]
    return {"error": error, "result": got if rank == 0 else None, "seconds": medians}


@dataclass(frozen=True)
class AllReduceMeasurement:
    """Median all-reduce seconds per message size, measured on real processes."""
    world: int
    backend: str
    nbytes: np.ndarray
    seconds: np.ndarray
    max_error: float        # |all_reduce - numpy sum| on random data (float32)
    result: np.ndarray      # rank 0's all-reduced random vector
    expected: np.ndarray    # the numpy sum of the same vectors


def measure_allreduce(world: int = 2, sizes: Sequence[int] = (1 << 10, 1 << 13, 1 << 16,
                      1 << 18, 1 << 20), repeats: int = 15, backend: str | None = None,
                      seed: int = 0) -> AllReduceMeasurement:
    """Launch ``world`` processes, check all_reduce and time it at each float32 count."""
    world = V.integer("world", world, low=1)
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__") or not len(sizes):
        raise ValueError(f"sizes must be a non-empty list of element counts >= 1, got {sizes!r}")
    sizes = [V.integer(f"sizes[{i}]", s, low=1) for i, s in enumerate(sizes)]
    repeats = V.integer("repeats", repeats, low=1)
    seed = V.integer("seed", seed, low=0)
    backend = backend or default_backend(world)
    out = launch(allreduce_worker, world, sizes, repeats, seed, backend=backend)
    expected = sum(np.random.default_rng(seed + r).standard_normal(sizes[0]).astype(np.float64)
                   for r in range(world))
    return AllReduceMeasurement(world, backend, np.array(sizes) * 4,
                                np.array(out[0]["seconds"]), max(o["error"] for o in out),
                                out[0]["result"], expected)


# ---- fitting α and β ------------------------------------------------------------------------

@dataclass(frozen=True)
class AlphaBetaFit:
    """α (s/message) and β (s/byte) of the all-reduce model fitted to measurements."""
    alpha: float
    beta: float
    world: int
    algorithm: str
    nbytes: np.ndarray
    seconds: np.ndarray

    def predict(self, nbytes) -> np.ndarray:
        return np.array([collective_time("all_reduce", self.algorithm, float(n), self.world,
                                         alpha=self.alpha, beta=self.beta)
                         for n in np.atleast_1d(nbytes)])

    @property
    def bandwidth(self) -> float:
        """1/β in bytes/s: the link bandwidth the fit implies."""
        return 1.0 / self.beta if self.beta > 0 else float("inf")

    @property
    def relative_errors(self) -> np.ndarray:
        return (self.predict(self.nbytes) - self.seconds) / self.seconds


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], world: int,
                   algorithm: str = "ring", *, weighted: bool = True) -> AlphaBetaFit:
    """Least-squares α, β ≥ 0 so that collective_time(all_reduce, algorithm) fits ``seconds``.

    The model is linear in (α, β): t = a·α + b(n)·β with a, b from :func:`cost_terms`
    (γ folded into β). Residuals are weighted by 1/t, i.e. relative errors are minimised, so
    small messages (which set α) count as much as large ones (which set β). Non-negativity
    by ``scipy.optimize.nnls``.

    ``weighted=False`` is the contrast of lab 9.3: ordinary least squares on absolute times
    (for the ring at p = 2 the same line as ``np.polyfit(n, t, 1)``, α = A/2, β = B), not
    clamped, so the largest message dominates and α can come out negative on noisy data.
    """
    weighted = V.boolean("weighted", weighted)
    from scipy.optimize import nnls  # deferred: scipy
    n = V.array("nbytes", nbytes, finite=True)
    t = V.array("seconds", seconds, finite=True)
    world = V.integer("world", world, low=1)
    V.one_of("algorithm", algorithm, ("naive", "ring", "tree", "recursive_halving_doubling"))
    if n.shape != t.shape or n.ndim != 1 or n.size < 2:
        raise ValueError(f"nbytes and seconds must be 1-D of the same length >= 2, got "
                         f"{n.shape} and {t.shape}")
    if np.any(t <= 0) or np.any(n < 0):
        raise ValueError("seconds must be > 0 and nbytes >= 0")
    if world < 2:
        raise ValueError(f"world must be >= 2 to fit an all-reduce (nothing is sent at 1), "
                         f"got {world}")
    terms = [cost_terms("all_reduce", algorithm, float(x), world) for x in n]
    design = np.array([[c.latency_count, c.path_bytes] for c in terms], dtype=float)
    scale = np.array([1.0, 1e-9])          # keep the two columns of similar size
    if not weighted:
        coef = np.linalg.lstsq(design * scale, t, rcond=None)[0]
        alpha, beta = coef * scale
        return AlphaBetaFit(float(alpha), float(beta), int(world), algorithm, n, t)
    w = 1.0 / t
    coef, _ = nnls(design * scale * w[:, None], t * w)
    alpha, beta = coef * scale
    return AlphaBetaFit(float(alpha), float(beta), int(world), algorithm, n, t)
