"""The harness of chapter 10's real labs: the learner's code on two gloo processes.

Each lab's module (:mod:`labkit.parallel.zero_lab` — 10.6, a ZeRO-1 optimizer;
:mod:`labkit.parallel.tp_lab` — 10.7, a ``parallelize_module`` plan;
:mod:`labkit.parallel.fsdp_lab` — 10.8, an FSDP2 wrapping; :mod:`labkit.parallel.moe_lab` —
10.10, an expert-parallel MoE layer) has a ``*_run(answer, ...)`` function that ships the
learner's class or function to the shared worker pool
(:func:`labkit.parallel.launch.pool_run`, two gloo processes on a free port), runs it there
on seeded inputs and returns **plain data** — what a check compares with one process
(``*_baseline``) and the collectives counted as they were issued. What they share lives
here: the worker pool's size and warm-up, the spy on ``torch.distributed``'s collectives
(:class:`CollectiveSpy`), the measurement of the tensors a process keeps alive, the errors
a worker reports, and ``LAST``, which keeps each lab's last run in this process, for the
cells after a check.

The labkit implementations the check watches in this process (``labkit.check.refuse.watch``,
active while a check runs the answer) are watched in the workers too (:class:`_Watch`): an
answer that calls one there is reported (``"uses_labkit"``).
"""
from __future__ import annotations

import gc
import pickle
import sys
import threading
import traceback
from typing import Any

import numpy as np

from labkit._code import _codes_of, by_value, resolve
from labkit.parallel.launch import pool_run, pool_start

WATCH_CLASS_MODULE = "labkit.check.refuse"   # where the refusal watch's class lives
LAST: dict[str, dict] = {}       # exercise -> {"results", "args"} of its last real run here
WORLD = 2
PRELOAD = ("torch.distributed.tensor.parallel", "torch.distributed.fsdp")


def warm_up() -> None:
    """Start the two gloo workers now, in the background (they import torch, join their
    process group and import DTensor and FSDP while the notebook goes on), so that the
    chapter's first real run does not wait for them."""
    pool_start(WORLD, preload=PRELOAD)


COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
               "all_gather", "all_gather_into_tensor", "all_gather_single", "broadcast",
               "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "send",
               "recv", "isend", "irecv")


class CollectiveSpy:
    """Stands in for every ``torch.distributed`` collective while active: each call is
    recorded (name, elements of its largest tensor argument, ``phase``, ``step``) and then
    made. A collective that calls another (a deprecated name calling its successor) counts
    once."""

    def __init__(self):
        self.calls: list[dict] = []
        self.phase, self.step = "setup", 0
        self._depth = 0
        self._saved: dict[str, Any] = {}

    def _wrap(self, name, real):
        def spy(*args, **kwargs):
            outer = self._depth == 0
            if outer:
                self.calls.append({"op": name, "numel": _numel(args, kwargs),
                                   "phase": self.phase, "step": self.step})
            self._depth += 1
            try:
                return real(*args, **kwargs)
            finally:
                self._depth -= 1
        spy.__name__ = name
        return spy

    def __enter__(self) -> "CollectiveSpy":
        import torch.distributed as dist  # deferred: torch
        for name in COLLECTIVES:
            real = getattr(dist, name, None)
            if real is not None:
                self._saved[name] = real
                setattr(dist, name, self._wrap(name, real))
        return self

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist  # deferred: torch
        for name, real in self._saved.items():
            setattr(dist, name, real)

    def count(self, op_prefix: str, phase: str | None = None, step: int | None = None) -> int:
        return sum(1 for c in self.calls if c["op"].startswith(op_prefix)
                   and (phase is None or c["phase"] == phase)
                   and (step is None or c["step"] == step))


def _numel(args, kwargs) -> int:
    """The largest tensor argument's elements (a list of tensors counts as their sum): the
    full vector of a reduce-scatter (its input) or an all-gather (its output)."""
    import torch  # deferred: torch
    sizes = [0]
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            sizes.append(int(a.numel()))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            sizes.append(int(sum(t.numel() for t in a)))
    return max(sizes)


