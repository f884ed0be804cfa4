"""labkit's tracing executor: run a kernel ``fn(cuda)`` in Python and record every access.

``run_traced(kernel_fn, griddim, blockdim, *args)`` calls ``kernel_fn(fake)`` with a fake
``cuda`` module (:class:`~labkit.kernels.traced_cuda.FakeCuda`) and runs the body once per
thread. Every read and write of global memory, of a shared array and of a local array, and
every warp shuffle, is recorded in a :class:`~labkit.kernels.trace.Trace` (what a row holds,
the memory spaces and the barrier epochs: :mod:`labkit.kernels.trace`; which local arrays
are registers: :mod:`labkit.kernels.traced_cuda`).

Blocks run one after another. Inside a block, a kernel that never synchronizes runs its
threads one after another; one that calls ``syncthreads`` or a warp primitive runs each
thread in its own OS thread, all in lockstep between barriers (a thread that has exited no
longer counts at a barrier, as on Volta and later). Whether a kernel synchronizes is
guessed from the names its code uses; a barrier reached anyway (through a helper function
or closure) is detected when it is called: the launch is restarted from the original
arguments in lockstep, so a wrapped kernel is never run thread after thread. A warp
shuffle or ``syncwarp`` waits for every running lane of the warp (the mask is not read). A
block whose running threads all wait at barriers that cannot complete (a barrier inside a
branch some threads skip) raises :class:`~labkit.kernels.trace.Deadlock` at once, naming
the barriers.

Work budgets, not seconds. A launch is refused *before it runs*, by its size, when it
launches more than ``max_threads`` threads or its array arguments hold more than
``max_elements`` elements (:class:`~labkit.kernels.trace.TraceLimitExceeded`, a ValueError
naming the size, the limit and ``runner="numba"``). While it runs, more than
``max_accesses`` memory accesses and shuffles, or more than ``max_barrier_waits`` barrier
waits (syncthreads, syncwarp, shuffles; both counts summed over threads; a wait costs a
thread switch, the time of tens of accesses) stop it with the same error: a kernel that
loops forever stops after a fixed amount of work, whatever the machine's load. (A loop
that touches no memory and no barrier is not counted.) ``None`` lifts a limit. The old
``budget_s`` keyword is accepted and ignored: no verdict depends on time. Launches that
take more than a few seconds show a tqdm progress bar over blocks (display only).
Out-of-bounds indices raise :class:`~labkit.kernels.trace.OutOfBounds` naming the thread,
where a GPU would read garbage. A stopped launch may leave partial writes in its inputs (a
refused one never starts).
"""
from __future__ import annotations

import dis
import inspect
import math
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from labkit.hardware import MAX_THREADS_PER_BLOCK, WARP_SIZE
from labkit.kernels.trace import (_COLUMNS, _SHUFFLE_COLUMNS, GLOBAL, LOCAL, SHARED,
                                  ArrayInfo, Trace, TraceLimitExceeded)
from labkit.kernels.traced_cuda import (FakeCuda, TracedArray, _Aborted, _BlockSync, _Dim3,
                                        _register_candidates, _register_words,
                                        uninitialized)
from labkit.validate import ceil_div, dims, integer, positive

DEFAULT_BUDGET_S = 10.0   # the old wall-clock budget: accepted for callers, ignored
# Work budgets of one traced launch (None lifts one). The largest launches the course traces
# (tests, checks, notebooks) start 4096 threads, pass 8192 elements, make 0.5 M accesses (the
# register-blocked matmul, local arrays counted) and 8192 barrier waits. A kernel that never
# ends stops at a cap in about ten seconds (measured on 2 cores at load 8: 6 s for 2^21
# accesses of one thread's loop, 11 s for 2^17 waits of a 256-thread block at syncthreads).
MAX_THREADS = 1 << 13         # threads it may start (blocks x threads per block)
MAX_ELEMENTS = 1 << 18        # elements its array arguments may hold, all together
MAX_ACCESSES = 1 << 21        # memory accesses and shuffles, summed over its threads
MAX_BARRIER_WAITS = 1 << 17   # waits at syncthreads, syncwarp and shuffles, summed likewise
PROGRESS_AFTER_S = 3.0    # launches estimated above this show a progress bar (display only)
_SYNC_NAMES = {"syncthreads", "syncwarp", "shfl_down_sync", "shfl_up_sync", "shfl_xor_sync",
               "shfl_sync", "syncthreads_count", "syncthreads_and", "syncthreads_or"}
