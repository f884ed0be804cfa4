"""The cluster scheduler: hand-worked schedules (exact start times), invariants on seeded
workloads, the CSV trace loader, and the metrics."""
import itertools

import numpy as np
import pytest

from labkit.cluster import metrics
from labkit.cluster import scheduler as S
from labkit.cluster.jobs import Job, generate_jobs, load_trace, offered_load, to_csv
from labkit.cluster.scheduler import Cluster, busy_gpus, simulate


def J(i, arrival, gpus, duration, priority=0, estimate=None):
    return Job(i, arrival, gpus, duration, priority, estimate)


POOL4 = Cluster(1, 4)          # one node of 4 GPUs: a pool of 4


# ---- hand-worked cases ----------------------------------------------------------------

# A: 3 GPUs for 10 s at t=0; B: 4 GPUs for 5 s at t=1 (must wait for A); C: 1 GPU for 3 s
# at t=2 (fits beside A now, ends at 5 < B's reservation at 10).
CASE = [J(0, 0, 3, 10), J(1, 1, 4, 5), J(2, 2, 1, 3)]


def test_fifo_head_of_line_blocking():
    r = simulate(CASE, POOL4, "fifo")
    assert list(r.start) == [0, 10, 15]       # C waits behind B although a GPU is free
    assert list(r.end) == [10, 15, 18]


def test_easy_backfills_a_job_that_ends_before_the_reservation():
    r = simulate(CASE, POOL4, "easy")
    assert list(r.start) == [0, 10, 2]
    assert r.reservations[1] == 10            # B's shadow time: when A ends


@pytest.mark.parametrize("jobs, policy, starts", [
    # C would end at 11, after B's reservation at 10
    pytest.param([J(0, 0, 3, 10), J(1, 1, 4, 5), J(2, 2, 1, 9)], "easy", [0, 10, 15],
                 id="easy-refuses-a-job-that-would-delay-the-head"),
    # A: 2 GPUs x 10 s; B: 3 GPUs (head at t=1, shadow 10, 4 free then: 1 extra);
    # C: 1 GPU x 100 s may start at t=2 on the extra GPU; D: 1 GPU x 100 s may not.
    pytest.param([J(0, 0, 2, 10), J(1, 1, 3, 5), J(2, 2, 1, 100), J(3, 3, 1, 100)], "easy",
                 [0, 10, 2, 15], id="easy-uses-extra-gpus"),
    # C really runs 3 s but declared 20 s: it would run past the shadow (10), so it waits.
    pytest.param([J(0, 0, 3, 10), J(1, 1, 4, 5), J(2, 2, 1, 3, estimate=20)], "easy",
                 [0, 10, 15], id="easy-uses-estimates-not-true-durations"),
    pytest.param([J(0, 0, 4, 10), J(1, 1, 4, 8), J(2, 1, 4, 2), J(3, 1, 4, 5)], "sjf",
                 [0, 17, 10, 12], id="sjf-orders-by-declared-length"),
])
def test_hand_worked_start_times(jobs, policy, starts):
    assert list(simulate(jobs, POOL4, policy).start) == starts


def test_easy_counts_jobs_ending_together_at_the_shadow():
    # Cluster(1, 6): A and B (2 GPUs, 10 s) at t=0; head H (4 GPUs) at t=1; C (2 GPUs, 20 s)
    # at t=2. A and B both end at 10: 6 GPUs free then, H needs 4, so 2 are extra and C may
    # start at 2 (counting only A, one would find 4 free, no extra, and make C wait to 10)
    jobs = [J(0, 0, 2, 10), J(1, 0, 2, 10), J(2, 1, 4, 5), J(3, 2, 2, 20)]
    r = simulate(jobs, Cluster(1, 6), "easy")
    assert list(r.start) == [0, 0, 10, 2] and r.reservations[2] == 10
    assert list(simulate(jobs, Cluster(1, 6), "fifo").start) == [0, 0, 10, 10]
    # on nodes: A and B on two nodes of 3 GPUs, H needs one whole node (3), C one GPU; only
    # when both A and B have ended is there a node for H beside C
    on_nodes = simulate([J(0, 0, 2, 10), J(1, 0, 2, 10), J(2, 1, 3, 5), J(3, 2, 1, 20)],
                        Cluster(2, 3), "easy")
    assert list(on_nodes.start) == [0, 0, 10, 2]


