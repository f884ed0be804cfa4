"""Chapter 11's checkpoint lab, run for real: a learner's atomic save under a simulated kill,
and a learner's resume after a real SIGKILL under torchrun.

:func:`save_probe` calls a ``save_checkpoint(state, path)`` three times while
:class:`WatchedIO` watches the file system calls it makes: a clean save, a save *killed*
after ``k`` bytes (every write through ``open``/``io.open``/``os.fdopen``, ``os.write`` and
``torch.save`` counts; the write that crosses ``k`` writes its first bytes and raises
:class:`SimulatedKill`, a ``BaseException`` as a real kill cannot be caught), and a save
after that crash. It reports, as plain data, what ``path`` holds after each, which file was
renamed onto ``path`` and from where, whether that file was fsynced after its last byte
(``os.fsync``/``os.fdatasync`` are wrapped: the file's size at the fsync is compared with
its size at the rename, so a buffer flushed only at close is seen), and whether the
directory was fsynced after the rename. The functions are also replaced under the names
the learner's module imported them as (``from os import fsync``).

:func:`resume_probe` runs chapter 11's training in this process with a learner's
``Checkpoint`` class: a first run "killed" after step ``kill_at`` (its objects dropped), a
fresh model and optimizer resumed from the checkpoint, the rest of the run; it returns the
final parameters (compared with :func:`labkit.cluster.ft_train.reference_params`) and what
the resume restored. :func:`checkpoint_lab_run` then does it for real: two gloo workers
under ``torchrun --max-restarts 1``, rank 1 SIGKILLed after ``kill_at``.
"""
from __future__ import annotations

import builtins
import io
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from labkit import validate as v
from labkit.cluster import ft_train as ft


def _warm_up() -> None:
    """Build a torch optimizer once, when this module is imported: the first one imports
    ``torch._dynamo`` (some 800 modules, about a second). A check imports this module
    before it runs the answer (the grader's answer process resolves the derive function
    first), so that import does not happen under the check's watch of the answer's calls
    (:class:`labkit.check.refuse.watch`, a profile hook on every call), where it takes
    minutes."""
    import torch  # deferred: torch
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)


_warm_up()


SAVE_PIECE = 4096     # torch.save, watched, writes its bytes in pieces of this size


class SimulatedKill(BaseException):
    """The process 'died' in the middle of a write (raised by :class:`WatchedIO`)."""


