"""The cluster scheduler as a state class (:class:`labkit.cluster.scheduler.ClusterSim`):
the results of the closures it replaced, kept as fingerprints, and its invariants on
workloads drawn by Hypothesis — no node's GPUs over-committed at any instant, every job run
for exactly its duration (plus the overhead of each preemption) on all its GPUs at once,
the GPU-seconds of the occupancy curve those of the jobs, and EASY starting every head no
later than the reservation it was given (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001, §2)."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.cluster import scheduler as S
from labkit.cluster.jobs import Job, generate_jobs
from labkit.cluster.scheduler import Cluster, busy_gpus, simulate

# ---- the state class gives the closures' results -------------------------------------------


def ends_first(now, queue, running, free):
    """A backfill pass without a reservation: every job behind the head that fits now and
    ends (by its estimate) before the first running job does, in queue order."""
    soonest = min((r.end for r in running), default=np.inf)
    out = []
    for w in queue[1:]:
        alloc = free.place(w.gpus)
        if alloc is not None and now + w.estimate <= soonest:
            free.take(alloc)
            out.append(w.job)
    return out


def smallest_first(now, queue, running, free):
    """EASY's test with the candidates behind the head tried smallest first."""
    behind = sorted(queue[1:], key=lambda w: (w.gpus, w.job))
    return S.easy_backfill(now, [queue[0], *behind], running, free)


PASSES = {"none": None, "ends_first": ends_first, "smallest_first": smallest_first}


def random_run(seed):
    """A workload, cluster, policy and options drawn from ``seed``: 1-4 nodes of 1-8 GPUs,
    10-120 jobs at a load of 0.5-1.4, over-estimated run times, priorities, preemption
    overheads, whole seconds (arrivals and ends that coincide) half the time, and EASY with
    labkit's pass or one of two others."""
    r = np.random.default_rng(seed)
    gpn = int(r.choice([1, 2, 4, 8]))
    nodes = int(r.integers(1, 5))
    total = nodes * gpn
    n = int(r.integers(10, 120))
    jobs = generate_jobs(n, total_gpus=total, load=float(r.uniform(0.5, 1.4)),
                         seed=int(r.integers(1000)), max_gpus=total,
                         median_duration=float(r.choice([5.0, 60.0, 600.0])),
                         priorities=int(r.integers(1, 4)),
                         overestimate=float(r.choice([1.0, 1.5, 3.0])))
    if r.random() < 0.5:
        jobs = [Job(j.id, float(np.floor(j.arrival)), j.gpus, float(np.ceil(j.duration)),
                    j.priority, float(np.ceil(j.estimate))) for j in jobs]
    policy = str(r.choice(S.POLICIES))
    placement = str(r.choice(S.PLACEMENTS))
    overhead = float(r.choice([0.0, 0.0, 2.5, 30.0]))
    name = str(r.choice(list(PASSES))) if policy == "easy" else "none"
    return jobs, Cluster(nodes, gpn), policy, dict(placement=placement,
                                                    preempt_overhead=overhead,
                                                    backfill=PASSES[name])


def fingerprint(res):
    """(preemptions, segments, sha256 of the starts, ends, segments and reservations), the
    times to 10 significant digits: numpy's ``exp`` (in ``generate_jobs``) takes other SIMD
    paths on other CPUs (AVX-512 or AVX2) and can differ in the last bit, so the exact bits
    of a time are the machine's, not the scheduler's."""
    def t(x):
        return f"{float(x):.10g}"
    segs = repr([(s.job, t(s.start), t(s.end), s.alloc) for s in res.segments])
    held = repr(sorted((k, t(v)) for k, v in res.reservations.items()))
    times = repr([t(x) for x in res.start]) + repr([t(x) for x in res.end])
    digest = hashlib.sha256((times + segs + held).encode())
    return res.preemptions, len(res.segments), digest.hexdigest()[:16]


# what simulate gave on random_run(k) when its state was closures sharing nonlocal
# variables (commit 241d7f5), before ClusterSim (fingerprinted to 10 digits since 2026-12):
# one [preemptions, segments, digest] a seed, kept as data in scheduler_closures.json
CLOSURES = [tuple(row) for row in json.loads(
    Path(__file__).with_name("scheduler_closures.json").read_text())]

# chapter 11's 1,500 jobs on 8 x 8 GPUs (cell-010), each policy, with the closures
CHAPTER = {"fifo": (0, 1500, '52170ade89a6be6f'), "sjf": (0, 1500, '84d9d209cb7e78cd'),
           "priority": (393, 1893, '845495086d2dfa9e'), "easy": (0, 1500, 'df62c3a891f044b0')}


@pytest.mark.parametrize("seed", range(len(CLOSURES)))
def test_the_state_class_gives_the_closures_results(seed):
    jobs, cluster, policy, options = random_run(seed)
    assert fingerprint(simulate(jobs, cluster, policy, **options)) == CLOSURES[seed]


def last_bit(x, direction):
    """``x`` one unit in the last place up or down, unless it is a whole number."""
    return x if x == int(x) else float(np.nextafter(x, direction))


