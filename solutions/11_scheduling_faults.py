# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (labkit)
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown] id="cell-000"
# # 11 · Scheduling, stragglers and fault tolerance
#
# *Deep Learning Systems: from algorithms to hardware* — chapter 11. Seed: 002 (part 6, 系统资源管理与调度策略 — resource management and scheduling: task scheduling, resource allocation, 负载均衡（Load Balancing）and 容错机制（Fault Tolerance）; part 7's energy theme).
#
# **Objectives.** After this chapter you can
#
# 1. simulate a GPU cluster's batch scheduler and explain what FIFO, shortest-job-first, priority with preemption and EASY backfilling do, with **gang scheduling** (all of a job's GPUs at once) and **placement** on nodes — and write EASY's backfill pass that the simulator then runs;
# 2. measure a schedule: job completion time (JCT), queueing delay, utilisation, and fairness with Jain's index;
# 3. explain why a synchronous data-parallel step waits for its slowest worker (the 掉队者, straggler), compute the expected slowdown, and weigh backup workers against their cost;
# 4. choose a checkpoint interval from the mean time between failures (MTBF) with Young's and Daly's formulas, and check them against a simulation;
# 5. write an atomic checkpoint (temporary file, fsync, rename) and a resume, and verify them on a real `torchrun` job whose worker is killed and restarted: the result is bit-identical;
# 6. estimate the energy of a schedule from a stated power model.

# %% [markdown] id="cell-001"
# **Guiding questions.**
#
# * Half the GPUs are idle and a job asking for one GPU is waiting. Why, and what would let it run without hurting anyone?
# * 64 workers each straggle 1 % of the time. How often is a step slow?
# * A failure every 8 hours, a checkpoint takes 2 minutes: how often should you checkpoint, and what does it cost?
# * What has to be true for a restarted run to end with *exactly* the same weights?

# %% id="cell-002"
# %matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
from labkit.check import check, predict, reveal
from labkit.cluster import jobs as cjobs, metrics, stragglers, faults, energy, plots, widgets, ckpt_lab
from labkit.cluster.jobs import Job, generate_jobs, load_trace
from labkit.hardware import MEASURED_POWER
from labkit.cluster.scheduler import Cluster, simulate, compare_policies, backfill_schedule, POLICIES

# %% [markdown] id="seed-002-resources"
# ## 1. Resource management: jobs, GPUs and the scheduler
#
# Seed 002 (part 6) splits 系统资源管理 into compute, memory and disk, and 调度策略 into task scheduling (batch, priority and distributed scheduling), resource-allocation optimisation, and load balancing with fault tolerance. On a shared GPU cluster the scarce resource is the GPU: a *job* asks for *g* GPUs for some time, and a **scheduler** (Slurm, Kubernetes with Volcano, …) decides who runs when and where. Memory and disk are usually tied to the GPUs a job holds (a node's host memory and local disk come with its GPUs), so here we schedule GPUs.
#
# Our simulator (`labkit.cluster.scheduler`) is event-driven: it jumps from one arrival or completion to the next and, at each, lets the policy start what it may. A job is **gang-scheduled**: it starts only when all its GPUs are free at once — a data-parallel job with 7 of its 8 GPUs cannot do anything. (In Ousterhout's original 1982 sense, *gang scheduling* also time-slices whole jobs; DL clusters mostly use the all-or-nothing allocation, as Volcano's gang plugin does.) Jobs come from a seeded generator (Poisson arrivals tuned to an offered load; heavy-tailed log-normal durations; mostly 1-GPU jobs, a few big ones) or from a CSV trace.

# %% id="cell-004"
js = generate_jobs(8, total_gpus=16, load=0.9, seed=1, max_gpus=8)
for j in js:
    print(f"job {j.id}: arrives {j.arrival:7.0f} s, {j.gpus} GPU(s) for {j.duration:6.0f} s, priority {j.priority}")
trace = "arrival,gpus,duration\n0,2,600\n30,8,1200\n45,1,oops\n"
try:
    load_trace(trace)
except ValueError as e:
    print("trace error:", e)

# %% [markdown] id="seed-002-scheduling"
# ## 2. Scheduling policies (任务调度)
#
# * **FIFO** (first come, first served): fair in order and predictable, but the job at the head of the queue blocks everyone behind it while it waits for enough GPUs.
# * **SJF** (shortest job first, by the *declared* run time): when all jobs wait at once on one machine, running them shortest first minimises the mean completion time (Smith's rule: W. E. Smith, *Naval Research Logistics Quarterly* 3, 1956, with equal weights); with jobs arriving over time it is a heuristic, and long jobs can starve.
# * **Priority with preemption** (优先级调度): a high-priority job that does not fit stops lower-priority jobs (they checkpoint and go back to the queue with their remaining work, plus a restart overhead).
# * **EASY backfilling** (Lifka 1995, the Argonne IBM SP scheduler; studied by Mu'alem & Feitelson, *IEEE TPDS* 2001): FIFO, but when the head job does not fit it gets a **reservation** at the *shadow time* — the earliest time enough running jobs will have ended (by their declared run times) for it to fit. A later job may jump ahead and start now only if it does not delay that reservation: it ends before the shadow time, or it uses only the **extra** GPUs the head will not need then.
#
# A hand-worked case on 4 GPUs: A (3 GPUs × 10 s) arrives at 0, B (4 GPUs × 5 s) at 1, C (1 GPU × 3 s) at 2. B cannot start until A ends at 10. Under FIFO, C waits behind B although a GPU is idle. Predict when C starts under EASY.

# %% id="cell-006"
### BEGIN SOLUTION
guess = 2
### END SOLUTION
predict("11.easy-start", guess, "start time of job C under EASY backfilling (s)")

