"""labkit.perf statistics and timing: percentiles, intervals, speedups, benchmark()."""
import math

import numpy as np
import pytest

from labkit.perf import benchmark, interleaved, threads
from labkit.stats import (NoiseEstimates, Spread, bootstrap_ci, noise_estimates, noisy_samples,
                          percentile, speedup_ci, t_ci)


@pytest.mark.parametrize("n", [1, 2, 7, 100])
@pytest.mark.parametrize("q", [0, 12.5, 50, 95, 99, 100])
def test_percentile_matches_numpy_linear(n, q):
    x = np.random.default_rng(n).lognormal(0, 1, n)
    assert percentile(x, q) == pytest.approx(float(np.percentile(x, q)), rel=1e-12)


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match=r"q must be in \[0, 100\]"):
        percentile([1.0, 2.0], 101)
    with pytest.raises(ValueError, match="samples must not be empty"):
        percentile([], 50)


def test_t_interval_closed_form():
    ci = t_ci([1, 2, 3, 4, 5])
    # mean 3, s = sqrt(2.5), t_{0.975, 4} = 2.776445
    half = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert ci.estimate == 3 and ci.low == pytest.approx(3 - half, rel=1e-6)
    assert ci.high == pytest.approx(3 + half, rel=1e-6) and ci.method == "t"


def test_bootstrap_interval_contains_median_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small = rng.lognormal(0, 0.2, 20)
    big = rng.lognormal(0, 0.2, 2000)
    a, b = bootstrap_ci(small), bootstrap_ci(big)
    assert a.low <= np.median(small) <= a.high and b.low <= np.median(big) <= b.high
    assert b.high - b.low < (a.high - a.low) / 4      # width ~ 1/sqrt(n): 10x more → ~1/10
    assert b.low < 1 < b.high          # the true median of lognormal(0, σ) is e^0 = 1


def test_speedup_interval_covers_the_true_ratio():
    rng = np.random.default_rng(1)
    a = rng.lognormal(np.log(2e-3), 0.05, 60)
    b = rng.lognormal(np.log(1e-3), 0.05, 60)
    ci = speedup_ci(a, b)
    assert ci.low < 2.0 < ci.high and ci.estimate == pytest.approx(np.median(a) / np.median(b))
    with pytest.raises(ValueError, match="timings must be > 0"):
        speedup_ci([1.0, -1.0], [1.0, 1.0])


def test_noise_moves_the_mean_not_the_median():
    x = noisy_samples(400, base=1e-3, jitter=0.02, interference=0.3, slowdown=3, seed=0)
    assert abs(np.median(x) / 1e-3 - 1) < 0.05
    assert x.mean() / 1e-3 > 1.4                      # 1 + 0.3 * 2 = 1.6 expected
    assert np.all(noisy_samples(10, interference=0.0, jitter=0.0) == 1e-3)
    with pytest.raises(ValueError, match=r"interference must be in \[0, 1\]"):
        noisy_samples(10, interference=1.5)


def test_noise_estimates_and_which_survive():
    """Chapter 12's reveal: 30 % interference (3× slower runs) moves the mean by about
    0.3 × 2 = 60 %, the median by a few per cent."""
    e = noise_estimates(50, interference=0.3, jitter=0.05, seed=0)
    x = noisy_samples(50, interference=0.3, jitter=0.05, seed=0)
    np.testing.assert_array_equal(e.values, x)
    assert (e.mean, e.median, e.low, e.high) == (x.mean(), np.median(x), x.min(), x.max())
    assert e.ci == bootstrap_ci(x) and e.base == 1e-3
    assert e.survivors() == "median" and e.mean > 1.4e-3
    assert noise_estimates(10, jitter=0.0).survivors() == "both"
    assert noise_estimates(50, interference=0.6, jitter=0.05).survivors() == "neither"
    skewed = NoiseEstimates(np.array([0.5e-3, 0.5e-3, 2.0e-3]), 1e-3, bootstrap_ci([1.0, 1.0]))
    assert skewed.survivors() == "mean" and skewed.survivors(tol=0.6) == "both"
    with pytest.raises(ValueError, match="tol must be > 0"):
        skewed.survivors(tol=0)


def test_spread():
    s = Spread((3.0, 1.0, 2.0, 6.0))
    assert (s.mean, s.median, s.low, s.high) == (3.0, 2.5, 1.0, 6.0)
    assert s.relative_range == 2.0 and Spread((0.0, 1.0, -1.0)).relative_range == 0.0
    assert s.overlaps(Spread((5.9, 8.0))) and not s.overlaps(Spread((6.1,)))
    assert s.format() == "2 (1–6)" and Spread((1234.0,)).format() == "1,234"
    assert s == Spread((3.0, 1.0, 2.0, 6.0)) and s != Spread((3.0, 1.0, 2.0))
    with pytest.raises(ValueError, match="at least one"):
        Spread(())


