"""GPU data-sheet facts: the one place the course's GPU numbers live (``labkit.hardware``).

Every rate is dense (no 2:4 sparsity); NVIDIA's sheets print the sparse figure with an
asterisk, and we halve it. Sources:

* V100 SXM2 32 GB — NVIDIA Tesla V100 data sheet (2020) and "NVIDIA Tesla V100 GPU
  Architecture" white paper (2017): 80 SMs × 64 FP32 cores, FP32 15.7 TFLOPS, FP16 Tensor
  Core 125 TFLOPS, HBM2 900 GB/s, NVLink 300 GB/s total, 300 W.
* A100 SXM4 80 GB — NVIDIA A100 Tensor Core GPU data sheet (2021) and architecture white
  paper (2020): 108 SMs × 64 FP32 cores, FP32 19.5, TF32 156, BF16/FP16 312, INT8 624
  TFLOPS/TOPS, HBM2e 2,039 GB/s, NVLink 600 GB/s total, 400 W.
* H100 SXM5 80 GB — NVIDIA H100 Tensor Core GPU data sheet (2023) and architecture white
  paper (2022): 132 SMs × 128 FP32 cores, FP32 67, TF32 494.5, BF16/FP16 989.5, FP8/INT8
  1,979 TFLOPS/TOPS, HBM3 3.35 TB/s, NVLink 900 GB/s total, up to 700 W.
* H200 SXM 141 GB — NVIDIA H200 Tensor Core GPU data sheet (2024): compute as H100 SXM,
  HBM3e 4.8 TB/s, 141 GB, NVLink 900 GB/s total, up to 700 W.

Use one precision per comparison and say which (``peak("fp32")`` vs ``peak("bf16")``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from labkit import validate as v
from labkit.hardware.roofline import ROOFLINE_PRECISIONS, Machine, Roofline, peak_rate

MAX_THREADS_PER_BLOCK = 1024   # every CUDA GPU since compute capability 2.0
WARP_SIZE = 32                 # threads per warp on every NVIDIA GPU so far
T = 1e12
GB = 1e9


@dataclass(frozen=True)
class GPU:
    """One GPU model's data-sheet numbers (dense rates, FLOP/s; bytes; B/s; W)."""
    key: str
    name: str
    compute_capability: str
    sm_count: int
    fp32_lanes_per_sm: int
    memory_bytes: float
    hbm_bandwidth: float              # B/s
    nvlink_bandwidth: float           # B/s, total of both directions, per GPU
    tdp_watts: float
    flops: dict = field(default_factory=dict)   # precision -> dense FLOP/s (or OP/s for int8)
    source: str = ""

    def peak(self, precision: str = "fp32") -> float:
        """Dense peak rate at ``precision`` (one of the keys of ``flops``)."""
        return peak_rate(self.flops, precision, self.key)

    def ridge(self, precision: str = "fp32") -> float:
        """Arithmetic intensity (FLOP/byte of HBM traffic) where the roofs meet: this GPU's
        own peak / bandwidth (a ``replace()``d copy too), by the course's one roofline
        (:attr:`labkit.hardware.roofline.Roofline.ridge`)."""
        return Roofline(self.name, self.peak(precision), self.hbm_bandwidth).ridge

    @property
    def nvlink_per_direction(self) -> float:
        return self.nvlink_bandwidth / 2