@pytest.mark.parametrize("direction", [np.inf, -np.inf])
def test_the_fingerprint_does_not_see_the_last_bit_of_a_run_time(direction):
    """Another CPU's ``exp`` moves a run time by one unit in the last place: the schedule's
    fingerprint stays (whole-second run times, the ties, are exact on every CPU)."""
    for seed in range(len(CLOSURES)):
        jobs, cluster, policy, options = random_run(seed)
        moved = [Job(j.id, j.arrival, j.gpus, last_bit(j.duration, direction), j.priority,
                     last_bit(j.estimate, direction)) for j in jobs]
        assert (fingerprint(simulate(moved, cluster, policy, **options))
                == CLOSURES[seed]), seed


def test_the_chapters_schedules_are_the_closures():
    jobs = generate_jobs(1500, total_gpus=64, load=0.85, seed=1, max_gpus=32)
    got = {p: fingerprint(simulate(jobs, Cluster(8, 8), p, preempt_overhead=60.0))
           for p in S.POLICIES}
    assert got == CHAPTER


# ---- invariants on workloads drawn by Hypothesis -------------------------------------------

@st.composite
def workloads(draw):
    """A cluster and jobs on whole seconds (so that arrivals and ends coincide), sizes that
    fit one node or take whole nodes, declared run times up to twice the true ones."""
    gpn = draw(st.sampled_from([1, 2, 4]))
    nodes = draw(st.integers(1, 3))
    sizes = [g for g in (1, 2, 4, 8, 12) if g <= gpn or (g % gpn == 0 and g <= nodes * gpn)]
    jobs = []
    for i in range(draw(st.integers(1, 24))):
        duration = float(draw(st.integers(1, 20)))
        jobs.append(Job(i, float(draw(st.integers(0, 40))), draw(st.sampled_from(sizes)),
                        duration, draw(st.integers(0, 2)),
                        duration * draw(st.sampled_from([1.0, 1.0, 1.5, 2.0]))))
    return Cluster(nodes, gpn), jobs


SET = settings(max_examples=80, deadline=None, derandomize=True)
OPTIONS = st.tuples(st.sampled_from(S.POLICIES), st.sampled_from(S.PLACEMENTS),
                    st.sampled_from([0.0, 2.5]))


@SET
@given(w=workloads(), options=OPTIONS)
def test_no_gpu_over_committed_and_every_job_runs_its_duration_on_all_its_gpus(w, options):
    (cluster, jobs), (policy, placement, overhead) = w, options
    r = simulate(jobs, cluster, policy, placement=placement, preempt_overhead=overhead)
    # each node's GPUs in use, at every instant (ends before starts at the same instant)
    edges = sorted([(s.end, 0, s) for s in r.segments] + [(s.start, 1, s) for s in r.segments],
                   key=lambda e: (e[0], e[1]))
    used = np.zeros(cluster.nodes, int)
    for _, starts, s in edges:
        for node, g in s.alloc:
            used[node] += g if starts else -g
        assert used.max() <= cluster.gpus_per_node and used.min() >= 0
    assert not used.any()
    # every job: all its GPUs at once (one node, or whole nodes), for its duration plus the
    # overhead of each preemption, from its arrival on, one segment after another
    ran = np.zeros(len(jobs))
    for s in r.segments:
        job = jobs[s.job]
        assert sum(g for _, g in s.alloc) == job.gpus and s.end > s.start >= job.arrival
        assert len(s.alloc) == 1 or all(g == cluster.gpus_per_node for _, g in s.alloc)
        ran[s.job] += s.end - s.start
    pieces = np.bincount([s.job for s in r.segments], minlength=len(jobs))
    np.testing.assert_allclose(ran, r.duration + overhead * (pieces - 1), rtol=1e-12)
    assert r.preemptions == pieces.sum() - len(jobs)
    assert policy == "priority" or r.preemptions == 0
    for k in range(len(jobs)):
        mine = sorted((s.start, s.end) for s in r.segments if s.job == k)
        assert mine[0][0] == r.start[k] and mine[-1][1] == r.end[k]
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:]))


@SET
@given(w=workloads(), options=OPTIONS)
def test_work_is_conserved(w, options):
    """The occupancy curve's GPU-seconds are the jobs' (and their preemptions' overhead),
    and it never exceeds the cluster."""
    (cluster, jobs), (policy, placement, overhead) = w, options
    r = simulate(jobs, cluster, policy, placement=placement, preempt_overhead=overhead)
    t, level = busy_gpus(r)
    assert level[-1] == 0 and level.min() >= 0 and level.max() <= cluster.total_gpus
    work = sum(j.gpu_seconds for j in jobs) + overhead * sum(
        jobs[s.job].gpus for s in r.segments) - overhead * sum(j.gpus for j in jobs)
    assert float(np.sum(np.diff(t) * level[:-1])) == pytest.approx(work, rel=1e-12)


@SET
@given(w=workloads(), placement=st.sampled_from(S.PLACEMENTS))
def test_easy_never_delays_a_heads_reservation_and_fifo_starts_in_arrival_order(w, placement):
    cluster, jobs = w
    easy = simulate(jobs, cluster, "easy", placement=placement)
    for k, shadow in easy.reservations.items():
        assert easy.start[k] <= shadow
    fifo = simulate(jobs, cluster, "fifo", placement=placement)
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i))
    assert all(np.diff(fifo.start[order]) >= 0)
    # with no pass at all, EASY is FIFO
    assert list(simulate(jobs, cluster, "easy", placement=placement,
                         backfill=lambda *a: []).start) == list(fifo.start)
