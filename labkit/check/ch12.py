"""Chapter 12's exercises: the median and its interval, a benchmark harness, interleaving,
MFU, percentiles, the batched-loss fix, counting operator calls, a speedup with its
interval, an MLP's gradients by hand, the size of an int8 model."""
from __future__ import annotations

import copy
import math

import numpy as np
# torch.profiler's first profile imports torch._dynamo, which wraps torch.manual_seed (and
# other torch functions) as it is imported. Exercise 12.6 profiles the answer: import it here,
# with the checks, so that it happens before any answer runs and the grader's watch on torch's
# functions does not take it for the answer's doing.
import torch._dynamo  # noqa: F401,E402

from labkit.check.core import Wrong, exercise, expect_raises
from labkit.check.formula import equals, formula_exercise, scaled
from labkit.hardware import GPUS
from labkit.perf import frameworks, profiling, virtual
from labkit.check.ch01 import chain, random_rows
from labkit.perf.deploy import fp32_linear_bytes, int8_linear_bytes
from labkit.perf.metrics import mfu
from labkit.stats import percentile, speedup_ci
from labkit.timing import benchmark, interleaved, summarise


def speedup_with_ci(baseline, candidate, level=0.95, resamples=2000, seed=0):
    """Reference: (speedup, low, high): median(baseline)/median(candidate), bootstrap."""
    ci = speedup_ci(baseline, candidate, level=level, resamples=resamples, seed=seed)
    return ci.estimate, ci.low, ci.high


# labkit's bootstrap intervals, which compute the answers of 12.1 and 12.8: refused there
BOOTSTRAP_INTERVALS = ("labkit.stats:bootstrap_ci", "labkit.stats:speedup_ci")


def _close(a, b, rtol: float = 1e-9) -> bool:
    return bool(np.allclose(a, b, rtol=rtol, atol=0))


# --------------------------------------------------- 12.1, 12.2: the harness
# (repeats, warmup, asynchronous, sync, level, number): an asynchronous device with its sync
# hook, no warm-up, a long warm-up, a CPU (synchronous, no hook), a 50 % interval, four calls
# per sample
HARNESS_CASES = ((15, 1, True, True, 0.95, 1), (9, 0, True, True, 0.95, 1),
                 (21, 3, True, True, 0.95, 1), (12, 2, False, False, 0.95, 1),
                 (41, 1, True, True, 0.5, 1), (10, 1, True, True, 0.95, 4))
_PROTOCOL = ("warm-up calls first, untimed; then per sample: sync(), read the clock, "
             "`number` calls, sync(), read the clock again, divide by `number`")


def _rank(sorted_x: np.ndarray, value: float) -> float:
    """Where ``value`` falls among the sorted samples, as an (interpolated) rank."""
    return float(np.interp(value, sorted_x, np.arange(sorted_x.size)))


def _check_samples(got: dict, want: dict, spec: dict) -> None:
    s, w = np.asarray(got["samples"], float), np.asarray(want["samples"], float)
    n, warm = spec["repeats"], spec["warmup"]
    if s.size != n:
        raise Wrong(f"benchmark(repeats={n}, warmup={warm}) recorded {s.size} samples: one "
                    f"sample per repetition, {n} in all.")
    k = spec["number"]
    if _close(s, w):
        return
    mistakes = [
        (dict(sync_stop=False),
         f"your samples are the launch only ({spec['launch_s'] * 1e6:.1f} µs each): the "
         f"call returned before the device finished. Call sync() after fn() and before you "
         f"read the clock to stop it."),
        (dict(sync_start=False),
         "your first sample includes the kernels the warm-up calls left running: call "
         "sync() before you start the clock, too."),
        (dict(warmup=0),
         f"your first sample holds the first call ({spec['first_call_s']:.2f} s: it "
         f"compiles, like torch.compile's first call): run `warmup` calls before timing, "
         f"and do not time them."),
        (dict(warmup=1),
         f"you ran one warm-up call, but the caller asked for warmup={warm}."),
        (dict(one_window=True),
         "all your samples are the same: you timed the repeats in one window and divided. "
         "Time each sample on its own: the samples' spread is what the interval is made of."),
        (dict(number=1),
         f"number={spec['number']}: each sample times {spec['number']} back-to-back calls "
         f"and divides by {spec['number']} (for calls shorter than the clock's resolution)."),
    ]
    for protocol, hint in mistakes:
        if protocol.get("warmup") == warm or protocol.get("number") == spec["number"]:
            continue
        if _close(s, virtual.protocol_samples(spec, **protocol)):
            raise Wrong(hint)
    if _close(np.sort(s), np.sort(w)):
        raise Wrong("keep the samples in the order they were measured.")
    if got.get("clock_reads") == 0:
        raise Wrong("your harness never read the clock it was given: read the time from "
                    "`clock` (the argument; the check's is virtual), not from "
                    "time.perf_counter.")
    i = int(np.argmax(~np.isclose(s, w, rtol=1e-9, atol=0)))
    raise Wrong(f"sample {i} is {s[i]:.6g} s, expected {w[i]:.6g} s (number={k}): "
                f"{_PROTOCOL}.")


