"""Pipeline-schedule simulator: interleaved 1F1B on 8 stages × 64 micro-batches × 4 chunks
(4,096 tasks, each placed by its dependencies). Goal: >= 100,000 tasks/s."""
from labkit.parallel.pipeline import bubble_formula, pipeline_schedule
from labkit.perf import Row, benchmark

P, M, V = 8, 64, 4


def rows():
    s = pipeline_schedule("interleaved", P, M, V)
    assert abs(s.bubble_fraction - bubble_formula("interleaved", P, M, V)) < 1e-9
    t = benchmark(lambda: pipeline_schedule("interleaved", P, M, V), repeats=7, warmup=1)
    return [Row(f"pipeline schedule simulator, interleaved {P}x{M}x{V} ({len(s.tasks)} tasks)",
                len(s.tasks) / t.median, unit="tasks/s", goal=">= 100,000 tasks/s")]
