"""Chapter 11's exercises: scheduling, stragglers and fault tolerance."""
from __future__ import annotations

import math

import numpy as np

from labkit.check.core import Wrong, exercise
from labkit.check.formula import equals, formula_exercise
from labkit.cluster import ckpt_lab, faults, ft_train, scheduler, stragglers
from labkit.cluster.jobs import generate_jobs


def can_backfill(now, free_gpus, running, head_gpus, job_gpus, job_estimate):
    """Reference: EASY's test on a pool of GPUs (:func:`labkit.cluster.scheduler.can_backfill`:
    the shadow time counts every job ending at the same instant)."""
    return scheduler.can_backfill(now, free_gpus, running, head_gpus, job_gpus, job_estimate)


def easy_backfill(now, queue, running, free):
    """Reference: EASY's backfill pass inside the simulator
    (:func:`labkit.cluster.scheduler.easy_backfill`)."""
    return scheduler.easy_backfill(now, queue, running, free)


def save_checkpoint(state, path):
    """Reference: the atomic save (:func:`labkit.cluster.ft_train.save_atomic`)."""
    return ft_train.save_atomic(state, path)


class Checkpoint(ft_train.Checkpoint):
    """Reference: what a worker saves and how it resumes
    (:class:`labkit.cluster.ft_train.Checkpoint`)."""


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
    (0.0, 2, [(10.0, 2), (10.0, 2)], 4, 2, 20.0),     # A and B end together: extra 2 -> yes
    (0.0, 1, [(5.0, 1), (5.0, 1), (9.0, 4)], 2, 1, 50.0),   # the two ending at 5 free 2
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


def _drawn_backfill_case(rng) -> tuple:
    """A pool with running jobs (ends on a coarse grid, so ties are common) and a head that
    does not fit now."""
    now = float(rng.integers(0, 5))
    running = [(now + float(rng.integers(1, 6)) * 5, int(rng.integers(1, 5)))
               for _ in range(int(rng.integers(1, 6)))]
    free = int(rng.integers(0, 4))
    head = int(rng.integers(free + 1, free + sum(g for _, g in running) + 1))
    return (now, free, running, head, int(rng.integers(1, 4)),
            float(rng.integers(1, 8)) * 5 - float(rng.integers(0, 2)))


def _can_backfill_first_end(now, free, running, head, g, est):
    """The tie bug: stop at the first running job after which the head fits."""
    avail, shadow = free, now
    for end, x in sorted(running):
        if avail >= head:
            break
        avail, shadow = avail + x, end
    return g <= free and (now + est <= shadow or g <= avail - head)


@exercise("11.1", "an EASY backfilling decision", reference=can_backfill, binds="can_backfill",
          answers=("labkit.cluster.scheduler:can_backfill",
                   "labkit.cluster.scheduler:shadow_time"))
def _(answer, ref, rng):
    cases = list(_BACKFILL_CASES) + [_drawn_backfill_case(rng) for _ in range(12)]
    for now, free, running, head, g, est in cases:
        want = ref(now, free, list(running), head, g, est)
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
        if bool(got) == _can_backfill_first_end(now, free, list(running), head, g, est):
            raise Wrong(f"{case}: count every job that ends at the shadow time: jobs ending "
                        f"at the same time give their GPUs back together, so all of them "
                        f"are free at the shadow time and the extra GPUs include theirs.")
        if got:
            raise Wrong(f"{case}: you let it start, but it would delay the head's "
                        f"reservation: it runs past the shadow time and takes GPUs the head "
                        f"needs then. Fitting now is not enough.")
        raise Wrong(f"{case}: it may start. Either it ends (now + estimate) no later than "
                    f"the shadow time, or it uses only the 'extra' GPUs — those free at the "
                    f"shadow time beyond what the head needs (count the GPUs the jobs ending "
                    f"by then give back, in order of their end times).")


# ---- 11.6: the backfill pass inside the simulator ---------------------------------------

