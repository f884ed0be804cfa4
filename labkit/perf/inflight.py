"""Little's law on a GPU (chapter 01): how many bytes and loads must be in flight to stream
a data sheet's memory bandwidth."""
from __future__ import annotations

from dataclasses import dataclass

from labkit import validate as v
from labkit.hardware import DEFAULT_GPU, gpu as sheet, sm_limits

def bytes_in_flight(latency_s: float, bandwidth: float) -> float:
    """Little's law (Little, Operations Research 9(3), 1961): L = λ·W. To sustain
    ``bandwidth`` bytes/s when each request takes ``latency_s`` seconds, latency × bandwidth
    bytes must be requested and not yet returned at every moment."""
    return v.positive("latency_s", latency_s) * v.positive("bandwidth", bandwidth)


def loads_in_flight(latency_s: float, bandwidth: float, bytes_per_load: int = 4) -> float:
    """Independent loads in flight needed to saturate memory (one per thread, say)."""
    return bytes_in_flight(latency_s, bandwidth) / v.integer("bytes_per_load", bytes_per_load,
                                                             low=1)


@dataclass(frozen=True)
class InFlight:
    """Little's law on a data-sheet GPU: what must be in flight to stream its HBM bandwidth
    when each load takes ``latency_s``, in total and per SM, against the threads an SM holds."""
    gpu: str
    latency_s: float
    bytes: float                  # latency × bandwidth
    sm_count: int
    max_threads_per_sm: int       # labkit.hardware.sm_limits (CUDA C++ Programming Guide)
    bytes_per_load: int = 4       # the width of one load

    @property
    def loads(self) -> float:
        return self.bytes / self.bytes_per_load

    @property
    def bytes_per_sm(self) -> float:
        return self.bytes / self.sm_count

    @property
    def loads_per_sm(self) -> float:
        return self.loads / self.sm_count


def in_flight(latency_s: float, gpu: str = DEFAULT_GPU, bytes_per_load: int = 4) -> InFlight:
    """:func:`bytes_in_flight` (and so :func:`loads_in_flight`) at ``gpu``'s HBM bandwidth
    (:mod:`labkit.hardware`), with its SM count and resident-thread limit."""
    g = sheet(gpu)
    bytes_per_load = v.integer("bytes_per_load", bytes_per_load, low=1)
    return InFlight(g.key, v.positive("latency_s", latency_s),
                    bytes_in_flight(latency_s, g.hbm_bandwidth), g.sm_count,
                    sm_limits(g.key).max_threads_per_sm, bytes_per_load)


def format_in_flight(r: InFlight) -> str:
    """Chapter 01's two lines: bytes and ``bytes_per_load``-byte loads in flight, in total
    and per SM."""
    return (f"bytes in flight: {r.bytes / 1e6:.2f} MB = {r.bytes_per_sm / 1e3:.1f} kB per SM\n"
            f"{r.bytes_per_load}-byte loads in flight: {r.loads:,.0f} = {r.loads_per_sm:,.0f} "
            f"per SM "
            f"(an SM holds at most {r.max_threads_per_sm:,} resident threads)")
