"""Decide each exercise's verdict where the learner's code cannot reach it.

For one notebook :func:`decide` starts the answer process (:mod:`labkit.grade.sandbox`) and,
for each exercise, sends it the exercise's slice (:mod:`labkit.grade.slices`). Then, in
this process:

* an answer whose cell text mentions a labkit implementation of itself (read here, from the
  notebook file), or that the answer process found to be one, fails;
* an answer whose cells altered labkit, numpy, torch or the standard library fails, with a
  note naming what was replaced and in which cell;
* otherwise the exercise's checker runs *here*, drawing its inputs from the grader's seed
  and computing the reference itself, with a :class:`Remote` answer: each call of the
  answer crosses to the answer process as plain data and its result comes back as plain
  data. The answer process never sees the seed, the reference or the verdict.

An exercise whose slice is the shipped learner notebook's own (its answer cells the stubs,
byte for byte, and no cell the learner added) is "missing" without starting anything.

Checkers in the old ``(answer)`` form run whole in the answer process; their verdict is
taken from there and marked as such (``trusted`` false).
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from labkit.check import core, handles, plain, refuse
from labkit.grade import limits, sandbox
from labkit.grade.generate import learner_version
from labkit.grade.slices import ADDED, ANSWER, Slice, build_slices

_REPLAY_LOCK = threading.Lock()


@dataclass
class ExerciseResult:
    exercise: str
    status: str
    message: str
    trusted: bool = True             # decided in the grader's process
    notes: list[str] = field(default_factory=list)
    traceback: str = ""              # the first error in the learner's cells, if any
    failed_cells: list[str] = field(default_factory=list)
    seconds: float = 0.0
    hint: dict | None = None         # what the answer process's own run of the check said


class AnswerEnded(Exception):
    """The answer process ended (or was killed) before it replied."""


class AnswerProcess:
    """The sandbox for one notebook: started once, one request per exercise."""

    def __init__(self, workdir: Path, env: dict | None = None):
        self.workdir = Path(workdir)
        self.env = dict(os.environ if env is None else env)
        self.env.pop(core.GRADE_ENV, None)
        self.env.pop(core.LOG_ENV, None)
        self.env["MPLBACKEND"] = "Agg"
        self.env.setdefault("LABKIT_PROGRESS", str(self.workdir / "progress.json"))
        self.proc: subprocess.Popen | None = None
        self.counter = 0
        self.final: dict | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labkit.grade.sandbox"], cwd=self.workdir, env=self.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)
        ready = sandbox.read_frame(self.proc.stdout)
        if not ready or not ready.get("ready"):
            self.close()
            raise RuntimeError(f"the answer process did not start: {ready}")

    def _send(self, payload: dict) -> None:
        try:
            self.proc.stdin.write(sandbox.frame(payload))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, AttributeError):
            raise AnswerEnded("the answer process could not be reached") from None

    def _until(self, want) -> dict:
        """Frames of the current request until one that ``want`` accepts (or the final)."""
        while True:
            reply = sandbox.read_frame(self.proc.stdout) if self.proc else None
            if reply is None:
                self.close()
                self.final = {"final": True, "status": "the answer process ended"}
                raise AnswerEnded("the answer process ended")
            if reply.get("request") != self.counter:
                continue                      # stale or forged: not this request's
            if reply.get("final"):
                self.final = reply
                raise AnswerEnded("the answer ended its process before replying")
            if want(reply):
                return reply

    def begin(self, request: dict) -> dict:
        """Send an exercise; its "ready" reply (cells run, answer found)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.counter += 1
        self.final = None
        self._send(dict(request, request=self.counter))
        return self._until(lambda r: r.get("stage") == "ready" or "crash" in r)

    def call(self, number: int, fn_key: str, args: tuple, kwargs: dict) -> dict:
        self._send({"request": self.counter, "call": number, "fn": fn_key,
                    "args": plain.encode([list(args), kwargs])})
        return self._until(lambda r: r.get("call") == number)

    def end(self) -> dict:
        """Tell the child it is done; its final frame (timeout, exit status)."""
        if self.final is None:
            try:
                self._send({"request": self.counter, "done": True})
                self._until(lambda r: False)
            except AnswerEnded:
                pass
        return self.final or {}

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.proc = None