def _check_median(got: dict, want: dict) -> None:
    s, m = np.asarray(got["samples"], float), got["median"]
    if _close(m, want["median"]):
        return
    if _close(m, s.mean()):
        raise Wrong("that is the mean of the samples: slow runs (a neighbour, a cache miss) "
                    "drag it up; report the median.")
    if _close(m, s.min()):
        raise Wrong("that is the fastest sample, not the median.")
    raise Wrong(f"median {m:.6g} s, expected {want['median']:.6g} s (np.median of the "
                f"samples you recorded).")


def _check_interval(got: dict, want: dict, spec: dict) -> None:
    s = np.sort(np.asarray(got["samples"], float))
    lo, hi, m = got["low"], got["high"], got["median"]
    if not _close(got["level"], spec["level"]):
        raise Wrong(f"level={spec['level']} was asked for; your Timing says "
                    f"level={got['level']}.")
    if not lo <= m <= hi:
        raise Wrong(f"the interval [{lo:.6g}, {hi:.6g}] must contain the median {m:.6g}.")
    if lo == hi and s[0] != s[-1]:
        raise Wrong("your interval has no width: resample the samples with replacement "
                    "(`resamples` times), take each resample's median, and report the "
                    "(1 - level)/2 and (1 + level)/2 percentiles of those medians.")
    if _close(lo, s[0]) and _close(hi, s[-1]) and not (_close(want["low"], s[0]) and
                                                        _close(want["high"], s[-1])):
        raise Wrong("that is the range of the samples, not an interval of their median: "
                    "bootstrap the median.")
    # two right bootstraps with different random draws land on the same or neighbouring
    # order statistics: allow two ranks either way
    for end, mine, ref in (("low", lo, want["low"]), ("high", hi, want["high"])):
        if abs(_rank(s, mine) - _rank(s, ref)) > 2:
            raise Wrong(f"the interval's {end} end is {mine:.6g} s, expected about "
                        f"{ref:.6g} s (level={spec['level']}, {spec['resamples']} "
                        f"resamples of the median; seed={spec['bench_seed']}).")


def _timing_samples(rng, n: int) -> np.ndarray:
    """``n`` long-tailed timings: 1 ms-ish, a tenth of them 3× slower."""
    x = rng.lognormal(np.log(1e-3), 0.1, n)
    x[rng.random(n) < 0.1] *= 3
    return x


def _seeded(derive, args: tuple) -> None:
    """Four calls with the same samples and seed must give one interval."""
    runs = [derive(*args) for _ in range(4)]
    if len({(r.get("low"), r.get("high")) for r in runs}) > 1:
        raise Wrong("the same samples and the same seed gave another interval: draw the "
                    "resamples from numpy.random.default_rng(seed), so that a measurement "
                    "can be reported and repeated.")


@exercise("12.1", "the median and its bootstrap interval", reference=summarise,
          binds="summarise", answers=BOOTSTRAP_INTERVALS)
