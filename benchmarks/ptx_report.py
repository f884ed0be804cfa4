"""What the compiler made of the matmul ladder and the reductions: registers, spills,
stack and the SASS instruction mix of each kernel's inner loop, without a GPU.

    PYTHONPATH=. /tmp/ptx/venv/bin/python benchmarks/ptx_report.py [--arch sm_90]
        [--gpu H200] [--cuda-bin DIR] [--only register2d,register,reduce_fast]
        [--blocked 64,64,8,4,4 ...] [--reduce 256,8 ...] [--sass-dir DIR]

For each kernel of :data:`labkit.kernels.models.LADDER` (at the launch shapes
:data:`~labkit.kernels.models.LADDER_SHAPES` that ``gpu_check.py`` times, plus every
``--blocked bm,bn,bk,tm,tn``) it

1. compiles ``fn(numba.cuda)`` to PTX with ``numba.cuda.compile_ptx`` (libnvvm; no GPU),
   with the factory's ``jit_options`` as :func:`labkit.kernels.numba_run.compiled` uses
   them: ``launch_bounds`` go into the PTX (``.maxntid`` / ``.minnctapersm``),
   ``max_registers`` to ptxas (``-maxrregcount``); the table's ``limits`` column shows
   both (``256/2``, ``r128``),
2. assembles it with ``ptxas -arch=sm_90 -v``: registers, stack frame, spill bytes, and
   the blocks of gpu_check's launch that fit on one SM of ``--gpu`` by registers and
   shared memory (:func:`labkit.kernels.occupancy.occupancy`: above 128 registers a
   256-thread block has an H200 SM to itself),
3. disassembles the cubin with ``cuobjdump -sass`` (which runs ``nvdisasm``) and counts the
   instructions of the inner loop — the innermost loop (backward branch) holding FFMAs —
   and of a whole phase of k (the loop around it that holds the barrier: the inner loop
   times its trips plus the tile loads), per thread, along the path that loads most, then
   the shortest: where a phase has a path for full tiles beside the guarded one, the full
   tiles' path.

For the reductions with a ``ptx_shape`` in :data:`labkit.kernels.registry.KERNELS` (the
first passes ``gpu_check.py`` times, plus ``reduce_fast`` at every ``--reduce
block,unroll``) it counts the loop that loads most
(the grid-stride loop; the whole kernel where no loop loads): its global loads, its
instructions per element loaded, the integer ones among them, and ``wrap``, the
``SHF.R.S32.HI ..., 0x1f`` that take the sign of a 64-bit index — numba's negative-index
wrap-around, which a loop over indices proven >= 0 does not have.

What to look for: an inner loop of FFMAs and shared loads (LDS, LDS.128) with few integer
instructions (address arithmetic, numba's negative-index wrap-around, 64-bit index math),
no local memory (LDL/STL: a ``cuda.local.array`` that did not become registers) and no
spills. The phase's FFMA share bounds the kernel: an SM sub-partition issues one warp
instruction per clock, and its FP32 peak needs an FFMA in every one of them, so a phase
that is 40 % FFMAs cannot pass 40 % of the FP32 peak.

The toolchain is not part of the project's environment and ``make test`` does not run
this script. numba-cuda needs libnvvm and libnvrtc to compile to PTX, the script needs
``ptxas``, and for the SASS ``cuobjdump`` and ``nvdisasm``. All come as NVIDIA's PyPI
wheels; install them beside the project's ``.venv``, never into it (CUDA 13 wheels,
about 1 GB; numba-cuda 0.30.4's ``cu13`` extra brings libnvvm, libdevice and libnvrtc)::

    python3.11 -m venv /tmp/ptx/venv
    /tmp/ptx/venv/bin/pip install "numba==0.68.1" "numba-cuda[cu13]==0.30.4" "numpy<2.5" \
        nvidia-cuda-nvcc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    PYTHONPATH=. /tmp/ptx/venv/bin/python benchmarks/ptx_report.py

``ptxas`` (from ``nvidia-cuda-nvcc``), ``cuobjdump`` and ``nvdisasm`` land in
``site-packages/nvidia/cu13/bin`` and are found there; elsewhere give ``--cuda-bin DIR``
or ``$LABKIT_CUDA_BIN``, or put them on ``PATH``; ``ptxas`` must be at least as new as
libnvvm (CUDA 13.0's refuses the PTX ISA 9.5 that 13.5's libnvvm writes; with that line
lowered by hand it gave the same registers: 124 for register2d, 54 for register). This
course's development machine has CUDA 13.0's ``ptxas`` and libnvvm in
``/usr/local/cuda-13.0`` but no libnvrtc, cuobjdump or nvdisasm, so the project's
``.venv`` alone cannot run the report. The script sets
``NUMBA_ENABLE_CUDASIM=0`` before labkit is imported: on a machine without a GPU labkit
would otherwise select the simulator, which compiles nothing. Without ptxas, or when
numba-cuda cannot compile, it says what is missing and exits 0; without the
disassembler it prints the ptxas numbers only.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import site
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


TOOLS = ("ptxas", "cuobjdump", "nvdisasm")
INTEGER = {"IMAD", "IADD3", "IADD", "VIADD", "LEA", "ISETP", "SEL", "LOP3", "SHF", "IABS",
           "IMNMX", "ISCADD", "POPC", "IMUL", "FLO", "PRMT", "BMSK", "SGXT"}
COLUMNS = ("FFMA", "LDS", "LDG", "STS", "LDL/STL", "integer", "other", "total")

Instr = tuple[int, str, str]        # (address, opcode with suffixes, text without predicate)


@dataclass
class KernelReport:
    name: str
    registers: int
    stack: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    threads: int = 0                  # per block, as gpu_check launches it
    limits: str = "-"                 # launch bounds / register cap asked for: see limits()
    blocks_per_sm: int = 0            # resident on the --gpu, limited by registers and smem
    has_sass: bool = False
    loop: Counter = field(default_factory=Counter)      # COLUMNS of the inner loop
    loop_ops: Counter = field(default_factory=Counter)  # its opcodes, with suffixes
    phase_instructions: float = 0.0   # per thread and phase of k
    phase_ffma: int = 0
    local_anywhere: int = 0           # LDL/STL in the whole kernel
    loads: int = 0                    # LDG in the loop that loads most (load_loop)
    load_mix: Counter = field(default_factory=Counter)  # COLUMNS of that loop
    wrap: int = 0                     # its sign extractions of 64-bit indices

    @property
    def ffma_share(self) -> float:
        return self.loop["FFMA"] / self.loop["total"] if self.loop["total"] else 0.0

    @property
    def phase_ffma_share(self) -> float:
        """FFMAs / instructions over a phase: the share of the FP32 peak that the issue
        slots leave (one warp instruction per clock and sub-partition)."""
        return self.phase_ffma / self.phase_instructions if self.phase_instructions else 0.0


# ---- toolchain --------------------------------------------------------------------------

def find_tools(cuda_bin: str | None = None) -> dict[str, str]:
    """Paths of ptxas, cuobjdump and nvdisasm, each from the first folder that has it:
    ``cuda_bin``, ``$LABKIT_CUDA_BIN``, NVIDIA's wheels beside this Python
    (``site-packages/nvidia/cu13/bin``, or the CUDA 12 wheels' folders), ``PATH``,
    ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``."""
    dirs = [d for d in (cuda_bin, os.environ.get("LABKIT_CUDA_BIN")) if d]
    for root in [*site.getsitepackages(), site.getusersitepackages()]:
        dirs += [os.path.join(root, "nvidia", sub, "bin")
                 for sub in ("cu13", "cuda_nvcc", "cuda_cuobjdump", "cuda_nvdisasm")]
    dirs += os.environ.get("PATH", "").split(os.pathsep)
    dirs += [os.path.join(os.environ[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH")
             if os.environ.get(v)]
    found = {}
    for tool in TOOLS:
        for d in dirs:
            if d and os.access(os.path.join(d, tool), os.X_OK):
                found[tool] = os.path.join(d, tool)
                break
    return found


def compile_problem() -> str | None:
    """Why numba-cuda cannot compile a kernel to PTX here (libnvvm or libnvrtc missing),
    or None."""
    try:
        from numba import cuda, float32

        def probe(x):
            x[0] = 1.0
        cuda.compile_ptx(probe, (float32[::1],), cc=(9, 0))
    except Exception as exc:  # noqa: BLE001 (whatever stops the compiler)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


# ---- compile, assemble, disassemble -----------------------------------------------------

_PTXAS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                    r"loads.*?Used (\d+) registers(?:.*?(\d+) bytes smem)?", re.S)
_SASS = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def ptx_of(fn, cc: tuple[int, int], arrays: int = 3, ndim: int = 2) -> str:
    """PTX of the kernel ``fn(numba.cuda)`` for ``arrays`` C-contiguous float32 arrays of
    ``ndim`` dimensions (a ladder matmul's (a, b, c); a reduction's (a, out): 2, 1), with
    the factory's ``launch_bounds`` (``fn.jit_options``) where it states them."""
    from numba import cuda, float32
    sig = (float32[:, ::1] if ndim == 2 else float32[::1],) * arrays
    options = {k: v for k, v in getattr(fn, "jit_options", {}).items() if k == "launch_bounds"}
    ptx, _ = cuda.compile_ptx(fn(cuda), sig, cc=cc, **options)
    return ptx


def limits(ptx: str, max_registers: int | None = None) -> str:
    """What a kernel asks of ptxas: its PTX's launch bounds (``256/2`` for ``.maxntid 256,
    1, 1`` and ``.minnctapersm 2``, ``256`` without the second) and the register cap
    (``r128`` for ``max_registers=128``), joined by a comma; ``-`` for neither."""
    ntid = re.search(r"\.maxntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?", ptx)
    ctas = re.search(r"\.minnctapersm\s+(\d+)", ptx)
    parts = []
    if ntid or ctas:
        threads = math.prod(int(v or 1) for v in ntid.groups()) if ntid else "?"
        parts.append(f"{threads}/{ctas[1]}" if ctas else str(threads))
    if max_registers:
        parts.append(f"r{max_registers}")
    return ",".join(parts) or "-"


def assemble(ptx: str, tools: dict[str, str], arch: str, workdir: Path,
             name: str, max_registers: int | None = None) -> tuple[dict, str | None]:
    """(ptxas -v numbers, SASS text or None without cuobjdump/nvdisasm) of one PTX module,
    with ``-maxrregcount`` where ``max_registers`` is given (as numba's linker does)."""
    src, cubin = workdir / f"{name}.ptx", workdir / f"{name}.cubin"
    src.write_text(ptx)
    cap = [f"-maxrregcount={max_registers}"] if max_registers else []
    out = subprocess.run([tools["ptxas"], f"-arch={arch}", "-v", *cap, str(src), "-o",
                          str(cubin)], capture_output=True, text=True)
    if out.returncode:          # e.g. an older ptxas than the PTX ISA libnvvm wrote
        raise RuntimeError(f"{tools['ptxas']} failed on {name}:\n{out.stderr.strip()}")
    m = _PTXAS.search(out.stdout + out.stderr)
    if m is None:
        raise RuntimeError(f"cannot read ptxas -v output:\n{out.stdout}{out.stderr}")
    stats = dict(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]),
                 registers=int(m[4]), shared_bytes=int(m[5] or 0))
    if "cuobjdump" not in tools or "nvdisasm" not in tools:
        return stats, None
    env = dict(os.environ, PATH=os.path.dirname(tools["nvdisasm"]) + os.pathsep
               + os.environ.get("PATH", ""))
    sass = subprocess.run([tools["cuobjdump"], "-sass", str(cubin)], capture_output=True,
                          text=True, check=True, env=env).stdout
    return stats, sass