class _File:
    """A file opened for writing whose ``write`` counts against the kill budget."""

    def __init__(self, real, watch: "WatchedIO"):
        self._real, self._watch = real, watch

    def write(self, data):
        view = memoryview(data).cast("B") if not isinstance(data, str) else data
        keep = self._watch._budget(len(view))
        if keep < len(view):
            self._real.write(view[:keep])
            self._real.flush()
            raise SimulatedKill(f"killed after {self._watch.kill_after} bytes")
        return self._real.write(data)

    def __enter__(self):
        self._real.__enter__()
        return self

    def __exit__(self, *exc):
        return self._real.__exit__(*exc)

    def __iter__(self):
        return iter(self._real)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _inode(st) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class WatchedIO:
    """Within ``with WatchedIO(kill_after=k, aliases=fn.__globals__) as w:``, file writes
    count against a budget of ``k`` bytes (None: unlimited) and ``w.events`` records, in
    order, every fsync ``("fsync", (dev, inode), is a directory, size)`` and rename
    ``("rename", source, target, (dev, inode), size)``."""

    def __init__(self, kill_after: int | None = None, aliases: dict | None = None):
        self.kill_after, self.written = kill_after, 0
        self.events: list[tuple] = []
        self.aliases = aliases if aliases is not None else {}

    def _budget(self, n: int) -> int:
        """How many of ``n`` bytes may still be written (fewer: the kill comes now)."""
        keep = n if self.kill_after is None else max(0, min(n, self.kill_after - self.written))
        self.written += keep
        return keep

    def __enter__(self) -> "WatchedIO":
        import torch  # deferred: torch
        import torch.serialization  # deferred: torch
        real = {"open": io.open, "write": os.write, "fsync": os.fsync,
                "fdatasync": getattr(os, "fdatasync", None), "replace": os.replace,
                "rename": os.rename, "save": torch.save}
        self._real = real

        def open_(file, mode="r", *args, **kwargs):
            fh = real["open"](file, mode, *args, **kwargs)
            return _File(fh, self) if any(c in mode for c in "wax+") else fh

        def write(fd, data):
            view = memoryview(data).cast("B")
            keep = self._budget(len(view))
            if keep < len(view):
                real["write"](fd, view[:keep])
                raise SimulatedKill(f"killed after {self.kill_after} bytes")
            return real["write"](fd, data)

        def syncer(fn):
            def sync(fd):
                st = os.fstat(fd)
                self.events.append(("fsync", _inode(st), stat.S_ISDIR(st.st_mode),
                                    st.st_size))
                return fn(fd)
            return sync

        def mover(fn):
            def move(src, dst, *args, **kwargs):
                try:
                    st = os.stat(src)
                    entry = ("rename", os.fspath(src), os.fspath(dst), _inode(st), st.st_size)
                except (OSError, TypeError):
                    entry = ("rename", str(src), str(dst), None, None)
                out = fn(src, dst, *args, **kwargs)
                self.events.append(entry)
                return out
            return move

        def save(obj, f, *args, **kwargs):
            buf = io.BytesIO()
            real["save"](obj, buf, *args, **kwargs)
            data = buf.getvalue()
            pieces = [data[k:k + SAVE_PIECE] for k in range(0, len(data), SAVE_PIECE)]
            if isinstance(f, (str, os.PathLike)):
                with open_(f, "wb") as fh:
                    for piece in pieces:
                        fh.write(piece)
            else:
                for piece in pieces:     # as torch's writer does: records, not one block
                    f.write(piece)
        fake = {"open": open_, "write": write, "fsync": syncer(real["fsync"]),
                "fdatasync": syncer(real["fdatasync"]) if real["fdatasync"] else None,
                "replace": mover(real["replace"]), "rename": mover(real["rename"]),
                "save": save}
        self._targets = [(builtins, "open"), (io, "open"), (os, "write"), (os, "fsync"),
                         (os, "replace"), (os, "rename"), (torch, "save"),
                         (torch.serialization, "save")]
        if real["fdatasync"]:
            self._targets.append((os, "fdatasync"))
        self._saved = [(obj, attr, getattr(obj, attr)) for obj, attr in self._targets]
        for obj, attr in self._targets:
            setattr(obj, attr, fake[attr])
        by_id = {id(real[k]): fake[k] for k in real if real[k] is not None}
        self._alias_saved = [(k, v) for k, v in self.aliases.items() if id(v) in by_id]
        for k, v in self._alias_saved:
            self.aliases[k] = by_id[id(v)]
        return self

    def __exit__(self, *exc) -> None:
        for obj, attr, value in self._saved:
            setattr(obj, attr, value)
        for k, v in self._alias_saved:
            self.aliases[k] = v


def _probe_state(seed: int, size: int) -> dict:
    import torch  # deferred: torch
    g = torch.Generator().manual_seed(seed)
    return {"model": {"weight": torch.randn(size, size, generator=g),
                      "bias": torch.randn(size, generator=g)},
            "step": int(seed % 1000), "rng": torch.Generator().manual_seed(seed).get_state()}


def _equal_state(a: Any, b: Any) -> bool:
    import torch  # deferred: torch
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            _equal_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return type(a) is type(b) and a == b


def _holds(path: Path, states: dict) -> str:
    """What ``path`` holds: "missing", "torn" (torch.load fails) or the name of the state."""
    import torch  # deferred: torch
    if not path.exists():
        return "missing"
    try:
        got = torch.load(path, weights_only=True)
    except Exception:
        return "torn"
    return next((name for name, s in states.items() if _equal_state(got, s)), "other")


def _globals_of(fn: Callable) -> dict:
    target = getattr(fn, "__func__", fn)
    return getattr(target, "__globals__", None) or {}


def _durability(w: WatchedIO, path: Path) -> dict:
    """From one clean save's watch: how the new file reached ``path`` — renamed onto it from
    the same directory, fsynced before the rename with all its bytes (its size then equals
    its size at the rename), the directory fsynced after the rename."""
    target = os.path.abspath(path)
    onto = [k for k, e in enumerate(w.events) if e[0] == "rename" and
            os.path.abspath(e[2]) == target]
    out = {"renamed": bool(onto), "same_dir": False, "fsynced": False, "flushed": False,
           "dir_fsynced": False}
    if not onto:
        return out
    at = onto[-1]
    _, src, _, inode, size = w.events[at]
    out["same_dir"] = os.path.dirname(os.path.abspath(src)) == os.path.dirname(target)
    syncs = [e for e in w.events[:at] if e[0] == "fsync" and e[1] == inode and not e[2]]
    out["fsynced"] = bool(syncs)
    out["flushed"] = bool(syncs) and syncs[-1][3] == size
    directory = _inode(os.stat(path.parent))
    out["dir_fsynced"] = any(e[0] == "fsync" and e[1] == directory and e[2]
                             for e in w.events[at + 1:])
    return out