def _(answer, ref, rng):
    for n, level, resamples in ((15, 0.95, 2000), (41, 0.5, 2000), (2, 0.95, 500),
                                (1, 0.95, 2000), (int(rng.integers(20, 200)), 0.9, 1000)):
        x = _timing_samples(rng, n)
        spec = {"level": level, "resamples": resamples, "bench_seed": int(rng.integers(1 << 30))}
        args = (x, level, resamples, spec["bench_seed"])
        got = answer.derive(virtual.summarised, *args)
        if got["type"] != "Timing":
            raise Wrong(f"summarise returned a {got['type']}: return Timing(samples, median, "
                        f"low, high, level) (labkit.timing.Timing).")
        if not _close(got["samples"], x):
            raise Wrong("keep the samples as they were given, in their order.")
        want = ref.derive(virtual.summarised, *args)
        _check_median(got, want)
        _check_interval(got, want, spec)
    _seeded(lambda *a: answer.derive(virtual.summarised, *a),
            (_timing_samples(rng, 30), 0.95, 100, int(rng.integers(1 << 30))))


@exercise("12.2", "a benchmark harness", reference=benchmark, binds="benchmark",
          answers=("labkit.timing:interleaved", "labkit.timing:_host_sample",
                   "labkit.perf.virtual:protocol_samples"))
def _(answer, ref, rng):
    for repeats, warmup, asynchronous, sync, level, number in HARNESS_CASES:
        spec = virtual.draw_spec(rng, repeats=repeats, warmup=warmup,
                                 asynchronous=asynchronous, sync=sync, level=level,
                                 number=number)
        got = answer.derive(virtual.run, spec)
        if got["type"] != "Timing":
            raise Wrong(f"benchmark returned a {got['type']}: return Timing(samples, "
                        f"median, low, high, level) (labkit.timing.Timing).")
        want = ref.derive(virtual.run, spec)
        _check_samples(got, want, spec)
        _check_median(got, want)
        _check_interval(got, want, spec)
    # seeded: with few resamples an unseeded bootstrap moves from call to call
    _seeded(lambda spec: answer.derive(virtual.run, spec),
            (virtual.draw_spec(rng, repeats=30, warmup=1, resamples=100),))


# ----------------------------------------------------------- 12.3: interleaving
@exercise("12.3", "interleave the variants", reference=interleaved, binds="interleaved",
          answers=("labkit.timing:_host_sample",))
def _(answer, ref, rng):
    for names, repeats, warmup in ((("A", "B"), 12, 1), (("A", "B", "C"), 9, 2),
                                   (("only",), 5, 0)):
        spec = virtual.draw_interleaved_spec(rng, names=names, repeats=repeats, warmup=warmup)
        got = answer.derive(virtual.run_interleaved, spec)
        if got["type"] != "dict":
            raise Wrong(f"interleaved returned a {got['type']}: return a dict of name -> "
                        f"Timing, one per function.")
        if set(got["timings"]) != set(names):
            raise Wrong(f"one Timing per function: expected the names {sorted(names)}, got "
                        f"{sorted(got['timings'])}.")
        want = ref.derive(virtual.run_interleaved, spec)
        timed = "".join(names) * repeats
        if not got["order"].endswith(timed) or len(got["order"]) != len(want["order"]):
            if got["order"].endswith("".join(n * repeats for n in names)):
                raise Wrong("you timed each function's repeats together (A A A … B B B …): "
                            "a neighbour who arrives halfway slows only the later ones. "
                            "Alternate: each round calls every function once (A B A B …).")
            raise Wrong(f"{warmup} warm-up call(s) of each function, then {repeats} rounds "
                        f"of one call of each, in the dict's order.")
        seq = virtual.sequential_samples(spec)
        for k in names:
            g, w = got["timings"][k], want["timings"][k]
            if g["type"] != "Timing":
                raise Wrong(f"interleaved's {k!r} is a {g['type']}: a Timing.")
            if _close(g["samples"], seq[k]) and not _close(g["samples"], w["samples"]):
                raise Wrong("your samples are those of timing each function's repeats "
                            "together: alternate, one call of each per round.")
            if not _close(g["samples"], w["samples"]):
                raise Wrong(f"{k!r}'s samples differ from the calls it made: one sample per "
                            f"call, sync() and the clock around each, as in benchmark.")
            _check_median(g, w)
            _check_interval(g, w, spec)