def parse_sass(sass: str) -> list[Instr]:
    """Every instruction of ``cuobjdump -sass`` output, its guard predicate dropped."""
    out = []
    for line in sass.splitlines():
        m = _SASS.match(line)
        if m:
            text = re.sub(r"^@!?U?P[T0-9]+\s+", "", m[2])
            out.append((int(m[1], 16), text.split()[0], text))
    return out


def category(op: str) -> str:
    """The report's column of an opcode (uniform-datapath ``U...`` integer ops count as
    integer: they take an issue slot too)."""
    base = op.split(".")[0]
    if base in ("FFMA", "LDS", "LDG", "STS"):
        return base
    if base in ("LDL", "STL"):
        return "LDL/STL"
    if base in INTEGER or (base.startswith("U") and base[1:] in INTEGER):
        return "integer"
    return "other"


def is_global_load(op: str) -> bool:
    """Whether ``op`` is a global load, the report's LDG column (``LDG.E.128`` is;
    ``LDGSTS``, an asynchronous copy to shared memory, and ``LDGDEPBAR``, its barrier,
    are not): the one test behind the column, :func:`load_loop` and :func:`loading_path`."""
    return category(op) == "LDG"


def loops(instrs: list[Instr]) -> list[list[Instr]]:
    """The body of every loop: from a backward ``BRA``'s target to the branch."""
    out = []
    for a, op, text in instrs:
        if op.startswith("BRA"):
            target = re.search(r"0x([0-9a-f]+)", text)
            if target and int(target[1], 16) <= a:
                lo = int(target[1], 16)
                out.append([x for x in instrs if lo <= x[0] <= a])
    return out