# %% id="cell-007"
case = [Job(0, 0, 3, 10), Job(1, 1, 4, 5), Job(2, 2, 1, 3)]
for policy in ("fifo", "easy"):
    r = simulate(case, Cluster(1, 4), policy)
    print(f"{policy:5s} starts {r.start.tolist()}, ends {r.end.tolist()}, mean JCT {metrics.jct(r).mean():.2f} s")
reveal("11.easy-start", float(r.start[2]), unit="s")
fig = plots.plot_gantt(r, title="EASY on 4 GPUs: C backfills before B's reservation (|)"); plt.show(); plt.close(fig)


# %% [markdown] id="cell-008"
# C ends at 5, before B's reservation at 10, so it cannot delay B. Had C declared 8 s it would end exactly at 10 and still backfill; at 9 s it would run past the shadow time on a GPU that B needs, and EASY would make it wait. Backfilling trusts the declared run times: users over-estimate them (Mu'alem & Feitelson found that this hardly hurts, and even helps a little), and a real scheduler kills a job that overruns its limit, so the reservation holds.
#
# ### Lab 11.1 — an EASY backfilling decision
#
# First the decision on a pool of GPUs. Write `can_backfill(now, free_gpus, running, head_gpus, job_gpus, job_estimate)`. `running` lists `(end_time, gpus)` of the running jobs (by their declared ends, in any order). The head of the queue needs `head_gpus` and does not fit now. Return `True` if the candidate job (`job_gpus` GPUs, declared `job_estimate` seconds) may start now under EASY:
#
# 1. it must fit now;
# 2. find the shadow time: walk the running jobs by end time, adding the GPUs each gives back, until the head fits — and jobs ending at the same time give their GPUs back together, so count every job that ends at that instant; the **extra** GPUs are those available then beyond `head_gpus`;
# 3. it may start if `now + job_estimate <= shadow`, or if `job_gpus <= extra`.

# %% id="cell-015"
def can_backfill(now, free_gpus, running, head_gpus, job_gpus, job_estimate):
    ### BEGIN SOLUTION
    if job_gpus > free_gpus:
        return False
    ends = sorted(running)
    avail, shadow, i = free_gpus, now, 0
    while avail < head_gpus and i < len(ends):
        shadow = ends[i][0]
        while i < len(ends) and ends[i][0] == shadow:     # jobs ending together free together
            avail += ends[i][1]
            i += 1
    extra = avail - head_gpus
    return now + job_estimate <= shadow or job_gpus <= extra
    ### END SOLUTION


# %% labkit={"exercise": "11.1"} tags=["check"]
check("11.1", can_backfill)

# %% id="cell-017"
# The cluster of the example at t = 2: A (3 GPUs) runs until 10, B (4 GPUs) waits.
for est in (3, 8, 9, 11):
    print(f"C declares {est:2d} s -> may backfill: {can_backfill(2, 1, [(10, 3)], 4, 1, est)}")
# Two jobs end together at the shadow time: both give their GPUs back then (issue 22's case).
print("A and B (2 GPUs each) end at 10, the head needs 4, C (2 GPUs) declares 20 s:",
      can_backfill(2, 2, [(10, 2), (10, 2)], 4, 2, 20))


# %% [markdown] id="lab-backfill"
# ### Lab 11.6 — the backfill pass inside the simulator
#
# Now the real thing: the pass that `simulate(..., "easy")` runs, on nodes, with placement — yours replaces labkit's (`simulate(..., backfill=easy_backfill)`), and the rest of this chapter's comparisons run on it. At every event the simulator first starts jobs from the head of the queue while they fit (FCFS); when the head does not fit, it calls `easy_backfill(now, queue, running, free)`:
#
# * `queue`: the waiting jobs in arrival order, each a `Waiting` with `.job` (its index), `.gpus`, `.estimate` (declared seconds); `queue[0]` is the head;
# * `running`: the running jobs, each a `Running` with `.end` (its estimated end), `.gpus` and `.alloc` (its GPUs, `((node, gpus), ...)`), in no particular order;
# * `free`: the free GPUs now, a `FreeGPUs` — `free.fits(g)`, `free.place(g)` (the allocation a job of `g` GPUs would get now under the cluster's placement rule, or None), `free.take(alloc)`, `free.give(alloc)`, `free.copy()`. It is yours to change.
#
# Return the jobs to start now (their `.job`), in order. EASY (Mu'alem & Feitelson 2001, §2):
#
# 1. the **shadow time** (write it as `shadow_time(now, head, running, free)`): on a copy of `free` — the cluster as it will be — give back the running jobs' allocations in order of their ends, all jobs ending at the same time together, until the head fits there; return the time and that copy;
# 2. go down the rest of the queue in order: a job whose `free.place(...)` is not None may start if it ends (`now + estimate`) by the shadow time, or — if it runs past it — if the cluster at the shadow time still fits the head with this job's allocation taken there too (keep it taken: those GPUs are no longer extra for the next job);
# 3. for each job you start, `free.take` its allocation before you look at the next.
#
# The check runs your pass in the simulator on workloads drawn at random (pools and nodes, pack and spread) and compares every start time with labkit's EASY; it names the shortcut a wrong schedule matches (jobs ending together counted one by one, no extra GPUs, extra GPUs not used up, a scan that stops early or looks only behind the head).

# %% id="easy-backfill"
def shadow_time(now, head, running, free):
    """(the shadow time, a FreeGPUs of the cluster as it is then) for the head `head`."""
    ### BEGIN SOLUTION
    later = free.copy()
    if later.fits(head.gpus):
        return now, later
    ending_at = {}                                  # end time -> the allocations freed then
    for r in running:
        ending_at.setdefault(r.end, []).append(r.alloc)
    for end in sorted(ending_at):
        for alloc in ending_at[end]:                # every job ending at `end` gives back
            later.give(alloc)
        if later.fits(head.gpus):
            return end, later
    raise ValueError("the head does not fit even on the whole cluster")
    ### END SOLUTION


