"""Alloc/free event lists replayed through an allocator core, and compared with labkit's
own allocator: what chapter 06's core checks and its agreement table run.

* Events are ``(kind, key, size)``: ``("alloc", key, size)`` allocates ``size`` bytes under
  ``key``, ``("free", key, 0)`` frees the block allocated under ``key``;
  :func:`random_events` draws them around the pools' boundaries, :func:`trace_events`
  reads them from a recorded :class:`~labkit.memory.trace.MemoryTrace`.
* :func:`replay_events` runs them through ``CachingAllocator(core=...)`` step by step;
  :func:`replay_summary` is the plain data a check compares after each step,
  :func:`rule_calls` every question the allocator asked one rule (and its answer), and
  :func:`core_agreement` a core's replay against labkit's default allocator
  (:class:`Agreement`).
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Callable

from labkit.memory.allocator import CachingAllocator, OutOfMemoryError
from labkit.memory.constants import MiB
from labkit.memory.core import ROLES, AllocatorCore, CoreError, allocator_core


# ---- replaying event lists through a core (what the checks compare) ----------------------

def _options(options) -> dict:
    options = dict(options or {})
    unknown = set(options) - {"max_split_size_mb", "expandable_segments",
                              "max_non_split_rounding_mb", "capacity"}
    if unknown:
        raise ValueError(f"options: unknown keys {sorted(unknown)}")
    return options


def segment_map(alloc) -> tuple:
    """The allocator's segments as plain data: ``((address, total, kind, ((addr, size,
    allocated), ...)), ...)`` in address order."""
    return tuple((s.address, s.total_size, s.segment_type,
                  tuple((b.address, b.size, b.state == "active_allocated") for b in s.blocks))
                 for s in alloc.segments())


def _digest(state) -> str:
    return hashlib.sha1(repr(state).encode()).hexdigest()[:16]


def replay_events(core: AllocatorCore | None, events, options=None):
    """Run ``events`` — ``(kind, key, size)`` with kind ``"alloc"`` (``size`` bytes under
    ``key``) or ``"free"`` (the block allocated under ``key``) — through a
    ``CachingAllocator(core=core, **options)``; yields ``(allocator, index)`` after each
    event, or ``(allocator, index, error)`` and stops when the core raised
    :class:`CoreError`, ``TypeError`` or the allocator ran out of memory."""
    opts = _options(options)
    alloc = CachingAllocator(core=core, **opts)
    live = {}
    for i, (kind, key, size) in enumerate(events):
        try:
            if kind == "alloc":
                live[key] = alloc.malloc(int(size))
            elif kind == "free":
                alloc.free(live.pop(key))
            else:
                raise ValueError(f"events[{i}]: kind must be 'alloc' or 'free', got {kind!r}")
        except (CoreError, OutOfMemoryError) as exc:
            yield alloc, i, f"{type(exc).__name__}: {exc}"
            return
        yield alloc, i, None


def replay_summary(rule: Callable | AllocatorCore, role: str, events, options=None) -> dict:
    """Plain data a check compares: after every event, ``(allocated, reserved,
    peak_allocated, peak_reserved, segments, digest of the segment map)``, with ``rule``
    as the allocator's ``role`` rule (``"core"``: ``rule`` is a whole AllocatorCore;
    ``"default"``: labkit's allocator without a core, ``rule`` unused)."""
    core = _core_for(rule, role)
    steps, error = [], None
    for alloc, i, err in replay_events(core, events, options):
        if err is not None:
            error = {"step": i, "message": err}
            break
        steps.append((alloc.allocated, alloc.reserved, alloc.peak_allocated,
                      alloc.peak_reserved, len(alloc.segments()), _digest(segment_map(alloc))))
    return {"steps": steps, "error": error}


