"""Occupancy: how many blocks of a kernel fit on one streaming multiprocessor (SM).

Blocks per SM = the minimum of four limits (NVIDIA, CUDA C++ Programming Guide, "Compute
Capabilities", technical specifications table; CUDA Occupancy Calculator / cuda_occupancy.h):

* warps:     floor(max warps per SM / warps per block), warps per block = ceil(threads / 32)
* blocks:    the max resident blocks per SM
* registers: registers are allocated per warp in units of 256: a warp takes
             roundup(regs_per_thread * 32, 256); each of the 4 SM sub-partitions holds
             floor((registers per SM / 4) / that) warps, so
             blocks = floor(4 * that / warps per block)
* shared:    each block takes roundup(shared bytes + 1 KB reserved by the runtime, 128);
             blocks = floor(shared memory per SM / that)  (carveout set to the maximum)

Occupancy = resident warps / max warps per SM. The CUDA C++ Best Practices Guide
("Calculating Occupancy") works an example the tests check: 37 registers per thread gives
12 blocks of 128 threads (75 %) but only 4 blocks of 320 threads.
"""
from __future__ import annotations

from dataclasses import dataclass

WARP = 32


@dataclass(frozen=True)
class SMLimits:
    """Per-SM limits of one GPU (CUDA C++ Programming Guide, compute capability table)."""
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


A100 = SMLimits("A100 (sm_80)", "8.0", 108, 64, 2048, 64, 32, 1024, 65536, 256, 255, 4,
                164 * 1024, 163 * 1024, 1024, 128)
H100 = SMLimits("H100 SXM (sm_90)", "9.0", 132, 128, 2048, 64, 32, 1024, 65536, 256, 255, 4,
                228 * 1024, 227 * 1024, 1024, 128)
GPUS = {"A100": A100, "H100": H100}
"""SM counts and FP32 lanes: NVIDIA A100 Tensor Core GPU Architecture white paper (2020),
108 SMs x 64 FP32 cores; NVIDIA H100 Tensor Core GPU Architecture white paper (2022),
SXM5: 132 SMs x 128 FP32 cores."""


@dataclass(frozen=True)
class Occupancy:
    gpu: str
    threads_per_block: int
    registers_per_thread: int
    shared_per_block: int
    limits: dict          # resource -> blocks per SM it allows
    blocks_per_sm: int
    active_warps: int
    max_warps: int

    @property
    def occupancy(self) -> float:
        return self.active_warps / self.max_warps

    @property
    def limiter(self) -> str:
        """The resource that allows the fewest blocks (first of ties in limits' order)."""
        return min(self.limits, key=lambda k: self.limits[k])


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(gpu: SMLimits | str, threads_per_block: int, registers_per_thread: int = 32,
              shared_per_block: int = 0) -> Occupancy:
    """Blocks per SM and occupancy of a kernel launch (formulas in the module docstring)."""
    sm = GPUS[gpu] if isinstance(gpu, str) and gpu in GPUS else gpu
    if not isinstance(sm, SMLimits):
        raise ValueError(f"gpu must be one of {sorted(GPUS)} or SMLimits, got {gpu!r}")
    if not 1 <= threads_per_block <= sm.max_threads_per_block:
        raise ValueError(f"threads_per_block must be in [1, {sm.max_threads_per_block}], "
                         f"got {threads_per_block}")
    if not 1 <= registers_per_thread <= sm.max_registers_per_thread:
        raise ValueError(f"registers_per_thread must be in [1, "
                         f"{sm.max_registers_per_thread}], got {registers_per_thread}")
    if not 0 <= shared_per_block <= sm.max_shared_per_block:
        raise ValueError(f"shared_per_block must be in [0, {sm.max_shared_per_block}] bytes, "
                         f"got {shared_per_block}")
    warps = -(-threads_per_block // WARP)
    regs_per_warp = _round_up(registers_per_thread * WARP, sm.register_unit)
    warps_per_sub = (sm.registers_per_sm // sm.sub_partitions) // regs_per_warp
    by_regs = (warps_per_sub * sm.sub_partitions) // warps
    if regs_per_warp * _round_up(warps, sm.sub_partitions) > sm.registers_per_sm:
        by_regs = 0  # the block alone needs more registers than the SM has
    smem = _round_up(shared_per_block + sm.reserved_shared_per_block, sm.shared_unit)
    limits = {"warps": sm.max_warps_per_sm // warps, "blocks": sm.max_blocks_per_sm,
              "registers": by_regs, "shared memory": sm.shared_per_sm // smem}
    blocks = min(limits.values())
    return Occupancy(sm.name, threads_per_block, registers_per_thread, shared_per_block,
                     limits, blocks, blocks * warps, sm.max_warps_per_sm)


def occupancy_sweep(gpu: SMLimits | str, registers_per_thread: int = 32,
                    shared_per_block: int = 0,
                    block_sizes: tuple[int, ...] = tuple(range(32, 1025, 32))
                    ) -> list[Occupancy]:
    """Occupancy for each block size (for a plot of occupancy against block size)."""
    return [occupancy(gpu, t, registers_per_thread, shared_per_block) for t in block_sizes]
