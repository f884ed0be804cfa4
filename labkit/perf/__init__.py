"""Benchmarking, profiling and roofline tools shared by the chapters and ``make bench``.

``benchmark`` is the project's one timing helper."""
from labkit.timing import Timing, benchmark, interleaved, threads  # noqa: F401
from labkit.perf.laws import (  # noqa: F401
    AmdahlCurve, amdahl_curve, amdahl_speedup, gustafson_speedup,
)
from labkit.perf.plots import plot_amdahl  # noqa: F401
from labkit.perf.bench import Row, format_table  # noqa: F401
from labkit.hardware import Roofline, datasheet, measure_machine  # noqa: F401
from labkit.stats import Interval, bootstrap_ci, percentile, speedup_ci, t_ci  # noqa: F401
