"""Registers per thread of a kernel ``fn(cuda)``: ptxas's count where a CUDA toolchain is
installed, else what the tracer knows.

Registers are decided by the compiler: numba-cuda compiles the kernel to PTX (libnvvm),
and ``ptxas -v`` assembles it for one architecture and prints "Used N registers" (the
approach of ``benchmarks/ptx_report.py``; no GPU needed). That needs numba-cuda's
libnvvm and libnvrtc and a ``ptxas``, which the course's environment does not install;
labkit runs numba on its CUDA simulator, which compiles nothing, so the compiler runs in
a subprocess with the simulator off, on the kernel's source, the numbers it uses and the
modules and library device functions it calls (imported there).

Without a toolchain the count is the tracer's: the 32-bit words of the kernel's local
arrays that it keeps in registers (every index a compile-time constant, see
:mod:`labkit.kernels.tracer`) — a lower bound, since the compiler adds the thread's
scalars, addresses and temporaries (labkit's register-blocked matmul at (16, 4): 4 words
of accumulators, 56 registers from ptxas 13.0 for sm_90).
"""
from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from labkit.kernels.trace import LOCAL
from labkit.kernels.tracer import run_traced

ARCH = "sm_90"
_USED = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class Registers:
    """What is known of a kernel's registers per thread."""
    ptxas: int | None            # ptxas -v's count, or None without a toolchain
    arch: str
    array_words: int             # 32-bit words of the local arrays kept in registers
    register_arrays: tuple[str, ...]
    memory_arrays: tuple[str, ...]   # local arrays in local memory (device memory)
    why_not_ptxas: str = ""

    @property
    def per_thread(self) -> int:
        """ptxas's count where there is one, else the register arrays' words (a lower
        bound)."""
        return self.ptxas if self.ptxas is not None else self.array_words

    def __str__(self) -> str:
        arrays = (f"{self.array_words} words of register arrays "
                  f"({', '.join(self.register_arrays)})" if self.register_arrays
                  else "no register arrays")
        spilled = (f"; in local memory: {', '.join(self.memory_arrays)}"
                   if self.memory_arrays else "")
        if self.ptxas is not None:
            return f"{self.ptxas} registers per thread (ptxas -v, {self.arch}); {arrays}{spilled}"
        return (f"at least {self.array_words} registers per thread: {arrays}{spilled} "
                f"(the tracer's count; ptxas would add the scalars — {self.why_not_ptxas})")


def _ptxas() -> str | None:
    dirs = [os.environ.get("LABKIT_CUDA_BIN", "")]
    dirs += [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH")
             if os.environ.get(v)]
    for d in dirs:
        if d and os.access(os.path.join(d, "ptxas"), os.X_OK):
            return os.path.join(d, "ptxas")
    return shutil.which("ptxas")


def _compiler_libraries() -> str:
    """Why numba-cuda cannot compile here ('' if it can find libnvvm and libnvrtc): a
    quick look, in this process, before a subprocess is started for nothing."""
    try:
        from cuda import pathfinder  # deferred: optional (numba-cuda's finder), may be absent
    except ImportError:
        return "no cuda.pathfinder (numba-cuda's library finder) in this environment"
    for lib in ("nvvm", "nvrtc"):
        try:
            pathfinder.load_nvidia_dynamic_lib(lib)
        except Exception as exc:  # noqa: BLE001 (not found, not loadable)
            return f"no lib{lib} for numba-cuda ({type(exc).__name__})"
    return ""


def _numba_type(arg: Any) -> str:
    if isinstance(arg, np.ndarray):
        dims = [":"] * (arg.ndim - 1) + ["::1"]
        return f"{arg.dtype.name}[{', '.join(dims)}]"
    if isinstance(arg, (bool, np.bool_)):
        return "boolean"
    if isinstance(arg, (int, np.integer)):
        return "int64"
    if isinstance(arg, (float, np.floating)):
        return "float64"
    raise TypeError(f"no numba type for an argument of type {type(arg).__name__}")


def _reads(fn: Callable) -> dict[str, Any]:
    """The values of the names the factory's code (its nested functions included) reads
    from its globals and closure, by name."""
    names: set[str] = set()
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        names.update(code.co_freevars)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    scope = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:
            pass
    return {n: scope[n] for n in sorted(names) if n in scope}