@pytest.mark.parametrize("args, want", [
    ((0, 2, [(10, 2), (10, 2)], 4, 2, 20), True),      # the issue-22 case: extra = 2
    ((0, 2, [(10, 2), (10, 2)], 4, 3, 20), False),     # does not fit now
    ((0, 2, [(10, 2), (10, 2)], 6, 2, 20), False),     # extra = 0
    ((0, 2, [(10, 2), (10, 2)], 6, 2, 10), True),      # ends at the shadow
    ((0, 1, [(5, 1), (5, 1), (9, 4)], 2, 1, 50), True),  # both end at 5: 3 free, extra 1
    ((0, 1, [(5, 1), (5, 1), (9, 4)], 3, 1, 50), False),  # 3 free at 5, extra 0
    ((0, 2, [(10.0, 4), (20.0, 2)], 6, 2, 5.0), True),   # the check's cases, unchanged
    ((0, 2, [(10.0, 4), (20.0, 2)], 6, 2, 15.0), False),
    ((0, 2, [(10.0, 4), (20.0, 2)], 4, 2, 15.0), True),
    ((5, 3, [(10.0, 5), (30.0, 5)], 8, 3, 5.0), True),
    ((5, 3, [(10.0, 5), (30.0, 5)], 8, 3, 5.5), False),
    ((0, 1, [(8.0, 1), (4.0, 2), (12.0, 4)], 3, 1, 20.0), False),
    ((2, 0, [(9.0, 8)], 4, 1, 1.0), False),
])
def test_can_backfill_on_a_pool(args, want):
    assert S.can_backfill(*args) is want


def test_shadow_time_ties_and_errors():
    assert S.shadow_time(0, 2, [(10, 2), (10, 2)], 4) == (10, 2)
    assert S.shadow_time(0, 2, [(10, 2), (12, 2)], 4) == (10, 0)
    assert S.shadow_time(3, 5, [(10, 2)], 4) == (3, 1)       # the head fits now
    with pytest.raises(ValueError, match="never fits"):
        S.shadow_time(0, 1, [(5, 1)], 4)
    with pytest.raises(ValueError, match="free_gpus"):
        S.can_backfill(0, -1, [], 1, 1, 1.0)
    with pytest.raises(ValueError, match="job_estimate"):
        S.can_backfill(0, 1, [], 1, 1, 0)


def test_priority_preempts_and_resumes_remaining_work():
    # low-priority A (4 GPUs, 10 s) runs; at t=4 high-priority B (2 GPUs, 3 s) preempts it;
    # A resumes at 7 with 6 s left (+1 s restart overhead) and ends at 14.
    jobs = [J(0, 0, 4, 10, priority=0), J(1, 4, 2, 3, priority=5)]
    r = simulate(jobs, POOL4, "priority", preempt_overhead=1.0)
    assert r.preemptions == 1
    assert list(r.start) == [0, 4] and list(r.end) == [14, 7]
    assert [(s.job, s.start, s.end) for s in r.segments] == [(0, 0, 4), (1, 4, 7), (0, 7, 14)]


def test_priority_never_preempts_equal_priority():
    jobs = [J(0, 0, 4, 10, priority=1), J(1, 4, 2, 3, priority=1)]
    r = simulate(jobs, POOL4, "priority")
    assert r.preemptions == 0 and list(r.start) == [0, 10]