def save_probe(save: Callable, seed: int = 0, size: int = 48) -> dict:
    """Lab 11.7's derive function: run the learner's ``save(state, path)`` (see the module
    docstring) and return what happened, as plain data."""
    import torch  # deferred: torch
    first, second, third = (_probe_state(seed + k, size) for k in range(3))
    buf = io.BytesIO()
    torch.save(second, buf)
    total = len(buf.getvalue())
    kill_after = int(total * (0.3 + 0.4 * (seed % 97) / 97))
    out: dict = {"bytes": total, "kill_after": kill_after, "error": None}
    aliases = _globals_of(save)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        states = {"first": first, "second": second, "third": third}
        try:
            with WatchedIO(aliases=aliases) as w:
                save(first, str(path))
        except NotImplementedError:
            raise
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
            return out
        out["after_first"] = _holds(path, states)
        out.update(_durability(w, path))
        killed = False
        try:
            with WatchedIO(kill_after=kill_after, aliases=aliases) as w2:
                save(second, str(path))
        except SimulatedKill:
            killed = True
        except Exception as exc:
            out["error"] = f"{type(exc).__name__} in the killed save: {exc}"
            return out
        out["killed"] = killed
        out["written_before_kill"] = w2.written
        out["after_kill"] = _holds(path, states)
        try:
            with WatchedIO(aliases=aliases):
                save(third, str(path))
            out["after_recovery"] = _holds(path, states)
        except Exception as exc:
            out["after_recovery"] = f"{type(exc).__name__}: {exc}"
    return out


def _snapshot(model, opt) -> dict:
    import torch  # deferred: torch
    return {"params": [p.detach().clone() for p in model.parameters()],
            "momentum": [opt.state[p]["momentum_buffer"].clone()
                         if p in opt.state and "momentum_buffer" in opt.state[p] else None
                         for p in model.parameters()],
            "rng": torch.get_rng_state()}


def _same(a, b) -> bool:
    import torch  # deferred: torch
    if a is None or b is None:
        return a is b
    return torch.equal(a, b)


def resume_probe(impl: type, cfg: dict, kill_at: int) -> dict:
    """Lab 11.8's first derive function: chapter 11's training, in this process, with the
    learner's ``impl(path)`` (``.save(model, optimizer, step)``, ``.resume(model,
    optimizer) -> step``): killed after ``kill_at`` and resumed by a fresh model and
    optimizer. Returns the final parameters and what the resume restored."""
    import torch  # deferred: torch
    cfg = ft.FTConfig(**cfg).validate(1)
    if not isinstance(impl, type):
        return {"not_class": type(impl).__name__}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    saved: dict = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, torch.random.fork_rng(devices=[]):
            path = Path(tmp) / "ckpt.pt"
            model, opt, data = ft._setup(cfg)
            ck = impl(path)
            before = [p.detach().clone() for p in model.parameters()]
            fresh = ck.resume(model, opt)
            untouched = all(torch.equal(a, p) for a, p in zip(before, model.parameters()))

            def after(done: int) -> None:
                if done % cfg.ckpt_every == 0:
                    ck.save(model, opt, done)
                    saved["step"], saved["state"] = done, _snapshot(model, opt)
            ft.train_steps(cfg, model, model, opt, data, 0, kill_at, on_step=after)
            del model, opt, ck                       # the kill: nothing survives but the file
            model, opt, data = ft._setup(cfg)        # a new process seeds and builds again
            start = impl(path).resume(model, opt)
            got = _snapshot(model, opt)
            want = saved["state"]
            restored = {
                "model": all(_same(a, b) for a, b in zip(got["params"], want["params"])),
                "optimizer": all(_same(a, b) for a, b in zip(got["momentum"], want["momentum"])),
                "rng": bool(torch.equal(got["rng"], want["rng"]))}
            ck = impl(path)

            def after2(done: int) -> None:
                if done % cfg.ckpt_every == 0:
                    ck.save(model, opt, done)
            if not isinstance(start, int) or not 0 <= start <= cfg.steps:
                return {"fresh": fresh, "untouched": untouched, "start": repr(start),
                        "saved": saved["step"], **restored}
            ft.train_steps(cfg, model, model, opt, data, start, cfg.steps, on_step=after2)
            params = {k: t.detach().numpy().copy() for k, t in model.state_dict().items()}
            return {"fresh": fresh if isinstance(fresh, int) else repr(fresh),
                    "untouched": untouched, "start": start, "saved": saved["step"],
                    "params": params, **restored}
    finally:
        torch.set_num_threads(threads)