def test_benchmark_counts_calls_and_checks_its_arguments():
    calls = []
    t = benchmark(lambda: calls.append(1), repeats=4, warmup=3, number=5)
    assert len(calls) == 3 + 4 * 5 and len(t.samples) == 4 and t.clock == "perf_counter"
    assert t.percentile(50) == pytest.approx(t.median)
    assert t.ci().low <= t.median <= t.ci().high
    with pytest.raises(ValueError, match="number must be an integer >= 1"):
        benchmark(lambda: None, number=0)
    with pytest.raises(ValueError, match="device must be one of"):
        benchmark(lambda: None, device="tpu")
    with pytest.raises(TypeError, match="fn must be callable"):
        benchmark(3)


def test_benchmark_calls_sync_around_each_sample():
    log = []
    benchmark(lambda: log.append("f"), repeats=2, warmup=0, sync=lambda: log.append("s"))
    assert log == ["s", "f", "s", "s", "f", "s"]


def test_interleaved_alternates():
    order = []
    out = interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                      repeats=3, warmup=0)
    assert order == ["a", "b"] * 3 and set(out) == {"a", "b"}


def test_threads_restores_torch_threads():
    import torch
    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.gpu
def test_benchmark_times_cuda_with_events():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a real CUDA GPU")
    a = torch.randn(2048, 2048, device="cuda")
    t = benchmark(lambda: a @ a, repeats=5, warmup=2, device="cuda")
    host = benchmark(lambda: a @ a, repeats=5, warmup=2)          # no sync: the launch only
    assert t.clock == "cuda events" and t.median > host.median


def test_a_timing_holds_its_median_and_interval():
    from labkit.timing import Timing, summarise
    t = summarise([3.0, 1.0, 2.0, 10.0], level=0.9, resamples=500, seed=3)
    assert t.samples == (3.0, 1.0, 2.0, 10.0) and t.median == 2.5 and t.level == 0.9
    ci = bootstrap_ci(t.samples, level=0.9, resamples=500, seed=3)
    assert (t.low, t.high) == (ci.low, ci.high)
    assert t.ci().low == t.low and t.ci(level=0.5).high <= t.high
    assert t.ci(method="t").method == "t"
    one = summarise([4.0])
    assert one.median == one.low == one.high == 4.0
    assert "median 2.5 s [" in str(t) and "90% CI" in str(t)
    with pytest.raises(TypeError, match="median must be a number"):
        Timing((1.0,), "1", 1.0, 1.0)
    with pytest.raises(ValueError, match="samples must hold at least one"):
        Timing((), 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="level must be"):
        Timing((1.0,), 1.0, 1.0, 1.0, level=1.5)


def test_bootstrap_of_the_median_is_the_same_vectorised():
    x = np.random.default_rng(4).lognormal(0, 1, 37)
    fast = bootstrap_ci(x, resamples=300, seed=2)
    slow = bootstrap_ci(x, statistic=lambda a: float(np.median(a)), resamples=300, seed=2)
    assert (fast.low, fast.high) == (slow.low, slow.high)


def test_benchmark_and_interleaved_read_the_clock_they_are_given():
    ticks = iter(range(100))
    t = benchmark(lambda: None, repeats=3, warmup=0, clock=lambda: next(ticks))
    assert t.samples == (1.0, 1.0, 1.0) and t.clock == "<lambda>"
    log = []
    out = interleaved({"a": lambda: log.append("a"), "b": lambda: log.append("b")},
                      repeats=2, warmup=1, sync=lambda: log.append("s"))
    assert log == ["a", "b", "s", "a", "s", "s", "b", "s", "s", "a", "s", "s", "b", "s"]
    assert set(out) == {"a", "b"} and all(len(t.samples) == 2 for t in out.values())
    with pytest.raises(TypeError, match="clock must be callable"):
        benchmark(lambda: None, clock=3)


def test_noise_rows_say_what_the_interval_is_around():
    from labkit.stats import format_noise_rows
    rows = format_noise_rows((0.0, 0.3, 0.45)).splitlines()
    assert rows[2].endswith("| yes |")
    # chapter 12's prose quotes these: the mean off by half at 0.3, the median +2.4 % and +6.8 %
    assert rows[3].startswith("| 0.30 | +52.6% | +2.4% |") and rows[3].endswith("| no |")
    assert rows[4].startswith("| 0.45 | +76.4% | +6.8% |") and rows[4].endswith("| no |")
