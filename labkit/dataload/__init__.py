"""labkit.dataload: input pipelines measured and simulated (chapter 07).

* :mod:`labkit.dataload.model` — images with structure, a real PNG codec (zlib), their
  augmentation (real numpy work), a map-style dataset any ``torch.utils.data.DataLoader``
  accepts with a sampler that carries the epoch into the workers, the steady-state window
  of a run, and the closed-form bounds of a pipeline's throughput.
* :mod:`labkit.dataload.sim` — a discrete-event simulator of read → decode → augment →
  collate → hand-over → copy → compute with DataLoader-style workers, prefetch queues and
  a fairly scheduled pool of CPU cores shared with other processes.
* :mod:`labkit.dataload.measure` — the timed loop, and real runs behind a real DataLoader
  (torch) that any loop of its signature times (the learner's, in chapter 07): the loader
  alone, the step alone on one cached batch, the full pipeline, repeated in alternation
  with their spread; :mod:`labkit.dataload.costs` — each stage's CPU cost measured apart,
  and PNGs against a decoded cache; :mod:`labkit.dataload.calibrate` — the simulator
  calibrated on those runs, in CPU time; :mod:`labkit.dataload.randomness` — which random
  streams repeat in workers and across epochs.
* :mod:`labkit.dataload.fake` — a machine in virtual time (a loader with the DataLoader's
  prefetch queue, an asynchronous step, exact clocks) on which chapter 07's checks run a
  loop: what it measures is known exactly, whatever the load.
* :mod:`labkit.dataload.formats` — one file per sample vs packed shards vs ``np.memmap``;
  :mod:`labkit.dataload.cifar` — the CIFAR-10/100 binary format.
* :mod:`labkit.dataload.compare` — measured against predicted with both spreads, and the
  diagnosis of a data-loading bottleneck (chapter 07's tables).

torch is imported only by :mod:`measure`, :mod:`costs` and :mod:`randomness` (inside their
functions), matplotlib only by :mod:`plots`.
"""
from labkit.dataload.model import (  # noqa: F401
    DecodedCache, EncodedImages, EpochSampler, augment, decode, encode, make_images,
    steady_throughput, steady_window, wait_fraction, workers_needed,
)
from labkit.dataload.sim import PipelineConfig, SimResult, simulate, sweep_workers  # noqa: F401