def _ffma(body: list[Instr]) -> int:
    return sum(op.startswith("FFMA") for _, op, _ in body)


def _span(body: list[Instr]) -> tuple[int, int]:
    return body[0][0], body[-1][0]


def _inside(inner: list[Instr], outer: list[Instr]) -> bool:
    (lo, hi), (olo, ohi) = _span(inner), _span(outer)
    return olo <= lo and hi <= ohi and (lo, hi) != (olo, ohi)


def inner_loop(instrs: list[Instr]) -> list[Instr]:
    """The innermost loop holding FFMAs (the one with most FFMAs if several; the whole
    kernel if no loop holds any)."""
    with_fma = [b for b in loops(instrs) if _ffma(b)]
    innermost = [b for b in with_fma if not any(_inside(o, b) for o in with_fma)]
    if not innermost:
        return instrs
    return max(innermost, key=lambda b: (_ffma(b), -len(b)))


def phase_loop(instrs: list[Instr], inner: list[Instr]) -> list[Instr] | None:
    """The loop over phases of k around ``inner``: ``inner`` itself if it holds the barrier
    (the compiler unrolled the k steps), else the smallest loop around it that does."""
    if any(op.startswith("BAR") for _, op, _ in inner):
        return inner
    around = [b for b in loops(instrs) if _inside(inner, b)
              and any(op.startswith("BAR") for _, op, _ in b)]
    return min(around, key=len) if around else None


