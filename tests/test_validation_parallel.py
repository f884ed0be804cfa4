"""Bad arguments to labkit.parallel's public entry points (issue 16): every call raises a
ValueError or TypeError whose message names the parameter, or returns a documented value.

Table-driven: each row is (function, keyword arguments that work, parameter to spoil, the
kind of value it takes); Hypothesis draws the spoiling values from the strategies below.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.parallel import collectives, cost, dp_sim, draw
from labkit.parallel.collectives import all_gather, all_reduce, broadcast, reduce_scatter

NOT_NUMBERS = st.sampled_from([None, "3", b"3", [1], {}, object()])
BOOLS = st.sampled_from([True, False, np.bool_(True)])
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf, np.float64("nan")])
NEGATIVE = st.one_of(st.integers(max_value=-1), st.floats(max_value=-1e-9, allow_nan=False,
                                                          allow_infinity=False))
NON_INTEGRAL = st.floats(min_value=0.01, max_value=1e6).filter(lambda x: x != int(x))

# a size, time or rate: no bool, no str/None, finite, >= 0
NONNEG = st.one_of(NOT_NUMBERS, BOOLS, NON_FINITE, NEGATIVE)
# a count >= 1: as above, plus 0 and fractions
COUNT = st.one_of(NOT_NUMBERS, BOOLS, NON_FINITE, NEGATIVE, st.just(0), NON_INTEGRAL)

RUN = all_reduce(draw.demo_data(4), "ring")
M, HW = dp_sim.MODELS["ResNet-50"], dp_sim.HARDWARE["8× A100 PCIe 4.0"]

ROWS = [
    (cost.collective_time, dict(op="all_reduce", algorithm="ring", nbytes=1e6, world=8,
                                alpha=1e-6, beta=1e-9), "nbytes", NONNEG),
    (cost.collective_time, dict(op="all_reduce", algorithm="ring", nbytes=1e6, world=8,
                                alpha=1e-6, beta=1e-9), "world", COUNT),
    (cost.collective_time, dict(op="all_reduce", algorithm="ring", nbytes=1e6, world=8,
                                alpha=1e-6, beta=1e-9), "alpha", NONNEG),
    (cost.collective_time, dict(op="all_reduce", algorithm="ring", nbytes=1e6, world=8,
                                alpha=1e-6, beta=1e-9), "beta", NONNEG),
    (cost.collective_time, dict(op="all_reduce", algorithm="ring", nbytes=1e6, world=8,
                                alpha=1e-6, beta=1e-9, gamma=0.0), "gamma", NONNEG),
    (cost.cost_terms, dict(op="broadcast", algorithm="tree", nbytes=10, world=3), "world", COUNT),
    (cost.bus_factor, dict(op="all_reduce", world=4), "world", COUNT),
    (cost.algbw, dict(nbytes=1e6, seconds=1e-3), "seconds", st.one_of(NONNEG, st.just(0))),
    (cost.algbw, dict(nbytes=1e6, seconds=1e-3), "nbytes", NONNEG),
    (cost.crossover_bytes, dict(world=8, alpha=1e-6, beta=1e-9), "world", COUNT),
    (cost.crossover_bytes, dict(world=8, alpha=1e-6, beta=1e-9), "alpha", NONNEG),
    (collectives.simulated_time, dict(run=RUN, alpha=1e-6, beta=1e-9), "alpha", NONNEG),
    (collectives.simulated_time, dict(run=RUN, alpha=1e-6, beta=1e-9), "beta", NONNEG),
    (collectives.simulated_time, dict(run=RUN, alpha=1e-6, beta=1e-9, gamma=0.0), "gamma",
     NONNEG),
    (collectives.chunk_bounds, dict(size=10, world=3), "world", COUNT),
    (broadcast, dict(data=np.ones(3), world=4), "world", COUNT),
    (broadcast, dict(data=np.ones(3), world=4, root=0), "root",
     st.one_of(NOT_NUMBERS, BOOLS, NON_FINITE, NEGATIVE, NON_INTEGRAL, st.just(4))),
    (draw.demo_data, dict(world=3), "world", COUNT),
    (dp_sim.simulate_step, dict(model=M, hw=HW, world=4), "world", COUNT),
    (dp_sim.simulate_step, dict(model=M, hw=HW, world=4), "per_gpu_batch", COUNT),
    (dp_sim.simulate_step, dict(model=M, hw=HW, world=4), "bucket_mb",
     st.one_of(NONNEG, st.just(0))),
    (dp_sim.simulate_step, dict(model=M, hw=HW, world=4), "jitter", NONNEG),
    (dp_sim.make_buckets, dict(grad_bytes_reverse=[1, 2], cap_bytes=2), "cap_bytes",
     st.one_of(NONNEG, st.just(0))),
]


@pytest.mark.parametrize("fn, good, param, bad", ROWS,
                         ids=[f"{r[0].__name__}-{r[2]}" for r in ROWS])
def test_bad_values_name_the_parameter(fn, good, param, bad):
    fn(**good)                                     # the row's good call works

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(value=bad)
    def spoil(value):
        with pytest.raises((ValueError, TypeError)) as info:
            fn(**dict(good, **{param: value}))
        assert param in str(info.value), str(info.value)

    spoil()


def test_issue_16_examples():
    kw = dict(alpha=1e-6, beta=1e-9)
    with pytest.raises(TypeError, match="world must be an integer"):
        cost.collective_time("all_reduce", "ring", 1e6, True, **kw)     # was 0.0
    with pytest.raises(ValueError, match="nbytes must be a finite"):
        cost.collective_time("all_reduce", "ring", math.nan, 8, **kw)   # was nan
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        collectives.simulated_time(RUN, alpha=-1, beta=1e-9)            # was accepted
    big = [np.full(4, 2 ** 62, dtype=np.int64)] * 4                      # sum is 2**64
    with pytest.raises(ValueError, match="overflows int64"):
        all_reduce(big, "ring")                                          # was 0
    with pytest.raises(TypeError, match=r"data\[0\] must be a numeric array"):
        all_reduce([np.array([True, False])] * 2, "ring")                # was True
    with pytest.raises(TypeError, match=r"data\[0\] must be a numeric array"):
        all_reduce([np.array(["ab", "cd"])] * 2, "ring")                 # was truncated
    # a count typed as an integral float is fine; a sum that fits is exact
    assert cost.collective_time("all_reduce", "ring", 1e6, 8.0, **kw) == \
        cost.collective_time("all_reduce", "ring", 1e6, 8, **kw)
    fits = [np.full(4, 2 ** 60, dtype=np.int64)] * 4
    assert all((o == 2 ** 62).all() for o in all_reduce(fits, "ring").outputs)


@pytest.mark.parametrize("call, name", [
    (lambda: all_reduce(None), "data"),
    (lambda: all_reduce([]), "data"),
    (lambda: all_reduce([[1.0, 2.0], [1.0]], "tree"), "data"),                    # ragged
    (lambda: all_reduce([np.ones(0)] * 2, "tree"), "data"),                        # empty
    (lambda: all_reduce([[[1.0, 2.0], [3.0]]] * 2, "tree"), "data[0]"),            # ragged rank
    (lambda: all_reduce([np.ones(4)] * 2, "ring", inplace="yes"), "inplace"),
    (lambda: reduce_scatter([np.ones(4), None]), "data[1]"),
    (lambda: all_gather([np.ones(2), np.ones(0)]), "chunks[1]"),
    (lambda: all_gather("ab"), "chunks"),
    (lambda: broadcast(None, 4), "data"),
    (lambda: broadcast(np.ones((2, 2)), 4), "data"),
    (lambda: collectives.simulated_time("run", alpha=0, beta=0), "run"),
    (lambda: dp_sim.simulate_step(M, HW, 4, "horovod"), "mode"),
])
def test_bad_arrays_and_options(call, name):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert name in str(info.value)