def easy_backfill(now, queue, running, free):
    ### BEGIN SOLUTION
    head, *behind = queue
    shadow, later = shadow_time(now, head, running, free)     # the head's reservation
    started = []
    for job in behind:
        alloc = free.place(job.gpus)
        if alloc is None:
            continue                          # it does not fit now
        if now + job.estimate > shadow:       # still running when the head is due:
            at_shadow = later.copy()          # only on GPUs the head leaves over then
            at_shadow.take(alloc)
            if not at_shadow.fits(head.gpus):
                continue                      # it would delay the head
            later = at_shadow
        free.take(alloc)
        started.append(job.job)
    return started
    ### END SOLUTION


# %% labkit={"exercise": "11.6"} tags=["check"]
check("11.6", easy_backfill)

# %% id="easy-backfill-try"
# Issue 22's case on 6 GPUs: A and B (2 GPUs, 10 s) at 0, the head H (4 GPUs) at 1, C (2 GPUs, 20 s) at 2.
rows = [(0, 2, 10, 10), (0, 2, 10, 10), (1, 4, 5, 5), (2, 2, 20, 20)]     # (arrival, GPUs, run time, declared)
print("start times under your pass:", backfill_schedule(easy_backfill, rows, 1, 6), "(C may start at 2)")

# %% [markdown] id="policy-compare-md"
# Now 1,500 seeded jobs on 8 nodes × 8 GPUs, drawn for an offered load of 0.85 (the GPU-seconds asked per second are 85 % of the cluster), every policy on the same jobs — EASY with **your** backfill pass.

# %% id="policy-compare-predict"
### BEGIN SOLUTION
guess = 0.72
### END SOLUTION
predict("11.easy-util", guess, "EASY's GPU utilisation over the whole run on this sample (a fraction)")

# %% id="policy-compare"
cluster = Cluster(8, 8)
big = generate_jobs(1500, total_gpus=cluster.total_gpus, load=0.85, seed=1, max_gpus=32)
print(f"offered load of this sample: {cjobs.offered_load(big, cluster.total_gpus):.3f}")
results = compare_policies(big, cluster, preempt_overhead=60.0, backfill=easy_backfill)
summary = {p: metrics.summarize(r) for p, r in results.items()}
for m in summary.values():
    print(m.row())
fig = plots.plot_utilisation(list(results.values()), title="GPUs busy, 1,500 jobs, 64 GPUs"); plt.show(); plt.close(fig)
reveal("11.easy-util", summary["easy"].utilisation)

# %% [markdown] id="cell-010"
# FIFO leaves GPUs idle whenever a big job waits at the head for enough of them to drain (head-of-line blocking): its mean JCT is hours, almost all of it waiting. SJF cuts the mean by running short jobs first. EASY does better still on this workload: it keeps FIFO's order for the head job but fills the holes, and the mean wait drops from hours to minutes. Priority serves the high-priority third first and preempts the rest; its p95 is the worst.
#
# Utilisation: this sample offers 0.765 of the cluster, not the 0.85 it was drawn for — the generator hits its target only on average (`cjobs.offered_load(big, 64)`, printed above). Over the whole run a policy's utilisation is that offered load × the arrival span / its makespan: after the last arrival the remaining jobs drain with the cluster partly idle, which costs EASY 5 points (71.2 %) and FIFO 11 (65.3 %); it is highest where the run ends soonest.
#
# **Metrics** (`labkit.cluster.metrics`): JCT = end − arrival; queueing delay = JCT − run time; bounded slowdown = max(1, JCT / max(run time, 10 s)) (Feitelson et al., JSSPP 1997); utilisation = GPU-seconds of work / (GPUs × span); fairness = **Jain's index** $J(x)=\frac{(\sum_i x_i)^2}{n\sum_i x_i^2}$ of the slowdowns (Jain, Chiu & Hawe 1984): 1 when every job is slowed equally, 1/n when one job takes it all.
#
# Fairness tells another story. Jain's index of the slowdowns is *lowest* for EASY: most jobs have a slowdown near 1 while a few big ones wait long, and the index punishes that spread. FIFO slows almost everyone (mean slowdown above 100) and so looks "fairer" by this index. No single number captures fairness; report the distribution, or the worst-off jobs, too.
#
# Before you move the load slider (the widget runs labkit's EASY): predict which policy gives the lowest mean JCT at an offered load of 1.0.

# %% id="cell-011"
### BEGIN SOLUTION
guess = "easy"
### END SOLUTION
predict("11.best-policy", guess, "lowest mean JCT at load 1.0", choices=POLICIES)

# %% id="policy-widget" tags=["browser-test"]
widgets.policy_widget(load=0.8, jobs=300)

# %% id="cell-013"
at_one = compare_policies(generate_jobs(300, total_gpus=64, load=1.0, seed=0, max_gpus=32), cluster, backfill=easy_backfill)
reveal("11.best-policy", min((metrics.summarize(r) for r in at_one.values()), key=lambda m: m.mean_jct).policy)

# %% [markdown] id="placement"
# ## 3. Placement: packing nodes
#
# GPUs live in nodes (here 8 per node), and a job's GPUs should sit in one node when they fit there (NVLink inside, a slower network between). The simulator puts a job of ≤ 8 GPUs inside one node and gives a bigger job whole free nodes. *Where* a small job goes matters: **packing** (best fit: the fullest node where it fits) keeps whole nodes free for big jobs; **spreading** (worst fit) scatters small jobs and fragments the cluster, so big jobs wait although enough GPUs are free in total.

# %% id="placement-predict"
### BEGIN SOLUTION
guess = 1.3
### END SOLUTION
predict("11.spread", guess, "mean JCT under EASY with spread placement / with pack, the 1,500 jobs")