def rule_calls(rule: Callable, role: str, events, options=None) -> dict:
    """Every call the allocator makes of its ``role`` rule while ``events`` are replayed
    with ``rule`` in that role (labkit's other two): ``{"calls": [(event, args, answer),
    ...], "error": None | {"step", "message"}}`` — the event during which the call was made,
    the rule's arguments as the allocator passed them, and what ``rule`` returned.

    A check replays a trace once with labkit's rule (``ref.derive(rule_calls, ...)``) and
    asks the learner's rule each recorded question: a rule that gives every answer labkit's
    gives makes the allocator hold the same blocks after every event, since the rest of
    the replay is the allocator's own, and the first answer that differs is where a replay
    with the learner's rule inside would first hold other blocks (the questions before it
    are the same) — with expandable segments, where the allocator moves best fit's block
    along one more rule of PyTorch's, no later than that."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    calls, at = [], [0]

    def asked(*args):
        shown = copy.deepcopy(args)
        out = rule(*args)
        calls.append((at[0], list(shown), out))
        return out
    error = None
    for _, i, err in replay_events(allocator_core(**{role: asked}), events, options):
        if err is not None:
            error = {"step": i, "message": err}
        at[0] = i + 1
    return {"calls": calls, "error": error}


def _core_for(rule, role: str) -> AllocatorCore | None:
    if role == "default":           # labkit's allocator without a core (its fast path)
        return None
    if role == "core":
        if not isinstance(rule, AllocatorCore):
            raise TypeError(f"role 'core' needs an AllocatorCore, got {type(rule).__name__}")
        return rule
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, 'core' or 'default', got {role!r}")
    return allocator_core(**{role: rule})


def first_difference(mine: dict, want: dict) -> int | None:
    """The first event after which two :func:`replay_summary` results differ (None: same)."""
    a, b = mine["steps"], want["steps"]
    for i, (x, y) in enumerate(zip(a, b)):
        if tuple(x) != tuple(y):
            return i
    if len(a) != len(b) or mine["error"] != want["error"]:
        return min(len(a), len(b))
    return None


# ---- traces to replay ---------------------------------------------------------------------

def random_events(rng, n: int = 120, *, live_max: int = 24, large: float = 0.15):
    """A random alloc/free sequence for the checks: sizes clustered around the 1 MiB
    small/large boundary (exactly 1 MiB, 1 MiB ± 512 B, log-uniform 64 KiB–4 MiB), a share
    ``large`` of 10–60 MiB requests (the 2 MiB rounding of big segments, max_split_size),
    frees of random live blocks; every block freed at the end."""
    events, live, key = [], [], 0
    edge = [MiB, MiB - 512, MiB + 512, MiB + 1, 512, 513, 2 * MiB, 10 * MiB - 512, 10 * MiB]
    for _ in range(n):
        if live and (len(live) >= live_max or rng.random() < 0.45):
            k = live.pop(int(rng.integers(len(live))))
            events.append(("free", k, 0))
            continue
        u = rng.random()
        if u < 0.1:
            size = int(edge[int(rng.integers(len(edge)))])
        elif u < 0.1 + large:
            size = int(rng.integers(10 * MiB, 60 * MiB))
        else:
            size = int(2 ** rng.uniform(16, 22))
        events.append(("alloc", key, size))
        live.append(key)
        key += 1
    for k in live:
        events.append(("free", k, 0))
    return events


def trace_events(trace) -> list[tuple[str, int, int]]:
    """A :class:`~labkit.memory.trace.MemoryTrace` as ``(kind, key, size)`` events with small keys
    (the n-th distinct live address gets key n), frees of unknown addresses and
    zero-size allocations left out — the same events on every recording of one program."""
    events, keys, next_key = [], {}, 0
    for kind, addr, size in zip(trace.kind.tolist(), trace.addr.tolist(), trace.size.tolist()):
        if kind:
            if size == 0:
                continue
            keys[addr] = next_key
            events.append(("alloc", next_key, int(size)))
            next_key += 1
        elif addr in keys:
            events.append(("free", keys.pop(addr), 0))
    return events


@dataclass(frozen=True)
class Agreement:
    """A core's replay of a trace against labkit's own allocator, event by event."""
    events: int
    agree: int                 # events after which both hold the same blocks and segments
    first_difference: int | None
    peak_reserved: tuple[int, int]    # (core, labkit)
    segments: tuple[int, int]
    error: str | None

    @property
    def identical(self) -> bool:
        return self.first_difference is None


def core_agreement(core: AllocatorCore, events, options=None) -> Agreement:
    """Replay ``events`` with ``core`` and with labkit's default allocator and compare every
    step (blocks, segments, allocated, reserved and their peaks)."""
    mine = replay_summary(core, "core", events, options)
    want = replay_summary(None, "default", events, options)
    diff = first_difference(mine, want)
    last = lambda s: s["steps"][-1] if s["steps"] else (0, 0, 0, 0, 0, "")  # noqa: E731
    return Agreement(len(events), len(events) if diff is None else diff, diff,
                     (last(mine)[3], last(want)[3]), (last(mine)[4], last(want)[4]),
                     None if mine["error"] is None else mine["error"]["message"])
