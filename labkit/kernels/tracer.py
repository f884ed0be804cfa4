"""labkit's tracing executor: run a kernel ``fn(cuda)`` in Python and record every access.

``run_traced(kernel_fn, griddim, blockdim, *args)`` calls ``kernel_fn(fake)`` with a fake
``cuda`` module (threadIdx, blockIdx, blockDim, gridDim, grid, shared.array, local.array,
syncthreads, atomic.add/max/min, shfl_down_sync/shfl_xor_sync/shfl_sync, syncwarp) and
runs the body once per thread. Array arguments are wrapped so that each read and write of
global memory and each access to a shared array is recorded with its block, thread, warp,
lane, flat element index and *site* (the source line that made it). Threads that make
the same access (site, array, op) for the k-th time form one warp instruction, which is what SIMT
hardware issues once for the whole warp: the analysis in :mod:`labkit.kernels.analysis`
groups by it to count 32-byte sectors (coalescing), bank conflicts and active masks.

Blocks run one after another. Inside a block, a kernel that never synchronizes runs its
threads one after another; one that calls ``syncthreads`` or a warp primitive runs each
thread in its own OS thread, all in lockstep between barriers (a thread that has exited no
longer counts at a barrier, as on Volta and later). Whether a kernel synchronizes is
guessed from the names its code uses; a barrier reached anyway (through a helper function
or closure) is detected when it is called: the launch is restarted from the original
arguments in lockstep, so a wrapped kernel is never run thread after thread.

The work is estimated before the bulk of it runs: the first block is timed and the
estimate is that time x the number of blocks (blocks do about the same work). A launch
estimated above ``budget_s`` seconds (default 10) raises a ValueError naming the size, the
estimate and what to use instead (``runner="numba"``, a smaller size), unless
``budget_s=None``; its inputs may then hold the first block's writes. Launches estimated
above a few seconds show a tqdm progress bar over blocks. Out-of-bounds indices raise
:class:`OutOfBounds` naming the thread, where a GPU would read garbage.
"""
from __future__ import annotations

import dis
import inspect
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from labkit.hardware import MAX_THREADS_PER_BLOCK, WARP_SIZE
from labkit.validate import ceil_div, positive

DEFAULT_BUDGET_S = 10.0   # a traced launch estimated above this raises (budget_s=None: off)
PROGRESS_AFTER_S = 3.0    # launches estimated above this show a progress bar
GLOBAL, SHARED = 0, 1
READ, WRITE, ATOMIC = 0, 1, 2
SPACE_NAMES = {GLOBAL: "global", SHARED: "shared"}
OP_NAMES = {READ: "read", WRITE: "write", ATOMIC: "atomic"}
_SYNC_NAMES = {"syncthreads", "syncwarp", "shfl_down_sync", "shfl_up_sync", "shfl_xor_sync",
               "shfl_sync", "syncthreads_count", "syncthreads_and", "syncthreads_or"}
_COLUMNS = ("block", "thread", "space", "op", "array", "index", "site", "occurrence")


class OutOfBounds(IndexError):
    """A thread indexed outside an array (on a GPU: a wrong value or a crash)."""


@dataclass(frozen=True)
class ArrayInfo:
    """One array the kernel touched: an argument (global) or a shared array of one block."""
    name: str
    space: int
    shape: tuple[int, ...]
    itemsize: int
    block: int = -1   # the block that owns a shared array; -1 for global arrays


@dataclass
class Trace:
    """Every memory access of one launch, as columns (one row per access).

    ``block`` is the linear block index, ``thread`` the linear thread index inside the block
    (x fastest, then y, then z, as CUDA numbers threads into warps), ``space`` GLOBAL or
    SHARED, ``op`` READ, WRITE or ATOMIC, ``array`` an index into ``arrays``, ``index`` the
    flat element index, ``site`` an index into ``sites`` (source line of the access) and
    ``occurrence`` how many times this thread had already made this access (same site, array
    and op).
    """
    griddim: tuple[int, int, int]
    blockdim: tuple[int, int, int]
    arrays: list[ArrayInfo]
    sites: list[int]                       # source line of each site
    columns: dict[str, np.ndarray]
    shuffles: int = 0                      # warp shuffle calls (register traffic)
    syncs: int = 0                         # syncthreads calls, summed over threads

    @property
    def threads_per_block(self) -> int:
        return int(np.prod(self.blockdim))

    @property
    def n_blocks(self) -> int:
        return int(np.prod(self.griddim))

    @property
    def n_threads(self) -> int:
        """Threads launched: blocks x threads per block."""
        return self.n_blocks * self.threads_per_block

    @property
    def n_accesses(self) -> int:
        return int(self.columns["block"].size)

    def array_id(self, name: str, space: int = GLOBAL) -> list[int]:
        ids = [k for k, a in enumerate(self.arrays) if a.name == name and a.space == space]
        if not ids:
            known = sorted({a.name for a in self.arrays})
            raise ValueError(f"no array named {name!r} in this trace; arrays: {known}")
        return ids

    def select(self, *, space: int | None = None, op: int | None = None,
               name: str | None = None) -> np.ndarray:
        """Boolean mask of the rows with this space, op and array name (None: any)."""
        c = self.columns
        mask = np.ones(self.n_accesses, dtype=bool)
        if space is not None:
            mask &= c["space"] == space
        if op is not None:
            mask &= c["op"] == op
        if name is not None:
            ids = self.array_id(name, SHARED if space == SHARED else GLOBAL)
            mask &= np.isin(c["array"], ids)
        return mask


