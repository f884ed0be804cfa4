"""Record real allocation traces from torch on CPU (imports torch when called).

``torch.profiler.profile(profile_memory=True)`` reports every allocation and free of
PyTorch's CPU allocator as a ``[memory]`` event with its address and byte count (negative
for frees). :func:`record_torch_trace` turns those into a :class:`~labkit.memory.trace.MemoryTrace`
and labels each allocation with the innermost operator that made it and the phase
(``record_function`` region such as ``forward``/``backward``/``optimizer``) around it.
"""
from __future__ import annotations

import bisect
import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable

import numpy as np

from labkit.memory.trace import MemoryTrace
from labkit.validate import integer

PHASES = ("setup", "forward", "backward", "optimizer", "zero_grad")


@contextlib.contextmanager
def _c_stderr_silenced():
    """Send file descriptor 2 to /dev/null: the profiler's C++ side logs
    ``USDT: profiler_start/stop`` there, below Python's ``sys.stderr``."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def record_torch_trace(fn: Callable[[], object]) -> MemoryTrace:
    """Run ``fn()`` under the profiler and return its CPU allocation trace."""
    import torch  # deferred: torch
    from torch.profiler import ProfilerActivity, profile

    with _c_stderr_silenced(), profile(activities=[ProfilerActivity.CPU],
                                        profile_memory=True) as prof:
        fn()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    del torch
    return _trace_from_chrome_events(events)


def _trace_from_chrome_events(events: list[dict]) -> MemoryTrace:
    # Comprehensions and C key functions, no generators or lambdas: a check measures a
    # learner's function with this under a profile hook, which pays for every Python call.
    ops = [(e["ts"], -(e["ts"] + e.get("dur", 0)), e["name"], e.get("tid"), e.get("cat", ""))
           for e in events if e.get("ph") == "X"]
    ops.sort(key=itemgetter(0, 1))
    ops = [(s, -neg_end, name, tid, cat) for s, neg_end, name, tid, cat in ops]
    regions = [(s, e, name) for s, e, name, _, cat in ops
               if cat == "user_annotation" and name in PHASES]
    mem = [e for e in events if e.get("name") == "[memory]"
           and e.get("args", {}).get("Device Type", 0) == 0]
    mem.sort(key=itemgetter("ts"))
    kinds, addrs, sizes, labels, phases = [], [], [], [], []
    starts = [o[0] for o in ops]
    for e in mem:
        nbytes = int(e["args"]["Bytes"])
        if nbytes == 0:
            continue
        ts = e["ts"]
        kinds.append(1 if nbytes > 0 else 0)
        addrs.append(int(e["args"]["Addr"]))
        sizes.append(abs(nbytes))
        # innermost op on the same thread whose span covers ts
        label = ""
        j = bisect.bisect_right(starts, ts) - 1
        while j >= 0:
            s, end, name, tid, cat = ops[j]
            if end >= ts and tid == e.get("tid") and cat == "cpu_op":
                label = name
                break
            j -= 1
        if not label:   # autograd's worker thread: take the innermost op on any thread
            j = bisect.bisect_right(starts, ts) - 1
            while j >= 0 and not label:
                s, end, name, tid, cat = ops[j]
                if end >= ts and cat == "cpu_op":
                    label = name
                j -= 1
        labels.append(label)
        phase = ""
        for s, end, name in regions:
            if s <= ts <= end:
                phase = name
                break
        phases.append(phase)
    return MemoryTrace(np.array(kinds, dtype=np.int8), np.array(addrs, dtype=np.int64),
                 np.array(sizes, dtype=np.int64), tuple(labels), tuple(phases))


@dataclass(frozen=True)
class StepSpec:
    """A small MLP trained with Adam; sizes chosen so a step records in well under a second."""
    widths: tuple[int, ...] = (256, 512, 512, 10)
    batch: int = 64
    steps: int = 2
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.widths, (str, bytes)) or not hasattr(self.widths, "__iter__"):
            raise TypeError(f"widths must be a sequence of layer widths, got {self.widths!r}")
        widths = tuple(integer(f"widths[{i}]", w, low=1) for i, w in enumerate(self.widths))
        if len(widths) < 2:
            raise ValueError(f"widths must be >= 2 positive ints, got {self.widths}")
        object.__setattr__(self, "widths", widths)
        object.__setattr__(self, "batch", integer("batch", self.batch, low=1))
        object.__setattr__(self, "steps", integer("steps", self.steps, low=1))
        object.__setattr__(self, "seed", integer("seed", self.seed, low=0))

    @property
    def num_params(self) -> int:
        """Parameters of the MLP: Σ (w_in·w_out + w_out) over its Linear layers (weights
        and biases)."""
        return sum(a * b + b for a, b in zip(self.widths[:-1], self.widths[1:]))


def record_training_step(spec: StepSpec = StepSpec(), *, include_setup: bool = True) -> MemoryTrace:
    """MemoryTrace of building an MLP and Adam (``setup``) and ``spec.steps`` training steps,
    each with ``forward``, ``backward``, ``optimizer`` and ``zero_grad`` phases."""
    import torch  # deferred: torch
    from torch.profiler import record_function

    torch.manual_seed(spec.seed)
    x = torch.randn(spec.batch, spec.widths[0])
    y = torch.randint(0, spec.widths[-1], (spec.batch,))
    state: dict = {}

    def setup():
        layers = []
        for i, (a, b) in enumerate(zip(spec.widths[:-1], spec.widths[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(spec.widths) - 2:
                layers.append(torch.nn.ReLU())
        state["model"] = torch.nn.Sequential(*layers)
        state["opt"] = torch.optim.Adam(state["model"].parameters(), lr=1e-3, foreach=False)

    def step():
        model, opt = state["model"], state["opt"]
        with record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        del loss
        with record_function("optimizer"):
            opt.step()
        with record_function("zero_grad"):
            opt.zero_grad(set_to_none=True)

    def run():
        if include_setup:
            with record_function("setup"):
                setup()
        for _ in range(spec.steps):
            step()

    if not include_setup:
        setup()
        step()     # warm up: Adam's states exist before recording
    return record_torch_trace(run)