# ------------------------------------------------------------------ 12.4: MFU
formula_exercise(
    "12.4", "MFU of a run", mfu,
    cases=[(19072.0, 50000.0, 1.5e11, True), (19072.0, 50000.0, 1.5e11, False),
           (2 * 7e9, 3000.0, 8 * GPUS["H100"].peak("bf16"), True), (1e6, 1.0, 1e12, True)],
    call=lambda f, s, peak, tr: f"mfu({f:g}, {s:g}, {peak:.3g}, training={tr})",
    shortcuts=[
        (lambda got, f, s, peak, tr: tr and math.isclose(got, f * s / peak, rel_tol=1e-9),
         "a training step runs forward and backward: model FLOPs are 3 × the forward FLOPs "
         "(backward ≈ 2 × forward)."),
        (scaled(mfu, 100),
         "return a fraction (0.42), not a percentage (42)."),
        (lambda got, f, s, peak, tr: not tr and math.isclose(got, 3 * f * s / peak,
                                                             rel_tol=1e-9),
         "inference runs the forward pass only: no factor 3."),
        (lambda got, f, s, peak, tr: tr and math.isclose(got, 2 * f * s / peak, rel_tol=1e-9),
         "backward ≈ 2 × forward comes on top of the forward itself: a training step is "
         "3 × the forward FLOPs."),
        (scaled(mfu, 2),
         "forward_flops_per_sample is in FLOPs already (2 per multiply-add): do not double "
         "it; PaLM's 6N per token is 3 × the forward's 2N.")],
    hint="MFU = (3 if training else 1) × forward FLOPs per sample × samples/s / peak "
         "(Chowdhery et al., PaLM, 2022, appendix B).")


# ------------------------------------------------------------ 12.5: percentiles
def _samples(rng):
    """Edge cases, then long-tailed timings of several sizes drawn from ``rng``."""
    yield np.array([3.0, 1.0, 2.0])
    yield np.array([5.0])
    yield np.array([1.0, 10.0])
    for n in (7, 20, 101, int(rng.integers(200, 1200))):
        x = rng.lognormal(-7, 0.3, n)
        x[rng.random(n) < 0.05] *= 5
        yield x


def _unsorted(x, q):
    h = (x.size - 1) * q / 100
    lo = int(np.floor(h))
    hi = min(lo + 1, x.size - 1)
    return x[lo] + (h - lo) * (x[hi] - x[lo])


@exercise("12.5", "a percentile from samples", reference=percentile, binds="percentile")
def _(answer, ref, rng):
    for x in _samples(rng):
        for q in (0, 50, 95, 99, 100, 37.5, float(rng.uniform(0, 100))):
            got = answer(x.copy(), q)
            if isinstance(got, bool) or not isinstance(got, (int, float, np.integer,
                                                             np.floating)):
                raise Wrong(f"percentile(...) returned {type(got).__name__}: return a number.")
            want = ref(x.copy(), q)
            if np.isclose(got, want, rtol=1e-9, atol=0):
                continue
            s = np.sort(x)
            nearest = s[min(int(np.ceil(q / 100 * x.size)) - 1, x.size - 1)] if q > 0 else s[0]
            if x.size > 1 and (np.isclose(got, np.percentile(x, q, method="lower"), rtol=1e-9,
                                          atol=0) or np.isclose(got, nearest, rtol=1e-9,
                                                                atol=0)):
                raise Wrong(f"n={x.size}, q={q}: {got:.6g} is a sample itself; interpolate "
                            f"between the two samples around position (n-1)·q/100.")
            if x.size > 1 and np.isclose(got, np.interp(q / 100 * x.size - 0.5,
                                                        np.arange(x.size), s), rtol=1e-9, atol=0):
                raise Wrong(f"n={x.size}, q={q}: the position is (n-1)·q/100, not n·q/100.")
            if np.isclose(got, _unsorted(x, q), rtol=1e-9, atol=0):
                raise Wrong("sort the samples first: percentiles are positions in the "
                            "sorted order.")
            raise Wrong(f"percentile(n={x.size}, q={q}) = {got:.6g}, expected {want:.6g} "
                        f"(linear interpolation at position (n-1)·q/100 of the sorted samples).")
    x = _timing_samples(rng, 9)
    for args, what in (((np.array([]), 50), "percentile([], 50)"),
                       ((x, 100.5), "percentile(samples, 100.5)"),
                       ((x, -1), "percentile(samples, -1)")):
        expect_raises(lambda a=args: answer(*a), ValueError, what,
                      hint="no samples, or q outside [0, 100], has no percentile: raise "
                           "ValueError saying which argument and what is allowed.")