class Remote(handles.Handle):
    """The answer, called across the process boundary (see the module docstring)."""

    def __init__(self, process: AnswerProcess):
        self.process, self.calls, self.altered = process, 0, []

    def _run(self, fn, args, kwargs):
        self.calls += 1
        try:
            plain.encode([list(args), kwargs])
        except plain.Unencodable as exc:
            raise CheckNotPlain(f"the check sends {exc} to the answer") from None
        reply = self.process.call(self.calls, handles.fn_key(fn), args, kwargs)
        self.altered += list(reply.get("altered") or [])
        if "crash" in reply:
            raise AnswerEnded(reply["crash"])
        if "mutated" in reply:
            new_args, new_kwargs = plain.decode(reply["mutated"])
            for old, new in zip(args, new_args):
                handles._apply_mutation(old, new)
            for k, v in new_kwargs.items():
                if k in kwargs:
                    handles._apply_mutation(kwargs[k], v)
        if "uses_labkit" in reply:
            raise handles.UsesLabkit(str(reply["uses_labkit"]))
        if "unencodable" in reply:
            raise plain.Unencodable(str(reply["unencodable"]))
        if "raised" in reply:
            handles._raise_recorded(reply["raised"])
        if "result" not in reply:
            raise AnswerEnded("a reply without a result")
        return plain.decode(reply["result"])


class CheckNotPlain(Exception):
    """A checker handed the answer something that is not plain data (a bug in the check)."""