def backfill_variant(*, ties: bool = True, extra: bool = True, accumulate: bool = True,
                     scan: str = "all", strict: bool = False):
    """EASY's pass with one of the mistakes the check names (the keyword set to its other
    value): shadow without ties, no extra GPUs, extra GPUs not used up by earlier backfills,
    a scan that stops at the first job that cannot start (``"stop"``) or looks only at the
    job behind the head (``"next"``), a strict "ends before the shadow"."""
    def variant(now, queue, running, free):
        head = queue[0]
        if ties:
            shadow, later = scheduler.reservation(now, head, running, free)
        else:                  # one job at a time, stopping as soon as the head fits
            later, shadow = free.copy(), now
            for r in sorted(running, key=lambda r: r.end):
                if later.fits(head.gpus):
                    break
                later.give(r.alloc)
                shadow = r.end
        started = []
        for job in queue[1:2] if scan == "next" else queue[1:]:
            alloc = free.place(job.gpus)
            ends_in_time = now + job.estimate < shadow if strict else \
                now + job.estimate <= shadow
            ok = alloc is not None and ends_in_time
            if alloc is not None and not ends_in_time and extra:
                trial = later.copy()
                trial.take(alloc)
                ok = trial.fits(head.gpus)
                if ok and accumulate:
                    later = trial
            if ok:
                free.take(alloc)
                started.append(job.job)
            elif scan == "stop":
                break
        return started
    return variant


BACKFILL_SHORTCUTS = [
    (dict(ties=False), "jobs that end at the same time give their GPUs back together: at the "
                       "shadow time count every job ending at that instant (the first one "
                       "that makes the head fit is not the last to free GPUs then), so the "
                       "extra GPUs include theirs."),
    (dict(extra=False), "a job that runs past the shadow time may still start if the cluster "
                        "at the shadow time fits the head with this job's GPUs taken (the "
                        "'extra' GPUs); you only backfilled jobs that end before it."),
    (dict(accumulate=False), "each job you backfill past the shadow time uses up extra GPUs: "
                             "take its GPUs from the cluster-at-the-shadow-time as well, or "
                             "the next job is let in on the same GPUs and the head is "
                             "delayed."),
    (dict(scan="next"), "you only looked at the job right behind the head; EASY scans the "
                        "whole queue behind it, in order."),
    (dict(scan="stop"), "you stopped at the first job that could not start; EASY goes on "
                        "down the queue (a later, smaller or shorter job may fit)."),
    (dict(strict=True), "a job that ends exactly at the shadow time does not delay the head: "
                        "now + estimate <= shadow is allowed."),
]

# hand-made workloads: (rows (arrival, gpus, duration, estimate), nodes, gpus per node)
BACKFILL_WORKLOADS = [
    # issue 22: A, B (2 GPUs, 10 s) at 0, head H (4 GPUs) at 1, C (2 GPUs, 20 s) at 2 on 6
    # GPUs: A and B end together at the shadow time, so C may use the extra 2 at once
    ([(0, 2, 10, 10), (0, 2, 10, 10), (1, 4, 5, 5), (2, 2, 20, 20)], 1, 6),
    # the chapter's case: C (1 GPU, 3 s) backfills before B's reservation
    ([(0, 3, 10, 10), (1, 4, 5, 5), (2, 1, 3, 3)], 1, 4),
    # behind the head: a job that does not fit now, then one that does
    ([(0, 6, 10, 10), (1, 8, 5, 5), (2, 4, 3, 3), (3, 2, 30, 30), (4, 1, 4, 6)], 1, 8),
    # two jobs past the shadow on 2 extra GPUs: only the first may start
    ([(0, 4, 10, 10), (1, 6, 5, 5), (2, 2, 50, 50), (2, 2, 50, 50)], 1, 8),
    # a job ending exactly at the shadow time
    ([(0, 3, 10, 10), (1, 4, 5, 5), (2, 1, 8, 8)], 1, 4),
]


def _drawn_workload(rng) -> tuple:
    nodes, gpn = [(1, 16), (4, 8), (2, 4), (8, 4)][int(rng.integers(4))]
    total = nodes * gpn
    jobs = generate_jobs(int(rng.integers(40, 90)), total_gpus=total,
                         load=float(rng.uniform(0.8, 1.3)), seed=int(rng.integers(1 << 30)),
                         max_gpus=total // 2 if nodes > 1 else total,
                         overestimate=float(rng.choice([1.0, 1.5, 3.0])))
    rows = [(j.arrival, j.gpus, j.duration, j.estimate) for j in jobs]
    if rng.random() < 0.5:                 # a coarse clock: many jobs end together
        rows = [(float(np.floor(a / 60) * 60), g, float(np.ceil(d / 60) * 60),
                 float(np.ceil(e / 60) * 60)) for a, g, d, e in rows]
    return rows, nodes, gpn