_SHUFFLE_KEY = (-1, -1)   # (array, op) of a shuffle in a thread's occurrence counts


@dataclass
class _ThreadState:
    tid: _Dim3
    linear: int
    counts: dict = field(default_factory=dict)
    shared_calls: int = 0
    epoch: int = 0         # syncthreads passed
    warp_epoch: int = 0    # syncthreads and syncwarp passed


class _NeedsLockstep(Exception):
    """A barrier was reached while threads run one after another: rerun in lockstep."""


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
    out = dims(what, value)
    return out + (1,) * (3 - len(out))  # type: ignore[return-value]


def _limit(name: str, value: Any) -> int | None:
    return None if value is None else integer(name, value, low=1)


def _site_order(key: tuple[Any, int]) -> tuple:
    code, line = key
    return (code.co_filename, code.co_firstlineno, code.co_name, line)


_INSTEAD = ("use runner='numba' (compiled, or Numba's CUDA simulator: values, no trace) or "
            "a smaller size")


class _Executor:
    def __init__(self, kernel_fn: Callable, griddim: Any, blockdim: Any, args: tuple, *,
                 max_threads: int | None = MAX_THREADS,
                 max_elements: int | None = MAX_ELEMENTS,
                 max_accesses: int | None = MAX_ACCESSES,
                 max_barrier_waits: int | None = MAX_BARRIER_WAITS,
                 budget_s: float | None = None):
        if budget_s is not None:      # accepted for old callers; time decides nothing
            positive("budget_s", budget_s)
        self.max_threads = _limit("max_threads", max_threads)
        self.max_elements = _limit("max_elements", max_elements)
        self.max_accesses = _limit("max_accesses", max_accesses)
        self.access_cap = sys.maxsize if max_accesses is None else self.max_accesses
        self.max_barrier_waits = _limit("max_barrier_waits", max_barrier_waits)
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
        self._reset()
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
        self.n_global = len(self.arrays)
        self._refuse_by_size()
        self.lockstep = _needs_lockstep(self.body)
        self.register_lines = _register_candidates(self.body.__code__)

    def _reset(self) -> None:
        del self.arrays[getattr(self, "n_global", 0):]
        self.site_ids: dict[tuple[Any, int], int] = {}
        self.site_keys: list[tuple[Any, int]] = []
        self.rows: list[tuple] = []
        self.shuffle_rows: list[tuple] = []
        self.shared_by_call: dict[int, TracedArray] = {}
        self.local_ids: dict[tuple[Any, int], int] = {}
        self.syncs = self.syncwarps = 0
        self.barrier_waits = 0

    def _refuse_by_size(self) -> None:
        n_blocks, per_block = math.prod(self.grid), math.prod(self.block)
        threads = n_blocks * per_block
        if self.max_threads is not None and threads > self.max_threads:
            raise TraceLimitExceeded(
                f"this launch is too big to trace: {n_blocks} blocks x {per_block} threads "
                f"= {threads} threads, over the tracer's limit of {self.max_threads} "
                f"(max_threads): {_INSTEAD}")
        sizes = [(self.arrays[a._id].name, a.size) for a in self.args
                 if isinstance(a, TracedArray)]
        elements = sum(n for _, n in sizes)
        if self.max_elements is not None and elements > self.max_elements:
            each = ", ".join(f"{name} {n}" for name, n in sizes)
            raise TraceLimitExceeded(
                f"this launch is too big to trace: its arrays hold {elements} elements "
                f"({each}), over the tracer's limit of {self.max_elements} (max_elements): "
                f"{_INSTEAD}")

    # -- per-thread state ------------------------------------------------------------
    def state(self) -> _ThreadState:
        return self.local.state

    def _site(self, frame) -> int:
        # A site is a source line (bytecode offsets move under 3.11's specialization);
        # the k-th access of one array with one op on that line is the same instruction.
        key = (frame.f_code, frame.f_lineno)
        site = self.site_ids.get(key)
        return self._new_site(key) if site is None else site

    def _new_site(self, key: tuple[Any, int]) -> int:
        # lockstep threads reach a new line together: one id per line, not per thread
        with self.count_lock:
            site = self.site_ids.get(key)
            if site is None:
                site = len(self.site_keys)
                self.site_keys.append(key)
                self.site_ids[key] = site
        return site

    def _count_work(self) -> None:
        """Stop the launch once it has recorded more than ``max_accesses`` accesses and
        shuffles, or waited more than ``max_barrier_waits`` times. The counts only grow
        and are exact at the end of each block, so whether a launch is stopped depends on
        its total work, never on how its threads were scheduled."""
        for cap, done, what in (
                (self.max_accesses, len(self.rows) + len(self.shuffle_rows),
                 "memory accesses and shuffles (max_accesses)"),
                (self.max_barrier_waits, self.barrier_waits,
                 "barrier waits: syncthreads, syncwarp and shuffles (max_barrier_waits)")):
            if cap is not None and done > cap:
                raise TraceLimitExceeded(
                    f"this launch did more work than the tracer allows: over {cap} {what}, "
                    f"each of one thread, by block {self.block_idx}: a loop that never "
                    f"ends, or far more work than the task needs? For big launches "
                    f"{_INSTEAD}")

    def _count_barrier(self) -> None:
        with self.count_lock:
            self.barrier_waits += 1
        self._count_work()

    def record(self, space: int, op: int, array_id: int, flat: int, frame) -> None:
        key = (frame.f_code, frame.f_lineno)       # the hot path: _site and _count_work
        site = self.site_ids.get(key)
        if site is None:
            site = self._new_site(key)
        state = self.local.state
        ckey = (site, array_id, op)
        occ = state.counts.get(ckey, 0)
        state.counts[ckey] = occ + 1
        rows = self.rows
        rows.append((self.block_linear, state.linear, space, op, array_id, flat,
                     site, occ, state.epoch, state.warp_epoch))
        if len(rows) + len(self.shuffle_rows) > self.access_cap:
            self._count_work()

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

    def local_array(self, shape: Any, dtype: Any, frame) -> TracedArray:
        """A new local array for this thread; one ArrayInfo per call site."""
        data = uninitialized(shape, dtype)
        key = (frame.f_code, frame.f_lineno)
        with self.atomic_lock:
            array_id = self.local_ids.get(key)
            if array_id is None:
                name = _assigned_name(frame) or f"local{len(self.local_ids)}"
                self.arrays.append(ArrayInfo(name, LOCAL, data.shape, data.itemsize))
                array_id = self.local_ids[key] = len(self.arrays) - 1
        return TracedArray(data, array_id, LOCAL, self)

    # -- synchronization -------------------------------------------------------------
    def syncthreads(self) -> None:
        if not self.lockstep:
            raise _NeedsLockstep()
        with self.count_lock:
            self.syncs += 1
        self._count_barrier()
        self.sync.wait(self.sync.threads, self.state().linear)
        state = self.state()
        state.epoch += 1
        state.warp_epoch += 1

    def syncwarp(self) -> None:
        if not self.lockstep:
            raise _NeedsLockstep()
        self._count_barrier()
        self.warp_exchange(None)
        with self.count_lock:
            self.syncwarps += 1
        self.state().warp_epoch += 1

    def warp_exchange(self, value: Any) -> list:
        if not self.lockstep:
            raise _NeedsLockstep()
        state = self.state()
        warp = state.linear // WARP_SIZE
        buf, barrier = self.warp_bufs[warp], self.sync.warps[warp]
        buf[state.linear % WARP_SIZE] = value
        self.sync.wait(barrier, state.linear)
        snapshot = list(buf)
        self.sync.wait(barrier, state.linear)
        return snapshot

    def shuffle(self, value: Any, source: Callable[[int], int], frame) -> Any:
        if not self.lockstep:
            raise _NeedsLockstep()
        site = self._site(frame)
        state = self.state()
        ckey = (site, *_SHUFFLE_KEY)
        occ = state.counts.get(ckey, 0)
        state.counts[ckey] = occ + 1
        self.shuffle_rows.append((self.block_linear, state.linear, site, occ))
        self._count_barrier()
        lane = state.linear % WARP_SIZE
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
            self._reset()
            self.lockstep = True
            return self._run_once()

    def _run_once(self) -> Trace:
        gx, gy, gz = self.grid
        n_blocks = gx * gy * gz
        order = [(bx, by, bz) for bz in range(gz) for by in range(gy) for bx in range(gx)]
        bar = None
        start = time.perf_counter()
        self.thread_syncs = np.zeros((n_blocks, math.prod(self.block)), dtype=np.int64)
        for done, (bx, by, bz) in enumerate(order):
            self.block_idx = _Dim3(bx, by, bz)
            self.block_linear = bx + by * gx + bz * gx * gy
            self.shared_by_call = {}
            if self.lockstep:
                states = self._run_block_threads()
            else:
                states = self._thread_states()
                for state in states:
                    self.local.state = state
                    self.body(*self.args)
            self.thread_syncs[self.block_linear] = [state.epoch for state in states]
            self._count_work()            # exact here: no thread of the block runs
            if done == 0 and n_blocks > 1:
                # display only: whether a bar is shown never changes the trace or a verdict
                if (time.perf_counter() - start) * n_blocks > PROGRESS_AFTER_S:
                    bar = tqdm(total=n_blocks, initial=1, desc="tracing blocks",
                               leave=False)
            elif bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return self._trace()

    def _trace(self) -> Trace:
        """The trace in canonical order: sites by source position, local arrays by call
        site, rows by (block, thread) in each thread's program order. Lockstep threads
        append rows and meet new sites in whatever order the OS runs them; this order
        does not depend on it (a thread's own rows are appended in its program order)."""
        order = sorted(range(len(self.site_keys)), key=lambda k: _site_order(self.site_keys[k]))
        site_map = np.empty(len(order), dtype=np.int64)
        site_map[order] = np.arange(len(order))
        local_sites = {array_id: key for key, array_id in self.local_ids.items()}
        keep = [k for k in range(len(self.arrays)) if k not in local_sites]
        keep += sorted(local_sites, key=lambda k: _site_order(local_sites[k]))
        array_map = np.empty(len(keep), dtype=np.int64)
        array_map[keep] = np.arange(len(keep))
        # constant-indexed local arrays of the body live in registers if they all fit
        regs = [k for k, (code, line) in local_sites.items()
                if code is self.body.__code__ and line in self.register_lines]
        words = sum(ceil_div(math.prod(self.arrays[k].shape) * self.arrays[k].itemsize, 4)
                    for k in regs)
        arrays = [replace(self.arrays[k], registers=True)
                  if k in regs and words <= _register_words() else self.arrays[k]
                  for k in keep]
        sites = [self.site_keys[k][1] for k in order]

        def table(rows: list[tuple], names: tuple[str, ...]) -> dict[str, np.ndarray]:
            data = np.array(rows, dtype=np.int64).reshape(-1, len(names))
            data = data[np.lexsort((data[:, 1], data[:, 0]))]   # stable: program order kept
            cols = {name: data[:, k].copy() for k, name in enumerate(names)}
            if cols["site"].size:
                cols["site"] = site_map[cols["site"]]
            if "array" in cols and cols["array"].size:
                cols["array"] = array_map[cols["array"]]
            return cols

        return Trace(self.grid, self.block, arrays, sites, table(self.rows, _COLUMNS),
                     len(self.shuffle_rows), self.syncs, self.syncwarps,
                     table(self.shuffle_rows, _SHUFFLE_COLUMNS), self.thread_syncs)

    def _run_block_threads(self) -> list[_ThreadState]:
        states = self._thread_states()
        n = len(states)
        self.sync = sync = _BlockSync(n, self.block_idx)
        self.warp_bufs = [[None] * WARP_SIZE for _ in range(len(sync.warps))]

        def target(state: _ThreadState) -> None:
            self.local.state = state
            try:
                self.body(*self.args)
            except _Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                sync.abort(exc)
            finally:
                sync.leave(state.linear)

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
        if sync.error is not None:
            raise sync.error
        return states


