"""A machine in virtual time, for checking chapter 07's timed loop by its behaviour.

A check never decides by wall-clock time: the grader's load moves every number. So
:class:`FakeMachine` hands a timed loop a loader, a step, a ``clock``, a ``cpu_clock`` and a
``sync`` whose costs advance a *virtual* clock. Every duration the loop can measure is then
known exactly and independent of the machine's load, and a loop that measures right
returns, to rounding, what labkit's :func:`labkit.dataload.measure.timed_loop` returns on
the same machine. All costs come from a spec, a dict of plain data (:func:`draw_spec`), so
a checker can send it across the grading boundary.

The model, after ``torch.utils.data.DataLoader`` (``_MultiProcessingDataLoaderIter`` in
``torch/utils/data/dataloader.py``):

* **Loader, no workers** (``workers = 0``): ``next()`` builds batch k in the training
  thread: ``load_s[k]`` of CPU time, ``load_s[k] × (1 + steal)`` of wall time (other
  processes take turns on the core).
* **Loader, W workers**: ``iter()`` starts them; ``startup_s`` later they begin. Worker
  ``k mod W`` builds batch k in ``load_s[k]``; at most ``prefetch × W`` indices are out —
  the index of batch k goes out when batch ``k − prefetch × W`` is taken (``_try_put_index``
  after each batch returned); batches return in order. ``next()`` blocks (wall time, no
  CPU) until batch k is ready, then takes it: ``receive_s[k]`` of CPU,
  ``× (1 + steal)`` of wall time.
* **Step** (the n-th call): ``host_s[n]`` of CPU on the training thread (``× (1 + steal)``
  wall), then ``device_s[n]`` of work queued on an accelerator that runs one step's work
  after another; the call returns before that work ends (as CUDA calls do).
* **sync()** waits, using no CPU, until the accelerator is idle (``torch.cuda.synchronize``).
* ``clock()`` / ``cpu_clock()`` read the virtual wall and CPU clocks, from offsets ``t0``
  and ``c0`` (only differences mean anything).

Every ``iter()``, ``next()``, step and ``sync()`` is logged (:meth:`FakeMachine.log`), so a
check can tell *how* a loop measured, not only what it returned.
"""
from __future__ import annotations

import copy

import numpy as np

from labkit import validate as V
from labkit.dataload.model import EncodedImages, make_images

SPEC_KINDS = ("no workers", "workers", "accelerator")
_ARRAYS = ("load_s", "receive_s", "host_s", "device_s")


def draw_spec(rng: np.random.Generator, kind: str) -> dict:
    """A machine of one kind (:data:`SPEC_KINDS`), its costs drawn from ``rng``:

    * ``"no workers"`` — the training thread loads (8–12 ms a batch, the first one 3×:
      a cold start), a CPU step of 3–5 ms, 10–50 % of the wall time taken by others;
    * ``"workers"`` — two workers (prefetch 2) starting in 40–80 ms, 15–25 ms a batch
      each, a CPU step of 6–10 ms, up to 30 % steal;
    * ``"accelerator"`` — one worker (prefetch 2), 6–9 ms a batch, a step of 0.5–1 ms on
      the CPU launching 4–8 ms of accelerator work.

    Per-step costs vary ±20 % around their means; the warm-up covers the workers' fill
    (``prefetch × W`` steps, or 1–3 without workers, plus up to two); the window is 10–20
    steps and the loader holds 4–8 batches more than warm-up + window."""
    kind = V.one_of("kind", kind, SPEC_KINDS)
    W = {"no workers": 0, "workers": 2, "accelerator": 1}[kind]
    prefetch = 2
    warmup = (prefetch * W if W else int(rng.integers(1, 4))) + int(rng.integers(0, 3))
    window = int(rng.integers(10, 21))
    total = warmup + window + int(rng.integers(4, 9))

    def around(low, high):
        return (rng.uniform(low, high) * rng.uniform(0.8, 1.2, total)).round(6)

    if kind == "no workers":
        load, host, device = around(0.008, 0.012), around(0.003, 0.005), np.zeros(total)
        load[0] *= 3
        steal = float(rng.uniform(0.1, 0.5))
    elif kind == "workers":
        load, host, device = around(0.015, 0.025), around(0.006, 0.010), np.zeros(total)
        steal = float(rng.uniform(0.0, 0.3))
    else:
        load, host, device = around(0.006, 0.009), around(0.0005, 0.001), around(0.004, 0.008)
        steal = 0.0
    receive = around(0.0002, 0.0005) if W else np.zeros(total)
    return {"batch_size": int(rng.choice([16, 32, 64])), "warmup": warmup, "window": window,
            "batches": total, "workers": W, "prefetch": prefetch,
            "startup_s": float(rng.uniform(0.04, 0.08)) if W else 0.0, "steal": round(steal, 3),
            "load_s": load, "receive_s": receive, "host_s": host, "device_s": device,
            "t0": float(rng.uniform(100, 1000)), "c0": float(rng.uniform(1, 50))}


