"""Chapter 07's exercises: data pipelines.

The lab (7.1–7.6) is checked by behaviour, never by time: the timed loop, the experiments
and the trials run on :class:`labkit.dataload.fake.FakeMachine`, whose loader, step, clocks
and ``sync`` advance a virtual clock (``answer.derive``), so every wait and rate they can
measure is exact and independent of the machine's load; the diagnosis is checked on
synthetic runs drawn from ``rng``.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close, expect_equal
from labkit.check.formula import check_formula, drawn_cases, equals, formula_exercise
from labkit.dataload import fake
from labkit.dataload.cifar import decode_record
from labkit.dataload.compare import VERDICTS, bottleneck_verdict
from labkit.dataload.measure import RESULT_KEYS, experiment, interleave, timed_loop
from labkit.dataload.model import (DecodedCache, EpochIndices, steady_throughput, wait_fraction,
                                   workers_needed)
from labkit.dataload.sim import prefetch_recurrence


# ---------------------------------------------------------------- 7.1 the timed loop
def _close(a, b) -> bool:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=1e-12))


def _loop_structure(log: dict, spec: dict) -> None:
    """How the loop used the loader and the step (the fake machine's log)."""
    warm, win, n = spec["warmup"], spec["window"], spec["warmup"] + spec["window"]
    nexts, steps = log["nexts"], log["steps"]
    if log["iters"] != 1:
        raise Wrong(f"your loop called iter() on the batches {log['iters']} times; call it "
                    f"once: each iter() of a DataLoader starts a new epoch (and new workers), "
                    f"so a second one times a start-up, not the steady state.")
    if len(nexts) != n:
        if len(nexts) == spec["batches"]:
            what = ("you took every batch the loader holds (the whole epoch): take warmup + "
                    "window batches and stop; the end of an epoch drains the pipeline.")
        elif len(nexts) == n + warm:
            what = ("after the warm-up, time `window` steps, not warmup + window: the window "
                    "is the steady part only.")
        elif len(nexts) == win:
            what = ("you took only `window` batches: first take `warmup` batches untimed "
                    "(the workers start and the prefetch queue fills), then time `window`.")
        else:
            what = f"take warmup ({warm}) + window ({win}) = {n} batches."
        raise Wrong(f"your loop took {len(nexts)} batches from the loader; {what}")
    if len(steps) != n or not np.array_equal(steps[:, 2], nexts[:, 2]):
        raise Wrong(f"call step(x, y) once on every batch you take, warm-up included, with "
                    f"the batch next() just returned ({len(steps)} steps for {n} batches).")


def _arrays(res, spec: dict) -> None:
    if not isinstance(res, dict) or any(k not in res for k in RESULT_KEYS):
        raise Wrong(f"return a dict with the keys {RESULT_KEYS}; got "
                    f"{sorted(res) if isinstance(res, dict) else type(res).__name__}.")
    for k in RESULT_KEYS[:4]:
        shape = np.shape(res[k])
        if shape == (spec["warmup"] + spec["window"],):
            raise Wrong(f"{k} holds {shape[0]} values: the warm-up steps are in it. Time only "
                        f"the `window` steps after the warm-up — the first steps wait for the "
                        f"workers to start and the queue to fill, not the steady state.")
        if shape != (spec["window"],):
            raise Wrong(f"{k} must hold one value per timed step ({spec['window']}), got "
                        f"shape {shape}.")


def _missed_sync(log: dict, spec: dict) -> bool:
    """Some step's accelerator work had not ended when the loop went on."""
    if not np.any(np.asarray(spec["device_s"]) > 0):
        return False
    steps, nexts = log["steps"], log["nexts"]
    syncs = log["syncs"]
    for k in range(len(steps)):
        later = nexts[k + 1, 0] if k + 1 < len(nexts) else math.inf
        done = steps[k, 3]
        if not np.any((syncs[:, 0] >= steps[k, 1] - 1e-12) & (syncs[:, 0] <= later)
                      & (syncs[:, 1] >= done - 1e-12)):
            return True
    return False


def _rate_shortcut(got: float, log: dict, spec: dict) -> str | None:
    """Name the wrong rate the loop computed, from its own log."""
    B, warm, win = spec["batch_size"], spec["warmup"], spec["window"]
    nexts, steps = log["nexts"], log["steps"]
    begin, end = nexts[warm, 0], log["t_end"]
    span = end - begin
    tests = [
        (B * (warm + win) / (end - nexts[0, 0]),
         "that rate counts the warm-up: start the clock after the warm-up's last step and "
         "count only the window's batches."),
        (B * win / (steps[-1, 1] - begin),
         "the clock stopped before the last step's work had ended: sync() after the last "
         "step, then read the end time."),
        (B * win / (nexts[-1, 0] - begin),
         "the end time was read before the last step: read it after the last step has "
         "ended (after its sync()), so the window holds `window` whole steps."),
        (B * (win - 1) / (nexts[-1, 0] - begin),
         "the end time was read before the last step: read it after the last step has "
         "ended (after its sync()), so the window holds `window` whole steps."),
        (win / span, "that is batches per second; multiply by batch_size for samples/s."),
        (B * (win + 1) / span, f"{win} batches ran in the window, not {win + 1}."),
        (B * (win - 1) / span, f"{win} batches ran in the window, not {win - 1}."),
        (B * (warm + win) / span,
         f"only the window's {win} batches ran between the two clock reads, not the "
         f"warm-up's too."),
    ]
    return next((hint for value, hint in tests if math.isclose(got, value, rel_tol=1e-9)),
                None)


def _loop_values(res: dict, want: dict, log: dict, spec: dict) -> None:
    per_step = ("one value for the whole window divided by the steps is not a per-step "
                "time: read the clock around each next() and each step.")
    if _missed_sync(log, spec) and not all(_close(res[k], want[k]) for k in RESULT_KEYS):
        raise Wrong("some step's accelerator work had not ended when your loop read the "
                    "clock: call sync() after each step (warm-up included) before reading "
                    "it — a CUDA call returns before its work ends, so without it the step's "
                    "time shows up in a later wait, or nowhere.")
    for k, what in (("wait_s", "the time in next()"),
                    ("compute_s", "the time from having the batch to the end of step and "
                                  "sync()")):
        if _close(res[k], want[k]):
            continue
        if np.ptp(res[k]) == 0 and np.ptp(want[k]) > 0:
            raise Wrong(f"{k} is the same for every step: {per_step}")
        raise Wrong(f"{k} differs from the time each step spent in its part ({what}).")
    for k, wall in (("wait_cpu_s", "wait_s"), ("step_cpu_s", "compute_s")):
        if _close(res[k], want[k]):
            continue
        if _close(res[k], res[wall]):
            raise Wrong(f"{k} equals {wall}: read cpu_clock() for CPU time — a thread "
                        f"blocked in next() uses none, and when other processes take turns "
                        f"on the core the wall clock runs on without us.")
        raise Wrong(f"{k} must be cpu_clock() read around the same part as {wall}.")
    if not math.isclose(float(res["samples_per_s"]), float(want["samples_per_s"]),
                        rel_tol=1e-9):
        hint = _rate_shortcut(float(res["samples_per_s"]), log, spec) or (
            "samples_per_s = batch_size × window / (end of the last step − end of the "
            "warm-up), both read after sync().")
        raise Wrong(f"samples_per_s = {float(res['samples_per_s']):.6g}, expected "
                    f"{float(want['samples_per_s']):.6g}: {hint}")


@exercise("7.1", "a timed training loop", reference=timed_loop, binds="timed_loop")
def _(answer, ref, rng):
    for kind in fake.SPEC_KINDS:
        spec = fake.draw_spec(rng, kind)
        got = answer.derive(fake.run_loop, spec)
        want = ref.derive(fake.run_loop, spec)
        try:
            _loop_structure(got["log"], spec)
            _arrays(got["result"], spec)
            _loop_values(got["result"], want["result"], got["log"], spec)
        except Wrong as w:
            raise Wrong(f"on a machine with {kind} ({spec['warmup']} warm-up steps, a window "
                        f"of {spec['window']}): {w}") from None


# ------------------------------------------------------------ 7.2 the waiting share
def _wait_cases(rng):
    # uneven steps: a slow first batch (worker start-up) and a mix of short and long waits
    yield np.array([0.9, 0.01, 0.0, 0.02, 0.0]), np.array([0.01, 0.05, 0.05, 0.05, 0.05])
    yield np.array([0.0, 0.0]), np.array([0.1, 0.2])
    for _ in range(3):
        n = int(rng.integers(3, 30))
        yield rng.exponential(0.02, n) * (rng.random(n) < 0.6), rng.uniform(0.005, 0.05, n)


@exercise("7.2", "share of time waiting for data", reference=wait_fraction,
          binds="wait_fraction", answers=("labkit.dataload.model:waiting_share",))
def _(answer, ref, rng):
    for w, c in _wait_cases(rng):
        got = answer(w.copy(), c.copy())
        want = ref(w, c)
        if np.isclose(got, np.mean(w / (w + c))) and not np.isclose(got, want):
            raise Wrong("you averaged the per-step shares; a long stall in one step weighs more "
                        "than a short one: divide the total wait by the total time.")
        if np.isclose(got, w.sum() / c.sum()) and not np.isclose(got, want):
            raise Wrong("that is wait / compute; the share is wait / (wait + compute).")
        expect_close(got, want, f"wait_fraction for {len(w)} steps",
                     hint="Σ wait / (Σ wait + Σ compute).")


# --------------------------------------------------------------- 7.3 the experiments
_EXPERIMENT_SPECS = {"pipeline": "accelerator", "loader alone": "workers",
                     "compute alone": "no workers"}


def _experiment_hint(kind: str, log: dict, spec: dict) -> str:
    n, nexts, steps = spec["warmup"] + spec["window"], log["nexts"], log["steps"]
    if kind == "loader alone" and len(steps):
        return ("the loader alone must not train: return the batches and a step that does "
                "nothing with them, so the loop times loading only.")
    if kind == "compute alone":
        if len(nexts) == 0:
            return "take the one batch from the batches you are given."
        if len(nexts) > 1:
            return (f"you took {len(nexts)} batches from the loader; take one "
                    f"(next(iter(batches))) and give the loop that batch again and again "
                    f"(itertools.repeat), so the clock sees no loading at all.")
        if len(steps) and np.any(steps[:, 2] != nexts[0, 2]):
            return "every step must get the one cached batch."
    if kind != "compute alone" and len(nexts) != n:
        return "give the loop the batches as they are: it takes them one at a time."
    if kind == "pipeline" and (len(steps) != n or np.any(steps[:, 2] != nexts[:, 2])):
        return "the pipeline is the batches and the training step, unchanged."
    return "the loop must see the batches and the step this experiment is about."


@exercise("7.3", "exercise 8's experiments", reference=experiment, binds="experiment")
def _(answer, ref, rng):
    for kind in rng.permutation(list(_EXPERIMENT_SPECS)):
        kind = str(kind)
        spec = fake.draw_spec(rng, _EXPERIMENT_SPECS[kind])
        got = answer.derive(fake.run_experiment, kind, spec)
        want = ref.derive(fake.run_experiment, kind, spec)
        if got["ok"]:
            raise Wrong(f"experiment({kind!r}, batches, step) {got['ok']}: return the "
                        f"pair (batches, step) to give the timed loop.")
        log, expect = got["log"], want["log"]
        same = all(_close(log[k], expect[k]) for k in ("nexts", "steps")) and \
            log["iters"] <= 1 + expect["iters"]
        if not same:
            raise Wrong(f"experiment({kind!r}, …): {_experiment_hint(kind, log, spec)}")


# ------------------------------------------------------------------ 7.4 the trials
_NAMES = ("num_workers=0", "num_workers=1", "loader alone", "compute alone", "prefetch=4",
          "batch 64")


@exercise("7.4", "trials in alternation", reference=interleave, binds="interleave",
          answers=("labkit.dataload.measure:interleaved_trials",))
def _(answer, ref, rng):
    for _ in range(3):
        names = [str(n) for n in rng.choice(_NAMES, size=int(rng.integers(2, 5)), replace=False)]
        trials = int(rng.integers(2, 5))
        got = answer.derive(fake.interleave_order, names, trials)
        want = ref.derive(fake.interleave_order, names, trials)
        call = f"interleave({{{', '.join(names)}}}, trials={trials})"
        if got["order"] != want["order"]:
            if len(got["order"]) != len(want["order"]):
                raise Wrong(f"{call} ran {len(got['order'])} experiments; run each of the "
                            f"{len(names)} {trials} times.")
            if got["order"] == [n for n in names for _ in range(trials)]:
                raise Wrong(f"{call} ran each experiment {trials} times in a row: alternate "
                            f"(all once, then all again, …), so that a change in the "
                            f"machine's load between trials slows every setting alike.")
            raise Wrong(f"{call} ran them in the order {got['order']}: run all once, in "
                        f"their order, then all again, {trials} rounds.")
        if got["result"] != want["result"]:
            raise Wrong(f"{call} must return {{name: [its {trials} results, in the order "
                        f"they ran]}}.")


# ------------------------------------------------------------------ 7.5 the diagnosis
def _wait_share_rule(p: dict) -> str:
    waited, computed = float(np.sum(p["wait_s"])), float(np.sum(p["compute_s"]))
    return "data" if waited > computed else "compute"


@exercise("7.5", "which bottleneck: data, compute or both", reference=bottleneck_verdict,
          binds="diagnose", answers=("labkit.dataload.compare:verdict_of_rates",
                                     "labkit.dataload.compare:diagnose_experiments"))
def _(answer, ref, rng):
    cases = [(v, thr) for v in VERDICTS for thr in (0.9, float(rng.uniform(0.8, 0.92)))]
    for k in rng.permutation(len(cases)):
        verdict, thr = cases[int(k)]
        loader, compute, pipeline = fake.synthetic_experiments(rng, verdict, thr)
        got = answer(loader, compute, pipeline, thr)
        want = ref(loader, compute, pipeline, thr)
        at_09 = ref(loader, compute, pipeline, 0.9)
        if got == want:
            continue
        rl, rc, rp = (r["samples_per_s"] for r in (loader, compute, pipeline))
        what = (f"diagnose(loader alone {rl:,.0f}, compute alone {rc:,.0f}, pipeline "
                f"{rp:,.0f} samples/s, threshold={thr:.3f}) = {got!r}, expected {want!r}")
        if got not in VERDICTS:
            hint = "return one of 'data', 'compute', 'both'."
        elif want == "both" and got == ("data" if rl <= rc else "compute"):
            hint = ("the pipeline reached only {:.0%} of the slower stage alone: when it is "
                    "below the threshold, loading and the step slow each other down (they "
                    "share the cores) — 'both'.").format(rp / min(rl, rc))
        elif got == _wait_share_rule(pipeline):
            hint = ("the pipeline's waiting share does not say which stage binds (a data-bound "
                    "pipeline may wait little, two stages that compete may wait much): compare "
                    "the pipeline's rate with each stage's rate alone.")
        elif got == at_09:
            hint = f"use the threshold you are given ({thr:.3f}), not 0.9."
        elif want != "both" and got == "both":
            hint = ("compare the pipeline with the slower stage alone: the faster one cannot "
                    "be reached while the slower one sets the pace.")
        else:
            hint = ("the slower stage alone binds ('data' for the loader, 'compute' for the "
                    "step) when the pipeline reaches threshold × its rate; else 'both'.")
        raise Wrong(f"{what}: {hint}")


# ---------------------------------------------------- 7.6 the epoch with each index
@exercise("7.6", "a sampler that carries the epoch", reference=EpochIndices,
          binds="EpochIndices", answers=("labkit.dataload.model:EpochSampler",))
def _(answer, ref, rng):
    for _ in range(2):
        n = int(rng.integers(3, 7))
        m = int(rng.integers(n, 3 * n + 1))
        epochs, seed = int(rng.integers(2, 4)), int(rng.integers(0, 1000))
        got = answer.derive(fake.persistent_worker_epochs, n, m, epochs, seed)
        want = ref.derive(fake.persistent_worker_epochs, n, m, epochs, seed)
        call = f"EpochIndices({n}, num_samples={m})"
        first = got["indices"][0]
        if first and all(len(i) == 1 for i in first):
            raise Wrong(f"{call} yields plain indices: yield (epoch, i) pairs. A persistent "
                        f"worker keeps the copy of the dataset it started with, so an epoch "
                        f"set in the training process never reaches it — the epoch must "
                        f"travel with each index.")
        if got["error"]:
            raise Wrong(f"a worker could not load what {call} yields ({got['error']}): "
                        f"yield tuples (epoch, i).")
        if got["len"] != want["len"]:
            raise Wrong(f"len({call}) = {got['len'][0]}, expected {m}: the sampler hands "
                        f"out num_samples indices per epoch.")
        if got["indices"] != want["indices"]:
            flipped = [[[i[1], i[0]] for i in ep] for ep in want["indices"]]
            if got["indices"] == flipped:
                hint = "the pair is (epoch, i), in that order."
            elif all(i[0] == 0 for ep in got["indices"] for i in ep):
                hint = "set_epoch(e) must change the epoch the indices carry."
            else:
                hint = (f"epoch e yields (e, k mod {n}) for k = 0, 1, …, num_samples − 1, "
                        f"the epoch being the last set_epoch's.")
            raise Wrong(f"{call}, over {epochs} epochs: {hint}")
        for e, (a, b) in enumerate(zip(got["pixels"], want["pixels"])):
            expect_close(a, b, f"the items a persistent worker loads in epoch {e}",
                         hint="yield (epoch, i) pairs; the dataset seeds each item's "
                              "augmentation from them.")


# ------------------------------------------------------------------ 7.7 the bound
# (L, C, workers, cores). (4, 2) comes before (2, 2): there L/cores = L/W, so an answer
# without the cores bound and one whose cores bound leaves out the step agree; on (4, 2)
# they differ and each gets the hint that is true of it.
_THROUGHPUT_CASES = [(0.032, 0.012, 0, 2), (0.032, 0.012, 1, 2), (0.032, 0.012, 4, 2),
                     (0.032, 0.012, 2, 2), (0.032, 0.012, 4, 16), (0.004, 0.010, 3, 8),
                     (0.050, 0.005, 8, 4), (0.020, 0.020, 1, 1), (0.010, 0.001, 16, 64)]


def _rate_is(bound):
    """The test "with workers, the answer is 1 / max(bounds(L, C, W, cores))"."""
    def test(got, L, C, W, cores):
        return W > 0 and math.isclose(got, 1 / max(bound(L, C, W, cores)), rel_tol=1e-6)
    return test


_no_cores = _rate_is(lambda L, C, W, cores: (C, L / W))
_cores_without_step = [_rate_is(lambda L, C, W, cores: (C, L / W, L / cores)),
                       _rate_is(lambda L, C, W, cores: (L / W, L / cores))]


def _cores_share_load_only(got, *case):
    return any(test(got, *case) for test in _cores_without_step)


_THROUGHPUT_SHORTCUTS = [      # the step bound first: an answer without it may also match
    # the cores bound without the step where that bound binds, e.g. 1/max(L/W, L/cores)
    (_rate_is(lambda L, C, W, cores: (L / W, (L + C) / cores)),
     "the training step itself takes C: however many workers load, the rate is at most 1/C."),
    (lambda got, *case: _no_cores(got, *case) and not _cores_share_load_only(got, *case),
     "that leaves out the cores: all the CPU work, L + C per batch, shares them, so the "
     "rate is at most cores / (L + C)."),
    (lambda got, *case: _cores_share_load_only(got, *case) and not _no_cores(got, *case),
     "the cores bound leaves out the step: the training step (C) runs on the CPU too, so "
     "the cores share L + C per batch and the rate is at most cores / (L + C), not "
     "cores / L."),
    # only a single-case check_formula test reaches this today: guards a reordering of the cases
    (lambda got, *case: _no_cores(got, *case) or _cores_share_load_only(got, *case),
     "the cores bound is missing or too loose: all the CPU work, loading (L) and the step "
     "(C), shares the cores, so the rate is at most cores / (L + C)."),
    (equals(lambda L, C, W, cores: 1 / (L + C), rtol=1e-6),
     "with workers the loading overlaps the step; the slowest resource sets the rate, not "
     "the sum."),
    (lambda got, L, C, W, cores: math.isclose(got, L + C if W == 0 else
                                              max(C, L / W, (L + C) / cores), rel_tol=1e-6),
     "that is seconds per batch; return batches per second.")]


@exercise("7.7", "throughput bound of a loader", reference=steady_throughput,
          binds="steady_throughput",
          answers=("labkit.dataload.model:pipeline_bounds", "labkit.dataload.sim:bound_rate"))
def _(answer, ref, rng):
    cases = [*_THROUGHPUT_CASES, *drawn_cases(_THROUGHPUT_CASES, ref, rng)]
    try:
        check_formula(answer, ref, cases, rtol=1e-6,
                      call=lambda L, C, W, cores: f"steady_throughput(L={L:.4g}, C={C:.4g}, "
                                                  f"workers={W}, cores={cores})",
                      shortcuts=_THROUGHPUT_SHORTCUTS,
                      hint="1/(L+C) without workers, else 1 / max(C, L/W, (L+C)/cores).")
    except ZeroDivisionError:     # only workers=0 divides by zero
        raise Wrong("with workers=0 the training process loads the batch itself: 1/(L + C); "
                    "do not divide by W.") from None


# ------------------------------------------------------------ 7.8 the prefetch queue
_QUEUE_HINT = ("ready_k = max(issued_k, free_w) + load_s[k] for worker w = k mod W; take_k = "
               "max(end_{k−1}, ready_k); end_k = take_k + compute_s[k]; wait_k = take_k − "
               "end_{k−1}; index k is issued at 0 for k < prefetch_factor × W, else when batch "
               "k − prefetch_factor × W is taken.")


def _queue_hint(wait, end, C, unbounded) -> str:
    """Name what the answer's own output breaks (no implementation of the queue here: the
    unbounded queue is the reference's with prefetch_factor = the number of batches)."""
    take = end - C
    prev = np.concatenate([[0.0], end[:-1]])
    if np.any(take < prev - 1e-12):
        return ("a batch was taken before the previous step had ended: the loop takes batch k "
                "only when it is ready *and* step k − 1 has ended, take_k = max(end_{k−1}, "
                "ready_k), and end_k = take_k + compute_s[k].")
    if not _close(wait, take - prev):
        return ("wait_k is the time between the end of step k − 1 and taking batch k: "
                "take_k − end_{k−1}, with take_k = end_k − compute_s[k].")
    if _close(wait, unbounded[0]) and _close(end, unbounded[1]):
        return ("no index is held back (issuing index k when batch k − D is built amounts to "
                "the same: batch k − D went to the same worker, which is then still busy): at "
                "most D = prefetch_factor × W indices are out, so index k goes out only when "
                "batch k − D is *taken* by the loop — the loader puts an index each time a "
                "batch is returned.")
    return _QUEUE_HINT


@exercise("7.8", "the prefetch queue as a recurrence", reference=prefetch_recurrence,
          binds="prefetch_pipeline", answers=("labkit.dataload.sim:simulate",))
def _(answer, ref, rng):
    cases = [(2, 1, 0.0), (2, 2, 0.5), (3, 1, 0.8), (1, 3, 0.4), (4, 2, 1.0)]
    for k in rng.permutation(len(cases)):
        W, pf, jitter = cases[int(k)]
        n = int(rng.integers(12, 30))
        L = float(rng.uniform(0.006, 0.02)) * (rng.gamma(1 / jitter ** 2, jitter ** 2, n)
                                               if jitter else np.ones(n))
        C = float(rng.uniform(0.6, 1.4)) * L.mean() / W * rng.uniform(0.7, 1.3, n)
        got = answer(L.copy(), C.copy(), W, pf)
        want = ref(L, C, W, pf)
        unbounded = ref(L, C, W, n)              # every index out at once
        call = f"prefetch_pipeline({n} batches, workers={W}, prefetch_factor={pf})"
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"{call}: return the pair (wait_s, end_s).")
        wait, end = (np.asarray(a, dtype=float) for a in got)
        if wait.shape != (n,) or end.shape != (n,):
            raise Wrong(f"{call}: wait_s and end_s hold one value per batch ({n}), got "
                        f"shapes {wait.shape} and {end.shape}.")
        if _close(wait, want[0]) and _close(end, want[1]):
            continue
        raise Wrong(f"{call}: {'end_s' if _close(wait, want[0]) else 'wait_s'} differs. "
                    f"{_queue_hint(wait, end, C, unbounded)}")


