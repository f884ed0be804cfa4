"""Chapter 07's checkers: right answers written here or taken from the chapter's solution
(not labkit's) pass, missing ones are
missing, and each named wrong answer or shortcut fails with its hint. The lab's checks run
on the virtual-time machine (labkit.dataload.fake), so nothing here depends on the load."""
import itertools
import math
import time

import numpy as np
import pytest

from labkit.check import FAIL, PASS, evaluate
from labkit.check import ch07
from labkit.check.core import Wrong
from labkit.check.formula import check_formula
from labkit.dataload.model import augment, steady_throughput, wait_fraction
from check_basics import assert_fails, mutants_fail_test, reference_and_missing_test
from solution_answers import solution_answer
from tests.mutants import mutant

IDS = [f"7.{k}" for k in range(1, 12)]


test_reference_passes_and_missing_is_missing = reference_and_missing_test(IDS, refused=True)


# ------------------------------------------------------------------------ 7.1
def my_loop(batches, step, *, batch_size, warmup, window, clock=time.perf_counter,
            cpu_clock=time.thread_time, sync=lambda: None):
    def now():                          # the wall clock and the CPU clock, read together
        return clock(), cpu_clock()

    it = iter(batches)
    for _ in range(warmup):
        x, y = next(it)
        step(x, y)
        sync()
    out = {k: [] for k in ("wait_s", "compute_s", "wait_cpu_s", "step_cpu_s")}
    begin = clock()
    for _ in range(window):
        t0, c0 = now()
        x, y = next(it)
        t1, c1 = now()
        step(x, y)
        sync()
        t2, c2 = now()
        out["wait_s"].append(t1 - t0)
        out["compute_s"].append(t2 - t1)
        out["wait_cpu_s"].append(c1 - c0)
        out["step_cpu_s"].append(c2 - c1)
    end = clock()
    out = {k: np.array(v) for k, v in out.items()}
    out["samples_per_s"] = batch_size * window / (end - begin)
    return out


def epoch_loop(batches, step, *, batch_size, warmup, window, clock=time.perf_counter,
               cpu_clock=time.thread_time, sync=lambda: None):
    """Time the whole epoch and divide: no per-step split."""
    t0, c0 = clock(), cpu_clock()
    waited = 0.0
    it = iter(batches)
    for _ in range(warmup + window):
        a = clock()
        x, y = next(it)
        waited += clock() - a
        step(x, y)
        sync()
    total, cpu = clock() - t0, cpu_clock() - c0
    n = warmup + window
    return {"wait_s": np.full(window, waited / n),
            "compute_s": np.full(window, (total - waited) / n),
            "wait_cpu_s": np.full(window, 0.0), "step_cpu_s": np.full(window, cpu / n),
            "samples_per_s": batch_size * n / total}


def boundary_loop(batches, step, *, batch_size, warmup, window, clock=time.perf_counter,
                  cpu_clock=time.thread_time, sync=lambda: None):
    """One clock read per boundary: the end of step k is the start of step k + 1."""
    it = iter(batches)
    for _ in range(warmup):
        step(*next(it))
        sync()
    t, c = [clock()], [cpu_clock()]
    got_t, got_c = [], []
    for _ in range(window):
        x, y = next(it)
        got_t.append(clock())
        got_c.append(cpu_clock())
        step(x, y)
        sync()
        t.append(clock())
        c.append(cpu_clock())
    t, c, got_t, got_c = map(np.array, (t, c, got_t, got_c))
    return {"wait_s": got_t - t[:-1], "compute_s": t[1:] - got_t, "wait_cpu_s": got_c - c[:-1],
            "step_cpu_s": c[1:] - got_c, "samples_per_s": batch_size * window / (t[-1] - t[0])}


def test_7_1_right_loops_pass():
    assert evaluate("7.1", my_loop).status == PASS
    assert evaluate("7.1", boundary_loop).status == PASS


