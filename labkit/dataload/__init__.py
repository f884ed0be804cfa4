"""labkit.dataload: input pipelines measured and simulated (chapter 07).

* :mod:`labkit.dataload.model` — synthetic encoded images, their decode and augment (real
  numpy work), a map-style dataset any ``torch.utils.data.DataLoader`` accepts, and the
  closed-form bounds of a pipeline's throughput.
* :mod:`labkit.dataload.sim` — a discrete-event simulator of read → decode → augment →
  copy → compute with DataLoader-style workers, prefetch queues and a pool of CPU cores.
* :mod:`labkit.dataload.measure` — a real training loop behind a real DataLoader (torch).
* :mod:`labkit.dataload.formats` — one file per sample vs packed shards vs ``np.memmap``;
  :mod:`labkit.dataload.cifar` — the CIFAR-10/100 binary format.
* :mod:`labkit.dataload.compare` — measured runs against the bound and the simulator, and
  the diagnosis of a data-loading bottleneck (chapter 07's tables).

torch is imported only by :mod:`measure`, matplotlib only by :mod:`plots`.
"""
from labkit.dataload.model import (  # noqa: F401
    EncodedImages, augment, decode, encode, make_images, steady_throughput, wait_fraction,
    workers_needed,
)
from labkit.dataload.sim import PipelineConfig, SimResult, simulate, sweep_workers  # noqa: F401