# --------------------------------------------------------------- 7.9 workers needed
formula_exercise(
    "7.9", "workers that keep the accelerator busy", workers_needed,
    cases=[(0.032, 0.012), (0.030, 0.010), (0.005, 0.020), (0.1, 0.009), (0.021, 0.007),
           (0.0101, 0.0050)],
    call=lambda L, C: f"workers_needed(L={L:.4g}, C={C:.4g})",
    shortcuts=[
        (lambda got, L, C: not got.is_integer(),
         "a worker count is a whole number; round L/C up."),
        (equals(lambda L, C: math.floor(L / C)),
         "W workers deliver W/L batches per second, fewer than the 1/C the step consumes: "
         "round up, not down."),
        (equals(lambda L, C: math.ceil(C / L)),
         "that is C/L upside down: W workers deliver W/L batches per second and the step "
         "consumes 1/C, so W ≥ L/C.")],
    hint="W workers deliver W/L batches per second; need W/L ≥ 1/C (and at least one worker).")


# ---------------------------------------------------------- 7.10 a cache of pixels
@exercise("7.10", "a cache of decoded pixels", reference=DecodedCache, binds="DecodedCache")
def _(answer, ref, rng):
    for _ in range(2):
        n, seed = int(rng.integers(3, 7)), int(rng.integers(0, 1000))
        picks = [[int(e), int(i)] for e, i in zip(rng.integers(0, 3, 6), rng.integers(0, 2 * n, 6))]
        same = [int(rng.integers(0, n))]
        indices = picks + [[0, same[0]], [1, same[0]], [same[0]]]
        got = answer.derive(fake.cache_behaviour, n, seed, indices)
        want = ref.derive(fake.cache_behaviour, n, seed, indices)
        call = f"DecodedCache(a dataset of {n} images, each twice)"
        if got["built"] + got["after"] > want["built"]:
            raise Wrong(f"{call} decoded {got['built'] + got['after']} times for {n} images: "
                        f"decode each image once, when the cache is built (dataset.image(j) "
                        f"for j < {n}), and augment from the cached pixels.")
        if got["built"] < want["built"]:
            raise Wrong(f"{call} decoded {got['built']} images when it was built: decode all "
                        f"{n} then, so no epoch pays a decode.")
        expect_equal(got["len"], want["len"], f"len({call})",
                     hint="as many items as the dataset.")
        expect_equal(got["stored_bytes"], want["stored_bytes"], f"{call}.stored_bytes",
                     hint="the bytes of the decoded pixels it holds.")
        if got["labels"] != want["labels"]:
            raise Wrong(f"{call}: item i's label is dataset.labels[i % {n}].")
        px = got["pixels"]
        if px.shape == want["pixels"].shape and np.array_equal(px[-3], px[-2]) \
                and not np.array_equal(want["pixels"][-3], want["pixels"][-2]):
            raise Wrong(f"{call} gives the same augmented item in epochs 0 and 1: random "
                        f"augmentation cannot be cached — cache the decoded pixels and augment "
                        f"them afresh for every item.")
        expect_close(px, want["pixels"], f"{call}'s items",
                     hint="augment the cached pixels exactly as the dataset does: rng = "
                          "np.random.default_rng((dataset.seed, epoch, i)), then "
                          "augment(pixels, rng, blur=dataset.blur); a plain index i uses "
                          "dataset.epoch.")


