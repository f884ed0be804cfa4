"""The cluster scheduler as a state class (:class:`labkit.cluster.scheduler.ClusterSim`):
the results of the closures it replaced, kept as fingerprints, and its invariants on
workloads drawn by Hypothesis — no node's GPUs over-committed at any instant, every job run
for exactly its duration (plus the overhead of each preemption) on all its GPUs at once,
the GPU-seconds of the occupancy curve those of the jobs, and EASY starting every head no
later than the reservation it was given (Mu'alem & Feitelson, IEEE TPDS 12(6), 2001, §2)."""
import hashlib

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
    """(preemptions, segments, sha256 of the starts, ends, segments and reservations)."""
    segs = repr([(s.job, s.start.hex(), s.end.hex(), s.alloc) for s in res.segments])
    held = repr(sorted((k, float(t).hex()) for k, t in res.reservations.items()))
    digest = hashlib.sha256(res.start.tobytes() + res.end.tobytes() + segs.encode()
                            + held.encode())
    return res.preemptions, len(res.segments), digest.hexdigest()[:16]


# what simulate gave on random_run(k) when its state was closures sharing nonlocal
# variables (commit 241d7f5), before ClusterSim
CLOSURES = [
    (0, 66, 'b17d889b2a68a014'), (0, 93, 'f9e49f2c0f54b078'), (0, 22, '1f5339d920d41238'),
    (0, 29, '614d11692a023d43'), (0, 106, 'e0ea61c795e73e2a'), (0, 12, '5d60b0ed2cf5dbaa'),
    (0, 66, 'bdf2b83fbbd87020'), (0, 85, '883d0ca70c6f2d3c'), (0, 35, '8f5160d755e1335b'),
    (10, 125, '650a01df56d8ceea'), (0, 39, '1d545fe3454a1bc8'), (0, 97, 'a39ecfd3c8aa3b6c'),
    (0, 117, '43b698c7e2f96ebb'), (0, 100, 'bfea9f9d27b9ee77'), (17, 98, '5f27b6e90af44aa2'),
    (0, 87, '2432ed82a249c8af'), (4, 104, '95c74e36ede38a2a'), (0, 21, 'c5d40412e576445a'),
    (0, 33, 'fd1bb8a6eed0d0b0'), (0, 49, '9c87bfb034bc8e66'), (0, 38, '2f52635c172fc19f'),
    (0, 52, '5ba6a7eb2a69323f'), (0, 82, '86756cc99d92ddc6'), (0, 56, 'd578436f76dec5ea'),
    (8, 100, '3671c8d3ec2c6720'), (0, 104, '51e281f8be1a3927'), (0, 70, 'edd41d6ceb43481e'),
    (0, 33, '6ef5fd2a05eaf2e4'), (0, 34, '2bd59ce7a29809f7'), (0, 75, 'bad8a5f9505c0c76'),
    (0, 92, 'cca28d5fe2d04056'), (2, 66, '6e25dc2ce9073b3d'), (0, 104, 'cba484fe61767e4a'),
    (0, 51, '8d5fe87f829283f0'), (0, 22, 'fd9a213c20236180'), (0, 100, 'ad22e3552079a848'),
    (7, 63, '5b3c4640ec26160f'), (0, 79, '5d789cf6309fbbb3'), (0, 45, '4446e3a4b312abce'),
    (0, 35, 'af675bf821b1c52a'),
]

# chapter 11's 1,500 jobs on 8 x 8 GPUs (cell-010), each policy, with the closures
CHAPTER = {"fifo": (0, 1500, 'b7922fac5723450b'), "sjf": (0, 1500, '9cbcab6c7658be6e'),
           "priority": (393, 1893, '5831a0a8785c7f6f'), "easy": (0, 1500, '372ae50ca6e23b02')}


@pytest.mark.parametrize("seed", range(len(CLOSURES)))
def test_the_state_class_gives_the_closures_results(seed):
    jobs, cluster, policy, options = random_run(seed)
    assert fingerprint(simulate(jobs, cluster, policy, **options)) == CLOSURES[seed]


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