# ---------------------------------------------------------- 12.6: the batched loss
@exercise("12.6", "the batched loss: one call for the whole batch",
          reference=profiling.batched_loss, binds="batched_loss",
          answers=("labkit.perf.profiling:per_sample_loss",))
def _(answer, ref, rng):
    classes = int(rng.integers(3, 20))
    reports = {}
    for batch, scale in ((4, 1.0), (int(rng.integers(48, 96)), 1.0), (6, 1000.0)):
        spec = {"seed": int(rng.integers(1 << 30)), "batch": batch, "classes": classes,
                "scale": scale}
        got = answer.derive(profiling.loss_report, spec)
        if not got["scalar"]:
            raise Wrong(f"batched_loss returned a {got['type']}: return the loss as a "
                        f"one-element torch tensor, so that backward() can run from it.")
        want = ref.derive(profiling.loss_report, spec)
        if not got["finite"]:
            raise Wrong(f"with logits of size ~{scale:g} your loss or its gradient is not "
                        f"finite: exp overflows. Use log_softmax (the log-sum-exp with the row "
                        f"maximum subtracted), not the log of exp(z) / sum(exp(z)).")
        if _close(got["loss"], batch * want["loss"], 1e-6):
            raise Wrong("that is the sum over the batch: cross-entropy of a batch is the mean "
                        "over its samples (reduction='mean').")
        if not _close(got["loss"], want["loss"], 1e-6):
            raise Wrong(f"batch {batch}: loss {got['loss']:.6g}, expected {want['loss']:.6g} "
                        f"(the mean over samples of -log softmax(logits)[i, target_i]).")
        if got["grad"] is None or not np.allclose(got["grad"], want["grad"], rtol=1e-6,
                                                  atol=1e-9):
            raise Wrong("the loss is right but its gradient is not: build it from torch "
                        "operations on the logits (no .item(), no numpy, no detach).")
        reports[batch, scale] = got, want
    (small, ref_small), (big, _) = reports[4, 1.0], next(
        r for k, r in reports.items() if k[0] > 6)
    if big["calls"] > small["calls"] + 2:
        raise Wrong(f"your loss makes {small['calls']} operator calls at batch 4 and "
                    f"{big['calls']} at a larger batch: calls that grow with the batch are "
                    f"calls per sample. One batched computation over the whole batch makes "
                    f"the same calls at every size (torch.profiler counts them).")
    if small["calls"] > 5 * ref_small["calls"]:
        raise Wrong(f"{small['calls']} operator calls for one loss and its backward; "
                    f"F.cross_entropy makes {ref_small['calls']}. Fewer, larger operations.")


# -------------------------------------------------------- 12.7: counting calls
@exercise("12.7", "count a step's operator calls", reference=profiling.op_calls,
          binds="op_calls")
def _(answer, ref, rng):
    for rows in (random_rows(rng, 6), random_rows(rng), chain(20), []):
        got = answer(copy.deepcopy(rows))
        if not isinstance(got, dict):
            raise Wrong(f"op_calls returned {type(got).__name__}: return a dict of name -> "
                        f"calls.")
        want = ref(rows)
        if {k: int(v) for k, v in got.items()} == want:
            continue
        top: dict[str, int] = {}
        for r in rows:
            top[r["name"]] = top.get(r["name"], 0) + 1
        if got == top:
            raise Wrong("only the top rows are counted: the operators a step calls sit "
                        "inside record_function ranges and other operators. Walk the "
                        "children too.")
        # the first name that differs, in the reference's order (a set's order would vary
        # from run to run with the hash seed)
        name = next(k for k in [*want, *got] if got.get(k) != want.get(k))
        raise Wrong(f"{name!r}: {got.get(name, 0)} calls, expected {want.get(name, 0)} "
                    f"(every row with that name, in the whole tree).")


# ------------------------------------------------------- 12.8: a speedup with its CI
@exercise("12.8", "a speedup with its confidence interval", reference=speedup_with_ci,
          binds="speedup_with_ci", answers=BOOTSTRAP_INTERVALS)
