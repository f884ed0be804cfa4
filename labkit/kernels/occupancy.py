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
("Calculating Occupancy") works an example on a device of compute capability 7.0 (V100)
that the tests check: 37 registers per thread gives 12 blocks of 128 threads (75 %) but
only 4 blocks of 320 threads (63 %).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit import hardware
from labkit.validate import ceil_div, integer

WARP = hardware.WARP_SIZE


SMLimits = hardware.SMLimits
V100, A100, H100, H200 = (hardware.SM_LIMITS[k] for k in ("V100", "A100", "H100", "H200"))
GPUS = dict(hardware.SM_LIMITS)
"""Per-SM limits, from :mod:`labkit.hardware` (the one place GPU facts live)."""


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
    return ceil_div(x, unit) * unit


def occupancy(gpu: SMLimits | str, threads_per_block: int, registers_per_thread: int = 32,
              shared_per_block: int = 0) -> Occupancy:
    """Blocks per SM and occupancy of a kernel launch (formulas in the module docstring)."""
    sm = GPUS[gpu] if isinstance(gpu, str) and gpu in GPUS else gpu
    if not isinstance(sm, SMLimits):
        raise ValueError(f"gpu must be one of {sorted(GPUS)} or SMLimits, got {gpu!r}")
    threads_per_block = integer("threads_per_block", threads_per_block, low=1,
                                high=sm.max_threads_per_block)
    registers_per_thread = integer("registers_per_thread", registers_per_thread, low=1,
                                   high=sm.max_registers_per_thread)
    shared_per_block = integer("shared_per_block", shared_per_block, low=0,
                               high=sm.max_shared_per_block)
    warps = ceil_div(threads_per_block, WARP)
    regs_per_warp = _round_up(registers_per_thread * WARP, sm.register_unit)
    warps_per_sub = (sm.registers_per_sm // sm.sub_partitions) // regs_per_warp
    by_regs = (warps_per_sub * sm.sub_partitions) // warps
    if regs_per_warp * _round_up(warps, sm.sub_partitions) > sm.registers_per_sm:
        by_regs = 0  # the block alone needs more registers than the SM has
    smem = _round_up(shared_per_block + sm.reserved_shared_per_block, sm.shared_unit)
    limits = {"warps": sm.max_warps_per_sm // warps, "blocks": sm.max_blocks_per_sm,
              "registers": by_regs,
              "shared memory": sm.shared_per_sm // smem if smem else sm.max_blocks_per_sm}
    blocks = min(limits.values())
    return Occupancy(sm.name, threads_per_block, registers_per_thread, shared_per_block,
                     limits, blocks, blocks * warps, sm.max_warps_per_sm)


def occupancy_sweep(gpu: SMLimits | str, registers_per_thread: int = 32,
                    shared_per_block: int = 0,
                    block_sizes: tuple[int, ...] = tuple(range(32, 1025, 32))
                    ) -> list[Occupancy]:
    """Occupancy for each block size (for a plot of occupancy against block size)."""
    return [occupancy(gpu, t, registers_per_thread, shared_per_block) for t in block_sizes]
