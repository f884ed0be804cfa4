"""One report of the software versions and the device this course runs on."""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata

from labkit._device import on_simulator

PACKAGES = ("numpy", "numba", "numba-cuda", "torch", "matplotlib", "ipywidgets", "ipykernel",
            "labkit")


@dataclass(frozen=True)
class EnvReport:
    python: str
    packages: dict[str, str]
    cpu_count: int
    device: str
    platform: str = field(default_factory=platform.platform)

    @property
    def warnings(self) -> list[str]:
        return environment_warnings(self.packages)

    def rows(self) -> list[tuple[str, str]]:
        rows = [("python", self.python)]
        rows += [(name, ver) for name, ver in self.packages.items()]
        rows += [("CPU cores", str(self.cpu_count)), ("CUDA device", self.device)]
        rows += [("warning", text) for text in self.warnings]
        return rows

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_markdown_(self) -> str:
        lines = ["| component | version / device |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.rows()]
        return "\n".join(lines)


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_warnings(packages: dict[str, str]) -> list[str]:
    """What in these package versions is known to break the course, and the fix."""
    found = []
    kernel = packages.get("ipykernel", "not installed")
    if kernel[:1].isdigit() and int(kernel.split(".")[0]) >= 7:
        found.append(
            f"ipykernel {kernel}: JupyterLab runs widget callbacks on a second thread "
            "(comms over subshells), and a widget can print its text but lose its plot "
            "(ipython/ipykernel#1564). Install ipykernel<7 (environment.yml pins one), or set "
            "Settings > Kernel > Kernel Comms over subshells to Disabled.")
    return found


def gpu_name() -> str:
    """The real GPU's name, or "CUDA simulator" when numba.cuda runs on the CPU."""
    if on_simulator():
        return "CUDA simulator"
    try:
        from numba import cuda  # deferred: numba

        return cuda.get_current_device().name.decode() if hasattr(
            cuda.get_current_device().name, "decode") else str(cuda.get_current_device().name)
    except Exception as exc:  # no driver, or the device is busy: say so, do not crash
        return f"no usable CUDA device ({type(exc).__name__})"


def report() -> EnvReport:
    """Versions of Python and the course's packages, the CPU count and the CUDA device."""
    return EnvReport(
        python=sys.version.split()[0],
        packages={name: package_version(name) for name in PACKAGES},
        cpu_count=os.cpu_count() or 1,
        device=gpu_name(),
    )
