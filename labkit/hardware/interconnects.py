"""Links between GPUs and between nodes: the one place their bandwidths live.

Bytes/s per direction. A PCIe link of generation g carries 8, 16 or 32 GT/s per lane with
128b/130b encoding (PCI-SIG, PCI Express Base Specification 3.0, 4.0, 5.0); an InfiniBand
port 100 (EDR), 200 (HDR) or 400 Gb/s (NDR) per direction (InfiniBand Trade Association
roadmap; NVIDIA ConnectX-5/6/7 adapters). NVLink is a property of the GPU: its data sheet's
total, :attr:`labkit.hardware.GPU.nvlink_bandwidth` (both directions) and
:attr:`~labkit.hardware.GPU.nvlink_per_direction`.
"""
from __future__ import annotations


def _pcie_x16(gt_per_s: float) -> float:
    """Bytes/s per direction of a x16 link at ``gt_per_s`` GT/s per lane, 128b/130b."""
    return gt_per_s * 1e9 * 16 * 128 / 130 / 8


PCIE3_X16 = _pcie_x16(8)
"""PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b = 15.75 GB/s per direction."""
PCIE4_X16 = _pcie_x16(16)
"""PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction."""
PCIE5_X16 = _pcie_x16(32)
"""PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b = 63 GB/s per direction (PCI-SIG, PCI Express
Base Specification 5.0, 2019); H100/H200 SXM hosts use PCIe Gen5."""

INFINIBAND_EDR = 100e9 / 8
"""Bytes/s per EDR InfiniBand port and direction: 100 Gb/s = 12.5 GB/s (NVIDIA Mellanox
ConnectX-5 EDR adapters)."""
INFINIBAND_HDR = 200e9 / 8
"""Bytes/s per HDR InfiniBand port and direction: 200 Gb/s (InfiniBand Trade Association, HDR;
NVIDIA Mellanox ConnectX-6 HDR adapters) = 25 GB/s."""
INFINIBAND_NDR = 400e9 / 8
"""Bytes/s per NDR InfiniBand port and direction: 400 Gb/s = 50 GB/s (NVIDIA ConnectX-7 NDR
adapters; a DGX H100 has eight for its eight GPUs)."""

DGX_A100_COMPUTE_NICS = 8
"""HDR HCAs per DGX A100 node for application traffic, one per GPU (Narayanan et al., SC'21
§5: "Each node has eight NVIDIA Mellanox 200Gbps HDR Infiniband HCAs for application
communication, with an additional two HCAs per node for dedicated storage"; the NVIDIA DGX
A100 User Guide lists the same 8 + 2 ConnectX-6 ports)."""