@pytest.mark.parametrize("old, new, hint", [
    # the warm-up/fill steps inside the window
    ("for _ in range(window):", "for _ in range(warmup + window):", "not warmup + window"),
    (("    for _ in range(warmup):\n        x, y = next(it)\n        step(x, y)\n        sync()"),
     "window += warmup", "the warm-up steps are in it"),
    ("    for _ in range(warmup):\n        x, y = next(it)\n        step(x, y)\n        sync()",
     "    pass", "first take `warmup` batches untimed"),
    # not syncing after each step
    ("        sync()\n        t2, c2 = now()", "t2, c2 = now()",
     "sync() after each step"),
    # the end of the window read before the last step has ended
    ("end = clock()", "end = t0", "before the last step"),
    # wrong batch counts
    ("batch_size * window / (end - begin)", "batch_size * (window - 1) / (end - begin)",
     "not 19"),
    ("batch_size * window / (end - begin)", "window / (end - begin)", "batches per second"),
    ("batch_size * window / (end - begin)", "batch_size * (warmup + window) / (end - begin)",
     "not the warm-up's too"),
    # wall time taken for CPU time
    ("t1, c1 = now()", "t1, c1 = now()\nc0, c1 = t0, t1",
     "read cpu_clock() for CPU time"),
    # a new iterator (a new epoch, new workers) for the timed part
    ("begin = clock()", "begin = clock()\nit = iter(batches)", "iter()"),
    # the whole loader
    ("for _ in range(window):", "for _ in itertools.count():", "every batch"),
])
def test_7_1_rejects(old, new, hint):
    wrong = mutant(my_loop, old, new)
    if "itertools.count" in new:            # the whole epoch: stop at the end of the loader
        wrong = mutant(wrong, "        x, y = next(it)\n        t1, c1 = now()",
                       "try:\n    x, y = next(it)\nexcept StopIteration:\n    break\n"
                       "t1, c1 = now()")
        wrong.__globals__["itertools"] = itertools
    v = evaluate("7.1", wrong)
    if hint == "not 19":
        assert v.status == FAIL and "batches ran in the window, not" in v.message, v.message
    else:
        assert v.status == FAIL and hint in v.message, v.message


def test_7_1_rejects_timing_the_whole_epoch():
    assert_fails("7.1", epoch_loop, "warm-up")


def test_7_1_per_step_split_is_required():
    def divided(*a, **k):
        out = my_loop(*a, **k)
        for key in ("wait_s", "compute_s"):
            out[key] = np.full(len(out[key]), out[key].mean())
        return out
    assert_fails("7.1", divided, "same for every step")


def test_7_1_a_clock_read_before_sync_misses_the_last_step():
    late = mutant(my_loop, "end = clock()", "end = clock()\nsync()")
    assert evaluate("7.1", late).status == PASS          # nothing left to wait for
    early = mutant(my_loop, "        sync()\n        t2, c2 = now()",
                   "t2, c2 = now()\nsync()")
    early = mutant(early, "end = clock()", "end = t2")
    assert_fails("7.1", early, "sync()")


# ------------------------------------------------------------------------ 7.2
@pytest.mark.parametrize("wrong, hint", [
    (lambda w, c: float(np.mean(np.asarray(w) / (np.asarray(w) + np.asarray(c)))), "per-step"),
    (lambda w, c: float(np.sum(w) / np.sum(c)), "wait / compute"),
    (lambda w, c: float(np.mean(w)), "Σ wait"),
])
def test_7_2_rejects(wrong, hint):
    assert_fails("7.2", wrong, hint)


def test_7_2_right():
    assert evaluate("7.2", lambda w, c: float(sum(w) / (sum(w) + sum(c)))).status == PASS


# ------------------------------------------------------------------------ 7.3
def my_experiment(kind, batches, step):
    if kind == "loader alone":
        return batches, lambda x, y: None
    if kind == "compute alone":
        it = iter(batches)
        batch = next(it)
        return itertools.repeat(batch), step
    return batches, step


def test_7_3_right():
    assert evaluate("7.3", my_experiment).status == PASS
    cycled = mutant(my_experiment, "itertools.repeat(batch)", "itertools.cycle([batch])")
    assert evaluate("7.3", cycled).status == PASS


