"""Chapter 12's checkers: a right answer written here passes, a missing one is missing, and
each named wrong answer (the no-warm-up harness, the unsynchronised one, the sequential
comparison, the per-sample loss, …) fails with its hint."""
import time

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from labkit.check import FAIL, PASS, evaluate
from labkit.check import ch12
from labkit import timing
from labkit.timing import Timing
from check_basics import reference_and_missing_test

IDS = [f"12.{k}" for k in range(1, 11)]


test_reference_passes_and_missing_is_missing = reference_and_missing_test(IDS, handles=True)


# -------------------------------------------------------------- a harness of our own
def summarise(samples, level=0.95, resamples=2000, seed=0):
    """Written apart from labkit's: numpy's quantile and rng.choice (other draws)."""
    x = np.array(samples, dtype=float)
    boot = np.median(np.random.default_rng(seed).choice(x, size=(resamples, x.size)), axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return Timing(tuple(samples), float(np.median(x)), float(lo), float(hi), level)


def harness(*, warmup_override=None, sync_start=True, sync_stop=True, one_window=False,
            median=np.median, unseeded=False, clock_arg=True, use_number=True):
    """A benchmark with one stated mistake (none by default)."""
    def bench(fn, *, repeats=7, warmup=1, number=1, sync=None, clock=time.perf_counter,
              level=0.95, resamples=2000, seed=0):
        clock = clock if clock_arg else time.perf_counter
        for _ in range(warmup if warmup_override is None else warmup_override):
            fn()
        if one_window:
            if sync:
                sync()
            t0 = clock()
            for _ in range(repeats):
                fn()
            if sync:
                sync()
            samples = [(clock() - t0) / repeats] * repeats
        else:
            samples = []
            for _ in range(repeats):
                if sync and sync_start:
                    sync()
                t0 = clock()
                for _ in range(number if use_number else 1):
                    fn()
                if sync and sync_stop:
                    sync()
                samples.append((clock() - t0) / (number if use_number else 1))
        t = summarise(samples, level, resamples,
                      int(np.random.randint(1 << 30)) if unseeded else seed)
        return Timing(t.samples, float(median(samples)), min(t.low, median(samples)),
                      max(t.high, median(samples)), level)
    return bench


def test_a_harness_written_here_passes_on_every_seed():
    assert evaluate("12.1", summarise).status == PASS
    for seed in range(5):
        assert evaluate("12.1", summarise, seed=seed).status == PASS
        assert evaluate("12.2", harness(), seed=seed).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (harness(warmup_override=0), "run `warmup` calls before timing"),
    (harness(sync_stop=False), "launch only"),
    (harness(sync_start=False), "sync() before you start the clock, too"),
    (harness(sync_start=False, sync_stop=False), "launch only"),
    (harness(warmup_override=1), "one warm-up call"),
    (harness(one_window=True), "in one window"),
    (harness(median=np.mean), "the mean of the samples"),
    (harness(median=np.min), "fastest sample"),
    (harness(unseeded=True), "default_rng(seed)"),
    (harness(clock_arg=False), "never read the clock it was given"),
    (harness(use_number=False), "back-to-back calls"),
    (lambda fn, **kw: {"median": 1.0}, "return Timing"),
])
def test_12_2_rejects(wrong, hint):
    v = evaluate("12.2", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def _fixed_level(samples, level=0.95, resamples=2000, seed=0):
    t = summarise(samples, 0.95, resamples, seed)
    return Timing(t.samples, t.median, t.low, t.high, level)


@pytest.mark.parametrize("wrong, hint", [
    (lambda s, level=0.95, resamples=2000, seed=0: Timing(
        tuple(s), float(np.median(s)), float(np.median(s)), float(np.median(s)), level),
     "no width"),
    (lambda s, level=0.95, resamples=2000, seed=0: Timing(
        tuple(s), float(np.median(s)), float(min(s)), float(max(s)), level), "range of the samples"),
    (_fixed_level, "expected about"),
    (lambda s, level=0.95, resamples=2000, seed=0: summarise(sorted(s), level, resamples, seed),
     "in their order"),
    (lambda s, level=0.95, resamples=2000, seed=0: summarise(
        s, level, resamples, int(np.random.randint(1 << 30))), "default_rng(seed)"),
    (lambda s, level=0.95, resamples=2000, seed=0: summarise(s, 0.5, resamples, seed),
     "level=0.95 was asked for"),
])
def test_12_1_rejects(wrong, hint):
    v = evaluate("12.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def interleaved(fns, *, repeats=15, warmup=1, sync=None, clock=time.perf_counter,
                level=0.95, resamples=2000, seed=0, sequential=False):
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in fns}
    order = ([(k, fn) for k, fn in fns.items() for _ in range(repeats)] if sequential else
             [(k, fn) for _ in range(repeats) for k, fn in fns.items()])
    for k, fn in order:
        if sync:
            sync()
        t0 = clock()
        fn()
        if sync:
            sync()
        samples[k].append(clock() - t0)
    return {k: summarise(s, level, resamples, seed) for k, s in samples.items()}


