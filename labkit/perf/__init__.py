"""Benchmarking and timing helpers shared by chapters and ``make bench``."""
from labkit.perf.timing import Timing, amdahl_speedup, time_call  # noqa: F401
from labkit.perf.bench import Row, format_table  # noqa: F401
