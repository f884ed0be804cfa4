"""Constants of PyTorch's CUDA caching allocator, with where they come from.

From ``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch)::

    constexpr size_t kMinBlockSize = 512;       // all sizes are rounded to at least 512 bytes
    constexpr size_t kSmallSize = 1048576;      // largest "small" allocation is 1 MiB
    constexpr size_t kSmallBuffer = 2097152;    // "small" allocations are packed in 2 MiB blocks
    constexpr size_t kMinLargeAlloc = 10485760; // allocations between 1 and 10 MiB may use kLargeBuffer
    constexpr size_t kRoundLarge = 2097152;     // round up large allocations to 2 MiB
    const size_t kLargeBuffer = 20971520;       // "large" allocations may be packed in 20 MiB blocks

From ``c10/core/AllocatorConfig.cpp``: ``kRoundUpPowerOfTwoIntervals = 16`` intervals of
``roundup_power2_divisions``, the first starting at ``kRoundUpPowerOfTwoStart = 1 MiB``
(sizes below 1 MiB use the first interval, sizes of 32 GiB and more the last);
``max_split_size_mb`` must be ``>= kLargeBuffer / kMB = 20``.
"""
from labkit.validate import number

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB
K_LARGE_BUFFER = 20 * MiB

K_ROUNDUP_POWER2_INTERVALS = 16
K_ROUNDUP_POWER2_START_LOG2 = 20          # log2(1 MiB)
MIN_MAX_SPLIT_SIZE_MB = K_LARGE_BUFFER // MiB  # 20

# Pages of an expandable segment: "we use 2MiB pages for our small pool and 20MiB pages for
# our large pool" (Note [Expandable Segments]).
SMALL_PAGE = K_SMALL_BUFFER
LARGE_PAGE = K_LARGE_BUFFER

# cudaMalloc returns 256-byte aligned pointers; the simulator hands out 2 MiB aligned
# segment addresses so a segment map is easy to read.
SEGMENT_ALIGN = 2 * MiB


def format_size(nbytes: float) -> str:
    """Bytes as PyTorch's ``format_size`` prints them (B, KiB, MiB, GiB)."""
    n = number("nbytes", nbytes)
    if abs(n) < KiB:
        return f"{int(n)} bytes"
    if abs(n) < MiB:
        return f"{n / KiB:.2f} KiB"
    if abs(n) < GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"
