"""Validation everywhere, found by a machine (issue 26).

The table-driven sweeps (``tests/test_validation_*.py``) cover what was listed by hand. This
walk lists it itself: every public function of every labkit module (``__all__``, or the
module's own functions not starting with ``_``) outside :data:`EXCLUDED`, each parameter
fed each value of :data:`BAD` while the others keep a working value — its default, or for a
required parameter the first candidate of :data:`VALID` (looked up by the parameter's name)
with which the call works. A function no candidate makes work is skipped and counted.

Accepted: the call returns (a bad-looking value may be valid there: ``seed=0``), or raises a
``ValueError``/``TypeError`` whose message names the parameter. Anything else is a finding:
another exception type (deep inside: ``AttributeError``, ``KeyError``, ``IndexError``,
``ZeroDivisionError``, ``MemoryError``), a message that does not name the parameter, or a
call running past :data:`HARD_S` CPU seconds (stopped by ``SIGPROF``: a process-time
alarm, so that a loaded machine does not move the verdict; the walk's Python runs its math
libraries on one thread; over :data:`SLOW_S` is printed, never failed). A finding nobody fixed
yet stands in :data:`KNOWN` with its reason; a new one fails the walk, and so does a
:data:`KNOWN` entry that finds nothing any more (delete it).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import json
import math
import os
import pkgutil
import re
import signal
import subprocess
import sys
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import labkit
from validation_walker_known import KNOWN, OVERTIME

TESTS = Path(__file__).resolve().parent
HARD_S = 5.0      # a call still running after this many CPU seconds is stopped and fails the walk
SLOW_S = 1.0      # a call over this is reported (printed), not failed
BASE_S = 5.0      # the working call a function is walked from

BAD: tuple[tuple[str, Any], ...] = (
    ("a str", "x"), ("None", None), ("NaN", math.nan), ("inf", math.inf),
    ("-inf", -math.inf), ("0", 0), ("-1", -1), ("10**12", 10**12), ("[]", []),
    ("an empty array", np.empty(0)),
)

EXCLUDED: dict[str, str] = {
    # module (and everything under it) -> why the walk does not call it
    "labkit.grade.cli": "labkit-grade's CLI entry points: argv in, files and processes out",
    "labkit.grade.release": "labkit-release's CLI: writes a student release",
    "labkit.grade.generate": "make notebooks: rewrites solutions/ and notebooks/ in the repo",
    "labkit.grade.runner": "starts a kernel and an answer process per notebook",
    "labkit.grade.sandbox": "the answer process: serves a grader over a pipe",
    "labkit.grade.processes": "finds, waits for and kills processes",
    "labkit.grade.watchdog": "a pytest plugin: kills a dead kernel's run",
    "labkit.grade.pytest_plugin": "a pytest plugin: its hooks take pytest's objects",
    "labkit.grade.gradebook": "an SQLite file per call",
    "labkit.parallel.launch": "starts gloo process groups",
    "labkit.parallel.ddp_train": "a torchrun/launcher worker script (gloo processes)",
    "labkit.parallel.mp_real": "PyTorch's distributed APIs on 2 gloo processes",
    "labkit.parallel.mp_labs": "the harness of chapter 10's real labs (gloo processes)",
    "labkit.parallel.zero_lab": "lab 10.6 on 2 gloo processes",
    "labkit.parallel.tp_lab": "lab 10.7 on 2 gloo processes",
    "labkit.parallel.fsdp_lab": "lab 10.8 on 2 gloo processes",
    "labkit.parallel.moe_lab": "lab 10.10 on 2 gloo processes",
    "labkit.cluster.ft_train": "a training script run as killed and restarted processes",
    "labkit.cluster.ckpt_lab": "kills and restarts a process around a learner's save",
    "labkit.dataload.measure": "real DataLoader runs with worker processes",
    "labkit.dataload.randomness": "real DataLoader worker processes",
    "labkit.memory.fidelity": "runs PyTorch's real CUDA caching allocator in a subprocess",
    "labkit.kernels.registers": "runs ptxas / a subprocess with the simulator off",
    "labkit.kernels.timing": "times the matmul ladder on a real GPU",
}

HEAVY: dict[str, str] = {
    # module -> why: on valid arguments each call runs real work for seconds, so the walk's
    # accepted substitutions alone would take minutes (their entry points are swept by hand
    # in the other tests/test_validation_*.py and their own unit tests)
    "labkit.autograd.frameworks": "TorchDynamo and jax compile one function per call",
    "labkit.compress.amp": "trains the digits MLP under autocast",
    "labkit.compress.distill": "trains teacher and student MLPs",
    "labkit.compress.train": "trains, quantizes and prunes MLPs with torch",
    "labkit.dataload.calibrate": "fits the simulator to measured DataLoader runs",
    "labkit.dataload.costs": "measures each pipeline stage in CPU time",
    "labkit.hardware.machine": "times matmuls to measure this machine's roofline",
    "labkit.kernels.cpu": "numba.njit(parallel=True) compiles per signature",
    "labkit.memory.measure": "torch measurements on CPU",
    "labkit.memory.record": "records torch allocation traces",
    "labkit.parallel.compression": "trains a task with compressed and local SGD",
    "labkit.parallel.planner_table1": "plans every row of Narayanan et al.'s Table 1",
    "labkit.perf.cnn_step": "times a CNN's training step",
    "labkit.perf.deploy": "exports and quantizes models, times them",
    "labkit.perf.frameworks": "one MLP trained six ways (torch, jax, compile)",
    "labkit.perf.metrics": "trains the digits model to measure it",
    "labkit.perf.process_memory": "runs a torch step and reads /proc",
    "labkit.perf.profiling": "torch.profiler runs",
    "labkit.perf.scorecard": "trains models to score them",
    "labkit.training.decoder_measure": "times decoding",
    "labkit.training.inference": "times torch inference sweeps",
    "labkit.training.leak": "measures memory growth over training steps",
    "labkit.training.modes": "trains a model to show the forgotten eval()",
    "labkit.training.train": "trains labkit's and torch's MLP on the digits",
}

# A working value for a required parameter, by its name: candidates tried in order (each a
# zero-argument factory, so a call that mutates its argument gets a fresh one).
VALID: dict[str, tuple[Callable[[], Any], ...]] = {}


def _valid(names: str, *factories: Callable[[], Any]) -> None:
    for name in names.split():
        VALID[name] = factories


def _const(value):
    return lambda: value


_valid("n size elements numel", _const(8))
_valid("block threads_per_block", _const(32))
_valid("tile", _const(8))
_valid("k", _const(2))
_valid("world workers stages dp tp pp batch heads n_heads n_kv_heads", _const(4))
_valid("seq hidden dim head_dim width in_features", _const(16))
_valid("microbatches steps num_layers n_layers layers", _const(8))
_valid("segments chunks", _const(2))
_valid("seed rank", _const(0))
_valid("p parallel_fraction", _const(0.5), _const(4))
_valid("serial_fraction sparsity capacity_factor", _const(0.1))
_valid("rng", lambda: np.random.default_rng(0))
_valid("num_params", _const(10**6))
_valid("alpha", _const(1e-6))
_valid("beta", _const(1e-9))
_valid("mtbf_s", _const(3600.0))
_valid("checkpoint_s segment_s interval_s restart_s work_s", _const(60.0))
_valid("load_s", _const(0.01))
_valid("compute_s seconds latency_s step_s", _const(0.02))
_valid("cores", _const(2))
_valid("gpu", _const("A100"))
_valid("precision", _const("fp16"))
_valid("op", _const("all_reduce"))
_valid("algorithm", _const("ring"))
_valid("x a b values samples data w y g", lambda: np.linspace(0.5, 2.0, 16).reshape(4, 4),
       lambda: np.linspace(0.5, 2.0, 8))
_valid("fn f", _const(lambda *args: args[0] if args else 0.0))
_valid("batch_size", _const(4))
_valid("sequence_parallel", _const(False))
_valid("rows", list)
_valid("nbytes", _const(1e6), _const([1e3, 1e6]))
_valid("source", lambda: {"segments": [], "device_traces": []})


def _tensor():
    from labkit.autograd import Tensor
    return (Tensor(np.ones(3), requires_grad=True) * 2).sum()


def _run():
    from labkit.parallel import collectives, draw
    return collectives.all_reduce(draw.demo_data(4), "ring")


_valid("root", _tensor)
_valid("run", _run)

SLOW: dict[str, str] = {
    # function -> why its calls are not made (each takes seconds, or starts a process)
    "labkit.cluster.faults:measure_checkpoint": "writes and times checkpoints on disk",
    "labkit.hardware.identify:device_name": "asks nvidia-smi (a process)",
    "labkit.kernels.ops:attention_traffic": "traces attention: seconds per accepted value",
}



@dataclass
class Walk:
    """What the walk did and found."""
    functions: list[str] = field(default_factory=list)      # walked
    skipped: dict[str, str] = field(default_factory=dict)   # function -> why
    calls: int = 0
    findings: dict[tuple[str, str, str], str] = field(default_factory=dict)
    slow: dict[tuple[str, str, str], float] = field(default_factory=dict)


class _Overtime(BaseException):
    """Raised by the alarm in a call past its time (BaseException: ``except Exception``
    inside labkit must not swallow it)."""


def _alarm(signum, frame):
    raise _Overtime()


def _excluded(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in (*EXCLUDED, *HEAVY))


def modules() -> list[types.ModuleType]:
    names = ["labkit"] + [m.name for m in pkgutil.walk_packages(labkit.__path__, "labkit.")]
    return [importlib.import_module(n) for n in sorted(names) if not _excluded(n)]


def public_functions(module: types.ModuleType) -> list[tuple[str, Callable]]:
    names = getattr(module, "__all__", None) or [n for n in vars(module)
                                                  if not n.startswith("_")]
    out = []
    for name in sorted(names):
        obj = getattr(module, name, None)
        if inspect.isfunction(obj) and obj.__module__ == module.__name__ and name != "main":
            out.append((f"{module.__name__}:{name}", obj))
    return out


def _names(message: str, param: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(param)}(?!\w)", message) is not None


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:        # arrays, incomparable objects
        return False


def call(fn: Callable, kwargs: dict, limit: float) -> tuple[BaseException | None, float]:
    """``fn(**kwargs)`` under an alarm of ``limit`` CPU seconds (a generator it returns is
    drawn from, so that its checks run): the exception it raised (or None), and CPU seconds."""
    old = signal.signal(signal.SIGPROF, _alarm)
    start = time.process_time()
    try:
        signal.setitimer(signal.ITIMER_PROF, limit, 0.25)   # again, should one be swallowed
        try:
            out = fn(**kwargs)
            if isinstance(out, types.GeneratorType):
                list(itertools.islice(out, 3))
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except BaseException as exc:  # noqa: BLE001 — the walk judges every kind
        if isinstance(exc, KeyboardInterrupt):
            raise
        return exc, time.process_time() - start
    finally:
        signal.signal(signal.SIGPROF, old)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return None, time.process_time() - start


def verdict(exc: BaseException | None, param: str) -> str | None:
    """None when the outcome is accepted, else what is wrong with it."""
    if exc is None:
        return None
    if isinstance(exc, _Overtime):
        return f"still running after {HARD_S:g} s"
    if isinstance(exc, (ValueError, TypeError)):
        if _names(str(exc), param):
            return None
        return f"{type(exc).__name__} not naming {param}: {str(exc)[:120]}"
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def working_call(fn: Callable) -> tuple[dict | None, str]:
    """Keyword arguments with which ``fn`` works (required ones from :data:`VALID`), or
    None and why not."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        return None, f"no signature: {exc}"
    required = [p for p in sig.parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [p.name for p in required if p.name not in VALID]
    if missing:
        return None, f"no valid value for {', '.join(missing)}"
    why = "no candidate works"
    for choice in itertools.islice(itertools.product(*(VALID[p.name] for p in required)), 8):
        kwargs = {p.name: make() for p, make in zip(required, choice)}
        exc, _ = call(fn, dict(kwargs), BASE_S)
        if exc is None:
            return {p.name: make for p, make in zip(required, choice)}, ""
        why = f"working call raised {type(exc).__name__}: {str(exc)[:80]}"
    return None, why


def walk_function(name: str, fn: Callable, walk: Walk, hard_s: float = HARD_S) -> None:
    if name in SLOW:
        walk.skipped[name] = SLOW[name]
        return
    factories, why = working_call(fn)
    if factories is None:
        walk.skipped[name] = why
        return
    walk.functions.append(name)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for p in params:
        good = factories[p.name]() if p.name in factories else p.default
        for label, bad in BAD:
            if _same(bad, good) or f"{name}({p.name}={label})" in OVERTIME:
                continue
            kwargs = {q: make() for q, make in factories.items()}
            kwargs[p.name] = bad
            exc, seconds = call(fn, kwargs, hard_s)
            walk.calls += 1
            wrong = verdict(exc, p.name)
            if wrong is not None:
                walk.findings[(name, p.name, label)] = wrong
            elif seconds > SLOW_S:
                walk.slow[(name, p.name, label)] = seconds


def walk_here() -> Walk:
    """The walk, in this process (:func:`the_walk` runs it in a fresh one)."""
    walk = Walk()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in modules():
            for name, fn in public_functions(module):
                walk_function(name, fn, walk)
    return walk


def _key(key: tuple[str, str, str]) -> str:
    return "|".join(key)


def main(out: str) -> None:
    """Walk and write what was found to the JSON file ``out`` (the child's side)."""
    walk = walk_here()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"functions": walk.functions, "skipped": walk.skipped, "calls": walk.calls,
                   "findings": {_key(k): v for k, v in walk.findings.items()},
                   "slow": {_key(k): v for k, v in walk.slow.items()}}, fh)