def constant_spec(*, load_s: float, step_s: float, batch_size: int = 32, warmup: int = 2,
                  window: int = 8, workers: int = 0, device_s: float = 0.0) -> dict:
    """A machine with the same costs every step (a first try of a loop, by hand): with no
    workers and no accelerator a right loop measures ``wait_s = load_s``,
    ``compute_s = step_s`` on every step and ``batch_size / (load_s + step_s)`` samples/s."""
    n = V.integer("warmup", warmup, low=0) + V.integer("window", window, low=1) + 4
    W = V.integer("workers", workers, low=0, high=8)
    return {"batch_size": V.integer("batch_size", batch_size, low=1), "warmup": warmup,
            "window": window, "batches": n, "workers": W, "prefetch": 2, "startup_s": 0.0,
            "steal": 0.0, "load_s": np.full(n, V.positive("load_s", load_s)),
            "receive_s": np.zeros(n), "host_s": np.full(n, V.positive("step_s", step_s)),
            "device_s": np.full(n, V.nonnegative("device_s", device_s)), "t0": 0.0, "c0": 0.0}


class _Loader:
    """The fake DataLoader: each ``iter()`` is a new epoch from batch 0."""

    def __init__(self, machine):
        self.m = machine

    def __iter__(self):
        return self.m._new_epoch()

    def __len__(self):
        return self.m.total


class _Epoch:
    def __init__(self, machine, epoch):
        self.m, self.epoch, self.k = machine, epoch, 0

    def __iter__(self):
        return self

    def __next__(self):
        return self.m._next(self)