def load_loop(instrs: list[Instr]) -> list[Instr]:
    """The innermost loop with the most global loads (LDG), the first in the listing if
    several (the main loop: the compiler puts a copy it unrolled from a remainder loop
    after it), or the whole kernel if no loop loads (one element per thread)."""
    def ldg(body):
        return sum(is_global_load(op) for _, op, _ in body)
    with_ldg = [b for b in loops(instrs) if ldg(b)]
    innermost = [b for b in with_ldg if not any(_inside(o, b) for o in with_ldg)]
    return max(innermost, key=lambda b: (ldg(b), -b[0][0])) if innermost else instrs


def wraps(body: list[Instr]) -> int:
    """Sign extractions of a 64-bit index (``SHF.R.S32.HI Rd, RZ, 0x1f, Rs``): what numba's
    negative-index wrap-around ``i + (i < 0) * n`` compiles to."""
    return sum(op.startswith("SHF.R.S32.HI") and re.search(r",\s*0x1f\s*,", text) is not None
               for _, op, text in body)


def mix(body: list[Instr]) -> tuple[Counter, Counter]:
    """(COLUMNS counts, opcode counts) of a list of instructions."""
    cols, ops = Counter(), Counter()
    for _, op, _ in body:
        cols[category(op)] += 1
        cols["total"] += 1
        ops[op] += 1
    return cols, ops


def conditional(sass: str) -> set[int]:
    """Addresses of the guarded (``@P0``, ``@!P1``) branches and exits of a listing: the
    ones that may fall through."""
    out = set()
    for line in sass.splitlines():
        m = _SASS.match(line)
        if m and re.match(r"@!?U?P[0-9]+\s+(BRA|EXIT)", m[2]):
            out.add(int(m[1], 16))
    return out