class _Dim3:
    __slots__ = ("x", "y", "z")

    def __init__(self, x: int, y: int, z: int):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __repr__(self) -> str:
        return f"({self.x}, {self.y}, {self.z})"


@dataclass
class _ThreadState:
    tid: _Dim3
    linear: int
    counts: dict = field(default_factory=dict)
    shared_calls: int = 0


class _Barrier:
    """A barrier for the threads still running: exited threads stop counting."""

    def __init__(self, parties: int):
        self.live = parties
        self.arrived = 0
        self.generation = 0
        self.cond = threading.Condition()
        self.error: BaseException | None = None

    def wait(self) -> None:
        with self.cond:
            self._raise_if_broken()
            gen = self.generation
            self.arrived += 1
            if self.arrived >= self.live:
                self._release()
            else:
                while gen == self.generation and self.error is None:
                    if not self.cond.wait(timeout=60):
                        self.error = RuntimeError("barrier timed out (deadlock?)")
                        self.cond.notify_all()
                self._raise_if_broken()

    def leave(self) -> None:
        with self.cond:
            self.live -= 1
            if self.live > 0 and self.arrived >= self.live:
                self._release()

    def abort(self, error: BaseException) -> None:
        with self.cond:
            self.error = error
            self.cond.notify_all()

    def _release(self) -> None:
        self.arrived = 0
        self.generation += 1
        self.cond.notify_all()

    def _raise_if_broken(self) -> None:
        if self.error is not None:
            raise _Aborted() from None


class _Aborted(Exception):
    """Another thread of the block failed; this one stops."""


class _NeedsLockstep(Exception):
    """A barrier was reached while threads run one after another: rerun in lockstep."""


class TracedArray:
    """A numpy array whose element reads and writes are recorded in the trace."""

    __slots__ = ("_data", "_flat", "_id", "_space", "_ex", "shape", "size", "ndim",
                 "dtype", "_strides")

    def __init__(self, data: np.ndarray, array_id: int, space: int, executor: "_Executor"):
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
            idx = (idx,)
        if len(idx) != self.ndim:
            raise IndexError(f"{what} uses {len(idx)} indices on a {self.ndim}-D array")
        flat = 0
        for i, n, s in zip(idx, self.shape, self._strides):
            i = int(i)
            if not 0 <= i < n:
                ex = self._ex
                state = ex.state()
                name = ex.arrays[self._id].name
                raise OutOfBounds(
                    f"thread {state.tid} of block {ex.block_idx} {what} {name}"
                    f"[{', '.join(str(int(j)) for j in idx)}] but {name} has shape "
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
    def __init__(self, ex: "_Executor"):
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
    @staticmethod
    def array(shape: Any, dtype: Any) -> np.ndarray:
        return uninitialized(shape, dtype)


class _Atomic:
    def __init__(self, ex: "_Executor"):
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

    def __init__(self, ex: "_Executor"):
        self._ex = ex
        self.shared = _Shared(ex)
        self.local = _Local()
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
        self._ex.warp_exchange(None)

    def shfl_down_sync(self, mask: int, value: Any, delta: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane + delta)

    def shfl_up_sync(self, mask: int, value: Any, delta: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane - delta)

    def shfl_xor_sync(self, mask: int, value: Any, lane_mask: int) -> Any:
        return self._ex.shuffle(value, lambda lane: lane ^ lane_mask)

    def shfl_sync(self, mask: int, value: Any, src_lane: int) -> Any:
        return self._ex.shuffle(value, lambda lane: src_lane)

    @staticmethod
    def fma(a: Any, b: Any, c: Any) -> Any:
        return a * b + c


def _needs_lockstep(fn: Callable) -> bool:
    names: set[str] = set()
    stack = [fn.__code__]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if inspect.iscode(c))
    return bool(names & _SYNC_NAMES)


