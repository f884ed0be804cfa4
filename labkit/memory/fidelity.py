"""Op-by-op comparison of the simulator with PyTorch's real CUDA caching allocator.

A seeded random program of ``malloc`` (sizes across the 512 B, 1 MiB, 10 MiB, 20 MiB and
``max_split_size`` boundaries), ``free`` and ``empty_cache`` runs twice: on
:class:`~labkit.memory.allocator.CachingAllocator` and, in a fresh process with
``PYTORCH_CUDA_ALLOC_CONF`` set, on ``torch.cuda`` (``torch.empty(n, dtype=torch.uint8)``).
After every op both report ``allocated_bytes``, ``reserved_bytes``, ``requested_bytes``
and the ``segment`` count under ``torch.cuda.memory_stats()``'s names; :func:`compare`
returns the first op where they differ. Each setting runs in its own process because the
allocator reads its configuration once.

Needs a CUDA GPU for the torch side (``benchmarks/gpu_check.py`` and a ``gpu``-marked
test); the labkit side and the comparison logic are tested on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from labkit import validate
from labkit.memory.allocator import CachingAllocator, OutOfMemoryError
from labkit.memory.constants import MiB

KEYS = ("allocated_bytes.all.current", "reserved_bytes.all.current",
        "requested_bytes.all.current", "segment.all.current")

# Settings the comparison runs under: (PYTORCH_CUDA_ALLOC_CONF, per-process memory fraction).
SETTINGS = (
    ("", None),
    ("expandable_segments:True", None),
    ("max_split_size_mb:64", None),
    ("max_split_size_mb:64,max_non_split_rounding_mb:40", None),
    ("roundup_power2_divisions:4", None),
    ("roundup_power2_divisions:[64:2,256:4,>:8]", None),
    ("garbage_collection_threshold:0.6", 0.02),
)

_BOUNDARIES = (1, 511, 512, 513, MiB - 1, MiB, MiB + 1, 2 * MiB, 10 * MiB - 1, 10 * MiB,
               10 * MiB + 1, 19 * MiB + MiB // 2, 20 * MiB, 21 * MiB, 63 * MiB, 64 * MiB,
               65 * MiB, 130 * MiB, 300 * MiB)


def random_ops(seed: int = 0, n: int = 300, max_live_bytes: int = 4 << 30) -> list[tuple]:
    """A seeded program: ``("malloc", id, nbytes)``, ``("free", id)``, ``("empty_cache",)``.

    Sizes are drawn half from the rule boundaries and half log-uniform in [1 B, 300 MiB];
    live bytes stay below ``max_live_bytes``.
    """
    seed = validate.integer("seed", seed, low=0)
    n = validate.integer("n", n, low=1)
    rng = np.random.default_rng(seed)
    ops: list[tuple] = []
    live: dict[int, int] = {}
    next_id = 0
    for _ in range(n):
        r = rng.random()
        if r < 0.03:
            ops.append(("empty_cache",))
        elif r < 0.45 and live:
            victim = list(live)[int(rng.integers(len(live)))]
            del live[victim]
            ops.append(("free", victim))
        else:
            if rng.random() < 0.5:
                size = int(_BOUNDARIES[int(rng.integers(len(_BOUNDARIES)))])
            else:
                size = int(np.exp(rng.uniform(0, np.log(300 * MiB))))
            if sum(live.values()) + size > max_live_bytes:
                continue
            live[next_id] = size
            ops.append(("malloc", next_id, size))
            next_id += 1
    return ops


def _replay(ops, malloc, free, empty_cache, memory_stats, oom_error) -> list[dict]:
    """Run ``ops`` on one allocator given as functions and return the ``KEYS`` of
    ``memory_stats()`` after each op (``"status"``: ``"oom"`` when ``malloc`` raised
    ``oom_error``). A freed id is dropped, then ``free`` is called with what malloc gave."""
    live = {}
    out = []
    for op in ops:
        status = "ok"
        if op[0] == "malloc":
            try:
                live[op[1]] = malloc(op[2])
            except oom_error:
                status = "oom"
        elif op[0] == "free":
            if op[1] in live:
                free(live.pop(op[1]))
        else:
            empty_cache()
        stats = memory_stats()
        out.append({"status": status, **{k: int(stats[k]) for k in KEYS}})
    return out


def replay_labkit(ops, conf: str = "", *, capacity: int, fraction: float | None = None,
                  segment_addresses=None) -> list[dict]:
    """Stats (``KEYS``) after each op on the simulator; an OOM is recorded as ``"oom"``.

    ``segment_addresses``: the device's cudaMalloc addresses in order (from torch's
    ``segment_alloc`` trace), so best fit breaks ties between equal-size blocks as there.
    """
    alloc = CachingAllocator(capacity, conf=conf or None)
    if fraction is not None:
        alloc.set_memory_fraction(fraction)
    if segment_addresses is not None:
        alloc.segment_addresses = iter(segment_addresses)
    return _replay(ops, alloc.malloc, alloc.free, alloc.empty_cache, alloc.memory_stats,
                   OutOfMemoryError)


def replay_torch(ops, *, fraction: float | None = None) -> tuple[list[dict], list[int]]:
    """The same program on ``torch.cuda`` in this process (set the conf before importing).

    Returns the stats after each op and the addresses of the segments cudaMalloc gave, in
    order (``torch.cuda.memory._record_memory_history``'s ``segment_alloc`` entries)."""
    import torch  # deferred: torch

    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction)
    out = _replay(ops, lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device="cuda"),
                  lambda tensor: None,          # dropping the last reference frees it
                  torch.cuda.empty_cache,
                  lambda: {k: 0 for k in KEYS} | torch.cuda.memory_stats(),  # absent: 0
                  torch.OutOfMemoryError)
    traces = torch.cuda.memory._snapshot().get("device_traces", [[]])
    addresses = [int(e["addr"]) for e in (traces[0] if traces else [])
                 if e.get("action") == "segment_alloc"]
    torch.cuda.memory._record_memory_history(enabled=None)
    return out, addresses