# %% id="cell-019"
two = Cluster(2, 4)
demo = [Job(0, 0, 2, 10), Job(1, 0, 2, 20), Job(2, 1, 4, 5)]
for placement in ("pack", "spread"):
    r = simulate(demo, two, "fifo", placement=placement)
    print(f"{placement:6s}: starts {r.start.tolist()}; allocations {[(s.job, s.alloc) for s in r.segments]}")
placed = {pl: metrics.summarize(simulate(big, cluster, "easy", placement=pl, backfill=easy_backfill))
          for pl in ("pack", "spread")}
for placement, m in placed.items():
    print(f"1,500 jobs, EASY, {placement:6s}: mean JCT {m.mean_jct / 3600:.2f} h, utilisation {m.utilisation:.1%}")
reveal("11.spread", placed["spread"].mean_jct / placed["pack"].mean_jct)

# %% [markdown] id="seed-002-load-balance"
# ## 4. Stragglers and load balance in synchronous data parallelism
#
# In chapter 09's data parallelism every step ends with an all-reduce that waits for every worker: the step time is the **maximum** over the workers, not the mean. Load imbalance or one slow machine — a busy host, a throttled GPU, a congested link — slows all of them. Say each of *N* workers independently takes 3× longer with probability *p* = 0.05. Predict the mean step time for *N* = 16 (one worker alone averages 1 + 2·0.05 = 1.1 s).

# %% id="cell-021"
### BEGIN SOLUTION
guess = 2.1
### END SOLUTION
predict("11.straggler", guess, "mean step time with 16 workers (s)")

# %% id="cell-022"
sim16 = stragglers.simulate_steps(16, model="bernoulli", p=0.05, slowdown=3.0, steps=20000)
print(f"16 workers: mean step {sim16.mean_step:.3f} s, {sim16.slowdown:.2f}× one worker's mean")
reveal("11.straggler", sim16.mean_step, unit="s")


# %% [markdown] id="cell-023"
# ### Check 11.4 — a straggler's slowdown (a formula)
#
# Write `straggler_step_time(workers, base, p, slowdown)`: the expected step time when each of the `workers` takes `slowdown × base` with probability `p` (independently) and `base` otherwise, and the step waits for all of them.

# %% id="cell-024"
def straggler_step_time(workers, base, p, slowdown):
    ### BEGIN SOLUTION
    return base * (1 + (slowdown - 1) * (1 - (1 - p) ** workers))
    ### END SOLUTION


# %% labkit={"exercise": "11.4"} tags=["check"]
check("11.4", straggler_step_time)

# %% id="cell-026"
for n in (1, 8, 64, 512):
    print(f"N = {n:3d}: expected step {straggler_step_time(n, 1.0, 0.01, 3.0):.3f} s with p = 1 %")


# %% [markdown] id="cell-027"
# With 512 workers almost every step has a straggler, even at 1 %. Two remedies:
#
# * **Backup workers** (Chen, Pan, Monga, Bengio & Jozefowicz, "Revisiting Distributed Synchronous SGD", 2016): run *N + b* workers, use the first *N* gradients to arrive and drop the rest. The step waits for the *N*-th fastest of *N + b*. It costs *b* more machines, and the dropped gradients are wasted work.
# * **Load balancing** (负载均衡): give faster workers more samples, or move work off a slow machine — the seed's "avoid some nodes overloaded while others idle".
#
# For a smooth model — each worker takes base + an exponential delay with mean *d* — order statistics give closed forms: the *k*-th smallest of *m* i.i.d. exponentials has mean $d\,(H_m - H_{m-k})$, where $H_n = 1 + \frac12 + \dots + \frac1n$ (Rényi's representation). The slowest of *N* therefore averages base + $d\,H_N$, which grows like ln *N*.
#
# ### Check 11.5 — backup workers (a formula)
#
# Write `backup_step_time(workers, backups, base, delay)`: the expected time of the *N*-th fastest of *N + b* workers whose times are `base + Exp(mean=delay)`.

# %% id="cell-028"
def backup_step_time(workers, backups, base, delay):
    ### BEGIN SOLUTION
    H = lambda n: sum(1.0 / k for k in range(1, n + 1))
    return base + delay * (H(workers + backups) - H(backups))
    ### END SOLUTION


# %% labkit={"exercise": "11.5"} tags=["check"]
check("11.5", backup_step_time)

# %% id="cell-030"
for b in (0, 2):
    s = stragglers.simulate_steps(32, backups=b, delay=0.2, steps=20000)
    print(f"N = 32, b = {b}: simulated {s.mean_step:.4f} s, formula {backup_step_time(32, b, 1.0, 0.2):.4f} s, "
          f"GPU-seconds per step {s.gpu_seconds_per_step:.1f}")
trade = stragglers.backup_tradeoff(32, 8, delay=0.2)
fig = plots.plot_backup_tradeoff(trade); plt.show(); plt.close(fig)

# %% [markdown] id="cell-031"
# Each backup shortens the step, with diminishing returns. The machine time per step, (*N + b*) × step time, first falls — here up to *b* = 4 the backups pay for themselves — and then grows, once one more machine no longer shortens the step enough. Backups pay most when stragglers are rare but severe (the Bernoulli model of check 11.4). Before moving the sliders, predict: with *N* = 16, *p* = 0.05 and 3× slowdowns, how many backups bring the mean step under 1.05 s?

# %% id="cell-032"
### BEGIN SOLUTION
guess = 3
### END SOLUTION
predict("11.backups", guess, "backups needed for a mean step < 1.05 s (N=16, p=0.05, 3x)")

# %% id="cell-033"
widgets.straggler_widget(workers=16, backups=2, p=0.05, slowdown=3.0)