def test_12_3_accepts_interleaving_and_rejects_sequential_timing():
    assert evaluate("12.3", interleaved).status == PASS
    assert evaluate("12.3", interleaved, seed=3).status == PASS
    v = evaluate("12.3", lambda fns, **kw: interleaved(fns, sequential=True, **kw))
    assert v.status == FAIL and "A A A … B B B" in v.message, v.message
    v = evaluate("12.3", lambda fns, **kw: [interleaved(fns, **kw)])
    assert v.status == FAIL and "dict of name -> Timing" in v.message
    v = evaluate("12.3", lambda fns, **kw: {"x": t for t in interleaved(fns, **kw).values()})
    assert v.status == FAIL and "one Timing per function" in v.message
    v = evaluate("12.3", lambda fns, **kw: interleaved(fns, **{**kw, "warmup": 0}))
    assert v.status == FAIL and "warm-up call(s) of each" in v.message, v.message


def test_the_virtual_neighbour_makes_sequential_timing_wrong():
    """The drift is there: timed A-then-B, the neighbour's slow calls land unequally on the
    two functions; interleaved, they are shared out (over six draws)."""
    from labkit.perf import virtual

    def hit(x):
        return np.mean(np.array(x) > 1.5 * np.min(x))
    seq_gap, inter_gap = [], []
    for seed in range(6):
        spec = virtual.draw_interleaved_spec(np.random.default_rng(seed), names=("A", "B"))
        seq = virtual.sequential_samples(spec)
        inter = virtual.run_interleaved(interleaved, spec)["timings"]
        seq_gap.append(abs(hit(seq["A"]) - hit(seq["B"])))
        inter_gap.append(abs(hit(inter["A"]["samples"]) - hit(inter["B"]["samples"])))
    assert np.mean(seq_gap) > 0.25 > 0.1 > np.mean(inter_gap)