def loading_path(body: list[Instr], guarded: set[int],
                  inner: list[Instr] | None = None) -> list[Instr]:
    """The path that takes a loop ``body`` from its first instruction to its back branch
    (the last) with the most global loads (LDG), and among those the fewest instructions,
    following its forward branches either way (a guarded branch may also fall through);
    ``inner``, a loop inside it, is passed straight through once. Most loads first: where
    the compiler branches around a guarded load instead of predicating it, the shortest
    path is the "guard fails, store 0" arm that loads nothing, which no phase of a real
    tile takes. For a phase loop with a path for full tiles (no guard fails) beside the
    guarded one, both load the tile, and the full tiles' path is the shorter."""
    lo, hi = _span(inner) if inner else (-1, -1)
    where = {a: p for p, (a, _, _) in enumerate(body)}
    loads = [int(is_global_load(op)) for _, op, _ in body]
    # (-LDGs, instructions, came from): tuples compare most loads first, then fewest
    best: list[tuple[int, int, int] | None] = [None] * len(body)
    best[0] = (-loads[0], 0, -1)
    for p, (a, op, text) in enumerate(body[:-1]):
        if best[p] is None:
            continue
        nxt = [p + 1]
        if not lo <= a <= hi and (op.startswith("BRA") or op == "EXIT"):
            target = re.search(r"0x([0-9a-f]+)", text) if op.startswith("BRA") else None
            nxt = [p + 1] if a in guarded else []
            if target and int(target[1], 16) in where and int(target[1], 16) > a:
                nxt.append(where[int(target[1], 16)])
        for q in nxt:
            step = (best[p][0] - loads[q], best[p][1] + 1, p)
            if best[q] is None or step[:2] < best[q][:2]:
                best[q] = step
    if best[-1] is None:
        return body
    path, p = [], len(body) - 1
    while p >= 0:
        path.append(body[p])
        p = best[p][2]
    return path[::-1]


def phase_cost(instrs: list[Instr], inner: list[Instr],
               ffma_per_phase: int | None, guarded: set[int] | None = None
               ) -> tuple[float, int]:
    """(instructions, FFMAs) one thread issues per phase of k. The inner loop runs
    (F - FFMAs outside it) / (its FFMAs) times per phase, F = ``ffma_per_phase``; without
    phases (or F) the inner loop itself is the unit. With ``guarded`` (:func:`conditional`)
    the phase is its :func:`loading_path` (the path that loads the tile; a full tile's,
    where the kernel has one), else
    every instruction of the phase loop counts."""
    phase = phase_loop(instrs, inner) if ffma_per_phase else None
    if phase is None:
        return float(len(inner)), _ffma(inner)
    if phase is inner:                       # unrolled k steps: one or more phases per trip
        path = inner if guarded is None else loading_path(inner, guarded)
        return len(path) * ffma_per_phase / _ffma(path), ffma_per_phase
    if guarded is not None:
        phase = loading_path(phase, guarded, inner)
    lo, hi = _span(inner)
    rest = [x for x in phase if not lo <= x[0] <= hi]
    trips = (ffma_per_phase - _ffma(rest)) / _ffma(inner)
    return len(rest) + trips * len(inner), ffma_per_phase


