"""The answer process: runs one exercise's slice and answers the grader's calls.

``python -m labkit.grade.sandbox`` is started by the grader (:mod:`labkit.grade.verdicts`)
once per notebook. It imports numpy, torch, IPython and labkit's checks first (so a fork is
cheap), then reads requests — frames on stdin — and for each forks a child that:

1. points stdout/stderr at a buffer (nothing the learner prints reaches the protocol);
2. runs the slice's cells (:mod:`labkit.grade.slices`) in a fresh IPython shell, taking a
   snapshot of labkit's, numpy's, torch's and the standard library's functions before each
   cell the learner wrote and comparing after it: a replaced function, code object or
   class attribute is reported with the cell that did it;
3. evaluates the check cell's answer expression, says whether it is labkit's own
   implementation, and replies "ready";
4. then answers calls: the grader's checker, running in the grader's process, sends each
   call of the answer (its arguments as plain data) and gets back the result, the
   exception, or the news that the answer called labkit's implementation — until "done".

The child never sees the grader's seed, the reference or the verdict: it only computes
what the answer computes for the inputs it is sent. The parent kills a child that runs
past its time limit (SIGKILL cannot be caught), and after every child writes a "final"
frame, so the grader always knows where a request ends.
"""
from __future__ import annotations

import importlib
import io
import json
import os
import signal
import sys
import time
import traceback
import types
import warnings
from typing import Any

import numpy

import labkit.check.core
from labkit.check import core, handles, plain, refuse
from labkit.grade import limits
from labkit.grade.processes import installed_roots

WATCHED_PREFIXES = ("labkit",)
WATCHED_MODULES = ("builtins", "numpy", "numpy.linalg", "numpy.random", "math", "os",
                   "os.path", "sys", "json", "random", "functools", "inspect", "types",
                   "gc", "threading", "time", "io", "copy", "operator", "itertools",
                   "importlib", "torch", "torch.nn", "torch.nn.functional",
                   "torch.distributed", "torch.autograd", "numba", "numba.cuda")
FRAME = b"LKR "
OUTPUT_LIMIT = 4000


def frame(payload: dict) -> bytes:
    body = json.dumps(payload, allow_nan=False, default=str).encode()
    return FRAME + str(len(body)).encode() + b"\n" + body


def read_frame(stream) -> dict | None:
    """One frame from a binary stream, or None at its end (or on garbage)."""
    head = stream.readline()
    if not head:
        return None
    if not head.startswith(FRAME):
        return {"garbage": head[:200].decode("utf-8", "replace")}
    try:
        size = int(head[len(FRAME):].strip())
    except ValueError:
        return {"garbage": head[:200].decode("utf-8", "replace")}
    body = stream.read(size)
    try:
        return json.loads(body)
    except ValueError:
        return {"garbage": body[:200].decode("utf-8", "replace")}


# ---- the integrity snapshot -------------------------------------------------------------

def _watched() -> list[tuple[str, types.ModuleType]]:
    mods = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not isinstance(mod, types.ModuleType):
            continue
        if name in WATCHED_MODULES or name.split(".")[0] in WATCHED_PREFIXES:
            mods.append((name, mod))
    return mods