class _Watch:
    """Calls of labkit's implementations named in ``refused`` while the answer runs in a
    worker, where the check's own watch cannot see. A profile hook on this thread and the
    threads started meanwhile compares each called code object with theirs — by identity
    only: copies of their code are found on the answer itself before the run
    (:func:`labkit.check.refuse.implementation`), and disassembling every code object the
    libraries call, as the check's watch does for code it does not know, kept FSDP's set-up
    from finishing in 90 s."""

    def __init__(self, refused):
        self.names = {c: f"{obj.__module__}.{obj.__qualname__}"
                      for obj in (resolve(i) for i in refused or () if i is not None)
                      for c in _codes_of(obj)}
        self.codes = set(self.names)
        self.hit: str | None = None

    def _hook(self, frame, event, arg):
        if event == "call" and self.hit is None and frame.f_code in self.codes:
            self.hit = self.names[frame.f_code]

    def __call__(self, fn, *args, **kwargs):
        if not self.codes:
            return fn(*args, **kwargs)
        old, old_threads = sys.getprofile(), threading.getprofile()
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(old)
            threading.setprofile(old_threads)


def watched_names() -> tuple[str, ...]:
    """"module:qualname" of every object the refusal watch active in this thread watches
    (none outside a check, or when a test checks labkit's own implementation). The watch
    is a :class:`labkit.check.refuse.watch`, known here by its class's module and name:
    labkit.parallel sits below labkit.check and does not import it."""
    owner = getattr(sys.getprofile(), "__self__", None)
    kind = type(owner)
    if (kind.__module__, kind.__qualname__) != (WATCH_CLASS_MODULE, "watch") or not owner.refused:
        return ()
    return tuple(f"{o.__module__}:{o.__qualname__}" for o in owner.refused.objects
                 if getattr(o, "__module__", None) and getattr(o, "__qualname__", None))


def _load(payload: bytes):
    return pickle.loads(payload)


def _error(exc: BaseException) -> dict:
    if isinstance(exc, NotImplementedError):
        return {"missing": True}
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "site-packages" not in f.filename and "labkit" not in f.filename]
    where = "".join(traceback.format_list(frames[-3:]))
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": where}


def _live_storages(collect: bool = True) -> dict[int, int]:
    """data pointer -> bytes of every tensor storage alive in this process (after a full
    garbage collection with ``collect``; without, garbage may be listed too — harmless in
    a "before" snapshot, whose garbage keeps its addresses until it is collected)."""
    import torch  # deferred: torch
    if collect:
        gc.collect()
    out = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):
            try:            # tensors without storage (meta, wrapper subclasses) are skipped
                st = obj.untyped_storage()
                nbytes, ptr = st.nbytes(), st.data_ptr()
            except Exception:
                continue
            if nbytes:
                out[ptr] = nbytes
    return out


def _storage_ptrs(tensors) -> set[int]:
    out = set()
    for t in tensors:
        try:
            out.add(t.untyped_storage().data_ptr())
        except Exception:
            pass
    return out


def _arrays(tensors) -> list[np.ndarray]:
    return [t.detach().numpy().copy() for t in tensors]


def _precheck(call) -> None:
    """Spare a real run for an unwritten answer: call it here, where no process group
    exists. A stub raises NotImplementedError at once (missing); written code fails on the
    missing process group or a dummy input (ignored) and is then run for real."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception:
        pass


def _last(exercise: str, last: dict | None):
    run = LAST.get(exercise) if last is None else last
    if not run or any("missing" in r or "error" in r for r in run["results"]):
        return None
    return run


def lab_run(exercise: str, worker, fn, *args, args_seen: dict, timeout_s: float) -> list[dict]:
    """One real run of a chapter 10 lab: ``worker(rank, world, by_value(fn), *args,
    watched_names())`` on :data:`WORLD` ranks of the pool; the per-rank results, kept in
    :data:`LAST` under ``exercise`` with ``args_seen`` for the summary cells after the check."""
    out = pool_run(worker, WORLD, by_value(fn), *args, watched_names(), timeout_s=timeout_s)
    LAST[exercise] = {"results": out, "args": args_seen}
    return out


def lazy_module_attribute(namespace: dict, name: str, build):
    """A module ``__getattr__`` (PEP 562) that builds ``name`` with ``build()`` on first use
    and keeps it in ``namespace`` (the module's ``globals()``): the torch classes of a lab,
    defined only when torch is imported."""
    def __getattr__(attr: str):
        if attr == name:
            namespace[name] = build()
            return namespace[name]
        raise AttributeError(attr)
    return __getattr__