def _constants(fn: Callable) -> dict[str, Any]:
    """The numbers (and tuples of numbers) the factory's code reads from its globals and
    closure: what the kernel's source needs besides ``cuda``, ``math`` and
    :func:`_imports`."""
    def plain(v):
        return isinstance(v, (int, float, bool)) or (
            isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v))
    return {n: v for n, v in _reads(fn).items() if plain(v)}


def _imports(fn: Callable) -> dict[str, tuple[str, str]]:
    """The modules, and the functions of importable modules, that the factory's code reads
    from its globals and closure (``operator``; the library's device functions, such as
    :func:`~labkit.kernels.library.reductions.warp_sum`): name -> (module, attribute, or
    "" for the module itself), for the compiler's subprocess to import. A notebook's
    functions (``__main__``) cannot be imported there and are left out."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in _reads(fn).items():
        if isinstance(value, types.ModuleType) and value.__name__ != "__main__":
            found[name] = (value.__name__, "")
        elif isinstance(value, types.FunctionType) and value.__module__ != "__main__":
            module = sys.modules.get(value.__module__)
            if getattr(module, value.__name__, None) is value:
                found[name] = (value.__module__, value.__name__)
    return found


_SCRIPT = """
import importlib, json, math, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from numba import cuda
job = json.load(sys.stdin)
ns = {"math": math, "cuda": cuda}
ns.update(job["constants"])
sys.path[:0] = [p for p in job["path"] if p not in sys.path]    # the caller's labkit
for name, (module, attr) in job["imports"].items():
    found = importlib.import_module(module)
    ns[name] = getattr(found, attr) if attr else found
exec(job["source"], ns)
ptx, _ = cuda.compile_ptx(ns[job["name"]](cuda), job["signature"], cc=tuple(job["cc"]))
print(json.dumps({"ptx": ptx}))
"""


def ptxas_registers(kernel_fn: Callable, *args: Any, arch: str = ARCH,
                    timeout: float = 120.0) -> tuple[int | None, str]:
    """(registers per thread, "") from numba-cuda and ``ptxas -v`` for ``arch``, or (None,
    why not). ``args``: example arguments (numpy arrays, numbers), for the signature."""
    ptxas = _ptxas()
    if ptxas is None:
        return None, "no ptxas on PATH, $CUDA_HOME/bin or $LABKIT_CUDA_BIN"
    missing = _compiler_libraries()
    if missing:
        return None, missing
    try:
        source = textwrap.dedent(inspect.getsource(kernel_fn))
        signature = f"({', '.join(_numba_type(a) for a in args)},)"
    except (OSError, TypeError) as exc:
        return None, f"cannot read the kernel's source ({exc})"
    job = {"source": source, "name": kernel_fn.__code__.co_name,
           "constants": _constants(kernel_fn), "imports": _imports(kernel_fn),
           "path": sys.path, "signature": signature,
           "cc": [int(arch[3]), int(arch[4:])]}
    try:
        run = subprocess.run([sys.executable, "-c", _SCRIPT], input=json.dumps(job),
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"numba-cuda took more than {timeout:g} s to compile"
    if run.returncode:
        last = (run.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"numba-cuda could not compile to PTX here ({last[:160]})"
    ptx = json.loads(run.stdout.strip().splitlines()[-1])["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        out = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o",
                              os.path.join(tmp, "kernel.cubin")], capture_output=True,
                             text=True, timeout=timeout)
    found = _USED.search(out.stdout + out.stderr)
    if out.returncode or found is None:
        return None, f"ptxas failed ({(out.stderr.strip().splitlines() or ['?'])[-1][:160]})"
    return int(found[1]), ""


def registers(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any,
              arch: str = ARCH, compiler: bool = True) -> Registers:
    """Registers per thread of ``kernel_fn`` on this launch: traced (which local arrays
    are registers), and compiled where a toolchain allows (``compiler=False`` skips it).
    The arrays in ``args`` are not changed (the launch runs on copies)."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    trace = run_traced(kernel_fn, griddim, blockdim, *copies)
    local = [a for a in trace.arrays if a.space == LOCAL]
    in_regs = [a for a in local if a.registers]
    words = sum(math.ceil(math.prod(a.shape) * a.itemsize / 4) for a in in_regs)
    count, why = (ptxas_registers(kernel_fn, *args, arch=arch) if compiler
                  else (None, "not compiled"))
    return Registers(count, arch, words, tuple(a.name for a in in_regs),
                     tuple(a.name for a in local if not a.registers), why)
