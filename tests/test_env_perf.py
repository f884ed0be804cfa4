"""labkit.env, device selection, and labkit.perf (timing, Amdahl, the bench table)."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from labkit._device import real_gpu_count
from labkit.env import environment_warnings, report
from labkit.perf import Row, amdahl_curve, amdahl_speedup, benchmark, format_table


def test_report_names_versions_and_device():
    r = report()
    assert r.python == sys.version.split()[0]
    assert r.packages["torch"].startswith("2.13.0")
    assert r.packages["numba-cuda"] != "not installed"
    assert r.cpu_count == os.cpu_count()
    expected = "CUDA simulator" if real_gpu_count() == 0 else None
    if expected:
        assert r.device == expected
    text = str(r)
    assert "numba" in text and "CUDA device" in text
    assert r._repr_markdown_().startswith("| component |")
    assert r.packages["ipykernel"].startswith("6.") and r.warnings == []


@pytest.mark.parametrize("version, warned", [
    ("7.4.0", True), ("7.0.0", True), ("10.1", True),
    ("6.31.0", False), ("6.29.5", False), ("not installed", False)])
def test_ipykernel_7_is_warned_about_with_the_fix(version, warned):
    found = environment_warnings({"ipykernel": version})
    assert bool(found) == warned
    if warned:
        assert "ipykernel<7" in found[0] and "subshells" in found[0] and version in found[0]


def test_import_selects_the_simulator_before_numba_and_stays_cheap():
    code = ("import os, sys, labkit; "
            "print(labkit.CUDA_BACKEND, os.environ.get('NUMBA_ENABLE_CUDASIM'), "
            "any(m in sys.modules for m in ('numba', 'torch', 'matplotlib')))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    if real_gpu_count() == 0:
        assert out[:2] == ["simulator", "1"]
    assert out[2] == "False"


def test_explicit_environment_wins():
    code = "import labkit; print(labkit.CUDA_BACKEND)"
    for value, want in (("1", "simulator"), ("0", "gpu")):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == want


def test_amdahl_closed_forms():
    assert amdahl_speedup(0.0, 64) == 1.0
    assert amdahl_speedup(1.0, 64) == 64.0
    assert math.isclose(amdahl_speedup(0.95, 1024), 1 / (0.05 + 0.95 / 1024))
    assert math.isclose(amdahl_speedup(0.5, 2), 4 / 3)
    curve = amdahl_curve(0.95, 1024)
    assert list(curve.workers) == [2 ** k for k in range(11)]
    assert math.isclose(curve.ceiling, 20.0)
    assert np.all(np.diff(curve.speedup) > 0) and np.all(curve.speedup < curve.ceiling)
    with pytest.raises(ValueError, match=r"parallel_fraction must be in \[0, 1\]"):
        amdahl_speedup(1.5, 4)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        amdahl_speedup(0.5, 0)
    with pytest.raises(ValueError, match=r"max_workers must be an integer in \[1, 1048576\]"):
        amdahl_curve(0.5, 0)


def test_benchmark_counts_calls_and_rejects_bad_repeats():
    calls = []
    t = benchmark(lambda: calls.append(1), repeats=5, warmup=2, number=3)
    assert len(calls) == 2 + 5 * 3 and len(t.samples) == 5
    assert t.best <= t.median and t.iqr >= 0
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        benchmark(lambda: None, repeats=0)


def test_bench_table_ratio_is_baseline_over_labkit():
    rows = [Row("step", 0.002, 0.001, "torch"), Row("alloc", 250000.0, unit="events/s")]
    assert rows[0].ratio == 0.5 and rows[1].ratio is None
    table = format_table(rows)
    assert "0.50x" in table and "250,000 events/s" in table and "2 ms" in table


def test_importing_labkit_perf_stays_cheap():
    code = ("import sys, labkit.perf; "
            "print(any(m in sys.modules for m in ('torch', 'matplotlib', 'numba')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_gustafson_scaled_speedup_and_amdahl_widget(capsys):
    import matplotlib
    matplotlib.use("Agg")
    from labkit.perf import gustafson_speedup
    from labkit.perf.widgets import amdahl_widget
    assert gustafson_speedup(0.05, 1024) == pytest.approx(0.05 + 0.95 * 1024)
    assert gustafson_speedup(0.0, 8) == 8 and gustafson_speedup(1.0, 8) == 1
    with pytest.raises(ValueError, match="serial_fraction"):
        gustafson_speedup(1.5, 4)
    with pytest.raises(ValueError, match="workers"):
        gustafson_speedup(0.1, 0)
    with pytest.raises(ValueError, match="parallel_fraction"):
        amdahl_widget(parallel_fraction=2)
    with pytest.raises(ValueError, match="max_workers"):
        amdahl_widget(max_workers=1000)
    w = amdahl_widget()
    assert "p = 0.95: S(1024) = 19.6, ceiling 1/(1-p) = 20" in capsys.readouterr().out
    w.children[0].value = 0.5
    assert "p = 0.50: S(1024) = 2, ceiling 1/(1-p) = 2" in capsys.readouterr().out
    matplotlib.pyplot.close("all")
