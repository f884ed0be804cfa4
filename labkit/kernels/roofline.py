"""Moved to :mod:`labkit.hardware` (the roofline model, :mod:`labkit.hardware.roofline`; the
data sheets as rooflines, :mod:`labkit.hardware.datasheets`; ``hardware("this machine")``,
:mod:`labkit.hardware.machine`). This re-export keeps ``labkit.kernels.roofline`` working
until the chapter 04/05 branches that import it land; then remove it. ``Hardware`` is now
:class:`labkit.hardware.Machine`, ``PRECISIONS`` :data:`labkit.hardware.ROOFLINE_PRECISIONS`."""
from labkit.hardware.datasheets import PRESETS, datasheet  # noqa: F401
from labkit.hardware.machine import hardware  # noqa: F401
from labkit.hardware.roofline import (  # noqa: F401
    ROOFLINE_PRECISIONS as PRECISIONS, Machine as Hardware, Roofline, attainable, bound, ratios)