def run_traced(kernel_fn: Callable, griddim: Any, blockdim: Any, *args: Any,
               max_threads: int | None = MAX_THREADS,
               max_elements: int | None = MAX_ELEMENTS,
               max_accesses: int | None = MAX_ACCESSES,
               max_barrier_waits: int | None = MAX_BARRIER_WAITS,
               budget_s: float | None = None) -> Trace:
    """Run ``kernel_fn(cuda)`` on ``griddim`` x ``blockdim`` threads and return its trace.

    Array arguments (C-contiguous numpy arrays) are updated in place, as after a launch
    followed by a copy back to the host; scalars are passed through. Work budgets, never
    seconds: a launch of more than ``max_threads`` threads, or whose arrays hold more than
    ``max_elements`` elements, is refused before it runs, and one that records more than
    ``max_accesses`` memory accesses and shuffles or waits at barriers (syncthreads,
    syncwarp, shuffles) more than ``max_barrier_waits`` times (each count summed over
    threads) is stopped, each with a :class:`TraceLimitExceeded` (a ValueError) that names
    the size and the limit; None lifts a limit. ``budget_s`` (the old wall-clock budget) is
    accepted and ignored.
    """
    return _Executor(kernel_fn, griddim, blockdim, args, max_threads=max_threads,
                     max_elements=max_elements, max_accesses=max_accesses,
                     max_barrier_waits=max_barrier_waits, budget_s=budget_s).run()