test_7_3_rejects = mutants_fail_test("7.3", my_experiment, [
    ("return batches, lambda x, y: None", "return batches, step", "must not train"),
    ("return itertools.repeat(batch), step", "return batches, step", "you took"),
    ("return itertools.repeat(batch), step", "return itertools.repeat(list(it)[0]), step",
     "you took"),
    ("return batches, lambda x, y: None", "return batches, None", "not a function"),
    ("return batches, lambda x, y: None", "return batches", "not a pair"),
    ("    return batches, step\n", "return itertools.islice(batches, 3), step",
     "give the loop the batches as they are"),
])


# ------------------------------------------------------------------------ 7.4
def my_interleave(experiments, trials):
    results = {name: [] for name in experiments}
    for _ in range(trials):
        for name in experiments:
            results[name].append(experiments[name]())
    return results


def test_7_4_right_and_wrong():
    assert evaluate("7.4", my_interleave).status == PASS
    grouped = mutant(my_interleave, "    for _ in range(trials):\n        for name in experiments:",
                     "    for name in experiments:\n        for _ in range(trials):")
    assert_fails("7.4", grouped, "in a row: alternate")
    once = mutant(my_interleave, "range(trials)", "range(1)")
    assert_fails("7.4", once, "times.")
    flat = mutant(my_interleave, "return results",
                  "return [r for v in results.values() for r in v]")
    assert_fails("7.4", flat, "must return")


# ------------------------------------------------------------------------ 7.5
def my_diagnose(loader, compute, pipeline, threshold=0.9):
    rates = {"data": loader["samples_per_s"], "compute": compute["samples_per_s"]}
    slower = min(rates, key=rates.get)
    return slower if pipeline["samples_per_s"] >= threshold * rates[slower] else "both"


def test_7_5_right():
    assert evaluate("7.5", my_diagnose).status == PASS


test_7_5_rejects = mutants_fail_test("7.5", my_diagnose, [
    # the pipeline's wait share alone
    ("return slower if", "return ('data' if sum(pipeline['wait_s']) > sum(pipeline['compute_s']) "
     "else 'compute')\nreturn slower if", "waiting share does not say"),
    # never "both"
    (' else "both"', " else slower", "share the cores"),
    # compared with the faster stage
    ("threshold * rates[slower]", "0.9 * rates[slower]", "use the threshold"),
    (' else "both"', ' else "neither"', "return one of"),
])


def test_7_5_compared_with_the_faster_stage_gets_its_hint():
    faster = mutant(my_diagnose, "    slower = min(rates, key=rates.get)\n    return slower if "
                    "pipeline[\"samples_per_s\"] >= threshold * rates[slower] else \"both\"",
                    "    slower = min(rates, key=rates.get)\n    if pipeline['samples_per_s'] >= "
                    "threshold * max(rates.values()):\n        return slower\n    return 'both'")
    assert_fails("7.5", faster, "slower stage alone")


# ------------------------------------------------------------------------ 7.6
class MyIndices:
    def __init__(self, n, num_samples=None):
        self.n, self.count, self.epoch = n, num_samples or n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.count

    def __iter__(self):
        return ((self.epoch, k % self.n) for k in range(self.count))


def _sampler(iter_body=None, len_body=None, epoch_body=None):
    ns = {}
    exec("class S(MyIndices):\n    pass\n", {"MyIndices": MyIndices}, ns)
    S = ns["S"]
    if iter_body:
        S.__iter__ = iter_body
    if len_body:
        S.__len__ = len_body
    if epoch_body:
        S.set_epoch = epoch_body
    return S


def test_7_6_right():
    assert evaluate("7.6", MyIndices).status == PASS


@pytest.mark.parametrize("kw, hint", [
    (dict(iter_body=lambda s: iter(range(s.count))), "yields plain indices"),
    (dict(iter_body=lambda s: ((k % s.n, s.epoch) for k in range(s.count))), "in that order"),
    (dict(epoch_body=lambda s, e: None), "set_epoch(e) must change"),
    (dict(len_body=lambda s: s.n), "num_samples indices"),
    (dict(iter_body=lambda s: ((s.epoch, k) for k in range(s.n))), "k mod"),
    (dict(iter_body=lambda s: ([s.epoch, k % s.n] for k in range(s.count))), "yield tuples"),
])
def test_7_6_rejects(kw, hint):
    assert_fails("7.6", _sampler(**kw), hint)


