"""Simulator speed: malloc/free events per second replaying a recorded training-step trace.

The trace is one steady-state training step of an MLP with Adam, recorded from torch's CPU
allocator (profiler memory events), tiled to at least 100,000 events.
"""
from __future__ import annotations

from labkit.memory import CachingAllocator, replay
from labkit.memory.record import StepSpec, record_training_step
from labkit.perf import Row, benchmark

MIN_EVENTS = 100_000


def rows() -> list[Row]:
    step = record_training_step(StepSpec(widths=(256, 512, 512, 512, 10), batch=64, steps=1),
                                include_setup=False)
    trace = step.tile(-(-MIN_EVENTS // len(step)))
    timing = benchmark(lambda: replay(trace, CachingAllocator(), record=False),
                       repeats=3, warmup=1)
    return [Row(f"caching allocator replay ({len(trace):,} events)", len(trace) / timing.median,
                unit="events/s", goal=">= 200,000 events/s")]
