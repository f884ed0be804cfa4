"""Parallel training: collectives step by step and as cost models, data-parallel simulation,
real ``torch.distributed`` runs, gradient compression and local/async SGD (chapter 09).

Submodules (import what you need; torch and matplotlib load only where used):

* :mod:`~labkit.parallel.collectives` — all-reduce (naive, ring, tree, recursive
  halving/doubling), reduce-scatter, all-gather, broadcast on per-rank numpy arrays, with a
  message log; :mod:`~labkit.parallel.cost` — α-β-γ formulas, algbw/busbw.
* :mod:`~labkit.parallel.dp_sim` — data-parallel step simulator (DataParallel vs DDP,
  bucketing and overlap, stragglers) with hardware presets.
* :mod:`~labkit.parallel.launch` — N local ``torch.distributed`` processes on a free port;
  all-reduce timing; α-β fit. :mod:`~labkit.parallel.ddp_train` — torchrun-ready DDP script
  and lab 9.4's bucketed DDP (gradient hooks + asynchronous all-reduce) run in real processes.
* :mod:`~labkit.parallel.compression` — top-k with error feedback, 8-bit, PowerSGD-style
  low rank, local SGD, async SGD, trained on scikit-learn digits.
* :mod:`~labkit.parallel.draw`, :mod:`~labkit.parallel.widgets` — plots (``plot_timeline``
  takes any event kind) and the ``*_widget()`` builders.
"""
from labkit.parallel.collectives import (  # noqa: F401
    CollectiveRun, Message, all_gather, all_reduce, broadcast, coverage, reduce_scatter,
    simulated_time,
)
from labkit.parallel.cost import algbw, bus_factor, busbw, collective_time, cost_terms  # noqa: F401
# chapter 10: model parallelism (pipeline, tensor, ZeRO, planner; torch runs in mp_real)
from labkit.parallel.pipeline import Schedule, bubble_formula, pipeline_schedule  # noqa: F401,E402
from labkit.parallel.planner import GPUCluster, cluster, plan  # noqa: F401,E402
from labkit.parallel.planner_cost import GPTModel  # noqa: F401,E402