@dataclass(frozen=True)
class Fidelity:
    conf: str
    fraction: float | None
    ops: int
    first_mismatch: int | None      # op index, None when equal throughout
    detail: str

    @property
    def equal(self) -> bool:
        return self.first_mismatch is None


def first_mismatch(ops, mine: list[dict], theirs: list[dict]) -> tuple[int | None, str]:
    """Index of the first op after which the two stat lists differ, and what differs."""
    for i, (a, b) in enumerate(zip(mine, theirs)):
        diff = [k for k in ("status",) + KEYS if a.get(k) != b.get(k)]
        if diff:
            shown = ", ".join(f"{k}: labkit {a.get(k)} vs torch {b.get(k)}" for k in diff)
            return i, f"after op {i} {ops[i]}: {shown}"
    if len(mine) != len(theirs):
        return min(len(mine), len(theirs)), "different lengths"
    return None, "equal after every op"


def compare(conf: str = "", *, fraction: float | None = None, seed: int = 0, n: int = 300,
            timeout: float = 300, real_addresses: bool = True) -> Fidelity:
    """Run the program on torch.cuda in a fresh process with ``conf`` and compare.

    With ``real_addresses`` labkit replays the device's segment addresses (ties in best
    fit then break as on the device); without, it uses its own rising addresses."""
    ops = random_ops(seed, n)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
    args = [sys.executable, "-m", "labkit.memory.fidelity", "--seed", str(seed), "--n", str(n)]
    if fraction is not None:
        args += ["--fraction", str(fraction)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"torch replay failed ({conf!r}): {proc.stderr[-2000:]}")
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    mine = replay_labkit(ops, conf, capacity=payload["capacity"], fraction=fraction,
                         segment_addresses=payload["addresses"] if real_addresses else None)
    index, detail = first_mismatch(ops, mine, payload["stats"])
    return Fidelity(conf, fraction, len(ops), index, detail)


def report(seed: int = 0, n: int = 300) -> list[Fidelity]:
    """Compare under every setting in :data:`SETTINGS` and print one line each (GPU only)."""
    results = []
    for conf, fraction in SETTINGS:
        label = (conf or "default") + (f" + memory fraction {fraction}" if fraction else "")
        for real in (True, False):
            r = compare(conf, fraction=fraction, seed=seed, n=n, real_addresses=real)
            print(f"allocator vs torch.cuda [{label}; "
                  f"{'device addresses' if real else 'labkit addresses'}]: {r.ops} ops, "
                  f"{'EQUAL' if r.equal else 'DIFFERENT'} — {r.detail}")
            if real:
                results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--fraction", type=float, default=None)
    a = parser.parse_args(argv)
    import torch  # deferred: torch

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    stats, addresses = replay_torch(random_ops(a.seed, a.n), fraction=a.fraction)
    capacity = torch.cuda.get_device_properties(0).total_memory
    print(json.dumps({"capacity": capacity, "stats": stats, "addresses": addresses}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