def test_gang_placement_packs_nodes():
    # 2 nodes × 4: two 2-GPU jobs then a 4-GPU job. Packing puts both small jobs on node 0,
    # so the 4-GPU job starts at once on node 1; spreading puts one on each node and the
    # 4-GPU job waits for one of them, although 4 GPUs are free in total.
    c = Cluster(2, 4)
    jobs = [J(0, 0, 2, 10), J(1, 0, 2, 20), J(2, 1, 4, 5)]
    pack = simulate(jobs, c, "fifo", placement="pack")
    spread = simulate(jobs, c, "fifo", placement="spread")
    assert list(pack.start) == [0, 0, 1]
    assert list(spread.start) == [0, 0, 10]
    node_of = {s.job: s.alloc for s in pack.segments}
    assert node_of[0] == ((0, 2),) and node_of[1] == ((0, 2),) and node_of[2] == ((1, 4),)


def test_multi_node_jobs_take_whole_nodes():
    c = Cluster(4, 2)
    jobs = [J(0, 0, 1, 10), J(1, 0, 4, 5), J(2, 1, 4, 5)]
    r = simulate(jobs, c, "fifo")
    alloc = {s.job: s.alloc for s in r.segments}
    assert alloc[1] == ((1, 2), (2, 2))        # two whole free nodes, node 0 is half used
    assert list(r.start) == [0, 0, 5]
    with pytest.raises(ValueError, match="whole nodes"):
        simulate([J(0, 0, 3, 1)], c, "fifo")


# ---- invariants on seeded workloads -------------------------------------------------------

def _check_capacity(r):
    events = sorted([(s.start, 1, s) for s in r.segments] + [(s.end, 0, s) for s in r.segments],
                    key=lambda e: (e[0], e[1]))
    used = np.zeros(r.cluster.nodes, int)
    for _, kind, s in events:
        for n, g in s.alloc:
            used[n] += g if kind else -g
        assert used.max() <= r.cluster.gpus_per_node and used.min() >= 0


@pytest.mark.parametrize("policy", S.POLICIES)
@pytest.mark.parametrize("placement", S.PLACEMENTS)
def test_invariants(policy, placement):
    jobs = generate_jobs(400, total_gpus=32, load=0.95, seed=3, max_gpus=16, overestimate=2.0)
    r = simulate(jobs, Cluster(4, 8), policy, placement=placement, preempt_overhead=5.0)
    _check_capacity(r)
    arr = r.arrival
    assert np.all(r.start >= arr) and np.all(r.end > r.start)
    # every job ran exactly its duration (+ overhead per preemption)
    ran = np.zeros(len(jobs))
    for s in r.segments:
        ran[s.job] += s.end - s.start
        assert sum(g for _, g in s.alloc) == jobs[s.job].gpus     # all GPUs at once
    per_job_pre = np.bincount([s.job for s in r.segments], minlength=len(jobs)) - 1
    np.testing.assert_allclose(ran, r.duration + 5.0 * per_job_pre, rtol=1e-9)
    if policy != "priority":
        assert r.preemptions == 0 and np.all(per_job_pre == 0)
    if policy == "fifo":                     # FIFO starts jobs in arrival order
        order = np.lexsort((np.arange(len(jobs)), arr))
        assert np.all(np.diff(r.start[order]) >= 0)
    if policy == "easy":                     # nobody delays a head's reservation
        for k, t in r.reservations.items():
            assert r.start[k] <= t + 1e-9