def report(name: str, fn, tools: dict[str, str], arch: str = "sm_90",
           sass_dir: Path | None = None, ffma_per_phase: int | None = None,
           threads: int = 0, gpu: str = "H200", arrays: int = 3,
           ndim: int = 2) -> KernelReport:
    """ptxas numbers of ``fn`` (with ``threads`` per block: the blocks that fit on an SM of
    ``gpu``) and, with the SASS tools, its inner loop's and phase's mix
    (``ffma_per_phase``: FMAs one thread does per phase of k) and its :func:`load_loop`'s;
    ``arrays`` and ``ndim`` as in :func:`ptx_of`."""
    major, minor = re.fullmatch(r"sm_(\d+)(\d)", arch).groups()   # sm_90 -> (9, 0)
    cc = (int(major), int(minor))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(sass_dir or tmp)
        ptx = ptx_of(fn, cc, arrays, ndim)
        cap = getattr(fn, "jit_options", {}).get("max_registers")
        stats, sass = assemble(ptx, tools, arch, work, name, cap)
        stats["limits"] = limits(ptx, cap)
        if sass_dir and sass is not None:
            (work / f"{name}.sass").write_text(sass)
    if threads:
        from labkit.kernels.occupancy import occupancy
        stats["blocks_per_sm"] = occupancy(gpu, threads, stats["registers"],
                                           stats["shared_bytes"]).blocks_per_sm
    if sass is None:
        return KernelReport(name, threads=threads, **stats)
    instrs = parse_sass(sass)
    inner = inner_loop(instrs)
    loop, ops = mix(inner)
    instructions, ffma = phase_cost(instrs, inner, ffma_per_phase, conditional(sass))
    local = sum(category(op) == "LDL/STL" for _, op, _ in instrs)
    loading = load_loop(instrs)
    load_mix, _ = mix(loading)
    return KernelReport(name, threads=threads, has_sass=True, loop=loop, loop_ops=ops,
                        phase_instructions=instructions, phase_ffma=ffma,
                        local_anywhere=local, loads=load_mix["LDG"], load_mix=load_mix,
                        wrap=wraps(loading), **stats)


# ---- the ladder -------------------------------------------------------------------------

def ladder(blocked: list[dict], only: set[str] | None) -> list[tuple]:
    """(name, kernel fn, FMAs per thread and phase, threads per block) of the ladder at
    gpu_check's shapes (each rung's registry entry: its ladder shape, and every
    ``blocked`` shape for a rung that takes one)."""
    from labkit.kernels import models, ops
    from labkit.kernels.registry import KERNELS, MATMUL
    out = []
    for variant in models.LADDER:
        if only and variant not in only:
            continue
        kernel = KERNELS[MATMUL][variant]
        for s in [kernel.ladder_shape] + (blocked if kernel.blocked else []):
            _, block, fn = ops.matmul_launch(variant, 4096, 4096, **kernel.keywords(s))
            out.append((f"{variant}_" + "_".join(str(v) for v in s.values()), fn,
                        kernel.ffma_per_phase(s), block[0] * block[1]))
    return out


def reductions(extra: list[dict], only: set[str] | None) -> list[tuple]:
    """(name, kernel fn, threads per block) of the reductions whose registry entry has a
    ``ptx_shape`` (the first passes ``gpu_check.py`` times: ``reduce_shared``,
    ``reduce_warp``, ``reduce_fast`` with its default ``unroll``), and of the grid-stride
    one (``reduce_fast``) at every ``extra`` shape."""
    from labkit.kernels.registry import KERNELS, REDUCTION
    out = []
    for kernel in KERNELS[REDUCTION].values():
        name = kernel.factory.__name__
        if kernel.ptx_shape is None or (only and name not in only):
            continue
        for s in [kernel.ptx_shape] + (extra if kernel.takes_blocks else []):
            out.append((f"{name}_" + "_".join(str(v) for v in s.values()),
                        kernel.factory(**s), s["block"]))
    return out


_HEAD = (f"{'kernel':26s} {'limits':>6s} {'regs':>4s} {'stack':>5s} {'spills':>7s} "
         f"{'smem':>6s} {'blocks/SM':>9s} | ")


def _head(r: KernelReport) -> str | None:
    """A row's ptxas columns, printed here with the reason when there is no SASS to count
    (then None)."""
    head = (f"{r.name:26s} {r.limits:>6s} {r.registers:4d} {r.stack:5d} {r.spill_stores:3d}/"
            f"{r.spill_loads:<3d} {r.shared_bytes:6d} {r.blocks_per_sm:4d} x{r.threads:<4d}|")
    if r.has_sass:
        return head
    print(head + "  (no SASS: cuobjdump / nvdisasm not found)")
    return None


def print_loads(reports: list[KernelReport]) -> None:
    """The reductions' table: per element loaded in the loop that loads most."""
    print(_HEAD + f"load loop: {'LDG':>3s} {'instr':>5s} {'wrap':>4s} | per element: "
          f"{'instr':>5s} {'integer':>7s}")
    for r in reports:
        head = _head(r)
        if head is None:
            continue
        total = r.load_mix["total"]
        per = (f"{total / r.loads:18.2f} {r.load_mix['integer'] / r.loads:7.2f}"
               if r.loads else f"{'-':>18s} {'-':>7s}")
        print(head + f" {r.loads:14d} {total:5d} {r.wrap:4d} | " + per)


