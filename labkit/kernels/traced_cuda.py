"""The ``cuda`` a kernel sees under the tracer (:class:`FakeCuda`, the subset of
``numba.cuda`` labkit's kernels use): threadIdx, blockIdx, blockDim, gridDim, grid,
shared.array, local.array, syncthreads, atomic.add/max/min,
shfl_down_sync/shfl_up_sync/shfl_xor_sync/shfl_sync, syncwarp and jit(device=True) for
device functions (plain Python calls here). Its arrays
(:class:`TracedArray`) report each element read and write to the launch
(:mod:`labkit.kernels.tracer`), which records it in the :class:`~labkit.kernels.trace.Trace`;
the barriers of a block (:class:`_BlockSync`) hold its threads in lockstep.

Local memory is not on-chip: "the local memory space resides in device memory, so local
memory accesses have the same high latency and low bandwidth as global memory accesses and
are subject to the same requirements for memory coalescing"; it "is however organized such
that consecutive 32-bit words are accessed by consecutive thread IDs" (CUDA C++ Programming
Guide, "Device Memory Accesses", Local Memory); from compute capability 5.x it is cached in
L2 like global memory. The analysis models that layout. Not every local array is local
memory: the guide lists what "the compiler is likely to place in local memory": "arrays
for which it cannot determine that they are indexed with constant quantities", "large
structures or arrays that would consume too much register space", and spilled variables.
So a local array of the kernel body whose every index is a compile-time constant
(literals, closure and module constants, counters of ``for`` loops over ``range`` of
constants, which the compiler unrolls, and arithmetic on those: read from the source, see
:func:`_register_candidates`) is marked ``registers`` when all such arrays together fit a
thread's 255 registers; its accesses stay in the trace but cost no memory traffic. Every
other local array (a runtime index, one lane looping over a copy of its inputs, a body
whose source cannot be read) is local memory. Checked against the compiler: numba-cuda
0.30.4's PTX for sm_90 has no ld.local/st.local for labkit's register-blocked matmuls and
``reduce_fast`` (as ``benchmarks/ptx_report.py`` finds in their SASS) and has them for
the tests' runtime-indexed kernels, as the tracer says; a loop counted with ``while`` is
taken as a runtime index, where NVVM may unroll it (conservative). Spilling is not
modelled.

Barriers. A thread that has exited no longer counts at a barrier (as on Volta and later).
A warp shuffle or ``syncwarp`` waits for every running lane of the warp (the mask is not
read). A block whose running threads all wait at barriers that cannot complete (a barrier
inside a branch some threads skip) raises :class:`~labkit.kernels.trace.Deadlock` at once,
naming the barriers.
"""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import threading
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from labkit.hardware import SM_LIMITS, WARP_SIZE
from labkit.kernels.trace import (ATOMIC, GLOBAL, READ, SPACE_NAMES, WRITE, Deadlock,
                                  OutOfBounds)
from labkit.validate import ceil_div

class _Dim3:
    __slots__ = ("x", "y", "z")

    def __init__(self, x: int, y: int, z: int):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __repr__(self) -> str:
        return f"({self.x}, {self.y}, {self.z})"


class _Barrier:
    """One barrier of a block (its syncthreads, or one warp's shuffles and syncwarp)."""

    def __init__(self, name: str, parties: int, lock: threading.Lock):
        self.name = name
        self.cond = threading.Condition(lock)   # wakes this barrier's waiters only
        self.live = parties          # members still running
        self.arrived = 0
        self.generation = 0
        self.waiting: set[int] = set()   # linear ids of the members blocked in it