def snapshot() -> dict[str, int]:
    """id() of every attribute of the watched modules, of each function's code, defaults
    and closure contents, and of each labkit class's attributes. Quiet: looking at a
    deprecated attribute (``torch.distributed.reduce_op``) warns, and the warning would land
    in the learner's cell output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _snapshot()


def _snapshot() -> dict[str, int]:
    out: dict[str, int] = {}
    for name, mod in _watched():
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        labkit = name.split(".")[0] == "labkit"
        for attr, value in items:
            key = f"{name}.{attr}"
            out[key] = id(value)
            if isinstance(value, types.FunctionType):
                out[key + ".__code__"] = id(value.__code__)
                out[key + ".__defaults__"] = id(value.__defaults__)
                out[key + ".__kwdefaults__"] = id(value.__kwdefaults__)
                for k, cell in enumerate(value.__closure__ or ()):
                    try:
                        out[f"{key}.__closure__[{k}]"] = id(cell.cell_contents)
                    except ValueError:
                        pass
            elif labkit and isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    out[f"{key}.{cattr}"] = id(cvalue)
                    if isinstance(cvalue, types.FunctionType):
                        out[f"{key}.{cattr}.__code__"] = id(cvalue.__code__)
    return out


def _bound(key: str):
    mod_name, _, attr = key.rpartition(".")
    mod = sys.modules.get(mod_name)
    return getattr(mod, attr, None) if mod is not None else None


def learner_made(value) -> bool:
    """Whether an object was made by code outside any installed module: a function or
    class defined in a notebook cell (or by exec), a lambda, a value that is not a
    function at all where one stood."""
    code = getattr(value, "__code__", None)
    if code is not None:
        name = code.co_filename
        if name.startswith("<"):
            return True
        path = os.path.realpath(name)
        return not any(path.startswith(root) for root in installed_roots())
    module = getattr(value, "__module__", None)
    if module in ("__main__", None) and not isinstance(value, (types.BuiltinFunctionType,
                                                                types.ModuleType)):
        return True
    return False


def altered(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """What changed: 'labkit.check.core.evaluate was replaced', '... was removed'. Outside
    labkit only what code of a notebook cell made counts (libraries patch each other on
    import: torch.package replaces ``inspect.getfile``, torch.compile ``torch.manual_seed``)."""
    if before == after:
        return []
    notes = []
    for key, ident in before.items():
        if key not in after:
            if "." in key and not key.endswith(("__code__", "__defaults__", "__kwdefaults__")):
                notes.append(f"{key} was removed")
        elif after[key] != ident:
            if not key.startswith("labkit.") and not key.endswith(
                    ("__code__", "__defaults__", "__kwdefaults__")) \
                    and not learner_made(_bound(key)):
                continue
            notes.append(f"{key} was replaced")
    return notes


_IGNORED = ("__builtins__", "__loader__", "__spec__", "_ih", "_oh", "_dh", "Out", "In",
            "_", "__", "___", "exit", "quit", "get_ipython", "sys.last_", "__warningregistry__",
            "sys.ps", "sys.displayhook", "sys.excepthook", "sys.stdout", "sys.stderr",
            "sys.stdin", "sys.settrace", "sys.setprofile", "builtins._", "builtins.display",
            "builtins.input", "builtins.raw_input", "builtins.breakpoint",
            "os.environ", "sys.path_importer_cache", "sys.modules", "sys.meta_path",
            "sys.path", "sys.argv", "random._inst")


def relevant(notes: list[str]) -> list[str]:
    keep = []
    for n in notes:
        key = n.rsplit(" was ", 1)[0]
        last = key.split(".")[-1]
        if last in _IGNORED or any(key.startswith(p) or f".{p}" in key for p in _IGNORED):
            continue
        if last.startswith("_") and not last.startswith("__") and ".__" not in key:
            continue      # private caches (numpy's, labkit's lazy imports) change legitimately
        keep.append(n)
    return keep


# ---- one exercise -----------------------------------------------------------------------

def _trim(text: str) -> str:
    return text if len(text) <= OUTPUT_LIMIT else "…" + text[-OUTPUT_LIMIT:]


def _learner_traceback(etype, value, tb) -> str:
    """The traceback's frames in the learner's cells (labkit's and the shell's folded)."""
    frames = [f for f in traceback.extract_tb(tb)
              if "labkit" not in f.filename and "IPython" not in f.filename
              and "site-packages" not in f.filename]
    lines = traceback.format_list(frames[-6:])
    return "".join(lines) + "".join(traceback.format_exception_only(etype, value))


def read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame_fd(fd: int) -> dict | None:
    """One frame from a raw file descriptor (unbuffered: a forked child shares it)."""
    head = b""
    while not head.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return None
        head += byte
        if len(head) > 64:
            return None
    if not head.startswith(FRAME):
        return None
    try:
        size = int(head[len(FRAME):].strip())
    except ValueError:
        return None
    try:
        return json.loads(read_exact(fd, size))
    except ValueError:
        return None


def prepare(request: dict, shell) -> tuple[dict, Any]:
    """Run the slice's cells and find the answer: the "ready" reply and the answer."""
    result: dict[str, Any] = {"exercise": request["exercise"], "stage": "ready",
                              "cells": [], "altered": []}
    ns = shell.user_ns
    for cell in request["cells"]:
        learner = cell["kind"] != "canonical"
        before = snapshot() if learner else None
        info = shell.run_cell(cell["source"], store_history=False, silent=True)
        entry = {"id": cell["id"], "kind": cell["kind"], "ok": info.success}
        err = info.error_in_exec or info.error_before_exec
        if err is not None:
            entry["error"] = f"{type(err).__name__}: {err}"
            entry["traceback"] = _trim(_learner_traceback(type(err), err, err.__traceback__))
        result["cells"].append(entry)
        if learner:
            for note in relevant(altered(before, snapshot())):
                result["altered"].append(f"{note} in {cell['id']}")
    try:
        answer = eval(request["answer"], ns)            # noqa: S307 - a check cell's argument
    except Exception as exc:
        answer = None
        result["answer_error"] = f"{type(exc).__name__}: {exc}"
    ex = core.get(request["exercise"])
    if core.is_missing(answer):
        result["missing"] = True
        return result, None
    name = refuse.implementation(answer, ex.refused())
    if name:
        result["labkit"] = core.labkit_message(name, ex, answer)
        return result, None
    if request.get("legacy"):
        # a checker of the old (answer) form runs here, whole; its verdict is marked so
        verdict = core.run_checker(ex, answer, None, core.exercise_rng(ex.id, 0))
        result["verdict"] = {"status": verdict.status, "message": verdict.message}
        return result, None
    return result, answer