def print_table(reports: list[KernelReport]) -> None:
    print(_HEAD + "inner loop " + " ".join(f"{c:>7s}" for c in COLUMNS)
          + "  FFMA % | per phase: instr  FFMA %")
    for r in reports:
        head = _head(r)
        if head is None:
            continue
        print(head + " " * 11 + " ".join(f"{r.loop[c]:7d}" for c in COLUMNS)
              + f" {r.ffma_share:7.1%} | {r.phase_instructions:15.0f} {r.phase_ffma_share:7.1%}")
    if any(r.has_sass for r in reports):
        print("inner-loop opcodes:")
    for r in reports:
        if r.has_sass:
            top = ", ".join(f"{op} {n}" for op, n in r.loop_ops.most_common(10))
            print(f"  {r.name}: {top}" + (f"; LDL/STL in the kernel: {r.local_anywhere}"
                                          if r.local_anywhere else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90", help="ptxas target, sm_XY (default sm_90)")
    p.add_argument("--cuda-bin", help="folder with ptxas, cuobjdump, nvdisasm")
    p.add_argument("--gpu", default="H200", help="labkit.hardware GPU for blocks per SM")
    p.add_argument("--only", help="comma-separated ladder variants and reductions "
                   "(default: all)")
    p.add_argument("--blocked", action="append", default=[],
                   help="another register2d shape bm,bn,bk,tm,tn (repeatable)")
    p.add_argument("--reduce", action="append", default=[],
                   help="another reduce_fast shape block,unroll (repeatable)")
    p.add_argument("--sass-dir", help="keep the PTX, cubin and SASS files here")
    args = p.parse_args(argv)
    if not re.fullmatch(r"sm_\d{2,3}", args.arch):
        p.error(f"--arch must look like sm_90, got {args.arch!r}")
    blocked = []
    for spec in args.blocked:
        values = [int(v) for v in spec.split(",") if v.strip().isdigit()]
        if len(values) != 5:
            p.error(f"--blocked takes five integers bm,bn,bk,tm,tn, got {spec!r}")
        blocked.append(dict(zip(("bm", "bn", "bk", "tm", "tn"), values)))
    extra = []
    for spec in args.reduce:
        values = [int(v) for v in spec.split(",") if v.strip().isdigit()]
        if len(values) != 2:
            p.error(f"--reduce takes two integers block,unroll, got {spec!r}")
        extra.append(dict(zip(("block", "unroll"), values)))

    tools = find_tools(args.cuda_bin)
    if "ptxas" not in tools:
        print("ptx_report: skipped: ptxas not found (give --cuda-bin or $LABKIT_CUDA_BIN; "
              "the install steps are in this script's docstring)")
        return 0
    if "numba" not in sys.modules:      # before labkit and numba: compile, not simulate
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    if importlib.util.find_spec("labkit") is None:      # run from a checkout, not installed
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    problem = compile_problem()
    if problem:
        print(f"ptx_report: skipped: numba-cuda cannot compile to PTX here ({problem}); "
              "the install steps are in this script's docstring")
        return 0
    print("tools: " + ", ".join(f"{t} {tools.get(t, 'not found')}" for t in TOOLS))
    only = set(args.only.split(",")) if args.only else None
    sass_dir = Path(args.sass_dir) if args.sass_dir else None
    if sass_dir:
        sass_dir.mkdir(parents=True, exist_ok=True)
    matmuls = ladder(blocked, only)
    if matmuls:
        print_table([report(name, fn, tools, args.arch, sass_dir, per_phase, threads,
                            args.gpu) for name, fn, per_phase, threads in matmuls])
    reduce = reductions(extra, only)
    if reduce:
        print_loads([report(name, fn, tools, args.arch, sass_dir, threads=threads,
                            gpu=args.gpu, arrays=2, ndim=1) for name, fn, threads in reduce])
    return 0


if __name__ == "__main__":
    sys.exit(main())
