"""Allocation traces: build, replay through the simulator, load PyTorch memory snapshots.

A :class:`MemoryTrace` is a sequence of ``alloc``/``free`` events keyed by address (the way
``torch.cuda.memory._record_memory_history`` records them). :func:`replay` runs one through
a :class:`~labkit.memory.allocator.CachingAllocator` and returns the memory timeline.

:func:`load_snapshot` reads the pickle written by ``torch.cuda.memory._dump_snapshot`` /
returned by ``torch.cuda.memory._snapshot()``: a dict with ``"segments"`` (each with
``address``, ``total_size``, ``segment_type``, ``blocks`` of ``address``, ``size``,
``requested_size``, ``state``) and ``"device_traces"`` (per device, a list of entries with
``action`` in alloc / free_requested / free_completed / segment_alloc / segment_free /
segment_map / segment_unmap / oom / snapshot, ``addr``, ``size``, ``time_us``, ``frames``).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from labkit.memory.allocator import CachingAllocator, OutOfMemoryError
from labkit.memory.snapshot import BlockInfo, SegmentInfo

ALLOC, FREE = 1, 0
_MISSING = object()
_ACTIONS = {"alloc": ALLOC, "free": FREE, "free_completed": FREE, "malloc": ALLOC}


@dataclass(frozen=True)
class MemoryTrace:
    """Events in order: ``kind[i]`` is 1 (alloc) or 0 (free) of ``size[i]`` bytes at
    ``addr[i]``; ``labels[i]`` says what allocated it (an op name), ``phases[i]`` the
    phase of the step (forward, backward, optimizer, ...), when known."""
    kind: np.ndarray
    addr: np.ndarray
    size: np.ndarray
    labels: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()

    def __post_init__(self):
        n = len(self.kind)
        if not (len(self.addr) == len(self.size) == n):
            raise ValueError("kind, addr and size must have the same length")
        for name in ("labels", "phases"):
            got = getattr(self, name)
            if got and len(got) != n:
                raise ValueError(f"{name} must be empty or have one entry per event")
        if n and np.any(self.size < 0):
            raise ValueError("event sizes must be >= 0")

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def from_events(cls, events: Iterable) -> "MemoryTrace":
        """From ``(action, addr, size)`` tuples or dicts with those keys;
        action is 'alloc' or 'free'."""
        kinds, addrs, sizes, labels = [], [], [], []
        for i, ev in enumerate(events):
            if isinstance(ev, dict):
                action, addr, size = ev.get("action"), ev.get("addr"), ev.get("size", 0)
                label = ev.get("label", "")
            else:
                try:
                    action, addr, size, *rest = ev
                except (TypeError, ValueError):
                    raise ValueError(f"event {i} must be (action, addr, size), got {ev!r}") \
                        from None
                label = rest[0] if rest else ""
            if action not in _ACTIONS:
                raise ValueError(f"event {i}: action must be 'alloc' or 'free', got {action!r}")
            if not isinstance(size, (int, np.integer)) or size < 0:
                raise ValueError(f"event {i}: size must be an int >= 0, got {size!r}")
            kinds.append(_ACTIONS[action])
            addrs.append(int(addr))
            sizes.append(int(size))
            labels.append(str(label))
        return cls(np.array(kinds, dtype=np.int8), np.array(addrs, dtype=np.int64),
                   np.array(sizes, dtype=np.int64),
                   tuple(labels) if any(labels) else ())

    def events(self) -> list[tuple[str, int, int]]:
        return [("alloc" if k else "free", int(a), int(s))
                for k, a, s in zip(self.kind, self.addr, self.size)]

    def allocations_by_phase(self) -> dict[str, tuple[int, int]]:
        """``{phase: (number of allocations, bytes allocated)}`` in the order the phases first
        appear (frees are not counted; a phase with only frees shows (0, 0); events outside
        any phase, ``""``, are left out)."""
        out: dict[str, list[int]] = {}
        for kind, size, phase in zip(self.kind, self.size, self.phases):
            if not phase:
                continue
            entry = out.setdefault(phase, [0, 0])
            if kind == ALLOC:
                entry[0] += 1
                entry[1] += int(size)
        return {phase: (n, nbytes) for phase, (n, nbytes) in out.items()}

    def is_balanced(self) -> bool:
        """Every free matches an earlier alloc and every alloc is freed by the end."""
        live: set[int] = set()
        for k, a in zip(self.kind.tolist(), self.addr.tolist()):
            if k:
                if a in live:
                    return False
                live.add(a)
            elif a in live:
                live.remove(a)
            else:
                return False
        return not live

    def tile(self, times: int) -> "MemoryTrace":
        """The trace repeated ``times`` times (it must be balanced, like one training step)."""
        if not isinstance(times, int) or times < 1:
            raise ValueError(f"times must be an int >= 1, got {times!r}")
        if not self.is_balanced():
            raise ValueError("only a balanced trace (every alloc freed in it) can be tiled")
        return MemoryTrace(np.tile(self.kind, times), np.tile(self.addr, times),
                     np.tile(self.size, times), self.labels * times, self.phases * times)


@dataclass(frozen=True)
class MemoryTimeline:
    """Memory after each replayed event (bytes), as ``torch.cuda.memory_stats`` reports it."""
    allocated: np.ndarray
    reserved: np.ndarray
    requested: np.ndarray
    peak_allocated: int
    peak_reserved: int
    peak_requested: int
    oom_at: int | None          # index of the event that ran out of memory, if any
    oom_message: str
    segments: tuple[SegmentInfo, ...]
    phases: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def n_events(self) -> int:
        return len(self.allocated)


def replay(trace: MemoryTrace, allocator: CachingAllocator | None = None, *,
           ignore_unknown_frees: bool = False, record: bool = True,
           stop_on_oom: bool = True) -> MemoryTimeline:
    """Run ``trace`` through ``allocator`` (a fresh unlimited one by default).

    Zero-size allocations are skipped (PyTorch allocates nothing for them). A free of an
    address that is not live raises ``ValueError`` unless ``ignore_unknown_frees`` (for
    traces that start mid-program, like a snapshot's ring buffer). An out-of-memory error
    ends the replay with ``oom_at`` set when ``stop_on_oom`` (else it propagates).
    """
    if not isinstance(trace, MemoryTrace):
        raise ValueError(f"trace must be a MemoryTrace, got {type(trace).__name__}")
    alloc = CachingAllocator() if allocator is None else allocator
    malloc, free = alloc.malloc, alloc.free
    live: dict[int, object] = {}
    kinds, addrs, sizes = trace.kind.tolist(), trace.addr.tolist(), trace.size.tolist()
    n = len(kinds)
    allocated: list[int] = []
    reserved: list[int] = []
    requested: list[int] = []
    oom_at, oom_message = None, ""
    for i in range(n):
        a = addrs[i]
        if kinds[i]:
            if a in live:
                raise ValueError(f"event {i}: address 0x{a:x} allocated twice without a free")
            s = sizes[i]
            if s:
                try:
                    live[a] = malloc(s)
                except OutOfMemoryError as exc:
                    if not stop_on_oom:
                        raise
                    oom_at, oom_message = i, str(exc)
                    break
            else:
                live[a] = None
        else:
            b = live.pop(a, _MISSING)
            if b is _MISSING:
                if not ignore_unknown_frees:
                    raise ValueError(f"event {i}: free of 0x{a:x}, which is not allocated "
                                     "(double free or a trace that starts mid-program; "
                                     "pass ignore_unknown_frees=True)")
            elif b is not None:
                free(b)
        if record:
            allocated.append(alloc.allocated)
            reserved.append(alloc.reserved)
            requested.append(alloc.requested)
    return MemoryTimeline(np.array(allocated, dtype=np.int64), np.array(reserved, dtype=np.int64),
                    np.array(requested, dtype=np.int64), alloc.peak_allocated,
                    alloc.peak_reserved, alloc.peak_requested, oom_at, oom_message,
                    tuple(alloc.segments()), trace.phases[:len(allocated)],
                    trace.labels[:len(allocated)])


# ---- PyTorch memory snapshots -------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    segments: tuple[SegmentInfo, ...]
    trace: MemoryTrace
    device: int

    @property
    def reserved_bytes(self) -> int:
        return sum(s.total_size for s in self.segments)

    @property
    def allocated_bytes(self) -> int:
        return sum(s.allocated_size for s in self.segments)


def load_snapshot(source, device: int = 0) -> Snapshot:
    """Read a PyTorch memory snapshot: a path to the pickle, its bytes, or the dict."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"source: snapshot file {str(path)!r} does not exist")
        data = pickle.loads(path.read_bytes())
    elif isinstance(source, (bytes, bytearray)):
        data = pickle.loads(bytes(source))
    else:
        data = source
    if not isinstance(data, dict) or "segments" not in data:
        raise ValueError("source is not a PyTorch memory snapshot: expected a dict with "
                         "'segments' (and 'device_traces')")
    segments = []
    for seg in data["segments"]:
        if seg.get("device", 0) != device:
            continue
        blocks = tuple(BlockInfo(int(b["address"]), int(b["size"]),
                                 int(b.get("requested_size", b["size"])),
                                 "active_allocated" if str(b["state"]).startswith("active")
                                 else "inactive")
                       for b in seg.get("blocks", ()))
        segments.append(SegmentInfo(int(seg["address"]), int(seg["total_size"]),
                                    str(seg.get("segment_type", "large")),
                                    bool(seg.get("is_expandable", False)), blocks))
    traces = data.get("device_traces", [])
    if traces and not (0 <= device < len(traces)):
        raise ValueError(f"device must be in [0, {len(traces) - 1}], got {device}")
    entries = traces[device] if traces else []
    free_action = ("free_completed" if any(e.get("action") == "free_completed" for e in entries)
                   else "free_requested")
    events = []
    for e in entries:
        action = e.get("action")
        if action == "alloc":
            kind = "alloc"
        elif action == free_action:
            kind = "free"
        else:
            continue
        frames = e.get("frames") or []
        label = frames[0].get("name", "") if frames and isinstance(frames[0], dict) else ""
        events.append((kind, int(e["addr"]), int(e["size"]), label))
    segments.sort(key=lambda s: s.address)
    return Snapshot(tuple(segments), MemoryTrace.from_events(events), device)


def snapshot_dict(allocator: CachingAllocator, trace: MemoryTrace | None = None) -> dict:
    """The allocator's state in the shape of ``torch.cuda.memory._snapshot()``."""
    segments = []
    for seg in allocator.segments():
        segments.append({
            "device": 0, "address": seg.address, "total_size": seg.total_size,
            "allocated_size": seg.allocated_size, "active_size": seg.allocated_size,
            "requested_size": seg.requested_size, "stream": 0,
            "segment_type": seg.segment_type, "segment_pool_id": (0, 0),
            "is_expandable": seg.is_expandable, "frames": [],
            "blocks": [{"address": b.address, "size": b.size,
                        "requested_size": b.requested_size, "state": b.state, "frames": []}
                       for b in seg.blocks],
        })
    entries = []
    if trace is not None:
        for i, (k, a, s) in enumerate(zip(trace.kind.tolist(), trace.addr.tolist(),
                                          trace.size.tolist())):
            actions = ("alloc",) if k else ("free_requested", "free_completed")
            for action in actions:
                entries.append({"action": action, "addr": a, "size": s, "stream": 0,
                                "time_us": i, "frames": []})
    return {"segments": segments, "device_traces": [entries],
            "allocator_settings": {"expandable_segments": allocator.config.expandable_segments}}


def save_snapshot(allocator: CachingAllocator, path, trace: MemoryTrace | None = None) -> Path:
    path = Path(path)
    path.write_bytes(pickle.dumps(snapshot_dict(allocator, trace)))
    return path