# %% id="cell-034"
reveal("11.backups", stragglers.backups_needed(16, 1.0, 0.05, 3.0, target=1.05))

# %% [markdown] id="seed-002-fault-tolerance"
# ## 5. Fault tolerance: checkpoints and the interval that minimises lost time
#
# Large jobs fail: a GPU, a node, a link, a software fault. Failures are modelled as a Poisson process: exponential gaps with mean **MTBF** *M* (a job on *n* machines each with MTBF *m* sees *M* ≈ *m*/*n*). The seed's 容错机制 — migrating or replicating work when a node fails — rests on a **checkpoint**: every τ seconds of work, save the state (C seconds); after a failure, restart (R seconds), reload the last checkpoint and redo the work since. Short τ wastes time writing checkpoints; long τ loses more work per failure.
#
# One simulated run: 20 hours of work, a checkpoint every 30 minutes, MTBF 3 hours.

# %% id="cell-036"
tl = faults.simulate_timeline(20 * 3600, 1800, 120, 300, 3 * 3600, seed=3)
print(f"{len(tl.failures)} failures; wall time {tl.wall_time / 3600:.1f} h for 20 h of work; "
      f"{tl.lost_work / 3600:.1f} h of work lost and redone")
fig = plots.plot_timeline(tl); plt.show(); plt.close(fig)

# %% [markdown] id="cell-037"
# **What does a checkpoint cost?** Measure it: `torch.save` of a model's state with Adam's two moments (3 × 4 bytes per parameter in fp32), written to disk and `fsync`ed, then loaded back. Mixed-precision training with Adam keeps 16 bytes per parameter (fp16 weights and gradients, fp32 master weights and two moments: Rajbhandari et al., ZeRO, 2020, §3.1); a checkpoint saves all of it but the gradients, which the next step recomputes (`labkit.memory.estimator.bytes_per_param`). Scaling by that gives the checkpoint of a 7 B-parameter model written at this machine's speed (real systems write shards from every GPU in parallel, to faster storage).

# %% id="ckpt-cost"
cost = faults.measure_checkpoint(4_000_000, repeats=3)
print(f"{cost.parameters:,} parameters: {cost.bytes / 1e6:.1f} MB saved in {cost.seconds * 1e3:.0f} ms "
      f"({cost.bandwidth / 1e6:.0f} MB/s), loaded in {cost.load_seconds * 1e3:.0f} ms")
big_ckpt = faults.checkpoint_size(7e9, "mixed", "adam")     # weights + optimizer states; gradients are not saved
print(f"7 B parameters × {big_ckpt.bytes_per_param} B = {big_ckpt.bytes / 1e9:.0f} GB -> "
      f"{cost.time_to_write(big_ckpt.bytes) / 60:.1f} min at this speed")


# %% [markdown] id="cell-039"
# **Young (1974)**, "A first order approximation to the optimum checkpoint interval" (CACM 17(9)): the time lost per unit of work is about $\frac{C}{\tau} + \frac{\tau}{2M}$ (a checkpoint every τ; on average half an interval lost per failure), minimised at
#
# $$\tau_{Young} = \sqrt{2\,C\,M}.$$
#
# **Daly (2006)**, "A higher order estimate of the optimum checkpoint interval for restart dumps" (FGCS 22(3)), models the whole process — failures during work, checkpoints and restarts — with expected wall time $T(\tau) = M e^{R/M}\left(e^{(\tau+C)/M} - 1\right)\frac{W}{\tau}$ for *W* seconds of work, and finds its minimiser to high order:
#
# $$\tau_{Daly} = \sqrt{2CM}\left[1 + \tfrac13\sqrt{\tfrac{C}{2M}} + \tfrac19\,\tfrac{C}{2M}\right] - C \quad (C < 2M), \qquad \tau_{Daly} = M \quad (C \ge 2M).$$
#
# Daly's own examples (C = 5 min): M = 24 h gives 117 min, M = 6 h gives 57 min, M = 15 min gives 9.1 min.
#
# ### Check 11.2 — Daly's interval (a formula)
#
# Write `daly_interval(checkpoint_s, mtbf_s)`.

# %% id="cell-040"
def daly_interval(checkpoint_s, mtbf_s):
    ### BEGIN SOLUTION
    C, M = checkpoint_s, mtbf_s
    if C >= 2 * M:
        return M
    x = C / (2 * M)
    return np.sqrt(2 * C * M) * (1 + np.sqrt(x) / 3 + x / 9) - C
    ### END SOLUTION


# %% labkit={"exercise": "11.2"} tags=["check"]
check("11.2", daly_interval)

# %% id="cell-042"
for M_min in (24 * 60, 6 * 60, 15):
    print(f"C = 5 min, M = {M_min:5d} min: Young {faults.young_interval(5, M_min):6.1f} min, Daly {daly_interval(5, M_min):6.1f} min")

# %% [markdown] id="cell-043"
# Now the simulation. `faults.sample_wall_times` draws whole 30-day runs from the exact distribution of this process (each segment of τ + C is retried until it survives; the number of failed tries is geometric; each costs the time it ran, which is an exponential conditioned on being shorter than the segment, plus a restart that can itself fail). We sweep τ and compare the simulated minimum with Young's and Daly's intervals, for M = 8 h, C = 2 min, R = 5 min.

# %% id="young-daly-sweep"
W, C_s, R_s, M_s = 30 * 86400, 120, 300, 8 * 3600
sweep = faults.interval_sweep(W, C_s, R_s, M_s, trials=2000, seed=0)
print(f"Young τ = {sweep.young / 60:.1f} min, Daly τ = {sweep.daly / 60:.1f} min, "
      f"simulated best on the grid = {sweep.best_simulated / 60:.1f} min (grid step 7 %)")
