"""Chapter 01, *the DL systems stack*: every name the chapter uses, from the module that
holds it (one import for the notebook, its checks and tests):

* :mod:`labkit.perf.layers` — the six layers, a profile charged to them (``profile_step``);
* :mod:`labkit.perf.simplenet` — seed 000's SimpleNet, its step and its counts;
* :mod:`labkit.perf.inflight` — Little's law on a GPU;
* :mod:`labkit.perf.process_memory` — seed examples 2 and 3: this process's memory;
* :mod:`labkit.perf.cnn_step` — seed experiment 1: the CNN step on a CPU and a GPU,
  measured or predicted.
"""
from labkit.perf.layers import (  # noqa: F401
    _COMPILER, _DEVICE, _FRAMEWORK, _RUNTIME, ALLOC_OPS, COMPUTE_OPS, LAYER_ADDS, LAYERS,
    OVERHEAD_ROW, _tree, busy_time, charge_layers, charge_of, event_rows, format_layer_table,
    kernel_intervals, layer_of, layer_share, layer_table, profile_step, ProfileRow, StepProfile)
from labkit.perf.simplenet import (  # noqa: F401
    simple_net, simplenet_counts, simplenet_step, simplenet_step_flops)
from labkit.perf.inflight import (  # noqa: F401
    bytes_in_flight, format_in_flight, in_flight, InFlight, loads_in_flight)
from labkit.perf.process_memory import (  # noqa: F401
    STATUS, format_memory_phases, memory_report, memory_through_step, MemoryPhase,
    process_memory, ProcessMemory, seed_example3, status_bytes)
from labkit.perf.cnn_step import (  # noqa: F401
    CALIBRATION_GPU, CONV_OPS, CURVE_BATCHES, H200_HOST_CPU_MEASURED, H200_MEASURED,
    MATMUL_OPS, _batches, _copy_s, _device_times, _torch_tf32, calibrate_host,
    calibrated_host_s, cifar_like, cnn_step_counts, CnnRun, CpuGpuRuns, format_cnn_runs,
    format_h200, gpu_peak, GpuPeak, host_half_batch, ideal_seconds, op_peaks, op_precision,
    pipeline_step, predict_cnn, predict_cnn_curve, run_cnn, seed_experiment1)
from labkit.hardware import DEFAULT_GPU, PCIE5_X16  # noqa: F401  (chapter 01 reads them here)
from labkit.hardware.roofline import format_rooflines  # noqa: F401
