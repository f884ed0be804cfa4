"""A cluster of data-sheet GPUs: GPUs per node, NVLink inside a node, NICs between nodes
(chapter 10's planner, :mod:`labkit.parallel.planner`)."""
from __future__ import annotations

from dataclasses import dataclass

from labkit import validate as V
from labkit.hardware.datasheets import gpu as sheet
from labkit.hardware.interconnects import INFINIBAND_HDR


@dataclass(frozen=True)
class GPUCluster:
    """GPUs per node × nodes; memory (bytes), peak (FLOP/s), bandwidths (B/s, one direction):
    ``intra_bw`` NVLink per GPU, ``inter_bw`` one NIC, ``hbm_bw`` a GPU's memory;
    ``nics_per_node`` NICs for application traffic in each node."""
    gpus_per_node: int
    nodes: int
    memory: float
    peak_flops: float
    intra_bw: float
    inter_bw: float
    hbm_bw: float
    nics_per_node: int
    name: str = ""

    def __post_init__(self):
        V.integer("gpus_per_node", self.gpus_per_node, low=1)
        V.integer("nodes", self.nodes, low=1)
        V.integer("nics_per_node", self.nics_per_node, low=1)
        for n in ("memory", "peak_flops", "intra_bw", "inter_bw", "hbm_bw"):
            V.positive(n, getattr(self, n))

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def gpu_cluster(gpu: str = "A100", gpus: int = 8, gpus_per_node: int = 8,
                inter_bw: float = INFINIBAND_HDR, precision: str = "bf16",
                nics_per_node: int | None = None) -> GPUCluster:
    """A cluster of ``gpus`` data-sheet GPUs (labkit.hardware) in nodes of ``gpus_per_node``,
    NVLink inside a node, NICs of ``inter_bw`` between nodes (default HDR InfiniBand), one
    per GPU unless ``nics_per_node`` says otherwise (a DGX A100 has
    :data:`labkit.hardware.DGX_A100_COMPUTE_NICS` for its 8 GPUs)."""
    g = sheet(gpu)
    precision = V.one_of("precision", precision, tuple(g.flops))
    n = V.integer("gpus", gpus, low=1)
    k = V.integer("gpus_per_node", gpus_per_node, low=1)
    if n > k:
        V.divides("gpus_per_node", k, "gpus", n)
    per_node = min(k, n)
    nics = per_node if nics_per_node is None else V.integer("nics_per_node", nics_per_node,
                                                            low=1)
    return GPUCluster(per_node, max(1, n // k), g.memory_bytes, g.peak(precision),
                      g.nvlink_per_direction, V.positive("inter_bw", inter_bw), g.hbm_bandwidth,
                      nics, f"{n} × {g.key}")