@functools.lru_cache(maxsize=1)
def the_walk(tmp: str) -> Walk:
    """The walk in a fresh Python whose working directory is ``tmp``: what labkit's
    functions do to their module's state (a registered op, a chosen rule, a file written
    under a path given as "x") stays there, and the import state is labkit's own."""
    out = os.path.join(tmp, "walk.json")
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); "
            f"import test_validation_walker as w; w.main({out!r})")
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent),
               MPLBACKEND="Agg", LABKIT_PROGRESS=os.path.join(tmp, "progress.json"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, timeout=600,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, encoding="utf-8") as fh:
        data = json.load(fh)
    split = lambda d: {tuple(k.split("|")): v for k, v in d.items()}  # noqa: E731
    return Walk(data["functions"], data["skipped"], data["calls"], split(data["findings"]),
                split(data["slow"]))


def known_params(name: str) -> set[str]:
    """The parameters :data:`KNOWN` lists for ``name`` ("unchecked: a (KeyError), b")."""
    reason = KNOWN.get(name, "")
    return {part.split(" (")[0] for part in reason.split(": ", 1)[-1].split(", ") if reason}


def _known(key: tuple[str, str, str]) -> bool:
    name, param, _ = key
    return param in known_params(name)


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    return the_walk(str(tmp_path_factory.mktemp("walk")))


