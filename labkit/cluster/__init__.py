"""Cluster scheduling, stragglers, faults and energy (chapter 11).

* :mod:`labkit.cluster.jobs` — the :class:`Job` record, a seeded job generator and a CSV
  trace loader.
* :mod:`labkit.cluster.scheduler` — an event-driven simulator of a GPU cluster with FIFO,
  shortest-job-first, preemptive priority and EASY backfilling, every job gang-scheduled
  (all its GPUs at once) and placed on nodes.
* :mod:`labkit.cluster.metrics` — completion time, queueing delay, slowdown, utilisation,
  Jain's fairness index.
* :mod:`labkit.cluster.stragglers` — synchronous data parallelism: step = max over workers,
  backup workers.
* :mod:`labkit.cluster.faults` — failures from an MTBF, checkpoint interval, Young/Daly.
* :mod:`labkit.cluster.energy` — power × time per job and per policy.
* :mod:`labkit.cluster.ft_train` — a real fault-tolerant training script (torchrun, kill,
  restart from a checkpoint).
"""
from labkit.cluster.jobs import Job, generate_jobs, load_trace  # noqa: F401
from labkit.cluster.scheduler import POLICIES, Cluster, simulate  # noqa: F401