class FakeMachine:
    """The virtual machine of the module docstring, built from a spec dict."""

    def __init__(self, spec: dict):
        if not isinstance(spec, dict):
            raise TypeError(f"spec must be a dict (draw_spec), got {type(spec).__name__}")
        self.spec = spec
        self.B = V.integer("batch_size", spec["batch_size"], low=1)
        self.warmup = V.integer("warmup", spec["warmup"], low=0)
        self.window = V.integer("window", spec["window"], low=1)
        self.total = V.integer("batches", spec["batches"], low=1)
        self.W = V.integer("workers", spec["workers"], low=0)
        self.depth = V.integer("prefetch", spec["prefetch"], low=1) * max(self.W, 1)
        self.startup = V.nonnegative("startup_s", spec["startup_s"])
        self.steal = V.nonnegative("steal", spec["steal"])
        for name in _ARRAYS:
            a = V.array(name, spec[name], ndim=1, shape=(self.total,))
            if (a < 0).any():
                raise ValueError(f"{name} must be >= 0")
            setattr(self, name, a)
        self.t0, self.c0 = float(spec["t0"]), float(spec["c0"])
        self.t = self.cpu = self.device_free = 0.0
        self.epochs: list[dict] = []
        self.nexts: list[tuple] = []      # (t_in, t_out, batch)
        self.steps: list[tuple] = []      # (t_in, t_out, batch, device work ends)
        self.syncs: list[tuple] = []      # (t_in, t_out)
        self.clock_reads = 0
        self.loader = _Loader(self)

    # --- what the loop sees -----------------------------------------------------------
    def clock(self) -> float:
        self.clock_reads += 1
        return self.t0 + self.t

    def cpu_clock(self) -> float:
        return self.c0 + self.cpu

    def sync(self) -> None:
        t_in = self.t
        self.t = max(self.t, self.device_free)
        self.syncs.append((t_in, self.t))

    def step(self, x, y) -> None:
        n = len(self.steps) % self.total
        t_in = self.t
        self._run_cpu(self.host_s[n])
        self.device_free = max(self.device_free, self.t) + self.device_s[n]
        batch = int(y) if isinstance(y, (int, np.integer)) and not isinstance(y, bool) else -1
        self.steps.append((t_in, self.t, batch, self.device_free))

    # --- inside -----------------------------------------------------------------------
    def _run_cpu(self, seconds: float) -> None:
        self.cpu += seconds
        self.t += seconds * (1 + self.steal)

    def _new_epoch(self) -> _Epoch:
        self.epochs.append({"t_iter": self.t, "ready": [], "taken": [],
                            "free": [self.t + self.startup] * max(self.W, 1)})
        return _Epoch(self, len(self.epochs) - 1)

    def _ready(self, e: dict, k: int) -> float:
        """When batch k of epoch ``e`` is built (workers); the ones before it first."""
        while len(e["ready"]) <= k:
            j = len(e["ready"])
            issued = e["t_iter"] if j < self.depth else e["taken"][j - self.depth]
            w = j % self.W
            done = max(issued, e["free"][w]) + self.load_s[j]
            e["free"][w] = done
            e["ready"].append(done)
        return e["ready"][k]

    def _next(self, it: _Epoch):
        k = it.k
        if k >= self.total:
            raise StopIteration
        e = self.epochs[it.epoch]
        t_in = self.t
        if self.W == 0:
            self._run_cpu(self.load_s[k])
        else:
            self.t = max(self.t, self._ready(e, k))
            self._run_cpu(self.receive_s[k])
        e["taken"].append(self.t)
        it.k += 1
        self.nexts.append((t_in, self.t, k))
        return np.full(2, float(k)), k

    # --- what a check reads -----------------------------------------------------------
    def log(self) -> dict:
        """Plain data: ``iters``, and per ``next()`` / step / ``sync()`` its virtual entry
        and exit times (the step: and the batch it was given, -1 if not one of the
        loader's, and when its device work ends), the clock reads."""
        return {"iters": len(self.epochs),
                "nexts": np.array(self.nexts, dtype=float).reshape(-1, 3),
                "steps": np.array(self.steps, dtype=float).reshape(-1, 4),
                "syncs": np.array(self.syncs, dtype=float).reshape(-1, 2),
                "clock_reads": self.clock_reads, "t_end": self.t, "cpu_end": self.cpu}

    def drive(self, batches, step, steps: int) -> None:
        """A harness: take ``steps`` batches from ``batches`` and run ``step`` on each,
        synced — what any loop does with an experiment's inputs (it stops early when the
        batches run out)."""
        it = iter(batches)
        for _ in range(V.integer("steps", steps, low=0)):
            try:
                x, y = next(it)
            except StopIteration:
                return
            step(x, y)
            self.sync()

    def run(self, loop) -> dict:
        """``loop(loader, step, batch_size=…, warmup=…, window=…, clock=…, cpu_clock=…,
        sync=…)`` on this machine: what the loop returned."""
        return loop(self.loader, self.step, batch_size=self.B, warmup=self.warmup,
                    window=self.window, clock=self.clock, cpu_clock=self.cpu_clock,
                    sync=self.sync)


# ------------------------------------------------------- derive functions of the checks
def run_loop(loop, spec: dict) -> dict:
    """Exercise 7.1: ``loop`` on the machine ``spec``: ``{"result": what it returned,
    "log": FakeMachine.log()}``."""
    m = FakeMachine(spec)
    result = m.run(loop)
    return {"result": result, "log": m.log()}