def _naive_easy(jobs, total):
    """EASY on a pool, written the slow obvious way, to compare against."""
    n = len(jobs)
    start, end = [None] * n, [None] * n
    times = sorted({j.arrival for j in jobs})
    pending = set(range(n))
    while pending:
        now = times.pop(0)
        running = [i for i in range(n) if start[i] is not None and end[i] > now]
        free = total - sum(jobs[i].gpus for i in running)
        queue = sorted((i for i in pending if jobs[i].arrival <= now),
                       key=lambda i: (jobs[i].arrival, i))

        def run(i):
            nonlocal free
            start[i], end[i] = now, now + jobs[i].duration
            free -= jobs[i].gpus
            pending.discard(i)
            running.append(i)
            times.append(end[i])
        while queue and jobs[queue[0]].gpus <= free:
            run(queue.pop(0))
        if queue:
            h, avail = queue[0], free
            for e in sorted({end[i] for i in running}):      # jobs ending together
                avail += sum(jobs[i].gpus for i in running if end[i] == e)
                if avail >= jobs[h].gpus:
                    shadow = e
                    break
            extra = avail - jobs[h].gpus
            for i in queue[1:]:
                g = jobs[i].gpus
                if g <= free and (now + jobs[i].duration <= shadow or g <= extra):
                    if now + jobs[i].duration > shadow:
                        extra -= g
                    run(i)
        times = sorted(set(times))
    return np.array(start, float)


@pytest.mark.parametrize("seed", range(6))
def test_easy_matches_a_naive_implementation(seed):
    jobs = generate_jobs(80, total_gpus=16, load=1.1, seed=seed, max_gpus=16)
    np.testing.assert_array_equal(simulate(jobs, Cluster(1, 16), "easy").start,
                                  _naive_easy(jobs, 16))


def test_easy_beats_fifo_and_sjf_beats_fifo_on_mean_jct():
    jobs = generate_jobs(1500, total_gpus=64, load=0.85, seed=1, max_gpus=32)
    m = {p: metrics.summarize(simulate(jobs, Cluster(8, 8), p)) for p in S.POLICIES}
    assert m["easy"].mean_jct < 0.5 * m["fifo"].mean_jct
    assert m["sjf"].mean_jct < m["fifo"].mean_jct
    assert m["easy"].utilisation >= m["fifo"].utilisation


def test_sjf_is_optimal_for_a_single_machine_batch():
    rng = np.random.default_rng(0)
    for _ in range(5):
        d = rng.uniform(1, 20, size=6)
        jobs = [J(i, 0, 1, float(d[i])) for i in range(6)]
        got = metrics.jct(simulate(jobs, Cluster(1, 1), "sjf")).mean()
        best = min(np.mean(np.cumsum(d[list(p)])) for p in itertools.permutations(range(6)))
        assert got == pytest.approx(best, rel=1e-12)
        fifo = metrics.jct(simulate(jobs, Cluster(1, 1), "fifo")).mean()
        assert got <= fifo


def test_busy_gpus_and_utilisation():
    r = simulate(CASE, POOL4, "easy")
    t, busy = busy_gpus(r)
    assert list(t) == [0, 2, 5, 10, 15] and list(busy) == [3, 4, 3, 4, 0]
    # work 3·10 + 4·5 + 1·3 = 53 GPU-s over 4 GPUs × 15 s
    assert metrics.utilisation(r) == pytest.approx(53 / 60)


def test_metrics_values():
    r = simulate(CASE, POOL4, "fifo")
    np.testing.assert_array_equal(metrics.jct(r), [10, 14, 16])
    np.testing.assert_array_equal(metrics.queueing_delay(r), [0, 9, 13])
    np.testing.assert_allclose(metrics.bounded_slowdown(r), [1, 14 / 10, 16 / 10])
    m = metrics.summarize(r)
    assert m.mean_jct == pytest.approx(40 / 3) and m.preemptions == 0


def test_jain_index():
    assert metrics.jain_index([2, 2, 2, 2]) == pytest.approx(1.0)
    assert metrics.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert metrics.jain_index([1, 2, 3]) == pytest.approx(36 / (3 * 14))
    with pytest.raises(ValueError):
        metrics.jain_index([1, -1])


# ---- jobs, generator, trace loader --------------------------------------------------------