# ------------------------------------------------------------------- 12.4 MFU
@pytest.mark.parametrize("wrong, hint", [
    (lambda f, s, p, t: f * s / p, "3 ×"),
    (lambda f, s, p, t: 100 * (3 if t else 1) * f * s / p, "fraction"),
    (lambda f, s, p, t: 3 * f * s / p, "forward pass only"),
    (lambda f, s, p, t: (2 if t else 1) * f * s / p, "on top of the forward"),
    (lambda f, s, p, t: (6 if t else 2) * f * s / p, "do not double"),
    (lambda f, s, p, t: (3 if t else 1) * f * s / p / 8, "PaLM"),     # peak of one GPU of 8
])
def test_12_4_rejects(wrong, hint):
    v = evaluate("12.4", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 12.5 percentiles
def _percentile(x, q):
    if not len(x) or not 0 <= q <= 100:
        raise ValueError(f"no percentile {q} of {len(x)} samples")
    s = sorted(x)
    h = (len(s) - 1) * q / 100
    i = int(h)
    return s[i] + (h - i) * (s[min(i + 1, len(s) - 1)] - s[i])


def _nearest(x, q):
    s = np.sort(x)
    return float(s[int(round((len(s) - 1) * q / 100))])


def _n_not_n_minus_1(x, q):
    s = np.sort(x)
    return float(np.interp(q / 100 * len(s) - 0.5, np.arange(len(s)), s))


def _unsorted(x, q):
    return ch12._unsorted(np.asarray(x), q)


def test_12_5_accepts_an_independent_percentile():
    assert evaluate("12.5", _percentile).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (_nearest, "interpolate"), (_n_not_n_minus_1, "(n-1)"), (_unsorted, "sort"),
    (lambda x, q: float(np.mean(x)), "expected"), (lambda x, q: [q], "return a number"),
    (lambda x, q: float(np.percentile(x, min(max(q, 0), 100))) if len(x) else float("nan"),
     "should raise ValueError"),
])
def test_12_5_rejects(wrong, hint):
    v = evaluate("12.5", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 12.6 the batched loss
def test_12_6_accepts_a_batched_loss_and_rejects_the_per_sample_loop():
    assert evaluate("12.6", lambda o, y: F.nll_loss(F.log_softmax(o, 1), y)).status == PASS
    assert evaluate("12.6", lambda o, y: -(o.log_softmax(1)[torch.arange(len(y)), y]).mean()
                    ).status == PASS
    v = evaluate("12.6", lambda o, y: sum(F.cross_entropy(o[i:i + 1], y[i:i + 1])
                                          for i in range(len(y))) / len(y))
    assert v.status == FAIL and "calls that grow with the batch" in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda o, y: F.cross_entropy(o, y, reduction="sum"), "sum over the batch"),
    (lambda o, y: -torch.log(torch.softmax(o, 1))[torch.arange(len(y)), y].mean(), "exp overflows"),
    (lambda o, y: -torch.log(torch.exp(o) / torch.exp(o).sum(1, keepdim=True))[
        torch.arange(len(y)), y].mean(), "exp overflows"),
    (lambda o, y: torch.tensor(float(F.cross_entropy(o, y)), dtype=o.dtype, requires_grad=True),
     "gradient is not"),
    (lambda o, y: F.cross_entropy(o, y).item(), "one-element torch tensor"),
    (lambda o, y: F.cross_entropy(o[:, :-1], y.clamp(max=o.shape[1] - 2)), "expected"),
])
def test_12_6_rejects(wrong, hint):
    v = evaluate("12.6", wrong)
    assert v.status == FAIL and hint in v.message, v.message


# ------------------------------------------------------------------- 12.7 operator calls
def _calls(rows, out=None):
    out = {} if out is None else out
    for r in rows:
        out[r["name"]] = out.get(r["name"], 0) + 1
        _calls(r["children"], out)
    return out


def test_12_7_counts_every_row_of_the_tree():
    assert evaluate("12.7", _calls).status == PASS
    v = evaluate("12.7", lambda rows: _calls([{**r, "children": []} for r in rows]))
    assert v.status == FAIL and "only the top rows" in v.message
    v = evaluate("12.7", lambda rows: {k: 1 for k in _calls(rows)})
    assert v.status == FAIL and "calls, expected" in v.message
    v = evaluate("12.7", lambda rows: sorted(_calls(rows)))
    assert v.status == FAIL and "dict of name" in v.message


# ------------------------------------------------------------------- 12.8 speedup
def _inverted(a, b, **k):
    s, lo, hi = ch12.speedup_with_ci(b, a)
    return s, lo, hi


def _means(a, b, **k):
    s = a.mean() / b.mean()
    return s, s * 0.9, s * 1.1


def _zero_width(a, b, **k):
    s = np.median(a) / np.median(b)
    return s, s, s


def _min_max(a, b, **k):
    s = np.median(a) / np.median(b)
    return s, a.min() / b.max(), a.max() / b.min()


@pytest.mark.parametrize("wrong, hint", [
    (_inverted, "above 1"), (_means, "medians"), (_zero_width, "too narrow"),
    (_min_max, "expected about"),
])
def test_12_8_rejects(wrong, hint):
    v = evaluate("12.8", wrong, refuse=False)
    assert v.status == FAIL and hint in v.message, v.message


