"""The cluster scheduler: jobs scheduled per second, 10,000 seeded jobs on 8 × 8 GPUs.

EASY backfilling at an offered load of 0.9 is the hardest of the four policies (one pass
over the waiting queue per completion); FIFO is the cheapest. Goal: >= 20,000 jobs/s,
i.e. 10,000 jobs in under half a second.
"""
from labkit.cluster.jobs import generate_jobs
from labkit.cluster.scheduler import Cluster, simulate
from labkit.perf import Row, benchmark

N = 10_000


def rows():
    jobs = generate_jobs(N, total_gpus=64, load=0.9, seed=0)
    cluster = Cluster(8, 8)
    out = []
    for policy in ("easy", "fifo"):
        t = benchmark(lambda: simulate(jobs, cluster, policy), repeats=3, warmup=1)
        out.append(Row(f"{policy} scheduler: jobs scheduled per second ({N:,} jobs, 64 GPUs, "
                       f"load 0.9)", N / t.median, unit="jobs/s", goal=">= 20,000 jobs/s"))
    return out