# ------------------------------------------------------------------------ 7.7
def _with_workers(rate):
    """A 7.7 answer right without workers and ``rate(L, C, W, cores)`` with them."""
    return lambda L, C, W, cores: 1 / (L + C) if W == 0 else rate(L, C, W, cores)


def test_7_7_right():
    assert evaluate("7.7", lambda L, C, W, c: 1 / (L + C) if W == 0 else
                    min(1 / C, W / L, c / (L + C))).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (_with_workers(lambda L, C, W, cores: 1 / max(C, L / W)), "that leaves out the cores"),
    (lambda L, C, W, cores: 1 / (L + C), "slowest"),
    (lambda L, C, W, cores: 1 / max(C, L / W, (L + C) / cores), "1/(L + C)"),
    (_with_workers(lambda L, C, W, cores: 1 / max(C, L / W, L / cores)),
     "the cores bound leaves out the step"),
    (_with_workers(lambda L, C, W, cores: 1 / max(L / W, L / cores)),
     "the cores bound leaves out the step"),
    (_with_workers(lambda L, C, W, cores: 1 / max(L / W, (L + C) / cores)), "at most 1/C"),
    (lambda L, C, W, cores: L + C if W == 0 else max(C, L / W, (L + C) / cores),
     "seconds per batch"),
    (lambda L, C, W, cores: 0.9 / (L + C) if W == 0 else 1 / max(C, L / W, (L + C) / cores),
     "1 / max(C, L/W, (L+C)/cores)"),
])
def test_7_7_rejects(wrong, hint):
    v = assert_fails("7.7", wrong, hint)
    if "cores bound" in hint or "leaves out the cores" in hint:
        assert "cores / (L + C)" in v.message


@pytest.mark.parametrize("wrong", [lambda L, C, W, cores: 1 / max(C, L / W),
                                   lambda L, C, W, cores: 1 / max(C, L / W, L / cores)])
def test_7_7_hint_where_no_cores_and_a_loose_cores_bound_agree(wrong):
    # with W = cores, L/cores = L/W: either answer may be meant, so the hint covers both
    with pytest.raises(Wrong, match=r"missing or too loose.*cores / \(L \+ C\)"):
        check_formula(wrong, steady_throughput, [(0.032, 0.012, 2, 2)], rtol=1e-6,
                      call=lambda *case: f"steady_throughput{case}",
                      shortcuts=ch07._THROUGHPUT_SHORTCUTS, hint="")


# ------------------------------------------------------------------------ 7.8
def my_queue(load_s, compute_s, workers, prefetch_factor):
    depth = workers * prefetch_factor
    worker_free = [0.0] * workers
    taken, waits, ends = [], [], []
    last_end = 0.0
    for k in range(len(load_s)):
        issue = taken[k - depth] if k >= depth else 0.0
        built = max(issue, worker_free[k % workers]) + load_s[k]
        worker_free[k % workers] = built
        t = max(last_end, built)
        taken.append(t)
        waits.append(t - last_end)
        last_end = t + compute_s[k]
        ends.append(last_end)
    return np.array(waits), np.array(ends)


def test_7_8_right():
    assert evaluate("7.8", my_queue).status == PASS


test_7_8_rejects = mutants_fail_test("7.8", my_queue, [
    ("issue = taken[k - depth] if k >= depth else 0.0", "issue = 0.0", "no index is held back"),
    ("t = max(last_end, built)", "t = built", "step k − 1 has ended"),
    ("return np.array(waits), np.array(ends)", "return np.array(waits)", "the pair"),
    ("waits.append(t - last_end)", "waits.append(t)", "take_k − end_{k−1}"),
    # the first free worker instead of k mod W: no named hint, the recurrence's rules
    ("worker_free[k % workers]) + load_s[k]", "min(worker_free)) + load_s[k]", "k mod W"),
])