def test_every_public_function_rejects_bad_arguments_by_name(walk):
    print(f"\nwalked {len(walk.functions)} functions, {walk.calls} calls; "
          f"skipped {len(walk.skipped)}")
    for key, seconds in sorted(walk.slow.items()):
        print(f"slow ({seconds:.1f} s): {key}")
    new = {k: v for k, v in walk.findings.items() if not _known(k)}
    report = "\n".join(f"{n}({p}={label}): {why}" for (n, p, label), why in sorted(new.items()))
    assert not new, f"{len(new)} bad arguments not rejected by name:\n{report}"


ISSUE_CASES = (
    # what issue 26 found ending deep inside: each is walked now and rejects by name
    "labkit.autograd.tensor:topological_order", "labkit.parallel.collectives:coverage",
    "labkit.memory.trace:load_snapshot", "labkit.perf.laws:amdahl_curve",
    "labkit.timing:benchmark", "labkit.perf.bench:format_table", "labkit.data.digits:load_digits",
    "labkit.data.digits:batches", "labkit.memory.widgets:show_activations",
    "labkit.parallel.draw:cost_curves", "labkit.memory.estimator:sqrt_checkpoint_segments",
)


def test_the_walk_covers_labkit(walk):
    assert len(walk.functions) >= 250 and walk.calls >= 7_000     # 264 and 7,425 today
    assert set(ISSUE_CASES) <= set(walk.functions)
    assert not {k for k in walk.findings if k[0] in ISSUE_CASES}
    for module in EXCLUDED:                     # a stale exclusion names no module
        importlib.import_module(module)