print(f"wall time at Daly's τ is {100 * sweep.excess_over_best(sweep.daly):.3f} % above the simulated minimum; "
      f"overhead there {100 * sweep.overhead_at(sweep.daly):.1f} %; at Young's τ/4: "
      f"{100 * sweep.overhead_at(sweep.young / 4):.1f} %, at 4× Young's τ: {100 * sweep.overhead_at(4 * sweep.young):.1f} %")
fig = plots.plot_checkpoint_sweep(sweep); plt.show(); plt.close(fig)

# %% [markdown] id="cell-045"
# The curve is flat near its minimum: being 20 % off the optimum costs almost nothing, while checkpointing 4× too often or 4× too rarely about doubles the overhead (compare the three percentages printed above). The simulated optimum agrees with Young and Daly within the grid step (a test in `tests/test_cluster_faults.py` holds this to 15 %, and the wall time at Daly's τ to within 0.1 % of the simulated minimum). Before moving the sliders, predict: if the MTBF falls from 8 h to 2 h (4× more machines), by what factor does the best interval shrink?

# %% id="cell-046"
### BEGIN SOLUTION
guess = 2
### END SOLUTION
predict("11.interval", guess, "τ(M = 8 h) / τ(M = 2 h)")

# %% id="cell-047"
widgets.checkpoint_widget(mtbf_hours=8.0, checkpoint_min=2.0, restart_min=5.0)

# %% id="cell-048"
reveal("11.interval", faults.daly_interval(120, 8 * 3600) / faults.daly_interval(120, 2 * 3600))


# %% [markdown] id="cell-049"
# ### Check 11.3 — expected work lost to a failure (a formula)
#
# A failure strikes a segment of length *L* = τ + C. How much time, on average, had the segment run? Write `expected_lost_work(segment_s, mtbf_s)` = $E[X \mid X < L]$ for $X \sim \text{Exp}(M)$. (Hint: $\int_0^L x\,\frac{e^{-x/M}}{M}dx$ divided by $P[X<L]$.)

# %% id="cell-050"
def expected_lost_work(segment_s, mtbf_s):
    ### BEGIN SOLUTION
    L, M = segment_s, mtbf_s
    return M - L / np.expm1(L / M)
    ### END SOLUTION


# %% labkit={"exercise": "11.3"} tags=["check"]
check("11.3", expected_lost_work)

# %% id="cell-052"
for L_h in (0.5, 2, 8):
    print(f"L = {L_h:3g} h, M = 8 h: lost {expected_lost_work(L_h * 3600, 8 * 3600) / 3600:.3f} h (L/2 = {L_h / 2:.3f} h)")

# %% [markdown] id="real-faults"
# ## 6. Real faults with the real engine
#
# `labkit.cluster.ft_train` is a real training script: a small MLP with dropout, SGD with momentum, `DistributedDataParallel` over gloo when several workers run. Every step's batch is drawn with `torch.randperm` and dropout draws its masks, both from torch's global generator, which every rank seeds alike and draws from alike. So what the next steps depend on is the weights, the optimizer's momentum buffers, the step — and the generator's state. Every few steps rank 0 saves a checkpoint; on start every rank resumes from it if there is one. The two labs below are that checkpointing, written by you and run by the script's workers.
#
# ### Lab 11.7 — an atomic checkpoint
#
# A job can die at any instant — also in the middle of writing its checkpoint. If it was writing *into* the checkpoint file, the restart finds a torn file and nothing to resume from. Write `save_checkpoint(state, path)` so that `path` always holds a whole checkpoint, the old one or the new one:
#
# 1. `torch.save` the state into a **temporary file in the same directory** as `path` (e.g. `tempfile.mkstemp(dir=...)`, then `os.fdopen(fd, "wb")`);
# 2. `f.flush()` (Python's buffer to the kernel), then `os.fsync(f.fileno())` (the kernel's to the disk);
# 3. `os.replace(tmp, path)`: POSIX `rename()` is atomic — when `path` exists, "a link named new shall remain visible to other threads throughout the renaming operation and refer either to the file referred to by new or old before the operation began" (The Open Group Base Specifications, Issue 7, `rename`) — but only within one file system (across two it fails with `EXDEV`), hence the same directory;
# 4. fsync the directory (`os.open(dir, os.O_RDONLY)`, `os.fsync`, `os.close`): the fsync(2) man page warns that fsync of a file "does not necessarily ensure that the entry in the directory containing the file has also reached disk. For that an explicit fsync() on a file descriptor for the directory is also needed."
#
# If anything fails on the way, remove the temporary file and raise again. The check kills your save deterministically: a hook counts every byte written through `open`, `os.write` and `torch.save` and raises after *k* of them (a `BaseException`, as a real kill cannot be caught); `path` must still hold the previous checkpoint. It wraps `os.fsync` and `os.fdatasync` (also under the names you import them as) and `os.replace`/`os.rename`: the file renamed onto `path` must come from `path`'s directory and have been fsynced after its last byte (its size at the fsync equals its size at the rename, so a buffer flushed only by `close` is seen), and the directory fsynced after the rename.

# %% id="save-checkpoint"
import os
import tempfile
import torch


def save_checkpoint(state, path):
    ### BEGIN SOLUTION
    directory = os.path.dirname(os.path.abspath(path))
    f = tempfile.NamedTemporaryFile("wb", dir=directory, prefix=".ckpt-", delete=False)
    renamed = False
    try:
        with f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(f.name, path)
        renamed = True
    finally:
        if not renamed and os.path.exists(f.name):   # killed on the way: no litter
            os.unlink(f.name)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    ### END SOLUTION


# %% labkit={"exercise": "11.7"} tags=["check"]
check("11.7", save_checkpoint)

# %% [markdown] id="torn-md"
# What does a kill in the middle of a save leave behind? Predict for the obvious save, `torch.save(state, path)` straight into the checkpoint, killed halfway: what does the restarted job's `torch.load(path)` do?