@exercise("11.6", "the EASY backfill pass inside the simulator", reference=easy_backfill,
          binds="easy_backfill", answers=("labkit.cluster.scheduler:easy_backfill",
                                          "labkit.cluster.scheduler:reservation",
                                          "labkit.cluster.scheduler:can_backfill",
                                          "labkit.cluster.scheduler:shadow_time"))
def _(answer, ref, rng):
    cases = [(rows, n, g, "pack") for rows, n, g in BACKFILL_WORKLOADS]
    for _ in range(4):
        rows, n, g = _drawn_workload(rng)
        cases.append((rows, n, g, str(rng.choice(["pack", "spread"]))))
    got = [answer.derive(scheduler.backfill_schedule, *case) for case in cases]
    want = [ref.derive(scheduler.backfill_schedule, *case) for case in cases]
    bad = [k for k in range(len(cases)) if list(got[k]) != list(want[k])]
    if not bad:
        return
    (rows, nodes, gpn, placement), mine, right = cases[bad[0]], got[bad[0]], want[bad[0]]
    i = next(k for k, (a, b) in enumerate(zip(mine, right)) if a != b)
    a, g, d, e = rows[i]
    where = (f"{len(rows)} jobs on {nodes}×{gpn} GPUs ({placement}): job {i} ({g} GPUs, "
             f"declared {e:g} s, arrived at {a:g} s) started at {mine[i]:g} s under your "
             f"pass, at {right[i]:g} s under EASY")
    for kw, hint in BACKFILL_SHORTCUTS:       # the mistake that explains every schedule
        shortcut = backfill_variant(**kw)
        if all(scheduler.backfill_schedule(shortcut, *cases[k]) == list(got[k])
               for k in range(len(cases))):
            raise Wrong(f"{where}. {hint}")
    raise Wrong(f"{where}. Compute the shadow time (give back the running jobs' GPUs by "
                f"estimated end, ties together, until the head fits), then go down the "
                f"queue: start a job that fits now if it ends by the shadow time, or if the "
                f"cluster at the shadow time still fits the head with its GPUs taken there "
                f"too.")


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


# ---- 11.7 the atomic save ------------------------------------------------------------------

RENAME = ("POSIX rename(): when the target exists, it 'shall remain visible ... and refer "
          "either to the file referred to by new or old before the operation began'")
FSYNC = ("fsync(2): 'Calling fsync() does not necessarily ensure that the entry in the "
         "directory containing the file has also reached disk. For that an explicit fsync() "
         "on a file descriptor for the directory is also needed.'")


@exercise("11.7", "an atomic checkpoint (write, fsync, rename)", reference=save_checkpoint,
          binds="save_checkpoint", answers=("labkit.cluster.ft_train:save_atomic",))
def _(answer, ref, rng):
    for _ in range(2):
        seed = int(rng.integers(1 << 20))
        got = answer.derive(ckpt_lab.save_probe, seed)
        if got["error"]:
            raise Wrong(f"your save raised {got['error']}.")
        if got["after_first"] != "first":
            raise Wrong(f"after save_checkpoint(state, path), torch.load(path) gives "
                        f"{got['after_first']!r} instead of the state: save the whole dict "
                        f"with torch.save so that torch.load(path, weights_only=True) reads "
                        f"it back.")
        kill = (f"a kill after {got['kill_after']} of the {got['bytes']} bytes of the next "
                f"save")
        if got["after_kill"] != "first":
            left = {"torn": "a torn file torch.load cannot read",
                    "missing": "no checkpoint at all"}.get(got["after_kill"],
                                                           got["after_kill"])
            raise Wrong(f"{kill} left {left} at path, where the previous checkpoint should "
                        f"be: never write into path itself. Write a temporary file in the "
                        f"same directory and rename it over path when it is complete "
                        f"(os.replace; {RENAME}).")
        if not got["killed"]:
            raise Wrong(f"{kill} did not stop your save (it wrote "
                        f"{got['written_before_kill']} bytes and returned): do not catch "
                        f"BaseException without raising it again.")
        if not got["renamed"]:
            raise Wrong("the new checkpoint never reached path by a rename: publish it with "
                        "os.replace(tmp, path) — a copy onto path is a write into path, and "
                        "a kill in its middle tears it.")
        if not got["same_dir"]:
            raise Wrong("your temporary file is not in path's directory: rename is atomic "
                        "only within one file system (across two it fails with EXDEV); "
                        "create it next to path (e.g. tempfile.mkstemp(dir=...)).")
        if not got["fsynced"]:
            raise Wrong("the file you renamed over path was never fsynced (the check wraps "
                        "os.fsync and os.fdatasync, also under the names you imported them "
                        "as): after a power loss the rename can be on disk while the data is "
                        "not. Call os.fsync(f.fileno()) before the rename.")
        if not got["flushed"]:
            raise Wrong("you fsynced the file while Python still held part of it in its "
                        "buffer (the file grew after the fsync): call f.flush() first, then "
                        "os.fsync(f.fileno()).")
        if not got["dir_fsynced"]:
            raise Wrong(f"after the rename, fsync the directory (os.open(dir, os.O_RDONLY), "
                        f"os.fsync, os.close) so the rename itself is durable: {FSYNC}")
        if got["after_recovery"] != "third":
            raise Wrong(f"after the crash, the next save did not work (path holds "
                        f"{got['after_recovery']!r}): a temporary file left by a crash must "
                        f"not stop the next save.")