def preload(sl: Slice) -> list[str]:
    """The top-level modules the slice's canonical cells import (imported before forking)."""
    from labkit.grade.slices import python_of  # deferred: nbformat

    out: list[str] = []
    for cell in sl.cells:
        if cell.kind != "canonical":
            continue
        try:
            tree = ast.parse(python_of(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.append(node.module)
    return list(dict.fromkeys(out))


def _first_error(cells: list[dict]) -> tuple[str, str, list[str]]:
    failed = [c for c in cells if not c.get("ok", True)]
    if not failed:
        return "", "", []
    first = failed[0]
    return first.get("error", ""), first.get("traceback", ""), [c["id"] for c in failed]


def _altered_message(altered: list[str]) -> str:
    shown = "; ".join(altered[:3])
    more = f" (and {len(altered) - 3} more)" if len(altered) > 3 else ""
    return f"labkit was altered: {shown}{more}"


def judge(sl: Slice, process: AnswerProcess, seed: int, timeout: float) -> ExerciseResult:
    """Send one exercise to the answer process and decide its verdict here."""
    ex = core.get(sl.exercise)
    request = {"exercise": ex.id, "answer": sl.answer, "timeout": timeout,
               "preload": preload(sl),
               "legacy": not ex.handles,
               "cells": [{"id": c.id, "source": c.source, "kind": c.kind} for c in sl.cells]}
    res = ExerciseResult(ex.id, core.ERROR, "")
    try:
        ready = process.begin(request)
    except AnswerEnded:
        ready = {}
    final = process.final
    res.seconds = float(ready.get("seconds", 0) or 0)
    error, tb, failed = _first_error(ready.get("cells", []))
    res.traceback, res.failed_cells = tb, failed
    mention = refuse.mentions(sl.learner_source, ex.refused())

    def ended() -> ExerciseResult:
        fin = process.end()
        if fin.get("timeout") and fin.get("spent") == limits.IDLE:
            res.status, res.message = core.ERROR, (
                f"the answer waited without working in the grader's answer process: after "
                f"{fin.get('elapsed', 0):.0f} s it had used {fin.get('used', 0):.1f} s of "
                f"CPU time (its time limit is {fin['timeout']:g} s of CPU time; a sleep, a "
                f"blocked read?)")
        elif fin.get("timeout"):
            res.status, res.message = core.ERROR, (
                f"the answer ran past the time limit of {fin['timeout']:g} s of CPU time in "
                f"the grader's answer process (an endless loop?)")
        else:
            res.status, res.message = core.ERROR, (
                "the answer process stopped before a verdict: the answer ended its process "
                "(os._exit, a signal, a crash)")
        return res

    if final is not None or not ready:
        return ended()
    if "crash" in ready:
        res.message = f"the answer process failed: {ready['crash']}"
        process.end()
        return res
    if mention:
        process.end()
        res.status = core.FAIL
        res.message = (f"your answer uses labkit's implementation ({mention}) in its cell: "
                       f"write your own.")
        return res
    if ready.get("altered"):
        process.end()
        res.status, res.message = core.FAIL, _altered_message(ready["altered"]) + (
            ". No verdict is given for it.")
        res.notes.append(_altered_message(ready["altered"]))
        return res
    if error and ("missing" in ready or "answer_error" in ready):
        process.end()
        res.status = core.ERROR
        res.message = f"your answer's cell {failed[0]} failed: {error}"
        return res
    for key, status, message in (
            ("labkit", core.FAIL, ready.get("labkit")),
            ("missing", core.MISSING, "not answered yet"),
            ("answer_error", core.ERROR, f"the answer could not be found: "
                                         f"{ready.get('answer_error')}")):
        if key in ready:
            process.end()
            res.status, res.message = status, message
            return res
    if not ex.handles:
        process.end()
        verdict = ready.get("verdict") or {}
        res.status = verdict.get("status", core.ERROR)
        res.message = verdict.get("message", "no verdict")
        res.trusted = False
        return res
    remote = Remote(process)
    with _REPLAY_LOCK:
        try:
            verdict = core.run_checker(ex, remote, core._reference_handle(ex, "live"),
                                       core.exercise_rng(ex.id, seed))
        except (AnswerEnded, CheckNotPlain) as exc:
            verdict = None
            if isinstance(exc, CheckNotPlain):
                res.message = f"internal: exercise {ex.id}'s check is not plain data ({exc})"
                process.end()
                return res
    if verdict is None or process.final is not None:
        return ended()
    process.end()
    if remote.altered:
        res.status = core.FAIL
        res.message = _altered_message(remote.altered) + ". No verdict is given for it."
        res.notes.append(_altered_message(remote.altered))
        return res
    res.status, res.message = verdict.status, verdict.message
    return res


def untouched(sl: Slice, stubs: dict[str, str]) -> ExerciseResult | None:
    """"missing" without running anything when the slice is the shipped notebook's own: its
    answer cells are the learner notebook's stubs to the byte and it holds no cell the
    learner added (a definition of the answer elsewhere is such a cell). Else None."""
    answers = [c for c in sl.cells if c.kind == ANSWER]
    if not answers or any(c.kind == ADDED for c in sl.cells):
        return None
    if any(stubs.get(c.id) != c.source for c in answers):
        return None
    return ExerciseResult(sl.exercise, core.MISSING, "not answered yet")


def decide(learner: nbformat.NotebookNode, solution: nbformat.NotebookNode,
           exercise_ids: list[str], *, seed: int, timeout: float = 120.0,
           workdir: Path | None = None) -> dict[str, ExerciseResult]:
    """Every exercise's verdict for one learner's notebook (see the module docstring)."""
    slices = build_slices(learner, solution, exercise_ids)
    stubs = {c.get("id"): c.source for c in learner_version(solution).cells
             if c.cell_type == "code"}
    own = workdir is None
    tmp = Path(tempfile.mkdtemp(prefix="labkit-answers-")) if own else Path(workdir)
    process = AnswerProcess(tmp)
    results: dict[str, ExerciseResult] = {}
    try:
        for ex_id, sl in slices.items():
            results[ex_id] = untouched(sl, stubs) or judge(sl, process, seed, timeout)
    finally:
        process.close()
        if own:
            shutil.rmtree(tmp, ignore_errors=True)
    return results