# %% id="torn-predict"
### BEGIN SOLUTION
guess = "raises an error"
### END SOLUTION
predict("11.torn", guess, "torch.load after a kill halfway through torch.save(state, path)",
        choices=("loads the old checkpoint", "loads the new checkpoint", "raises an error"))

# %% id="torn-demo"
for name, save in (("torch.save(state, path)", ckpt_lab.save_in_place), ("your save_checkpoint", save_checkpoint)):
    print(f"{name:24s} killed halfway: {ckpt_lab.kill_mid_save(save)}")
reveal("11.torn", ckpt_lab.torn_outcome(ckpt_lab.save_in_place))


# %% [markdown] id="lab-resume"
# ### Lab 11.8 — resume, bit-identical after a kill
#
# Write the class the workers checkpoint with: `Checkpoint(path)` with
#
# * `save(model, optimizer, step)`: everything the later steps depend on — `model.state_dict()`, `optimizer.state_dict()`, the step, and torch's generator (`torch.get_rng_state()`) — through your `save_checkpoint`;
# * `resume(model, optimizer)`: if `path` exists, load it (`torch.load(path, weights_only=True)`) into the freshly built model and optimizer, restore the generator (`torch.set_rng_state`), and return the step to continue from; without a checkpoint, change nothing and return 0.
#
# The check first kills a run inside this process (after a step that is not a checkpoint step, so the steps since the last checkpoint are redone), resumes with a fresh model and optimizer and names what your resume did not restore; then it ships your class to **two gloo workers under `torchrun --max-restarts 1`**, SIGKILLs rank 1 after step *k* in the first attempt, lets torchrun restart both, and compares the final weights bit for bit with an uninterrupted two-worker run (`ft_train.reference_params`, computed in one process: exactly what DDP's two workers compute, `tests/test_cluster_ft.py`).

# %% id="checkpoint-class"
class Checkpoint:
    def __init__(self, path):
        self.path = path

    def save(self, model, optimizer, step):
        ### BEGIN SOLUTION
        save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "step": step, "rng": torch.get_rng_state()}, self.path)
        ### END SOLUTION

    def resume(self, model, optimizer):
        ### BEGIN SOLUTION
        try:
            state = torch.load(self.path, weights_only=True)
        except FileNotFoundError:               # no checkpoint yet: start from step 0
            return 0
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        return state["step"]
        ### END SOLUTION


# %% labkit={"exercise": "11.8"} tags=["check"]
check("11.8", Checkpoint)

# %% [markdown] id="cell-055"
# Here is that run — the check's (its seed drawn by the check), or, if the check did not run it, the same job now with your class (labkit's if yours failed): `torchrun --standalone --nproc-per-node 2 --max-restarts 1`, two gloo workers, a checkpoint every 4 steps; rank 1 kills itself with SIGKILL after step 10 in the first attempt only (it reads `TORCHELASTIC_RESTART_COUNT`). torchrun's agent sees the dead worker, stops the other, and starts both again; they resume from the last checkpoint. (One practical snag, met while writing this: torchrun shares its rendezvous store with the workers, and after a restart gloo could read the old attempt's addresses and fail to connect — pytorch/pytorch#135712; the script's launcher sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`.) Predict first: from which step do the restarted workers resume, with a checkpoint every 4 steps and the kill after step 10?

# %% id="restart-predict"
### BEGIN SOLUTION
guess = 8
### END SOLUTION
predict("11.restart-step", guess, "the step the restarted workers resume from (checkpoint every 4, killed after 10)")

# %% id="cell-057"
# NBVAL_IGNORE_OUTPUT
hit = ckpt_lab.restart_run(Checkpoint)
for a in sorted(hit.run.attempts, key=lambda a: (a["attempt"], a["rank"])):
    print(f"attempt {a['attempt']}, rank {a['rank']}: started from step {a['resumed_from']}")
print(f"killed after step {hit.kill_at}, restarted, finished {hit.cfg.steps} steps in {hit.run.wall_s:.1f} s "
      f"(restarts: {hit.run.restarts}; a checkpoint every {hit.cfg.ckpt_every} steps)")
print("bit-identical to an uninterrupted 2-worker run:", hit.identical)
reveal("11.restart-step", hit.run.resumed_from)

# %% [markdown] id="restart-after-md"
# Bit-identity needs three things: the whole state is saved (weights *and* optimizer moments, the step, and the random generator that draws the batches and the dropout masks); the computation after the restart replays the same way (same world size, same reduction order); and the checkpoint the restart reads is whole (Lab 11.7). Change the world size on restart and the result is merely close, not equal. Here every rank draws the same random numbers, so rank 0's generator state is every rank's; with per-rank generators (different dropout masks per rank, as Megatron-LM keeps them) each rank must save its own.

# %% [markdown] id="seed-002-energy"
# ## 7. Energy (能耗)
#
# Seed 002 asks for 绿色计算 — energy-aware systems. A stated model: a GPU running a job draws its TDP (`labkit.hardware.GPUS[...].tdp_watts`, from the data sheets); an idle, powered GPU draws less — how much, no data sheet says (NVIDIA's V100, A100, H100 and H200 sheets give only the maximum), so it must be measured. The one reading this course has is recorded, with how it was taken, in `labkit.hardware.MEASURED_POWER`: on one H200 SXM (TDP up to 700 W), `nvidia-smi --query-gpu=power.draw` read 79 W with no process on the GPU, 120 W once a process held a CUDA context but ran nothing, and 692 W during a bf16 matmul loop. `PowerModel.measured("H200")` takes its idle fraction from it (79 / 700 ≈ 11 %); for another GPU, measure yours and pass `idle_fraction`. Host, network and cooling are left out. Every job's own energy is the same under every policy (same GPU-seconds, except work redone after preemption); what differs is how long the cluster idles.