def test_generator_is_seeded_and_hits_the_load():
    a = generate_jobs(3000, total_gpus=64, load=0.7, seed=5)
    assert a == generate_jobs(3000, total_gpus=64, load=0.7, seed=5)
    assert a != generate_jobs(3000, total_gpus=64, load=0.7, seed=6)
    work = sum(j.gpu_seconds for j in a)
    assert offered_load(a, 64) == pytest.approx(work / (a[-1].arrival * 64))
    assert 0.55 < offered_load(a, 64) < 0.9


def test_offered_load_of_chapter_11s_sample_and_the_drain():
    """Chapter 11's 1,500 jobs drawn for a load of 0.85 offer 0.765; each policy's
    utilisation is that × arrival span / makespan (the drain after the last arrival)."""
    jobs = generate_jobs(1500, total_gpus=64, load=0.85, seed=1, max_gpus=32)
    assert offered_load(jobs, 64) == pytest.approx(0.7653, abs=5e-5)
    span = jobs[-1].arrival - jobs[0].arrival
    for policy in ("fifo", "easy"):
        r = simulate(jobs, Cluster(8, 8), policy, preempt_overhead=60.0)
        assert metrics.utilisation(r) == pytest.approx(
            offered_load(jobs, 64) * span / r.makespan, rel=1e-12)
        assert metrics.utilisation(r) < offered_load(jobs, 64)
    assert offered_load([J(0, 0, 2, 10), J(1, 10, 2, 10)], 4) == pytest.approx(40 / 40)
    with pytest.raises(ValueError, match="span"):
        offered_load([J(0, 3, 1, 1)], 4)
    with pytest.raises(ValueError, match="total_gpus"):
        offered_load(jobs, 0)
    with pytest.raises(TypeError, match="jobs"):
        offered_load([], 4)


def test_trace_round_trip_and_errors(tmp_path):
    jobs = generate_jobs(20, seed=2, overestimate=1.5)
    path = tmp_path / "trace.csv"
    path.write_text(to_csv(jobs))
    assert load_trace(path) == jobs
    assert load_trace("arrival,gpus,duration\n0,2,5\n1.5,1,3\n") == [J(0, 0, 2, 5), J(1, 1.5, 1, 3)]
    bad = {
        "arrival,gpus,duration\n0,2,5\n1,x,3\n": "row 2, field 'gpus'",
        "arrival,gpus,duration\n0,2.5,5\n": "row 1, field 'gpus'",
        "arrival,gpus,duration\n0,2,5\n1,1,3\n2,1,-1\n": "row 3, field 'duration'",
        "arrival,gpus,duration\n-1,2,5\n": "row 1, field 'arrival'",
        "arrival,gpus,duration,estimate\n0,2,5,4\n": "row 1, field 'estimate'",
        "arrival,gpus,duration\n0,2,\n": "row 1, field 'duration'",
        "id,arrival,gpus,duration\n1,0,2,5\n1,0,2,5\n": "row 2, field 'id'",
        "arrival,gpus\n0,2\n": "lacks the column",
        "arrival,gpus,duration\n": "no rows",
    }
    for text, msg in bad.items():
        with pytest.raises(ValueError, match=msg):
            load_trace(text)


def test_argument_errors():
    with pytest.raises(ValueError, match="policy"):
        simulate(CASE, POOL4, "lottery")
    with pytest.raises(ValueError, match="placement"):
        simulate(CASE, POOL4, "fifo", placement="random")
    with pytest.raises(ValueError, match="cluster has 4"):
        simulate([J(0, 0, 8, 1)], POOL4)
    with pytest.raises(TypeError):
        simulate(CASE, "4 GPUs")
    with pytest.raises(ValueError, match="estimate"):
        J(0, 0, 1, 10, estimate=5)
    with pytest.raises(ValueError, match="gpus"):
        J(0, 0, 0, 10)
    with pytest.raises(ValueError, match="nodes"):
        Cluster(0, 8)
    with pytest.raises(ValueError, match="load"):
        generate_jobs(10, load=0)


