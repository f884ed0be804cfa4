"""Pipeline simulator speed: events per second simulating 4 workers on 2 cores, 32-sample
batches (every sample's CPU chunk, every copy and every step is an event)."""
from __future__ import annotations

from labkit.dataload.sim import PipelineConfig, simulate
from labkit.perf import Row, benchmark


def rows() -> list[Row]:
    cfg = PipelineConfig(batch_size=32, num_workers=4, cores=2, read_s=1e-4, batches=2000)
    events = simulate(cfg).events
    timing = benchmark(lambda: simulate(cfg), repeats=3, warmup=1)
    return [Row(f"pipeline simulator ({events:,} events)", events / timing.median,
                unit="events/s", goal=">= 200,000 events/s")]