def test_7_8_issue_when_built_gets_its_hint():
    built = mutant(my_queue, "        taken.append(t)\n", "taken.append(built)")
    # taken[] now holds the built times: index k issued when batch k − D was built
    assert_fails("7.8", built, "amounts to the same")


# ------------------------------------------------------------------------ 7.9
@pytest.mark.parametrize("wrong, hint", [
    (lambda L, C: L / C, "whole number"),
    (lambda L, C: math.floor(L / C), "round up"),
    (lambda L, C: round(L / C), "round up"),
    (lambda L, C: math.ceil(L / C) + 1, "need W/L ≥ 1/C"),
    (lambda L, C: math.ceil(C / L), "upside down"),
])
def test_7_9_rejects(wrong, hint):
    assert_fails("7.9", wrong, hint)


def test_7_9_right():
    assert evaluate("7.9", lambda L, C: max(1, -int(-L // C) if L % C > 1e-12 * C
                                            else round(L / C))).status == PASS


# ------------------------------------------------------------------------ 7.10
# the solution's DecodedCache (self.dataset, and self.images decoded once); each wrong
# cache below is it with one method replaced
MyCache = solution_answer("07", "7.10")


def _cache_with(**methods):
    return type("Cache", (MyCache,), methods)


def _per_item(self, index):
    d = self.dataset
    epoch, i = index if isinstance(index, tuple) else (d.epoch, index)
    rng = np.random.default_rng((d.seed, epoch, i))
    return augment(d.image(i), rng, blur=d.blur), d.labels[i % len(self.images)]


def _memo(self, index):
    i = index[1] if isinstance(index, tuple) else index
    if not hasattr(self, "memo"):
        self.memo = {}
    if i not in self.memo:
        self.memo[i] = MyCache.__getitem__(self, index)
    return self.memo[i]


# the seed's epoch and index swapped
_swapped = mutant(MyCache.__getitem__, "default_rng((d.seed, epoch, i))",
                  "default_rng((d.seed, i, epoch))")


def test_7_10_right():
    assert evaluate("7.10", MyCache).status == PASS


@pytest.mark.parametrize("cls, hint", [
    (_cache_with(__getitem__=_per_item), "decode each image once"),
    (_cache_with(__getitem__=_memo), "cannot be cached"),
    (_cache_with(__getitem__=_swapped), "default_rng((dataset.seed, epoch, i))"),
    (_cache_with(stored_bytes=property(lambda s: s.dataset.stored_bytes)),
     "decoded pixels it holds"),
    (_cache_with(__len__=lambda s: len(s.images)), "as many items as the dataset"),
])
def test_7_10_rejects(cls, hint):
    assert_fails("7.10", cls, hint)


# ------------------------------------------------------------------------ 7.11
def _right_record(rec):
    return rec[0], np.frombuffer(rec, np.uint8, offset=1).reshape(3, 32, 32).transpose(1, 2, 0)


def _interleaved(rec):
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(32, 32, 3)


def _chw(rec):
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(3, 32, 32)


def _label_included(rec):
    a = np.frombuffer(rec, np.uint8)
    return int(a[0]), a[:3072].reshape(3, 32, 32).transpose(1, 2, 0)


def _transposed(rec):      # planes read column-major
    return rec[0], np.frombuffer(rec[1:], np.uint8).reshape(3, 32, 32).transpose(2, 1, 0)


def test_7_11_right():
    assert evaluate("7.11", _right_record).status == PASS


@pytest.mark.parametrize("wrong, hint", [
    (_interleaved, "planes"), (_chw, "CHW"), (_label_included, "label byte"),
    (_transposed, "pixel values"),
])
def test_7_11_rejects(wrong, hint):
    assert_fails("7.11", wrong, hint)


def test_the_waiting_share_of_a_fake_run_is_exact():
    # the fake machine's numbers are exact: wait 10 ms, step 5 ms on every step
    from labkit.dataload import fake

    r = fake.FakeMachine(fake.constant_spec(load_s=0.010, step_s=0.005)).run(my_loop)
    assert r["samples_per_s"] == pytest.approx(32 / 0.015, rel=1e-12)
    assert wait_fraction(r["wait_s"], r["compute_s"]) == pytest.approx(2 / 3, rel=1e-12)