class _BlockSync:
    """The barriers of one block, under one lock, with exact deadlock detection.

    Exited threads stop counting at a barrier. When every running thread of the block is
    blocked at a barrier that has not completed, none can ever complete (a barrier
    completes only when a member arrives or exits): that is a deadlock, detected the
    moment it happens rather than after a timeout.
    """

    def __init__(self, n: int, block: _Dim3):
        self.lock = threading.Lock()
        self.block = block
        self.live = n
        self.blocked = 0
        self.error: BaseException | None = None
        self.threads = _Barrier("cuda.syncthreads()", n, self.lock)
        self.warps = [_Barrier(f"a shuffle or cuda.syncwarp() of warp {w}",
                               min(WARP_SIZE, n - w * WARP_SIZE), self.lock)
                      for w in range(ceil_div(n, WARP_SIZE))]

    def wait(self, barrier: _Barrier, thread: int) -> None:
        with self.lock:
            self._raise_if_broken()
            gen = barrier.generation
            barrier.arrived += 1
            if barrier.arrived >= barrier.live:
                self._release(barrier)
                return
            barrier.waiting.add(thread)
            self.blocked += 1
            if self.blocked >= self.live:
                self._deadlock()
            while gen == barrier.generation and self.error is None:
                barrier.cond.wait()
            self._raise_if_broken()

    def leave(self, linear: int) -> None:
        with self.lock:
            self.live -= 1
            for barrier in (self.threads, self.warps[linear // WARP_SIZE]):
                barrier.live -= 1
                if barrier.live > 0 and barrier.arrived >= barrier.live:
                    self._release(barrier)
            if self.error is None and 0 < self.live <= self.blocked:
                self._deadlock()

    def abort(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error
            self._wake_all()

    def _wake_all(self) -> None:
        for barrier in (self.threads, *self.warps):
            barrier.cond.notify_all()

    def _release(self, barrier: _Barrier) -> None:
        self.blocked -= len(barrier.waiting)
        barrier.waiting.clear()
        barrier.arrived = 0
        barrier.generation += 1
        barrier.cond.notify_all()

    def _deadlock(self) -> None:
        held = [b for b in (self.threads, *self.warps) if b.waiting]
        what = "; ".join(f"{len(b.waiting)} at {b.name} (threads {_ranges(b.waiting)})"
                         for b in held)
        self.error = Deadlock(
            f"deadlock in block {self.block}: every running thread waits at a barrier "
            f"that cannot complete — {what}. A barrier inside a branch that some threads "
            "skip? On a GPU that hangs or is undefined; every running thread of the block "
            "(of the warp, for a shuffle or syncwarp) must reach it.")
        self._wake_all()

    def _raise_if_broken(self) -> None:
        if self.error is not None:
            raise _Aborted() from None


def _ranges(ids) -> str:
    """'0-15, 32' for {0, ..., 15, 32}: linear thread ids as runs."""
    ids = sorted(ids)
    runs, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(runs)


class _Aborted(Exception):
    """Another thread of the block failed; this one stops."""


class TracedArray:
    """A numpy array whose element reads and writes are recorded in the trace."""

    __slots__ = ("_data", "_flat", "_id", "_space", "_ex", "shape", "size", "ndim",
                 "dtype", "_strides")

    def __init__(self, data: np.ndarray, array_id: int, space: int, executor: Any):
        self._data = data
        self._flat = data.reshape(-1)
        self._id = array_id
        self._space = space
        self._ex = executor
        self.shape = data.shape
        self.size = data.size
        self.ndim = data.ndim
        self.dtype = data.dtype
        strides = []
        step = 1
        for n in reversed(data.shape):
            strides.append(step)
            step *= n
        self._strides = tuple(reversed(strides))

    def __len__(self) -> int:
        return self.shape[0]

    def _flat_index(self, idx: Any, what: str) -> int:
        if not isinstance(idx, tuple):
            if self.ndim == 1:
                i = int(idx)
                if 0 <= i < self.size:
                    return i
            idx = (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"{what} uses {len(idx)} indices on a {self.ndim}-D array")
        flat = 0
        for i, n, s in zip(idx, self.shape, self._strides):
            i = int(i)
            if not 0 <= i < n:
                ex = self._ex
                state = ex.state()
                info = ex.arrays[self._id]
                name = info.name
                kind = "" if info.space == GLOBAL else f" ({SPACE_NAMES[info.space]})"
                raise OutOfBounds(
                    f"thread {state.tid} of block {ex.block_idx} {what} {name}"
                    f"[{', '.join(str(int(j)) for j in idx)}] but {name}{kind} has shape "
                    f"{self.shape}: a missing or wrong bounds guard?")
            flat += i * s
        return flat

    def __getitem__(self, idx: Any) -> Any:
        flat = self._flat_index(idx, "read")
        self._ex.record(self._space, READ, self._id, flat, sys._getframe(1))
        return self._flat[flat]

    def __setitem__(self, idx: Any, value: Any) -> None:
        flat = self._flat_index(idx, "wrote")
        self._ex.record(self._space, WRITE, self._id, flat, sys._getframe(1))
        self._flat[flat] = value

    def atomic(self, idx: Any, fn: Callable[[Any, Any], Any], value: Any, frame) -> Any:
        flat = self._flat_index(idx, "atomically updated")
        self._ex.record(self._space, ATOMIC, self._id, flat, frame)
        with self._ex.atomic_lock:
            old = self._flat[flat]
            self._flat[flat] = fn(old, value)
        return old


class _Shared:
    def __init__(self, ex: Any):
        self._ex = ex

    def array(self, shape: Any, dtype: Any) -> TracedArray:
        return self._ex.shared_array(shape, dtype, sys._getframe(1))


def uninitialized(shape: Any, dtype: Any) -> np.ndarray:
    """A new shared or local array. On a GPU these start with whatever the memory held
    (CUDA C++ Programming Guide: ``__shared__`` variables cannot be initialised in their
    declaration); here they start poisoned, NaN or a large integer, so a kernel that reads
    a slot before writing it gets a visibly wrong answer, as it would on a GPU, instead of
    a lucky zero."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.full(shape, np.nan, dtype=dtype)
    if dtype.kind in "iu":
        return np.full(shape, np.iinfo(dtype).max // 3 + 7, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


class _Local:
    def __init__(self, ex: Any):
        self._ex = ex

    def array(self, shape: Any, dtype: Any) -> TracedArray:
        return self._ex.local_array(shape, dtype, sys._getframe(1))


class _Atomic:
    def __init__(self, ex: Any):
        self._ex = ex

    def add(self, array: TracedArray, idx: Any, value: Any) -> Any:
        return array.atomic(idx, lambda old, v: old + v, value, sys._getframe(1))

    def max(self, array: TracedArray, idx: Any, value: Any) -> Any:
        return array.atomic(idx, lambda old, v: max(old, v), value, sys._getframe(1))

    def min(self, array: TracedArray, idx: Any, value: Any) -> Any:
        return array.atomic(idx, lambda old, v: min(old, v), value, sys._getframe(1))


class FakeCuda:
    """The ``cuda`` a kernel sees under the tracer (the subset of ``numba.cuda`` we use)."""

    float32, float64, int32, int64 = np.float32, np.float64, np.int32, np.int64
    warpsize = WARP_SIZE

    def __init__(self, ex: Any):
        self._ex = ex
        self.shared = _Shared(ex)
        self.local = _Local(ex)
        self.atomic = _Atomic(ex)

    @property
    def threadIdx(self) -> _Dim3:  # noqa: N802 (CUDA's name)
        return self._ex.state().tid

    @property
    def blockIdx(self) -> _Dim3:  # noqa: N802
        return self._ex.block_idx

    @property
    def blockDim(self) -> _Dim3:  # noqa: N802
        return self._ex.block_dim

    @property
    def gridDim(self) -> _Dim3:  # noqa: N802
        return self._ex.grid_dim

    @property
    def laneid(self) -> int:
        return self._ex.state().linear % WARP_SIZE

    def grid(self, ndim: int):
        t, b, d = self.threadIdx, self._ex.block_idx, self._ex.block_dim
        x = b.x * d.x + t.x
        if ndim == 1:
            return x
        y = b.y * d.y + t.y
        if ndim == 2:
            return x, y
        return x, y, b.z * d.z + t.z

    def gridsize(self, ndim: int):
        g, d = self._ex.grid_dim, self._ex.block_dim
        sizes = (g.x * d.x, g.y * d.y, g.z * d.z)
        return sizes[0] if ndim == 1 else sizes[:ndim]

    def syncthreads(self) -> None:
        self._ex.syncthreads()

    def syncwarp(self, mask: int = 0xFFFFFFFF) -> None:
        self._ex.syncwarp()

    def shfl_down_sync(self, mask: int, value: Any, delta: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane + delta, sys._getframe(1))

    def shfl_up_sync(self, mask: int, value: Any, delta: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane - delta, sys._getframe(1))

    def shfl_xor_sync(self, mask: int, value: Any, lane_mask: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane ^ lane_mask, sys._getframe(1))

    def shfl_sync(self, mask: int, value: Any, src_lane: int) -> Any:
        return self._ex.shuffle(value, lambda lane: src_lane, sys._getframe(1))

    @staticmethod
    def fma(a: Any, b: Any, c: Any) -> Any:
        return a * b + c

    @staticmethod
    def jit(fn: Callable | None = None, *, device: bool = False, **options: Any) -> Any:
        """``cuda.jit(device=True, ...)`` (:func:`~labkit.kernels.library.sizes.device`):
        under the tracer a device function is the Python function itself, run by the
        thread that calls it (numba's options, ``inline`` and the rest, change nothing
        here). A kernel is launched with :func:`~labkit.kernels.tracer.run_traced`, not
        jitted: ``device=False`` is refused."""
        if not device:
            raise ValueError("device must be True: under the tracer cuda.jit makes device "
                             "functions; launch a kernel with run_traced")
        return (lambda f: f) if fn is None else fn


# ---- which local arrays live in registers ------------------------------------------------

_CONSTANT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift,
                 ast.BitAnd, ast.BitOr, ast.BitXor, ast.USub, ast.UAdd, ast.Invert)


@lru_cache(maxsize=None)
def _register_candidates(code) -> frozenset[int]:
    """Source lines of the ``cuda.local.array`` calls in a kernel body whose arrays are
    indexed only with compile-time constants: literals, names the body does not assign
    (closure and module constants, which numba freezes), the counter of an enclosing
    ``for ... in range(constants)`` (a loop the compiler unrolls), names only ever given
    such values, and arithmetic on those. An array used in any other way (a runtime index,
    passed to a function) is not one; neither is any array of a body whose source cannot
    be read."""
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return frozenset()
    args = fn.args
    runtime = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    runtime |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    parent: dict[ast.AST, ast.AST] = {}
    stores: dict[str, list[ast.AST]] = {}      # name -> the statements that bind it
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stmt = parent[node]
            while not isinstance(stmt, ast.stmt):
                stmt = parent[stmt]
            stores.setdefault(node.id, []).append(stmt)

    def loop_range(stmt: ast.AST, name: str) -> ast.Call | None:
        """The range(...) of ``for name in range(...)``, else None."""
        it = getattr(stmt, "iter", None)
        if (isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name)
                and stmt.target.id == name and isinstance(it, ast.Call)
                and isinstance(it.func, ast.Name) and it.func.id == "range"
                and not it.keywords):
            return it
        return None

    def binding_constant(stmt: ast.AST, name: str, seen: frozenset) -> bool:
        if isinstance(stmt, ast.For):
            it = loop_range(stmt, name)
            return it is not None and all(constant(a, stmt, seen) for a in it.args)
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            return constant(stmt.value, stmt, seen)
        return False

    def constant(expr: ast.AST, at: ast.AST, seen: frozenset = frozenset()) -> bool:
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, int)
        if isinstance(expr, ast.Name):
            name = expr.id
            if name in runtime or name in seen:
                return False
            seen = seen | {name}
            node = at
            while node in parent:              # an enclosing loop over this name binds it
                node = parent[node]
                if loop_range(node, name) is not None and all(
                        s is node for s in stores[name] if _inside(s, node, parent)):
                    return binding_constant(node, name, seen)
            return all(binding_constant(s, name, seen) for s in stores.get(name, ()))
        if isinstance(expr, ast.BinOp):
            return (isinstance(expr.op, _CONSTANT_OPS) and constant(expr.left, at, seen)
                    and constant(expr.right, at, seen))
        if isinstance(expr, ast.UnaryOp):
            return isinstance(expr.op, _CONSTANT_OPS) and constant(expr.operand, at, seen)
        if isinstance(expr, ast.Tuple):
            return all(constant(e, at, seen) for e in expr.elts)
        return False

    found = set()
    for node in ast.walk(fn):
        call = node.value if isinstance(node, ast.Assign) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "array" and isinstance(call.func.value, ast.Attribute)
                and call.func.value.attr == "local" and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if stores.get(name) != [node]:
            continue
        uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name
                and n is not node.targets[0]]
        if all(isinstance(parent.get(u), ast.Subscript) and parent[u].value is u
               and constant(parent[u].slice, parent[u]) for u in uses):
            found.update({first + node.lineno - 1, first + call.lineno - 1})
    return frozenset(found)


def _inside(node: ast.AST, ancestor: ast.AST, parent: dict) -> bool:
    while node in parent:
        if node is ancestor:
            return True
        node = parent[node]
    return node is ancestor


def _register_words() -> int:
    """32-bit registers a thread may have (CUDA C++ Programming Guide, Technical
    Specifications: 255 on every compute capability labkit models)."""
    return min(s.max_registers_per_thread for s in SM_LIMITS.values())