def _assigned_name(frame) -> str | None:
    """The local name the call at ``frame``'s current instruction is stored into."""
    try:
        after = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti]
    except Exception:  # pragma: no cover - bytecode introspection is best effort
        return None
    for ins in after[:4]:
        if ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF"):
            return ins.argval
        if ins.opname not in ("CACHE", "PRECALL", "CALL", "EXTENDED_ARG", "NOP"):
            return None
    return None


def _as_dim3(value: Any, what: str) -> tuple[int, int, int]:
    from labkit.validate import dims
    out = dims(what, value)
    return out + (1,) * (3 - len(out))  # type: ignore[return-value]


class _Executor:
    def __init__(self, kernel_fn: Callable, griddim: Any, blockdim: Any, args: tuple,
                 budget_s: float | None = DEFAULT_BUDGET_S):
        self.budget_s = None if budget_s is None else positive("budget_s", budget_s)
        self.grid = _as_dim3(griddim, "griddim")
        self.block = _as_dim3(blockdim, "blockdim")
        if math.prod(self.block) > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"blockdim has {math.prod(self.block)} threads; a block holds "
                             f"at most {MAX_THREADS_PER_BLOCK}")
        self.grid_dim = _Dim3(*self.grid)
        self.block_dim = _Dim3(*self.block)
        self.block_idx = _Dim3(0, 0, 0)
        self.block_linear = 0
        self.local = threading.local()
        self.atomic_lock = threading.Lock()
        self.count_lock = threading.Lock()  # site ids and counters shared by threads
        self.arrays: list[ArrayInfo] = []
        self.site_ids: dict[tuple[Any, int], int] = {}
        self.site_lines: list[int] = []
        self.rows: list[tuple] = []
        self.shared_by_call: dict[int, TracedArray] = {}
        self.shuffles = 0
        self.syncs = 0
        self.body = kernel_fn(FakeCuda(self))
        if not callable(self.body):
            raise ValueError("kernel_fn(cuda) must return the kernel body (a function)")
        sig = inspect.signature(self.body).parameters
        params = [p for p in sig if sig[p].kind != inspect.Parameter.VAR_POSITIONAL]
        if len(params) < len(sig):  # kernel(*args): name the extra arguments arg0, arg1...
            params += [f"arg{k}" for k in range(len(params), len(args))]
        if len(params) != len(args):
            raise ValueError(f"the kernel takes {len(params)} arguments {params}, "
                             f"got {len(args)}")
        self.args = []
        for name, arg in zip(params, args):
            if isinstance(arg, np.ndarray):
                if not arg.flags.c_contiguous:
                    raise ValueError(f"array argument {name!r} must be C-contiguous")
                self.arrays.append(ArrayInfo(name, GLOBAL, arg.shape, arg.itemsize))
                self.args.append(TracedArray(arg, len(self.arrays) - 1, GLOBAL, self))
            else:
                self.args.append(arg)
        self.lockstep = _needs_lockstep(self.body)

    # -- per-thread state ------------------------------------------------------------
    def state(self) -> _ThreadState:
        return self.local.state

    def record(self, space: int, op: int, array_id: int, flat: int, frame) -> None:
        # A site is a source line (bytecode offsets move under 3.11's specialization);
        # the k-th access of one array with one op on that line is the same instruction.
        key = (frame.f_code, frame.f_lineno)
        site = self.site_ids.get(key)
        if site is None:
            # lockstep threads reach a new line together: one id per line, not per thread
            with self.count_lock:
                site = self.site_ids.get(key)
                if site is None:
                    site = len(self.site_lines)
                    self.site_lines.append(frame.f_lineno)
                    self.site_ids[key] = site
        state = self.local.state
        ckey = (site, array_id, op)
        occ = state.counts.get(ckey, 0)
        state.counts[ckey] = occ + 1
        self.rows.append((self.block_linear, state.linear, space, op, array_id, flat,
                          site, occ))

    def shared_array(self, shape: Any, dtype: Any, frame) -> TracedArray:
        state = self.state()
        call = state.shared_calls
        state.shared_calls += 1
        with self.atomic_lock:
            if call not in self.shared_by_call:
                name = _assigned_name(frame) or f"shared{call}"
                data = uninitialized(shape, dtype)
                self.arrays.append(ArrayInfo(name, SHARED, data.shape, data.itemsize,
                                             self.block_linear))
                self.shared_by_call[call] = TracedArray(data, len(self.arrays) - 1, SHARED,
                                                        self)
            return self.shared_by_call[call]

    # -- synchronization -------------------------------------------------------------
    def syncthreads(self) -> None:
        if not self.lockstep:
            raise _NeedsLockstep()
        with self.count_lock:
            self.syncs += 1
        self.barrier.wait()

    def warp_exchange(self, value: Any) -> list:
        if not self.lockstep:
            raise _NeedsLockstep()
        state = self.state()
        warp = state.linear // WARP_SIZE
        buf, barrier = self.warp_bufs[warp], self.warp_barriers[warp]
        buf[state.linear % WARP_SIZE] = value
        barrier.wait()
        snapshot = list(buf)
        barrier.wait()
        return snapshot

    def shuffle(self, value: Any, source: Callable[[int], int]) -> Any:
        with self.count_lock:
            self.shuffles += 1
        lane = self.state().linear % WARP_SIZE
        values = self.warp_exchange(value)
        src = source(lane)
        if 0 <= src < WARP_SIZE and values[src] is not None:
            return values[src]
        return value

    # -- running -----------------------------------------------------------------------
    def _thread_states(self) -> list[_ThreadState]:
        bx, by, bz = self.block
        return [_ThreadState(_Dim3(x, y, z), x + y * bx + z * bx * by)
                for z in range(bz) for y in range(by) for x in range(bx)]

    def run(self) -> Trace:
        if self.lockstep:
            return self._run_once()
        saved = [a._data.copy() for a in self.args if isinstance(a, TracedArray)]
        try:
            return self._run_once()
        except _NeedsLockstep:
            # a barrier reached through a helper: restore the inputs, start over in lockstep
            for a, data in zip((a for a in self.args if isinstance(a, TracedArray)), saved):
                a._data[...] = data
            n_global = sum(isinstance(a, TracedArray) for a in self.args)
            del self.arrays[n_global:]
            self.site_ids, self.site_lines, self.rows = {}, [], []
            self.shuffles = self.syncs = 0
            self.lockstep = True
            return self._run_once()

    def _run_once(self) -> Trace:
        gx, gy, gz = self.grid
        n_blocks = gx * gy * gz
        order = [(bx, by, bz) for bz in range(gz) for by in range(gy) for bx in range(gx)]
        bar = None
        start = time.perf_counter()
        for done, (bx, by, bz) in enumerate(order):
            self.block_idx = _Dim3(bx, by, bz)
            self.block_linear = bx + by * gx + bz * gx * gy
            self.shared_by_call = {}
            if self.lockstep:
                self._run_block_threads()
            else:
                for state in self._thread_states():
                    self.local.state = state
                    self.body(*self.args)
            if done == 0 and n_blocks > 1:
                first = time.perf_counter() - start
                estimate = first * n_blocks
                if self.budget_s is not None and estimate > self.budget_s:
                    raise ValueError(
                        f"tracing this launch ({n_blocks} blocks x "
                        f"{math.prod(self.block)} threads) would take about "
                        f"{estimate:.0f} s (its first block took {first:.2f} s), over "
                        f"budget_s={self.budget_s:g}: use runner='numba' (compiled, or "
                        "Numba's CUDA simulator) or a smaller size, or pass "
                        "budget_s=None to trace it anyway")
                if estimate > PROGRESS_AFTER_S:
                    from tqdm.auto import tqdm
                    bar = tqdm(total=n_blocks, initial=1, desc="tracing blocks",
                               leave=False)
            elif bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        rows = np.array(self.rows, dtype=np.int64).reshape(-1, len(_COLUMNS))
        columns = {name: rows[:, k].copy() for k, name in enumerate(_COLUMNS)}
        return Trace(self.grid, self.block, self.arrays, self.site_lines, columns,
                     self.shuffles, self.syncs)

    def _run_block_threads(self) -> None:
        states = self._thread_states()
        n = len(states)
        self.barrier = _Barrier(n)
        n_warps = ceil_div(n, WARP_SIZE)
        self.warp_barriers = [_Barrier(min(WARP_SIZE, n - w * WARP_SIZE))
                              for w in range(n_warps)]
        self.warp_bufs = [[None] * WARP_SIZE for _ in range(n_warps)]
        errors: list[BaseException] = []

        def target(state: _ThreadState) -> None:
            self.local.state = state
            warp_barrier = self.warp_barriers[state.linear // WARP_SIZE]
            try:
                self.body(*self.args)
            except _Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)
                self.barrier.abort(exc)
                for b in self.warp_barriers:
                    b.abort(exc)
            finally:
                self.barrier.leave()
                warp_barrier.leave()

        threads = [threading.Thread(target=target, args=(s,), daemon=True) for s in states]
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(old)
        if errors:
            raise errors[0]


def run_traced(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any,
               budget_s: float | None = DEFAULT_BUDGET_S) -> Trace:
    """Run ``kernel_fn(cuda)`` on ``griddim`` x ``blockdim`` threads and return its trace.

    Array arguments (C-contiguous numpy arrays) are updated in place, as after a launch
    followed by a copy back to the host; scalars are passed through. The first block is
    timed; if all blocks would take more than ``budget_s`` seconds a ValueError says so
    (``budget_s=None``: no limit).
    """
    return _Executor(kernel_fn, griddim, blockdim, args, budget_s).run()