def test_known_entries_are_still_found(walk):
    found = {(n, p) for n, p, _ in walk.findings}
    stale = sorted(f"{n}({p})" for n in KNOWN for p in known_params(n) if (n, p) not in found)
    assert not stale, f"fixed, or no longer walked: delete from KNOWN: {stale}"


def _validated(n: int = 4, rate: float = 0.5, name: str = "ring"):
    from labkit import validate as V
    return V.integer("n", n, low=1) * V.positive("rate", rate), V.one_of("name", name, ("ring",))


def _deep(n: int = 4, rate: float = 0.5):
    return [0.0] * n, 1 / rate                  # 0 -> ZeroDivisionError, "x" -> TypeError


def _unnamed(n: int = 4):
    if not 1 <= n:                              # TypeError from '<=' names no parameter
        raise ValueError("out of range")
    return n


def _stuck(n: int = 4):
    while n != 4:                               # any other n never ends
        pass


@pytest.mark.parametrize("fn, expect", [
    (_validated, {}),
    (_deep, {("rate", "0"): "ZeroDivisionError", ("n", "10**12"): "MemoryError",
             ("n", "a str"): "TypeError not naming n"}),
    (_unnamed, {("n", "-1"): "ValueError not naming n", ("n", "None"): "TypeError not naming"}),
    (_stuck, {("n", "0"): "still running"}),
])
def test_a_function_that_fails_deep_fails_the_walk(fn, expect):
    walk = Walk()
    walk_function(fn.__name__, fn, walk, hard_s=0.3)
    assert walk.functions == [fn.__name__] and walk.calls > 0
    got = {(p, label): why for (_, p, label), why in walk.findings.items()}
    for key, start in expect.items():
        assert got.get(key, "").startswith(start), (key, got.get(key))
    assert bool(got) == bool(expect)