LAST_FT_RUN: list = []     # the last lab 11.8 torchrun run in this kernel: (FTRun, cfg, kill)


def checkpoint_lab_run(impl: type, cfg: dict, kill_at: int) -> dict:
    """Lab 11.8's second derive function: ``torchrun --nproc-per-node 2 --max-restarts 1``
    over gloo with the learner's class in every worker, rank 1 SIGKILLed after step
    ``kill_at`` in the first attempt. Returns the final parameters and the attempts."""
    cfg = ft.FTConfig(**cfg)
    try:
        run = ft.run_torchrun(cfg, world=2, kill_at=kill_at, kill_rank=1, max_restarts=1,
                              impl=impl, timeout_s=120.0)
    except RuntimeError as exc:
        return {"error": str(exc)[-2500:]}
    LAST_FT_RUN[:] = [(run, cfg, kill_at)]
    return {"params": run.params, "restarts": run.restarts, "resumed_from": run.resumed_from,
            "attempts": [[a["attempt"], a["rank"], a["resumed_from"]] for a in run.attempts],
            "wall_s": run.wall_s}


# ---- the chapter's demonstrations ---------------------------------------------------------

def save_in_place(state, path) -> None:
    """The obvious save, for contrast: ``torch.save`` straight into the checkpoint."""
    import torch  # deferred: torch
    torch.save(state, path)


def torn_outcome(save: Callable, fraction: float = 0.5) -> str:
    """What ``torch.load(path)`` does after ``save`` of a new state is killed after
    ``fraction`` of its bytes, ``path`` holding an older checkpoint: "loads the old
    checkpoint", "loads the new checkpoint" or "raises an error" (also for no file)."""
    return _kill_mid_save(save, fraction)[0]


def kill_mid_save(save: Callable, fraction: float = 0.5) -> str:
    """:func:`torn_outcome` in words, with the error torch.load raises."""
    outcome, detail = _kill_mid_save(save, fraction)
    return outcome + (f" ({detail})" if detail else "")


def _kill_mid_save(save: Callable, fraction: float) -> tuple[str, str]:
    import torch  # deferred: torch
    fraction = v.fraction("fraction", fraction)
    old, new = _probe_state(1, 48), _probe_state(2, 48)
    buf = io.BytesIO()
    torch.save(new, buf)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt.pt"
        save_in_place(old, path)
        try:
            with WatchedIO(kill_after=int(fraction * len(buf.getvalue())),
                           aliases=_globals_of(save)):
                save(new, str(path))
        except SimulatedKill:
            pass
        try:
            got = torch.load(path, weights_only=True)
        except Exception as exc:
            return "raises an error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
        if _equal_state(got, old):
            return "loads the old checkpoint", "intact"
        return ("loads the new checkpoint" if _equal_state(got, new) else "raises an error",
                "")


@dataclass
class RestartRun:
    """A lab 11.8 torchrun run: the run, its configuration, the kill step and whether its
    final weights equal the uninterrupted run's bit for bit."""
    run: "ft.FTRun"
    cfg: "ft.FTConfig"
    kill_at: int
    identical: bool


def restart_run(impl: type, cfg: "ft.FTConfig | None" = None, kill_at: int = 10
                ) -> RestartRun:
    """The check's last torchrun run in this kernel (:data:`LAST_FT_RUN`), or, when the
    check did not launch one, the same job now: 2 gloo workers, rank 1 SIGKILLed after
    ``kill_at``, ``impl`` checkpointing."""
    if LAST_FT_RUN:
        run, cfg, kill_at = LAST_FT_RUN[0]
    else:
        cfg = cfg or ft.FTConfig(steps=12, ckpt_every=4)
        run = ft.run_torchrun(cfg, world=2, kill_at=kill_at, kill_rank=1, max_restarts=1,
                              impl=impl)
    return RestartRun(run, cfg, kill_at, ft.identical(run.params, ft.reference_params(cfg, 2)))
