"""Chapter 11's exercises: scheduling, stragglers and fault tolerance."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise
from labkit.cluster import faults, stragglers


def can_backfill(now, free_gpus, running, head_gpus, job_gpus, job_estimate):
    """Reference: EASY's test on a pool of GPUs. ``running`` is a list of (end time, GPUs).
    The head's shadow time is when enough running jobs have ended for it to fit; the
    "extra" GPUs are those free then beyond what the head needs. A job may start now iff
    it fits now and (it ends by the shadow time, or it needs no more than the extra GPUs)."""
    if job_gpus > free_gpus:
        return False
    avail, shadow = free_gpus, now
    if head_gpus > avail:
        for end, g in sorted(running):
            avail += g
            if avail >= head_gpus:
                shadow = end
                break
    extra = avail - head_gpus
    return now + job_estimate <= shadow or job_gpus <= extra


def daly_interval(checkpoint_s, mtbf_s):
    """Reference: Daly's (2006) optimum checkpoint interval."""
    return faults.daly_interval(checkpoint_s, mtbf_s)


def expected_lost_work(segment_s, mtbf_s):
    """Reference: E[X | X < L] for X ~ Exp(M)."""
    return faults.expected_lost_work(segment_s, mtbf_s)


def straggler_step_time(workers, base, p, slowdown):
    """Reference: E[max] when each of N workers takes slowdown × base with probability p:
    base · (1 + (slowdown − 1)(1 − (1 − p)^N))."""
    return stragglers.expected_step_bernoulli(workers, base, p, slowdown)


def backup_step_time(workers, backups, base, delay):
    """Reference: E[N-th fastest of N + b shifted exponentials] = base + delay (H_{N+b} − H_b)."""
    return stragglers.expected_step_exponential(workers, base, delay, backups)


# ---- 11.1 ------------------------------------------------------------------------------

_BACKFILL_CASES = [
    # (now, free, running [(end, gpus)], head, job gpus, job estimate)
    (0.0, 2, [(10.0, 4), (20.0, 2)], 6, 2, 5.0),      # ends before the shadow (10)
    (0.0, 2, [(10.0, 4), (20.0, 2)], 6, 2, 15.0),     # runs past it; extra = 0 -> no
    (0.0, 2, [(10.0, 4), (20.0, 2)], 4, 2, 15.0),     # head needs 4, 6 free then: extra 2
    (0.0, 2, [(10.0, 4), (20.0, 2)], 6, 3, 1.0),      # does not fit now
    (5.0, 3, [(10.0, 5), (30.0, 5)], 8, 3, 5.0),      # ends exactly at the shadow: allowed
    (5.0, 3, [(10.0, 5), (30.0, 5)], 8, 3, 5.5),      # just past it, extra 0: no
    (5.0, 3, [(10.0, 4), (30.0, 5)], 8, 3, 50.0),     # shadow 30, extra 4: yes
    (0.0, 1, [(8.0, 1), (4.0, 2), (12.0, 4)], 5, 1, 20.0),   # unsorted list; shadow 12
    (0.0, 1, [(8.0, 1), (4.0, 2), (12.0, 4)], 3, 1, 20.0),   # shadow 4, extra 0 -> no
    (0.0, 4, [(9.0, 4)], 6, 2, 20.0),                 # shadow 9; extra 2 -> yes
    (0.0, 4, [(9.0, 4)], 6, 3, 20.0),                 # extra 2 < 3 -> no
    (2.0, 0, [(9.0, 8)], 4, 1, 1.0),                  # nothing free
]


@exercise("11.1", "an EASY backfilling decision", reference=can_backfill, binds="can_backfill")
def _(answer):
    for now, free, running, head, g, est in _BACKFILL_CASES:
        want = can_backfill(now, free, list(running), head, g, est)
        got = answer(now, free, list(running), head, g, est)
        if not isinstance(got, (bool, np.bool_)):
            raise Wrong(f"return True or False, got {type(got).__name__} {got!r}.")
        if bool(got) == want:
            continue
        case = (f"now={now}, free={free}, running={running}, head needs {head}, job "
                f"{g} GPUs × {est} s")
        if got and g > free:
            raise Wrong(f"{case}: the job needs {g} GPUs but only {free} are free: it cannot "
                        f"start now.")
        if got:
            raise Wrong(f"{case}: you let it start, but it would delay the head's "
                        f"reservation: it runs past the shadow time and takes GPUs the head "
                        f"needs then. Fitting now is not enough.")
        raise Wrong(f"{case}: it may start. Either it ends (now + estimate) no later than "
                    f"the shadow time, or it uses only the 'extra' GPUs — those free at the "
                    f"shadow time beyond what the head needs (count the GPUs the jobs ending "
                    f"by then give back, in order of their end times).")


