"""Benchmarking and timing helpers shared by chapters and ``make bench``."""
from labkit.perf.timing import Timing, time_call  # noqa: F401
from labkit.perf.laws import AmdahlCurve, amdahl_curve, amdahl_speedup, plot_amdahl  # noqa: F401
from labkit.perf.bench import Row, format_table  # noqa: F401