def _(answer, ref, rng):
    ratios = ((40, 40, 2.0), (25, 60, 1.1), (60, 30, 0.8),
              (int(rng.integers(20, 80)), int(rng.integers(20, 80)), float(rng.uniform(0.5, 3))))
    for n_a, n_b, ratio in ratios:
        a = rng.lognormal(np.log(1e-3), 0.1, n_a)
        a[:3] *= 6                                   # a few runs hit by a neighbour
        b = rng.lognormal(np.log(1e-3 / ratio), 0.1, n_b)
        got = answer(a.copy(), b.copy())
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Wrong("return a triple (speedup, low, high).")
        s, lo, hi = (float(t) for t in got)
        want = ref(a.copy(), b.copy(), 0.95, 4000)
        if np.isclose(s, np.median(b) / np.median(a), rtol=1e-9, atol=0):
            raise Wrong("speedup = median(baseline) / median(candidate): above 1 means the "
                        "candidate is faster.")
        if np.isclose(s, a.mean() / b.mean(), rtol=1e-9, atol=0):
            raise Wrong("the mean is dragged by the slow outliers; use the medians.")
        if not np.isclose(s, want[0], rtol=1e-9, atol=0):
            raise Wrong(f"speedup {s:.4g}, expected median(a)/median(b) = {want[0]:.4g}.")
        if not lo <= s <= hi:
            raise Wrong(f"the interval [{lo:.4g}, {hi:.4g}] must contain the estimate {s:.4g}.")
        width = want[2] - want[1]
        if hi - lo < 0.5 * width:
            raise Wrong(f"interval [{lo:.4g}, {hi:.4g}] is too narrow (expected about "
                        f"[{want[1]:.4g}, {want[2]:.4g}]): resample both sets with "
                        f"replacement, take the 2.5th and 97.5th percentiles of the ratios.")
        if abs(lo - want[1]) > 0.25 * width + 1e-12 or abs(hi - want[2]) > 0.25 * width + 1e-12:
            raise Wrong(f"interval [{lo:.4g}, {hi:.4g}], expected about [{want[1]:.4g}, "
                        f"{want[2]:.4g}]: bootstrap the ratio of medians, both sets "
                        f"resampled independently.")
    # the level is an argument, not a constant: a 50 % interval is about half as wide
    _, lo, hi = (float(t) for t in answer(a.copy(), b.copy(), level=0.5))
    want = ref(a.copy(), b.copy(), 0.5, 4000)
    width = want[2] - want[1]
    if abs(lo - want[1]) > 0.25 * width + 1e-12 or abs(hi - want[2]) > 0.25 * width + 1e-12:
        raise Wrong(f"with level=0.5 the interval is [{lo:.4g}, {hi:.4g}], expected about "
                    f"[{want[1]:.4g}, {want[2]:.4g}]: take the (1-level)/2 and (1+level)/2 "
                    f"quantiles of the resampled ratios.")


# ------------------------------------------------------- 12.9: gradients by hand
def _grads_hint(got: dict, want: dict, spec: dict) -> str | None:
    """The named mistake ``got``'s gradients match, if any."""
    g, w = got["grads"], want["grads"]
    n = spec["batch"]
    if all(_close(gw, n * ww, 1e-6) and _close(gb, n * wb, 1e-6)
           for (gw, gb), (ww, wb) in zip(g, w)):
        return ("every gradient is n × too large: the loss is the mean over the batch, so "
                "dz = (p - onehot(y)) / n.")
    if _close(g[-1][0], w[-1][0], 1e-6) and not _close(g[0][0], w[0][0], 1e-6):
        return ("the last layer is right and an earlier one is not: between layers the "
                "ReLU passes the gradient only where its input was > 0 "
                "(dz ← (dz Wᵀ) ⊙ [z > 0]), and each dW = (that layer's input)ᵀ dz.")
    return None


@exercise("12.9", "an MLP's loss and gradients by hand", reference=frameworks.numpy_grads,
          binds="mlp_grads", answers=("labkit.perf.frameworks:numpy_step",))