def run_experiment(experiment, kind: str, spec: dict) -> dict:
    """Exercise 7.3: ``experiment(kind, loader, step)`` on the machine ``spec``, its
    ``(batches, step)`` then driven for warm-up + window steps: ``{"ok": …, "log": …}``
    (``ok`` is a message when what came back cannot be driven)."""
    m = FakeMachine(spec)
    out = experiment(kind, m.loader, m.step)
    if not isinstance(out, tuple) or len(out) != 2:
        return {"ok": f"returned {type(out).__name__}, not a pair (batches, step)", "log": m.log()}
    batches, step = out
    if not callable(step):
        return {"ok": f"the step returned is {type(step).__name__}, not a function",
                "log": m.log()}
    m.drive(batches, step, m.warmup + m.window)
    return {"ok": "", "log": m.log()}


def interleave_order(interleave, names: list, trials: int) -> dict:
    """Exercise 7.4: ``interleave({name: run}, trials)`` where each run notes its call;
    ``{"order": the names in the order they ran, "result": what interleave returned}``
    (a run returns ``"name#n"``, its n-th call)."""
    order: list[str] = []

    def runner(name):
        def run():
            order.append(name)
            return f"{name}#{order.count(name)}"
        return run
    result = interleave({n: runner(n) for n in names}, trials)
    return {"order": order, "result": result}


def persistent_worker_epochs(sampler_cls, images: int, num_samples: int, epochs: int,
                             seed: int) -> dict:
    """Exercise 7.6: what one persistent worker loads, epoch after epoch, with the sampler
    ``sampler_cls(n, num_samples=…)``. The dataset (:class:`EncodedImages`, ``images``
    8×8 scenes) is copied into the worker once, at its start (``copy.deepcopy``: a forked
    worker's copy, which nothing in the training process reaches again); the sampler lives
    in the training process, where ``set_epoch(e)`` is called before each epoch; the
    worker loads each index the sampler yields. Returns per epoch ``len(sampler)``, the
    indices (each as a list of ints) and the items' pixels — or ``error``."""
    imgs, labels = make_images(V.integer("images", images, low=1), size=8, seed=seed)
    main = EncodedImages(imgs, labels, seed=seed, blur=False)
    worker = copy.deepcopy(main)
    sampler = sampler_cls(len(main), num_samples=num_samples)
    out: dict = {"len": [], "indices": [], "pixels": [], "error": ""}
    for e in range(V.integer("epochs", epochs, low=1)):
        sampler.set_epoch(e)
        idx = list(iter(sampler))
        out["len"].append(int(len(sampler)))
        out["indices"].append([[int(v) for v in i] if isinstance(i, (tuple, list))
                               else [int(i)] for i in idx])
        try:
            out["pixels"].append(np.stack([worker[i][0] for i in idx]))
        except Exception as exc:        # the worker cannot load what the sampler yields
            out["error"] = f"dataset[{idx[0]!r}] raised {type(exc).__name__}: {exc}"
            break
    return out


