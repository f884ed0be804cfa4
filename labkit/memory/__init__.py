"""labkit.memory: PyTorch's caching allocator simulated, allocation traces replayed, and the
memory of training estimated (model states with ZeRO, activations per Korthikanti et al.).

Pure Python and numpy here; torch is imported only by :mod:`labkit.memory.record` and
:mod:`labkit.memory.measure`, matplotlib by :mod:`labkit.memory.plots`.
"""
from labkit.memory.allocator import (  # noqa: F401
    CachingAllocator, OutOfMemoryError, allocation_size, pool_of, round_size,
    roundup_power2_next_division, should_split,
)
from labkit.memory.blocks import Block  # noqa: F401
from labkit.memory.config import AllocatorConfig, make_config, parse_alloc_conf  # noqa: F401
from labkit.memory.constants import (  # noqa: F401
    K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_MIN_LARGE_ALLOC, K_ROUND_LARGE, K_SMALL_BUFFER,
    K_SMALL_SIZE, MiB, format_size,
)
from labkit.memory.estimator import (  # noqa: F401
    ModelStateBytes, activation_bytes_per_layer, activation_terms, bytes_per_param,
    checkpoint_memory_units, mlp_saved_bytes, model_state_bytes, sqrt_checkpoint_segments,
    training_memory,
)
from labkit.memory.snapshot import BlockInfo, MemoryStats, SegmentInfo  # noqa: F401
from labkit.memory.trace import (  # noqa: F401
    MemoryTimeline, MemoryTrace, Snapshot, load_snapshot, replay, save_snapshot, snapshot_dict,
)