def test_chapter_11_policy_comparison_says_what_the_simulator_gives():
    """Chapter 11 (cell-010) reads the 1,500-job table in words; each sentence, asserted."""
    jobs = generate_jobs(1500, total_gpus=64, load=0.85, seed=1, max_gpus=32)
    m = {p: metrics.summarize(simulate(jobs, Cluster(8, 8), p, preempt_overhead=60.0))
         for p in S.POLICIES}
    fifo, sjf, easy, prio = m["fifo"], m["sjf"], m["easy"], m["priority"]
    assert fifo.mean_jct > 3600 and fifo.mean_queueing > 0.9 * fifo.mean_jct  # hours, waiting
    assert easy.mean_jct < sjf.mean_jct < fifo.mean_jct
    assert fifo.mean_queueing > 3600 > easy.mean_queueing > 60                # hours -> minutes
    assert prio.p95_jct == max(x.p95_jct for x in m.values())
    assert all(x.utilisation < 0.85 for x in m.values())
    soonest = min(m.values(), key=lambda x: x.makespan)
    assert soonest.utilisation == max(x.utilisation for x in m.values())


# ---- the pluggable backfill pass (chapter 11's lab) -------------------------------------

def test_backfill_argument_and_return_errors():
    with pytest.raises(ValueError, match="backfill"):
        simulate(CASE, POOL4, "fifo", backfill=S.easy_backfill)
    with pytest.raises(TypeError, match="backfill"):
        simulate(CASE, POOL4, "easy", backfill="easy")
    with pytest.raises(ValueError, match="behind the head"):
        simulate(CASE, POOL4, "easy", backfill=lambda now, q, r, f: [q[0].job])
    with pytest.raises(ValueError, match="behind the head"):
        simulate(CASE, POOL4, "easy", backfill=lambda now, q, r, f: [7])

    def everything(now, queue, running, free):          # never takes from `free`
        return [w.job for w in queue[1:]]
    jobs = [J(0, 0, 3, 10), J(1, 1, 4, 5), J(2, 2, 1, 3), J(3, 2, 1, 3)]
    with pytest.raises(ValueError, match="does not fit"):
        simulate(jobs, POOL4, "easy", backfill=everything)


def test_the_default_pass_is_easy_backfill_and_a_custom_one_is_used():
    jobs = generate_jobs(200, total_gpus=32, load=1.1, seed=4, max_gpus=16, overestimate=2.0)
    base = simulate(jobs, Cluster(4, 8), "easy", placement="spread")
    same = simulate(jobs, Cluster(4, 8), "easy", placement="spread", backfill=S.easy_backfill)
    np.testing.assert_array_equal(base.start, same.start)
    none = simulate(jobs, Cluster(4, 8), "easy", backfill=lambda *a: [])
    fifo = simulate(jobs, Cluster(4, 8), "fifo")
    np.testing.assert_array_equal(none.start, fifo.start)      # no backfill is FIFO
    got = S.compare_policies(jobs, Cluster(4, 8), backfill=lambda *a: [])
    assert list(got) == list(S.POLICIES)
    np.testing.assert_array_equal(got["easy"].start, fifo.start)


def test_free_gpus_views_and_errors():
    free = S.FreeGPUs.pool(2, 4, [((0, 3),)])
    assert free.total == 5 and free.fits(4) and not free.fits(5)
    assert free.place(1) == ((0, 1),) and free.place(4) == ((1, 4),)
    later = free.copy()
    later.give(((0, 3),))
    assert later.fits(8) and not free.fits(8)                  # copies are independent
    with pytest.raises(ValueError, match="node 0"):
        free.take(((0, 2),))
    with pytest.raises(ValueError, match="node 1"):
        free.give(((1, 1),))
    shadow, at = S.reservation(0, S.Waiting(9, 6, 1.0), [S.Running(5, 3, ((0, 3),))], free)
    assert shadow == 5 and at.total == 8
