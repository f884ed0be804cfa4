"""The threat model of CONTRIBUTING, tried: learners who write Python in their notebook to be
graded pass without a right answer (issue 21).

Each submission below answers chapter 00's exercise wrongly or not at all and cheats one
way; the grading command (run as an instructor runs it) must give none of them a pass, and
its notes or the verdict must say what happened. The honest learner still passes.
"""
import functools
import textwrap

import nbformat
import pytest

from grading_runs import (RIGHT, WRONG, ZERO as NAME, course, grade_command, grade_rows,
                          hand_in, run_grading, with_answer as answer, with_new_cell)
from labkit.grade.generate import NOTEBOOKS, SOLUTIONS

early = with_new_cell                       # a cell of the learner's own, before any exercise
after_check = functools.partial(with_new_cell, after="check-0-1")


def cheats(learner):
    """name -> (notebook, what the verdict or the notes must say)."""
    return {
        # 1. replacing labkit's verdict function, in an early cell; no answer
        "fake_evaluate": (early(learner, """
            import labkit.check.core as core
            core.evaluate = lambda ex, a, **k: core.Verdict(ex, "pass", "correct")
            """), "labkit.check.core.evaluate was replaced"),
        # 2. appending pass lines to the verdict log the grader used to read
        "forged_log": (early(learner, """
            import json, os
            with open(os.environ["LABKIT_GRADE_LOG"], "a") as fh:
                fh.write(json.dumps({"exercise": "0.1", "status": "pass",
                                     "message": "correct"}) + "\\n")
            """), "holds a pass for 0.1"),
        # 3. a second check through another name, its failure caught, after a wrong answer
        "second_check": (after_check(answer(learner, WRONG), """
            from labkit.check import check as verify
            try:
                verify("0.1", lambda n, t: -(-n // t))
            except Exception:
                pass
            """), "you rounded down"),
        # 4. the answer's name bound to labkit's reference
        "imports_reference": (answer(learner, "from labkit.grid import blocks_needed\n"),
                              "labkit's implementation (labkit.grid.blocks_needed)"),
        # 5. a wrapper around labkit's function
        "wrapper": (answer(learner, """
            import labkit.grid as g
            def blocks_needed(n, threads_per_block):
                return g.blocks_needed(n, threads_per_block)
            """), "labkit's implementation"),
        # 6. the same, with the name hidden from a reader of the cell
        "hidden_wrapper": (answer(learner, """
            import importlib
            _f = getattr(importlib.import_module("lab" + "kit.grid"), "blocks_" + "needed")
            def blocks_needed(n, threads_per_block):
                return _f(n, threads_per_block)
            """), "calls labkit's implementation"),
        # 7. a copy of the reference's code object under the learner's name
        "code_copy": (answer(learner, """
            import importlib, types
            _f = getattr(importlib.import_module("lab" + "kit.grid"), "blocks_" + "needed")
            blocks_needed = types.FunctionType(_f.__code__, _f.__globals__, "blocks_needed")
            """), "labkit's implementation"),
        # 8. outputs typed in for the inputs a learner can see (learning mode's)
        "typed_in": (answer(learner, """
            from labkit.check.ch00 import CASES, fresh_cases
            from labkit.check.core import exercise_rng
            _known = {(n, t): -(-n // t) for n, t in CASES + fresh_cases(exercise_rng("0.1"))}
            def blocks_needed(n, threads_per_block):
                return _known.get((n, threads_per_block), 1)
            """), "expected"),
        # 9. numpy and the checks' comparison patched in the answer cell, wrong answer
        "patched_numpy": (answer(learner, WRONG + textwrap.dedent("""
            import numpy as np
            np.allclose = lambda *a, **k: True
            np.array_equal = lambda *a, **k: True
            """)), "numpy.allclose was replaced"),
        # 10. labkit's checker swapped for one that passes, in the answer cell
        "patched_checker": (answer(learner, WRONG + textwrap.dedent("""
            import labkit.check.core as core
            core.run_checker = lambda ex, *a, **k: core.Verdict(ex.id, "pass", "correct")
            core.get("0.1").checker.__code__ = (lambda answer, ref, rng: None).__code__
            """)), "was replaced"),
        # 11. an environment variable the grader once read, and the grading flag
        "environment": (early(answer(learner, WRONG), """
            import os
            os.environ["LABKIT_GRADE"] = "0"
            os.environ["LABKIT_GRADE_LOG"] = "/dev/null"
            """), "you rounded down"),
        # 12. os._exit in the answer cell after a right-looking start
        "exits": (answer(learner, RIGHT + "import os\nos._exit(0)\n"),
                  "ended its process"),
        # 13. a signal to the answer process's parent
        "kills_parent": (answer(learner, WRONG + "import os, signal\n"
                                "os.kill(os.getppid(), signal.SIGKILL)\n"),
                         "you rounded down"),
        # 14. an answer that swallows interrupts and never returns
        "swallows_interrupts": (answer(learner, """
            import time
            def blocks_needed(n, threads_per_block):
                while True:
                    try:
                        time.sleep(0.05)
                    except KeyboardInterrupt:
                        pass
            """), "time limit"),
        # 15. a forged reply frame on the answer process's channel, then exit
        "forged_frame": (answer(learner, """
            import json, os
            body = json.dumps({"request": 1, "stage": "ready", "cells": [],
                               "altered": []}).encode()
            for fd in range(3, 40):
                try:
                    os.write(fd, b"LKR " + str(len(body)).encode() + b"\\n" + body)
                except OSError:
                    pass
            def blocks_needed(n, threads_per_block):
                return 1
            """), "expected"),
        # 16. the hook that watches for labkit's implementation switched off around a call
        "unwatched_call": (answer(learner, """
            import importlib, sys
            _f = getattr(importlib.import_module("lab" + "kit.grid"), "blocks_" + "needed")
            def blocks_needed(n, threads_per_block):
                hook = sys.getprofile()
                sys.setprofile(None)
                try:
                    return _f(n, threads_per_block)
                finally:
                    sys.setprofile(hook)
            """), "labkit's implementation"),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root, sols = course(tmp_path_factory, "cheats")
    (sols / NAME).write_bytes((SOLUTIONS / NAME).read_bytes())
    learner = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    subs = {name: nb for name, (nb, _) in cheats(learner).items()}
    subs["honest"] = answer(learner, RIGHT)
    folder = hand_in(root / "submissions", subs)
    out = root / "grades"
    proc = run_grading(grade_command(folder, out, sols, "--jobs", "2", "--timeout", "40",
                                     "--cell-timeout", "10", "--exercise-timeout", "10",
                                     "--quiet"), timeout=900)
    rows = grade_rows(out)
    return rows, (out / "grades.md").read_text(), proc.stdout


def test_at_least_twelve_cheats_one_per_class():
    assert len(cheats(nbformat.read(NOTEBOOKS / NAME, as_version=4))) >= 12


@pytest.mark.parametrize("name", sorted(cheats(nbformat.read(NOTEBOOKS / NAME, as_version=4))))
def test_no_cheat_passes_and_the_grade_says_why(graded, name):
    rows, markdown, _ = graded
    said = cheats(nbformat.read(NOTEBOOKS / NAME, as_version=4))[name][1]
    assert rows[name]["0.1"] != "pass", rows[name]
    learner_lines = "\n".join(line for line in markdown.splitlines()
                              if f"**{name}**" in line or f"- {name} ·" in line)
    assert said in learner_lines, learner_lines


def test_the_honest_learner_passes_and_the_seed_is_reported(graded):
    rows, _, stdout = graded
    assert rows["honest"]["0.1"] == "pass" and rows["honest"]["notes"] == ""
    assert "inputs drawn from seed" in stdout
