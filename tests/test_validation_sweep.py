"""Bad input everywhere (issue 16): one table of public entry points, every numeric or
named parameter fed the values a hostile but fair user would try.

Each row names a callable, arguments that work, and the parameters to sweep. For each
parameter and each bad value the call must raise ``ValueError`` or ``TypeError`` whose
message names the parameter — or, where the row lists the value as accepted, return
normally. A deep error (ZeroDivisionError, AttributeError, OverflowError, numpy's dtype
errors) or a silent nonsense result fails the row.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

BAD_NUMBERS = (None, "abc", "3", True, math.nan, math.inf, -math.inf, 0, -1, 2.5, [], {})
BAD_ARRAYS = (None, "abc", [], [[1.0, 2.0], [3.0]], np.array(["a", "b"]), object())


@dataclass(frozen=True)
class Row:
    target: str                          # "module:function"
    kwargs: dict                         # arguments that work
    sweep: tuple[str, ...]               # parameters to feed bad values
    accepted: dict = field(default_factory=dict)   # param -> bad values that are valid
    arrays: tuple[str, ...] = ()         # parameters swept with BAD_ARRAYS instead
    reals: tuple[str, ...] = ()          # real-valued parameters: 2.5 is a good value there

    def fn(self) -> Callable[..., Any]:
        module, name = self.target.split(":")
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


MiB = 1 << 20
ROWS: list[Row] = [
    # labkit.memory
    Row("labkit.memory.allocator:CachingAllocator", {"capacity": 1 << 30},
        ("capacity", "max_split_size_mb", "max_non_split_rounding_mb",
         "garbage_collection_threshold"),
        accepted={"capacity": (None,), "max_split_size_mb": (None,),
                  "max_non_split_rounding_mb": (None,), "garbage_collection_threshold": (None,)},
        reals=('garbage_collection_threshold',)),
    Row("labkit.memory.allocator:round_size", {"size": 1000}, ("size",)),
    Row("labkit.memory.allocator:allocation_size", {"rounded_size": 4 * MiB}, ("rounded_size",)),
    Row("labkit.memory.allocator:pool_of", {"rounded_size": 4 * MiB}, ("rounded_size",)),
    Row("labkit.memory.allocator:roundup_power2_next_division", {"size": 1200, "divisions": 4},
        ("size", "divisions")),
    # labkit.hardware
    Row("labkit.hardware:gpu", {"gpu": "H100"}, ("gpu",)),
    Row("labkit.memory.estimator:model_state_bytes", {"num_params": 10**9},
        ("num_params", "zero_stage", "dp", "precision", "optimizer"),
        accepted={"zero_stage": (0,), "num_params": (0,)}),
    Row("labkit.memory.estimator:activation_bytes_per_layer",
        {"seq": 2048, "batch": 1, "hidden": 4096, "heads": 32},
        ("seq", "batch", "hidden", "heads", "tp", "recompute")),
    # labkit.grid, labkit.kernels
    Row("labkit.grid:blocks_needed", {"n": 1000, "threads_per_block": 256},
        ("n", "threads_per_block")),
    Row("labkit.kernels.occupancy:occupancy", {"gpu": "A100", "threads_per_block": 256},
        ("gpu", "threads_per_block", "registers_per_thread", "shared_per_block"),
        accepted={"shared_per_block": (0,)}),
    # labkit.parallel
    Row("labkit.parallel.cost:collective_time",
        {"op": "all_reduce", "algorithm": "ring", "nbytes": 1e6, "world": 8, "alpha": 1e-6,
         "beta": 1e-9}, ("op", "algorithm", "nbytes", "world", "alpha", "beta", "gamma"),
        accepted={"nbytes": (0,), "alpha": (0,), "beta": (0,), "gamma": (0,)},
        reals=('nbytes', 'alpha', 'beta', 'gamma')),
    Row("labkit.parallel.pipeline:pipeline_schedule", {"kind": "1f1b", "stages": 4,
                                                       "microbatches": 8},
        ("kind", "stages", "microbatches", "chunks", "t_forward", "t_backward"),
        reals=('t_forward', 't_backward')),
    Row("labkit.parallel.pipeline:bubble_formula", {"kind": "gpipe", "stages": 4,
                                                    "microbatches": 8},
        ("kind", "stages", "microbatches", "chunks")),
    Row("labkit.parallel.zero:zero_table", {"num_params": 10**9, "dp": 8},
        ("num_params", "dp", "precision", "optimizer")),
    Row("labkit.parallel.planner:cluster", {"gpus": 8},
        ("gpu", "gpus", "gpus_per_node", "inter_bw", "precision"),
        reals=('inter_bw',)),
    # labkit.cluster
    Row("labkit.cluster.faults:young_interval", {"checkpoint_s": 60.0, "mtbf_s": 3600.0},
        ("checkpoint_s", "mtbf_s"),
        reals=('checkpoint_s', 'mtbf_s')),
    Row("labkit.cluster.faults:daly_interval", {"checkpoint_s": 60.0, "mtbf_s": 3600.0},
        ("checkpoint_s", "mtbf_s"),
        reals=('checkpoint_s', 'mtbf_s')),
    Row("labkit.cluster.faults:expected_lost_work", {"segment_s": 600.0, "mtbf_s": 3600.0},
        ("segment_s", "mtbf_s"),
        reals=('segment_s', 'mtbf_s')),
    Row("labkit.cluster.stragglers:expected_step_exponential",
        {"workers": 8, "base": 1.0, "delay": 0.1},
        ("workers", "base", "delay", "backups"), accepted={"backups": (0,), "delay": (0,), "base": (0,)},
        reals=('base', 'delay')),
    Row("labkit.cluster.jobs:generate_jobs", {"n": 10},
        ("n", "total_gpus", "load", "seed", "median_duration"), accepted={"seed": (0,)},
        reals=('load', 'median_duration')),
    # labkit.dataload, labkit.compress
    Row("labkit.dataload.model:steady_throughput",
        {"load_s": 0.01, "compute_s": 0.02, "workers": 2, "cores": 2},
        ("load_s", "compute_s", "workers", "cores"), accepted={"workers": (0,)},
        reals=('load_s', 'compute_s')),
    Row("labkit.dataload.model:workers_needed", {"load_s": 0.01, "compute_s": 0.02},
        ("load_s", "compute_s"),
        reals=('load_s', 'compute_s')),
    Row("labkit.compress.model:fake_quant", {"x": np.linspace(-1, 1, 12).reshape(3, 4)},
        ("x", "bits", "axis"), arrays=("x",), accepted={"axis": (None, 0, -1)}),
    Row("labkit.compress.model:magnitude_mask", {"w": np.arange(1.0, 13.0).reshape(3, 4),
                                                 "sparsity": 0.5},
        ("w", "sparsity"), arrays=("w",), accepted={"sparsity": (0,)}),
    Row("labkit.compress.model:conv_cost", {"kernel": 3, "in_ch": 8, "out_ch": 16,
                                            "feature": 32},
        ("kernel", "in_ch", "out_ch", "feature")),
    Row("labkit.compress.model:update_loss_scale", {"scale": 1024.0, "found_inf": False,
                                                    "good_steps": 0},
        ("scale", "found_inf", "good_steps"), accepted={"good_steps": (0,), "found_inf": (True,)},
        reals=('scale',)),
    # labkit.perf
    Row("labkit.stats:percentile", {"samples": [3.0, 1.0, 2.0, 5.0], "q": 50},
        ("samples", "q"), arrays=("samples",), accepted={"q": (0,)},
        reals=('q',)),
    Row("labkit.stats:t_ci", {"samples": [3.0, 1.0, 2.0, 5.0]}, ("samples", "level"),
        arrays=("samples",)),
    Row("labkit.perf.metrics:mfu", {"forward_flops_per_sample": 1e6, "samples_per_s": 100.0,
                                    "peak": 1e12},
        ("forward_flops_per_sample", "samples_per_s", "peak"),
        reals=('forward_flops_per_sample', 'samples_per_s', 'peak')),
    Row("labkit.perf:amdahl_speedup", {"parallel_fraction": 0.9, "workers": 8},
        ("parallel_fraction", "workers"), reals=("workers",),
        accepted={"parallel_fraction": (0,), "workers": (math.inf,)}),   # the limit
    Row("labkit.perf:gustafson_speedup", {"serial_fraction": 0.1, "workers": 8},
        ("serial_fraction", "workers"), reals=("workers",),
        accepted={"serial_fraction": (0,), "workers": (math.inf,)}),
]


def _cases():
    for row in ROWS:
        for param in row.sweep:
            values = BAD_ARRAYS if param in row.arrays else BAD_NUMBERS
            for bad in values:
                if any(_same(bad, ok) for ok in row.accepted.get(param, ())):
                    continue
                if param in row.reals and _same(bad, 2.5):
                    continue
                yield pytest.param(row, param, bad, id=f"{row.target}-{param}-{bad!r:.12}")


@pytest.mark.parametrize("row, param, bad", list(_cases()))
def test_bad_value_gets_a_clear_error(row, param, bad):
    fn = row.fn()
    kwargs = dict(row.kwargs, **{param: bad})
    try:
        fn(**kwargs)
    except (ValueError, TypeError) as exc:
        assert param in str(exc), f"{row.target}({param}={bad!r}) said {exc!r}"
        return
    except Exception as exc:  # noqa: BLE001 — the point is to catch the deep ones
        pytest.fail(f"{row.target}({param}={bad!r}) raised {type(exc).__name__}: {exc}")
    pytest.fail(f"{row.target}({param}={bad!r}) returned without a word")


@pytest.mark.parametrize("row", ROWS, ids=[r.target for r in ROWS])
def test_good_arguments_work(row):
    row.fn()(**row.kwargs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20),
                 st.text(max_size=4), st.booleans(), st.none()))
def test_validate_integer_never_fails_deep(value):
    from labkit import validate
    try:
        out = validate.integer("n", value, low=1)
    except (ValueError, TypeError) as exc:
        assert "n must" in str(exc)
    else:
        assert isinstance(out, int) and out >= 1 and out == value


def test_checked_fields_are_checked_in_order_and_kept_as_their_check_returns():
    from labkit import validate as V

    @dataclass(frozen=True)
    class Run:
        steps: int = V.checked(30, V.integer, low=1)
        lr: float = V.checked(1, V.positive)
        dtype: str = V.checked("float64", V.one_of, options=("float32", "float64"))
        note: str = "unchecked"

        def __post_init__(self):
            V.check_fields(self)

    run = Run(steps=7.0)
    assert (run.steps, type(run.steps), run.lr, type(run.lr)) == (7, int, 1.0, float)
    assert Run(note=None).note is None
    with pytest.raises(ValueError, match=r"steps must be an integer >= 1, got 0"):
        Run(steps=0, lr=-1)                        # the first field declared fails first
    with pytest.raises(ValueError, match="lr must be > 0"):
        Run(lr=0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        Run(dtype="float16")
    with pytest.raises(TypeError, match="config must be a dataclass instance"):
        V.check_fields(Run)
    with pytest.raises(TypeError, match="check must be callable"):
        V.checked(1, "integer")