def answer_call(message: dict, answer: Any, refused,
                before: dict[str, int] | None = None) -> tuple[dict, dict[str, int]]:
    """Run one call of the answer the grader asked for: the reply (plain data) and the
    snapshot taken after it. ``before`` is the snapshot after the previous call (nothing of
    the grader's runs in between, so a change made between calls, by a thread the answer
    left running, is seen too); None takes one now. One snapshot a call, not two: a
    snapshot of the watched modules costs about 20 ms, and an allocator check makes
    hundreds of calls."""
    reply: dict[str, Any] = {"call": message.get("call")}
    fn = None
    key = message.get("fn")
    if key and key != "call":
        if not key.startswith("labkit."):
            return dict(reply, raised={"type": "ValueError", "base": "ValueError",
                                       "message": f"derive with a non-labkit function {key}"})
        fn = handles.resolve_key(key)
    args, kwargs = plain.decode(message.get("args", [[], {}]))
    live = handles.Live(answer, refused)
    before = snapshot() if before is None else before
    try:
        out = live._invoke(fn, tuple(args), dict(kwargs))
        reply["result"] = plain.encode(out)
    except handles.UsesLabkit as exc:
        reply["uses_labkit"] = str(exc)
    except plain.Unencodable as exc:
        reply["unencodable"] = str(exc)
    except Exception as exc:
        reply["raised"] = handles._exception_record(exc)
    try:
        reply["mutated"] = plain.encode([list(args), kwargs])
    except plain.Unencodable:
        pass
    after = snapshot()
    reply["altered"] = [f"{n} while the check ran the answer"
                        for n in relevant(altered(before, after))]
    return reply, after


def _child(request: dict, shell, in_fd: int, out_fd: int) -> None:
    os.setpgid(0, 0)
    buffer = io.StringIO()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = buffer
    req = request.get("request")

    def send(payload: dict) -> None:
        payload["request"] = req
        payload["output"] = _trim(buffer.getvalue())
        try:
            data = frame(payload)
        except (TypeError, ValueError) as exc:
            data = frame({"request": req, "crash": f"a reply could not be sent: {exc}"})
        os.write(out_fd, data)

    start = time.perf_counter()
    try:
        ready, answer = prepare(request, shell)
    except BaseException as exc:            # noqa: BLE001 - report, whatever it was
        ready, answer = {"crash": f"{type(exc).__name__}: {exc}"}, None
    ready["seconds"] = time.perf_counter() - start
    send(ready)
    if answer is not None:
        refused = core.get(request["exercise"]).refused()
        last = None
        while True:
            message = read_frame_fd(in_fd)
            if message is None or message.get("done") or message.get("request") != req:
                break
            try:
                reply, last = answer_call(message, answer, refused, last)
                send(reply)
            except BaseException as exc:   # noqa: BLE001
                last = None
                send({"call": message.get("call"), "crash": f"{type(exc).__name__}: {exc}"})
    os._exit(0)


def serve() -> None:
    """The zygote loop: one request frame on stdin forks one child; after the child ends,
    one "final" frame on stdout."""
    out_fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.environ.setdefault("MPLBACKEND", "Agg")

    from IPython.core.interactiveshell import InteractiveShell  # deferred: IPython

    shell = InteractiveShell.instance()
    # figures are never shown here: `%matplotlib inline` (which needs a kernel) does nothing
    shell.register_magic_function(lambda line="": None, "line", "matplotlib")
    os.write(out_fd, frame({"ready": True}))
    while True:
        request = read_frame_fd(0)
        if request is None:
            break
        if "exercise" not in request:
            continue
        # what the notebook's cells import, and the exercise's checks, imported once here
        # so that each child starts with them (a fork shares them)
        for module in [*request.get("preload", []), "labkit.check.core"]:
            try:
                importlib.import_module(module)
            except Exception:               # noqa: BLE001 - the child will report it
                pass
        try:
            labkit.check.core.get(request["exercise"])
        except Exception:                   # noqa: BLE001
            pass
        limit = float(request.get("timeout", 120))
        pid = os.fork()
        if pid == 0:
            _child(request, shell, 0, out_fd)
        budget = limits.Budget(pid, limit)
        status, spent, polls = None, None, 0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            polls += 1
            if polls % 20 == 0 and (spent := budget.spent()):   # every 0.1 s
                for kill in (lambda: os.killpg(pid, signal.SIGKILL),
                             lambda: os.kill(pid, signal.SIGKILL)):
                    try:
                        kill()
                    except ProcessLookupError:
                        pass
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        final = {"request": request.get("request"), "final": True, "status": status}
        if spent:
            final.update(timeout=limit, spent=spent, elapsed=budget.elapsed, used=budget.used)
        os.write(out_fd, frame(final))


if __name__ == "__main__":
    serve()