def synthetic_experiments(rng: np.random.Generator, verdict: str, threshold: float = 0.9,
                          steps: int = 40) -> tuple[dict, dict, dict]:
    """Exercise 7.5's inputs: three timed loops' results (the loader alone, the step alone,
    the pipeline; :meth:`labkit.dataload.measure.LoaderRun.from_steps` over ``steps``
    steps with ±10 % per-step scatter) whose rates give ``verdict`` ("data", "compute" or
    "both") under :func:`labkit.dataload.compare.verdict_of_rates` at ``threshold``, the
    pipeline's rate at least 0.03 above or 0.06 below ``threshold`` × the slower stage's.
    The pipeline's wait share is drawn apart from the verdict (a data-bound pipeline may
    wait little, a "both" one much or little): it does not decide."""
    from labkit.dataload.measure import LoaderRun  # deferred: resource

    verdict = V.one_of("verdict", verdict, ("data", "compute", "both"))
    threshold = V.number("threshold", threshold, low=0.5, high=0.95)
    B = int(rng.choice([32, 64]))
    fast = float(rng.uniform(0.003, 0.010))                  # the faster stage's period
    slow = fast * float(rng.uniform(1.15, 3.0))
    loader_T, compute_T = (slow, fast) if verdict == "data" else (fast, slow)
    if verdict == "both" and rng.random() < 0.5:
        loader_T, compute_T = compute_T, loader_T
    if verdict == "both":
        ratio = float(rng.uniform(0.35, threshold - 0.06))
        share = float(rng.uniform(0.05, 0.85))
    else:
        ratio = float(rng.uniform(threshold + 0.03, 1.0))
        # data-bound: the step takes about what it takes alone, the rest is waiting
        share = (1 - min(compute_T * rng.uniform(1.0, 1.1) * ratio / loader_T, 0.97)
                 if verdict == "data" else float(rng.uniform(0.0, 0.1)))
    period = max(loader_T, compute_T) / ratio

    def scatter(mean):
        return mean * rng.uniform(0.9, 1.1, steps)

    tiny = np.full(steps, 2e-6)
    runs = (LoaderRun.from_steps(scatter(loader_T), tiny, batch_size=B, num_workers=1,
                                 kind="loader alone"),
            LoaderRun.from_steps(tiny, scatter(compute_T), batch_size=B, kind="compute alone"),
            LoaderRun.from_steps(scatter(period * share), scatter(period * (1 - share)),
                                 batch_size=B, num_workers=1))
    return tuple(r.result for r in runs)


def try_loop(loop) -> str:
    """A first try of a timed loop, with the numbers it must give: on a machine where every
    batch takes 10 ms to load in the training thread and every step 1 ms on the CPU plus
    4 ms on an accelerator, a right loop measures wait 10 ms, compute 5 ms (synced) of which
    1 ms is CPU, and 32 / 15 ms = 2,133.3 samples/s. Returns (and prints) the comparison."""
    spec = constant_spec(load_s=0.010, step_s=0.001, device_s=0.004)
    want = {"wait_s": 0.010, "compute_s": 0.005, "wait_cpu_s": 0.010, "step_cpu_s": 0.001,
            "samples_per_s": 32 / 0.015}
    try:
        got = FakeMachine(spec).run(loop)
    except NotImplementedError:
        text = f"{getattr(loop, '__name__', 'the loop')} is not written yet."
        print(text)
        return text
    lines = []
    for k, v in want.items():
        g = got.get(k) if isinstance(got, dict) else None
        arr = np.atleast_1d(np.asarray(g, dtype=float)) if g is not None else np.array([np.nan])
        ok = arr.size in (1, spec["window"]) and bool(np.allclose(arr, v, rtol=1e-9))
        shown = "missing" if g is None else f"{arr.mean():.6g}" + ("" if arr.size == 1 else
                                                                   f" (mean of {arr.size})")
        lines.append(f"{'✓' if ok else '✗'} {k:13s} {shown:24s} expected {v:.6g}")
    text = "\n".join(lines)
    print(text)
    return text


def cache_behaviour(cache_cls, images: int, seed: int, indices: list) -> dict:
    """Exercise 7.10: ``cache_cls(dataset)`` in front of an :class:`EncodedImages` of
    ``images`` 8×8 scenes whose ``image(j)`` (the decode) is counted: the decodes while the
    cache is built and after reading the items at ``indices`` (each ``[epoch, i]``, or
    ``[i]`` for a plain index), the items' pixels and labels, ``len`` and
    ``stored_bytes``."""
    class Counted(EncodedImages):
        decodes = 0

        def image(self, i):
            Counted.decodes += 1
            return super().image(i)

    ds = Counted(*make_images(V.integer("images", images, low=1), size=8, seed=seed), seed=seed,
                 repeat=2)
    cache = cache_cls(ds)
    built = Counted.decodes
    keys = [tuple(int(v) for v in k) if len(k) == 2 else int(k[0]) for k in indices]
    items = [cache[k] for k in keys]
    return {"built": built, "after": Counted.decodes - built, "len": int(len(cache)),
            "stored_bytes": int(cache.stored_bytes),
            "pixels": np.stack([np.asarray(x, dtype=np.float32) for x, _ in items]),
            "labels": [int(y) for _, y in items]}