def _(answer, ref, rng):
    cases = [((64, 128, 10), 64, 0.0), ((int(rng.integers(3, 40)), int(rng.integers(2, 50)),
                                        int(rng.integers(2, 12))), int(rng.integers(1, 30)), 0.0),
             ((int(rng.integers(3, 20)), int(rng.integers(2, 30)), int(rng.integers(2, 30)),
               int(rng.integers(2, 9))), int(rng.integers(2, 20)), 0.0),       # three layers
             ((int(rng.integers(3, 20)), int(rng.integers(2, 9))), 7, 0.0),    # one layer
             ((8, 16, 5), 12, 800.0)]           # logits near 800: exp overflows (e^709.8)
    for sizes, batch, offset in cases:
        spec = {"seed": int(rng.integers(1 << 30)), "sizes": list(sizes), "batch": batch,
                "offset": offset}
        got = answer.derive(frameworks.grads_report, spec)
        if not got["ok"]:
            raise Wrong(f"mlp_grads {got['why']}.")
        want = ref.derive(frameworks.grads_report, spec)
        where = f"sizes {sizes}, batch {batch}"
        if not np.isfinite(got["loss"]) or not all(np.all(np.isfinite(a)) for pair in
                                                   got["grads"] for a in pair):
            raise Wrong(f"{where}, large logits: NaN or inf. exp(z) overflows for z > 88 in "
                        f"float32 (709 in float64): subtract each row's maximum before exp.")
        if not _close(got["loss"], want["loss"], 1e-7):
            raise Wrong(f"{where}: loss {got['loss']:.6g}, expected {want['loss']:.6g} "
                        f"(mean over the batch of -log softmax(z)[i, y_i]).")
        if len(got["grads"]) != len(want["grads"]):
            raise Wrong(f"return one (dW, db) pair per layer: {len(want['grads'])} pairs.")
        for k, ((gw, gb), (ww, wb)) in enumerate(zip(got["grads"], want["grads"]), 1):
            if gw.shape != ww.shape or gb.shape != wb.shape:
                raise Wrong(f"layer {k}: dW has shape {gw.shape} and db {gb.shape}, expected "
                            f"{ww.shape} and {wb.shape}: a gradient has its parameter's shape "
                            f"(dW = inputᵀ · d(output)).")
        for k, ((gw, gb), (ww, wb)) in enumerate(zip(got["grads"], want["grads"]), 1):
            if not (np.allclose(gw, ww, rtol=1e-6, atol=1e-10)
                    and np.allclose(gb, wb, rtol=1e-6, atol=1e-10)):
                raise Wrong(_grads_hint(got, want, spec) or
                            f"{where}: the gradients of layer {k} are off (by up to "
                            f"{max(np.abs(gw - ww).max(), np.abs(gb - wb).max()):.3g}).")


# ------------------------------------------------------------ 12.10: int8 size
def _weights_biases(layers):
    """(weights, biases) of Linear layers given as (in_features, out_features)."""
    return sum(i * o for i, o in layers), sum(o for _, o in layers)


def _int8_shortcut(wrong):
    """The test "the answer is ``wrong(weights, biases, layer count)``"."""
    return equals(lambda layers: wrong(*_weights_biases(layers), len(layers)))


formula_exercise(
    "12.10", "size of an int8 model", int8_linear_bytes, binds="int8_bytes",
    cases=[([(64, 128), (128, 10)],), ([(10, 50), (50, 1)],),
           ([(784, 512), (512, 512), (512, 10)],), ([(1, 1)],)],
    call=lambda layers: f"int8_bytes({layers})", rtol=0,
    draw=lambda rng: ([tuple(int(k) for k in rng.integers(1, 1025, 2))
                       for _ in range(int(rng.integers(1, 5)))],),
    shortcuts=[
        (_int8_shortcut(lambda w, b, n: w + b + 8 * n),
         "dynamic quantization keeps the biases in fp32: 4 bytes each."),
        (_int8_shortcut(lambda w, b, n: w + 4 * b),
         "each quantized weight tensor also stores its scale (fp32) and zero point (int32): "
         "8 bytes per layer."),
        (equals(fp32_linear_bytes),
         "that is the fp32 model, 4 bytes per weight; an int8 weight takes 1."),
        (_int8_shortcut(lambda w, b, n: w + b),
         "only the weights become int8; biases stay fp32, and each layer adds a scale and a "
         "zero point.")],
    hint="1 byte per int8 weight, 4 per fp32 bias, and 8 per layer for the weight's scale "
         "and zero point.")
