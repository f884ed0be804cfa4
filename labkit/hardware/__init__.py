"""The hardware the course talks about: the one place its numbers live.

* :mod:`~labkit.hardware.datasheets` — GPU data sheets (``GPUS["A100"].peak("bf16")``, HBM
  bandwidth, NVLink, power), per-SM limits (``sm_limits``), L2 sizes, and the sheets as
  rooflines (``PRESETS``, ``datasheet``);
* :mod:`~labkit.hardware.interconnects` — PCIe and InfiniBand bandwidths, NICs per node;
* :mod:`~labkit.hardware.clusters` — GPUs in nodes joined by those links (``gpu_cluster``);
* :mod:`~labkit.hardware.identify` — which data sheet describes the GPU here
  (``hardware_key``, ``gpu_key``, ``torch_gpu_key``);
* :mod:`~labkit.hardware.roofline` — the course's one roofline model (``Roofline``, a
  ``Machine``'s rates per precision);
* :mod:`~labkit.hardware.machine` — this machine's roofline, measured (``measure_machine``),
  and ``hardware(name)``: a data sheet or "this machine".

Importing it is cheap: torch and numba are imported by the functions that measure or ask a
device.
"""
from labkit.hardware.roofline import (  # noqa: F401
    PRECISIONS, ROOFLINE_PRECISIONS, Machine, Roofline, attainable, bound, peak_rate, ratios)
from labkit.hardware.datasheets import (  # noqa: F401
    GB, GPU, GPUS, KB, L2_BYTES, MAX_THREADS_PER_BLOCK, MEASURED_POWER, PRESETS,
    SHARED_BYTES_PER_CLOCK, PowerMeasurement,
    SM_LIMITS, SMLimits, T, WARP_SIZE, datasheet, fp32_clock_hz, gpu, sm_limits)
from labkit.hardware.interconnects import (  # noqa: F401
    DGX_A100_COMPUTE_NICS, INFINIBAND_EDR, INFINIBAND_HDR, INFINIBAND_NDR, PCIE3_X16,
    PCIE4_X16, PCIE5_X16)
from labkit.hardware.clusters import GPUCluster, gpu_cluster  # noqa: F401
from labkit.hardware.identify import (  # noqa: F401
    DEFAULT_GPU, OTHER_FORM_FACTORS, SAME_SHEET_MEMORY_GB, device_name, gpu_key, hardware_key,
    torch_gpu_key)
from labkit.hardware.machine import (  # noqa: F401
    hardware, measure_bandwidth, measure_machine, measure_peak_flops)