# ---- 11.8 resume, bit-identical after a kill ---------------------------------------------

def _ft_case(rng) -> tuple[dict, int]:
    every = int(rng.choice([3, 4]))
    kill = int(rng.integers(every + 1, 12))
    if kill % every == 0:
        kill += 1
    return dict(steps=12, ckpt_every=every, seed=int(rng.integers(1000))), kill


RESTART_CFG, RESTART_KILL = dict(steps=12, ckpt_every=4), 10    # the chapter's torchrun job


@exercise("11.8", "resume bit-identically after a worker is killed", reference=Checkpoint,
          binds="Checkpoint", answers=("labkit.cluster.ft_train:Checkpoint",))
def _(answer, ref, rng):
    cfg, kill = _ft_case(rng)
    probe = answer.derive(ckpt_lab.resume_probe, cfg, kill)
    if "not_class" in probe:
        raise Wrong(f"pass the class itself (Checkpoint), not {probe['not_class']}.")
    if probe["fresh"] != 0:
        raise Wrong(f"with no checkpoint file yet, resume returned {probe['fresh']!r}: "
                    f"return 0 (start from the first step).")
    if not probe["untouched"]:
        raise Wrong("with no checkpoint file yet, resume changed the model: leave it as "
                    "built and return 0.")
    where = (f"trained with a checkpoint every {cfg['ckpt_every']} steps, killed after step "
             f"{kill}, resumed by a fresh model and optimizer")
    if probe["start"] != probe["saved"]:
        raise Wrong(f"{where}: resume returned {probe['start']!r}, but the last checkpoint "
                    f"was written after step {probe['saved']}: save the step and return it.")
    for part, hint in (("model", "load the model's state_dict"),
                       ("optimizer", "load the optimizer's state_dict (SGD keeps a "
                                     "momentum buffer per parameter)"),
                       ("rng", "restore torch's generator (torch.get_rng_state() when "
                               "saving, torch.set_rng_state(...) when resuming): it draws "
                               "every batch and every dropout mask")):
        if not probe[part]:
            raise Wrong(f"{where}: after resume the {part} is not what it was at the "
                        f"checkpoint: {hint}.")
    want = ft_train.reference_params(ft_train.FTConfig(**cfg), 1)
    if not ft_train.identical(probe["params"], want):
        raise Wrong(f"{where}: the final weights differ from an uninterrupted run: save "
                    f"everything the later steps depend on, and save it at the step you "
                    f"are given.")
    cfg, kill = dict(RESTART_CFG, seed=int(rng.integers(1000))), RESTART_KILL
    real = answer.derive(ckpt_lab.checkpoint_lab_run, cfg, kill)
    if "error" in real:
        raise Wrong(f"the torchrun job with your class did not finish:\n{real['error']}")
    if real["restarts"] != 1 or real["resumed_from"] == 0:
        raise Wrong(f"torchrun restarted {real['restarts']} time(s) and the last attempt "
                    f"started from step {real['resumed_from']}: the restarted workers must "
                    f"resume from the checkpoint.")
    want = ft_train.reference_params(ft_train.FTConfig(**cfg), 2)
    if not ft_train.identical(real["params"], want):
        raise Wrong(f"two gloo workers under torchrun, rank 1 killed after step {kill} and "
                    f"restarted: the final weights differ from an uninterrupted 2-worker run.")