# %% id="energy-predict"
### BEGIN SOLUTION
guess = "easy"
### END SOLUTION
predict("11.least-energy", guess, "which policy's schedule of the 1,500 jobs uses the least energy?", choices=POLICIES)

# %% id="cell-059"
pm = energy.PowerModel.measured("H200")     # idle power from the recorded nvidia-smi reading
reading = MEASURED_POWER["H200"]
print(f"power model: {pm.busy_watts:.0f} W busy (TDP), {pm.idle_watts:.0f} W idle per {pm.gpu} "
      f"({reading.how}; {reading.source})")
energies = {p: energy.schedule_energy(r, pm) for p, r in results.items()}
for p, e in energies.items():
    print(f"{p:9s} {e.total_kwh / 1000:7.2f} MWh over {e.makespan / 86400:5.1f} days; idle share {e.idle_share:5.1%}; "
          f"mean per job {e.job_joules.mean() / energy.J_PER_KWH:6.1f} kWh")
reveal("11.least-energy", min(energies, key=lambda p: energies[p].total_kwh))

# %% [markdown] id="summary"
# ## 8. The programmer's view: pitfalls
#
# * **Declared run times are a contract.** Backfilling and SJF trust them; a job that overruns its limit is killed. Declare generously, but not absurdly — a huge limit never backfills.
# * **Gang scheduling and fragmentation.** "Enough free GPUs" is not "enough free GPUs in the right places": pack small jobs, keep whole nodes free for big ones.
# * **Preemption is only as cheap as your checkpoint.** A preempted job that cannot resume loses everything since its start.
# * **The step waits for the slowest worker.** Watch the tail of per-worker step times, not the mean.
# * **Checkpoint atomically.** Write to a temporary file in the same directory, flush and `fsync` it, rename it over the checkpoint, `fsync` the directory; a job killed mid-write must find the previous checkpoint intact (Lab 11.7).
# * **Save the whole state.** Weights alone resume a *different* run: the optimizer moments, the step, the data position and the RNG state all matter.
# * **Test your restart path.** Kill a run on purpose (SIGKILL, not Ctrl-C) and compare with an uninterrupted one, as in §6 — a checkpoint kept in memory survives a "kill" simulated inside one process, never a real one.
# * **torchrun restarts all workers,** not only the dead one; `--max-restarts` bounds how often.
#
# ## 9. Summary
#
# * A scheduler trades utilisation, completion time and fairness. FIFO is fair in order but wastes GPUs; SJF minimises mean JCT but starves long jobs; priority with preemption serves important jobs at others' expense; EASY backfilling keeps FIFO's guarantee for the head job and fills the holes.
# * Gang scheduling needs all GPUs at once; placement decides whether big jobs find room.
# * A synchronous step costs the maximum of its workers: with *N* workers a rare straggler becomes a common slow step. Backup workers cut the tail at the price of machines.
# * With MTBF *M* and checkpoint cost *C*, checkpoint about every $\sqrt{2CM}$ (Young), minus *C* and plus small terms (Daly); the simulation agrees and the optimum is flat.
# * A real restart is bit-identical only if the whole state is saved and the computation replays the same way.
# * Energy = power × time; idle power makes utilisation an energy question too.

# %% [markdown] id="cell-061"
# ## 10. Exercises
#
# 1. In the policy widget, raise the load from 0.6 to 1.1. Which policy's mean JCT grows fastest, and why does utilisation stop growing for FIFO long before load 1?
# 2. Jobs declare 2× their true run times (`generate_jobs(..., overestimate=2)`). Does EASY get better or worse? Explain with the shadow time.
# 3. A 1,024-GPU job: each GPU fails on average every 5 years, a checkpoint takes 3 minutes. Compute the job's MTBF, Young's and Daly's intervals, and the expected overhead.
# 4. Why does the expected lost work per failure fall below τ/2 when τ is comparable to the MTBF?

# %% [markdown] id="cell-062"
# ### BEGIN SOLUTION
# 1. SJF and EASY degrade gracefully; FIFO's mean JCT explodes first. FIFO's effective capacity is below the cluster's because GPUs idle while a big job waits at the head (head-of-line blocking); once the offered load exceeds that effective capacity the queue grows without bound.
# 2. It often gets a little *better* or stays about the same for the mean (Mu'alem & Feitelson 2001 observed this): jobs that finish early free their GPUs before their declared end, and the scheduler recomputes the shadow at each completion. Fewer jobs qualify as "ends before the shadow", though, so backfilling of long jobs drops.
# 3. M = 5 · 365 · 24 h / 1024 ≈ 42.8 h ≈ 154,000 s; C = 180 s: Young √(2·180·154000) ≈ 7,450 s ≈ 124 min; Daly ≈ 122 min (−C, plus terms of order √(C/2M) ≈ 2.4 %). Overhead ≈ C/τ + (τ + C)/(2M) ≈ 2.4 % + 2.5 % ≈ 5 % (use `faults.expected_wall_time` with R for the full value).
# 4. With exponential gaps the failure density decreases along the segment, so conditioned on striking before L a failure tends to come early: E[X | X < L] = M − L/(e^{L/M} − 1) < L/2, approaching L/2 only when L ≪ M.
# ### END SOLUTION

# %% id="cell-063"
M1 = faults.system_mtbf(5 * 365 * 24 * 3600, 1024)      # 1024 GPUs, each failing once in 5 years
tau = faults.daly_interval(180, M1)
print(f"MTBF {M1 / 3600:.1f} h; Young {faults.young_interval(180, M1) / 60:.1f} min; Daly {tau / 60:.1f} min; "
      f"overhead at Daly's τ {100 * faults.expected_overhead(1e7, tau, 180, 300, M1):.1f} % (R = 5 min)")