GPUS: dict[str, GPU] = {
    "V100": GPU("V100", "V100 SXM2 32GB", "7.0", 80, 64, 32 * GB, 900 * GB, 300 * GB, 300,
                {"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
                "NVIDIA Tesla V100 data sheet (2020); V100 architecture white paper (2017)"),
    "A100": GPU("A100", "A100 SXM4 80GB", "8.0", 108, 64, 80 * GB, 2039 * GB, 600 * GB, 400,
                {"fp64": 9.7 * T, "fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T,
                 "bf16": 312 * T, "int8": 624 * T},
                "NVIDIA A100 Tensor Core GPU data sheet (2021); A100 white paper (2020)"),
    "H100": GPU("H100", "H100 SXM5 80GB", "9.0", 132, 128, 80 * GB, 3350 * GB, 900 * GB, 700,
                {"fp64": 34 * T, "fp32": 67 * T, "tf32": 494.5 * T, "fp16": 989.5 * T,
                 "bf16": 989.5 * T, "fp8": 1979 * T, "int8": 1979 * T},
                "NVIDIA H100 Tensor Core GPU data sheet (2023); H100 white paper (2022)"),
    "H200": GPU("H200", "H200 SXM 141GB", "9.0", 132, 128, 141 * GB, 4800 * GB, 900 * GB, 700,
                {"fp64": 34 * T, "fp32": 67 * T, "tf32": 494.5 * T, "fp16": 989.5 * T,
                 "bf16": 989.5 * T, "fp8": 1979 * T, "int8": 1979 * T},
                "NVIDIA H200 Tensor Core GPU data sheet (2024)"),
}


@dataclass(frozen=True)
class PowerMeasurement:
    """Board power of one GPU read with ``nvidia-smi`` — a measurement, not a data sheet's
    number (the V100, A100, H100 and H200 sheets give only the maximum, the TDP)."""
    gpu: str                   # a key of GPUS
    idle_watts: float          # powered, no process on the GPU
    context_watts: float       # a process holds a CUDA context and runs nothing
    busy_watts: float          # a bf16 matmul loop
    how: str
    source: str


MEASURED_POWER = {
    "H200": PowerMeasurement(
        "H200", 79.0, 120.0, 692.0,
        "nvidia-smi --query-gpu=power.draw --format=csv, one reading per state",
        "measured for this course on one H200 SXM 141 GB (TDP up to 700 W, GPUS['H200']); "
        "one board, one machine: other boards, drivers and clocks differ — measure yours"),
}
"""Recorded power readings per GPU model, with how they were taken (chapter 11's energy
model takes its idle power from here: ``labkit.cluster.energy.PowerModel.measured``)."""


def gpu(gpu: str) -> GPU:
    """The data sheet of ``gpu`` (V100, A100, H100, H200)."""
    return GPUS[v.one_of("gpu", gpu, tuple(GPUS))]


# ---- per-SM limits (chapter 04's occupancy, chapter 05's ladder model) ---------------------

@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one GPU: CUDA C++ Programming Guide, "Technical Specifications per
    Compute Capability" (threads, warps, blocks, registers, shared memory per SM and per
    block, and the 1 KB of shared memory the runtime reserves per block from 8.0 on); the
    allocation units are the CUDA Occupancy Calculator's (registers: 256 per warp; shared
    memory: 256 B on 7.x, 128 B on 8.x and 9.x)."""
    name: str
    compute_capability: str
    sm_count: int
    fp32_lanes_per_sm: int        # FP32 "CUDA cores" per SM (architecture white papers)
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int
    register_unit: int            # registers are allocated to a warp in these units
    max_registers_per_thread: int
    sub_partitions: int
    shared_per_sm: int            # bytes, with the carveout at its maximum
    max_shared_per_block: int     # bytes (opt-in maximum)
    reserved_shared_per_block: int
    shared_unit: int              # shared-memory allocation granularity, bytes

    @property
    def cuda_cores(self) -> int:
        """FP32 lanes of the whole GPU: SMs x FP32 lanes per SM."""
        return self.sm_count * self.fp32_lanes_per_sm

    @property
    def max_resident_threads(self) -> int:
        """Threads resident at once on the whole GPU: SMs x threads per SM."""
        return self.sm_count * self.max_threads_per_sm


KB = 1024
SM_LIMITS: dict[str, SMLimits] = {
    "V100": SMLimits("V100 (sm_70)", "7.0", 80, 64, 2048, 64, 32, MAX_THREADS_PER_BLOCK,
                     65536, 256, 255, 4, 96 * KB, 96 * KB, 0, 256),
    "A100": SMLimits("A100 (sm_80)", "8.0", 108, 64, 2048, 64, 32, MAX_THREADS_PER_BLOCK,
                     65536, 256, 255, 4, 164 * KB, 163 * KB, KB, 128),
    "H100": SMLimits("H100 SXM (sm_90)", "9.0", 132, 128, 2048, 64, 32, MAX_THREADS_PER_BLOCK,
                     65536, 256, 255, 4, 228 * KB, 227 * KB, KB, 128),
    "H200": SMLimits("H200 SXM (sm_90)", "9.0", 132, 128, 2048, 64, 32, MAX_THREADS_PER_BLOCK,
                     65536, 256, 255, 4, 228 * KB, 227 * KB, KB, 128),
}
"""SM counts: V100 white paper (2017) 80 SMs; A100 white paper (2020) 108 SMs x 64 FP32
lanes; H100 white paper (2022) SXM5 132 SMs x 128 FP32 lanes; H200 SXM is the same GH100
configuration (H200 data sheet: compute as H100 SXM)."""

L2_BYTES: dict[str, int] = {"V100": 6 * 2 ** 20, "A100": 40 * 2 ** 20, "H100": 50 * 2 ** 20,
                            "H200": 50 * 2 ** 20}
"""L2 cache: V100 white paper 6 MB; A100 white paper 40 MB; H100 white paper 50 MB (SXM5);
H200 as H100 SXM5."""

SHARED_BYTES_PER_CLOCK = 128   # per SM: 32 banks x 4 bytes (Programming Guide, "Shared Memory")


def sm_limits(key: str) -> SMLimits:
    """Per-SM limits of ``key`` (V100, A100, H100, H200)."""
    if key not in SM_LIMITS:
        raise ValueError(f"gpu must be one of {', '.join(SM_LIMITS)}; got {key!r}")
    return SM_LIMITS[key]


def fp32_clock_hz(key: str) -> float:
    """The boost clock implied by the data sheet: FP32 peak / (SMs x FP32 lanes x 2 FLOP per
    FMA) — 1.53 GHz (V100), 1.41 GHz (A100), 1.98 GHz (H100/H200)."""
    g, s = gpu(key), sm_limits(key)
    return g.peak("fp32") / (s.sm_count * s.fp32_lanes_per_sm * 2)


# ---- the data sheets as rooflines (chapters 01, 04, 05) ----------------------------------

def _preset(key: str) -> Machine:
    g = gpu(key)
    return Machine(g.name, {p: g.flops[p] for p in ROOFLINE_PRECISIONS if p in g.flops},
                   g.hbm_bandwidth, g.source)


PRESETS = {key: _preset(key) for key in ("A100", "H100", "H200")}
"""The GPUs the roofline chapters compare, as :class:`~labkit.hardware.roofline.Machine`."""


def datasheet(key: str, precision: str = "fp32") -> Roofline:
    """The roofline of a data-sheet GPU (``labkit.hardware.GPUS``, any key) at ``precision``."""
    g = gpu(key)
    return Roofline(f"{g.key} {precision} (data sheet)", g.peak(precision), g.hbm_bandwidth,
                    g.source)