# ---- 11.2 ------------------------------------------------------------------------------

formula_exercise(
    "11.2", "Daly's checkpoint interval", daly_interval,
    cases=[(300.0, 86400.0), (300.0, 21600.0), (300.0, 900.0), (120.0, 8 * 3600.0),
           (60.0, 3600.0), (7200.0, 3600.0), (30.0, 1e6)],
    call=lambda c, m: f"daly_interval(C={c:g} s, M={m:g} s)",
    shortcuts=[
        (lambda got, c, m: c >= 2 * m,
         "when the checkpoint takes at least 2M, Daly's interval is simply M."),
        (equals(lambda c, m: math.sqrt(2 * c * m)),
         "that is Young's first-order √(2CM); Daly adds the higher-order terms and "
         "subtracts C."),
        (equals(lambda c, m: daly_interval(c, m) + c), "you forgot the final − C."),
        (equals(lambda c, m: math.sqrt(c * m)), "√(CM) misses the factor 2.")],
    hint="τ = √(2CM)·[1 + ⅓√(C/2M) + ⅑(C/2M)] − C for C < 2M.")


# ---- 11.3 ------------------------------------------------------------------------------

formula_exercise(
    "11.3", "expected work lost to a failure", expected_lost_work,
    cases=[(3600.0, 8 * 3600.0), (600.0, 600.0), (7200.0, 3600.0), (60.0, 1e5),
           (2000.0, 5000.0)],
    call=lambda L, m: f"expected_lost_work(L={L:g}, M={m:g})", rtol=1e-7,
    shortcuts=[
        (equals(lambda L, m: L / 2),
         "L/2 assumes the failure is uniform over the segment. With exponential gaps it is "
         "likelier early: compute E[X | X < L] for X ~ Exp(M) (integrate x·e^(−x/M)/M over "
         "[0, L], divide by P[X < L])."),
        (equals(lambda L, m: m), "M is the mean of X without the condition X < L.")],
    hint="E[X | X < L] = M − L / (e^(L/M) − 1).")


# ---- 11.4 ------------------------------------------------------------------------------

formula_exercise(
    "11.4", "a straggler's slowdown", straggler_step_time,
    cases=[(1, 1.0, 0.1, 3.0), (8, 1.0, 0.05, 3.0), (64, 0.5, 0.02, 4.0),
           (256, 2.0, 0.01, 2.0), (16, 1.0, 0.0, 5.0), (4, 1.0, 1.0, 2.0), (32, 1.0, 0.3, 1.0)],
    call=lambda n, base, p, s: f"straggler_step_time(N={n}, base={base}, p={p}, slowdown={s})",
    atol=1e-12,
    shortcuts=[
        (equals(lambda n, base, p, s: base * (1 + (s - 1) * p)),
         "that is one worker's mean time. The step waits for the slowest of N workers: it "
         "is slow unless *no* worker straggles."),
        (equals(lambda n, base, p, s: base * (1 + (s - 1) * min(1.0, n * p))),
         "N·p is the union bound, not the probability that at least one worker straggles; "
         "use 1 − (1 − p)^N."),
        (equals(lambda n, base, p, s: base * s),
         "the step is slow only when some worker straggles.")],
    hint="E[step] = base · (1 + (slowdown − 1)·P[some worker is slow]).")


# ---- 11.5 ------------------------------------------------------------------------------

_H = stragglers.harmonic      # H_n = 1 + 1/2 + … + 1/n

formula_exercise(
    "11.5", "backup workers", backup_step_time,
    cases=[(1, 0, 1.0, 0.5), (8, 0, 1.0, 0.1), (8, 2, 1.0, 0.1), (32, 4, 0.5, 0.2),
           (100, 5, 1.0, 1.0), (4, 4, 2.0, 0.3)],
    call=lambda n, b, base, d: f"backup_step_time(N={n}, b={b}, base={base}, delay={d})",
    shortcuts=[
        (equals(lambda n, b, base, d: base + d * _H(n)),
         "base + delay·H_N is the slowest of N; with b backups the step waits only for the "
         "N-th fastest of N + b."),
        (equals(lambda n, b, base, d: base + d * _H(n + b)),
         "that is the slowest of all N + b; the b slowest are dropped."),
        (equals(lambda n, b, base, d: base + d * (_H(n) - _H(b))),
         "the N-th smallest of m = N + b exponentials has mean delay·(H_m − H_(m−N)).")],
    hint="E = base + delay · (H_(N+b) − H_b), H_n = 1 + 1/2 + … + 1/n.")