def _speedup(a, b, level=0.95, resamples=2000, seed=7):
    rng = np.random.default_rng(seed)
    r = (np.median(rng.choice(a, (resamples, a.size)), axis=1) /
         np.median(rng.choice(b, (resamples, b.size)), axis=1))
    lo, hi = np.quantile(r, [(1 - level) / 2, (1 + level) / 2])
    return float(np.median(a) / np.median(b)), float(lo), float(hi)


def test_12_8_accepts_an_independent_bootstrap_and_rejects_a_level_typed_in():
    assert evaluate("12.8", _speedup).status == PASS
    for fixed in (0.95, 0.90):
        v = evaluate("12.8", lambda a, b, level=0.95, f=fixed: _speedup(a, b, level=f))
        assert v.status == FAIL and "level=0.5" in v.message, v.message


# ------------------------------------------------------------------- 12.9 gradients
def grads_by_autograd(params, x, y):
    """Right, and written apart from labkit's: torch autograd in float64."""
    ps = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
          for w, b in params]
    a = torch.tensor(x)
    for i, (w, b) in enumerate(ps):
        a = a @ w + b
        if i < len(ps) - 1:
            a = a.relu()
    loss = F.cross_entropy(a, torch.tensor(y))
    loss.backward()
    return float(loss), [(w.grad.numpy(), b.grad.numpy()) for w, b in ps]


def _times_n(params, x, y):
    loss, g = grads_by_autograd(params, x, y)
    return loss, [(len(y) * w, len(y) * b) for w, b in g]


def _no_relu_mask(params, x, y):
    loss, g = grads_by_autograd(params, x, y)
    (w1, b1), (w2, b2) = params[0], params[-1]
    a = np.maximum(x @ w1 + b1, 0)
    z = a @ w2 + b2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    dz = p / len(y)
    dh = dz @ w2.T                       # the mistake: no [h > 0]
    return loss, [(x.T @ dh, dh.sum(0)), *g[1:]] if len(params) == 2 else g


def _unstable(params, x, y):
    loss, g = grads_by_autograd(params, x, y)
    a = x
    for i, (w, b) in enumerate(params):
        a = a @ w + b
        if i < len(params) - 1:
            a = np.maximum(a, 0)
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    return float(-np.log(p[np.arange(len(y)), y]).mean()), g


@pytest.mark.parametrize("wrong, hint", [
    (_times_n, "n × too large"), (_no_relu_mask, "ReLU passes the gradient"),
    (_unstable, "subtract each row's maximum"),
    (lambda p, x, y: (grads_by_autograd(p, x, y)[0], [(w.T, b) for w, b in
                                                      grads_by_autograd(p, x, y)[1]]),
     "a gradient has its parameter's shape"),
    (lambda p, x, y: grads_by_autograd(p, x, y)[1], "must be the loss, a number"),
    (lambda p, x, y: (grads_by_autograd(p, x, y)[0] * 2, grads_by_autograd(p, x, y)[1]),
     "mean over the batch of -log"),
])
def test_12_9_rejects(wrong, hint):
    v = evaluate("12.9", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_12_9_accepts_autograd_written_apart():
    assert evaluate("12.9", grads_by_autograd).status == PASS


# ------------------------------------------------------------------- 12.10 int8 size
@pytest.mark.parametrize("wrong, hint", [
    (lambda L: sum(i * o + o + 8 for i, o in L), "biases in fp32"),
    (lambda L: sum(i * o + 4 * o for i, o in L), "scale"),
    (lambda L: sum(i * o + o for i, o in L), "only the weights"),
    (lambda L: sum(4 * (i * o + o) for i, o in L), "fp32 model"),
    (lambda L: sum(i * o + 4 * o + 4 for i, o in L), "8 per layer"),      # scale only
])
def test_12_10_rejects(wrong, hint):
    v = evaluate("12.10", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_labkit_harnesses_are_refused_even_when_wrapped():
    v = evaluate("12.2", lambda fn, **kw: timing.benchmark(fn, **kw))
    assert v.status == FAIL and "labkit's implementation" in v.message
    v = evaluate("12.1", lambda s, level=0.95, resamples=2000, seed=0: timing.summarise(
        s, level=level, resamples=resamples, seed=seed))
    assert v.status == FAIL and "labkit's implementation" in v.message