# ----------------------------------------------------------- 7.11 a CIFAR-10 record
def _record(rng, label_bytes=1):
    img = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=label_bytes).astype(np.uint8)
    rec = labels.tobytes() + img.transpose(2, 0, 1).tobytes()
    return rec, int(labels[-1]), img


def _ramp_record():
    """A recognisable image: red ramp along rows, green along columns, label 7."""
    img = np.zeros((32, 32, 3), np.uint8)
    img[..., 0] = np.arange(32)[:, None] * 8
    img[..., 1] = np.arange(32)[None, :] * 8
    img[..., 2] = 200
    return bytes([7]) + img.transpose(2, 0, 1).tobytes(), 7, img


@exercise("7.11", "decode a CIFAR-10 binary record", reference=decode_record,
          binds="decode_record", answers=("labkit.dataload.cifar:read_cifar_bin",))
def _(answer, ref, rng):
    for rec, label, img in [_ramp_record(), *(_record(rng) for _ in range(3))]:
        got = answer(rec)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong("return a pair (label, image).")
        want_label, want_img = ref(rec)
        lab, im = got
        im = np.asarray(im)
        if int(lab) != int(want_label):
            raise Wrong(f"label {lab}, expected {want_label}: the label is the record's first "
                        f"byte.")
        if im.shape == (3, 32, 32):
            raise Wrong("that is CHW; return the image as (32, 32, 3), height × width × channel.")
        if im.shape != (32, 32, 3):
            raise Wrong(f"image shape {im.shape}; expected (32, 32, 3). The 3072 pixel bytes "
                        f"follow the label byte.")
        if np.array_equal(im, np.frombuffer(rec[1:], np.uint8).reshape(32, 32, 3)) \
                and not np.array_equal(im, want_img):
            raise Wrong("the pixels are not interleaved RGBRGB…: the record holds 1024 red "
                        "bytes, then 1024 green, then 1024 blue (planes), each 32×32 row-major.")
        if not np.array_equal(im, want_img):
            raise Wrong("pixel values differ: skip exactly one label byte, read three 32×32 "
                        "planes (R, G, B), then move the channel axis last.")
