"""benchmarks/gpu_check.py: its sections exist, it exits 0 without a GPU, and its reduction
section runs end to end on the simulator at a tiny size (so the script is not first tried
on a GPU session's clock)."""
import functools
import importlib.util
import sys
from pathlib import Path

import labkit
import numpy as np
import pytest

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module        # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_sections_and_no_gpu_exit(capsys):
    g = _module()
    assert list(g.SECTIONS) == ["kernels", "timing", "matmul", "reduction", "allocator"]
    assert g.hardware_key("NVIDIA H200") == "H200" and g.hardware_key("Tesla T4") is None
    if labkit.CUDA_BACKEND != "gpu":
        assert g.main([]) == 0
        assert "no CUDA GPU" in capsys.readouterr().out


def test_reduction_section_on_the_simulator(capsys):
    if labkit.CUDA_BACKEND == "gpu":
        pytest.skip("runs at full size on a GPU")
    g = _module()
    ctx = g.Context(True, np.random.default_rng(0), "simulator", "H200",
                    sizes=dict(reduction=256, repeats=1, block=32))
    assert g.section_reduction(ctx) == []
    out = capsys.readouterr().out
    assert out.count(" ok") == 5 and "reduce_fast" in out


def test_unmeasured_goals_fail_outside_quick(capsys):
    """Issue 15's goals never pass silently: without a CUDA torch (cuBLAS) the matmul goal,
    without a data sheet for the board the reduction goal, is a failure of a full run."""
    if labkit.CUDA_BACKEND == "gpu":
        pytest.skip("the simulator path")
    from labkit.kernels import timing

    g = _module()
    # seconds, not half a minute: the ladder's rungs launched once each (1024-thread blocks
    # are slow on the simulator), the extra 2-D shapes left to the correctness pass
    g.time_matmul = functools.partial(timing.time_matmul,
                                      timer=lambda launch, repeats: launch() or 1e-3)
    g.REGISTER2D_TRIALS = ()
    ctx = g.Context(False, np.random.default_rng(0), "simulator", "H200",
                    sizes=dict(matmul=16, repeats=1))
    assert g.section_matmul(ctx) == ["matmul_goal_unmeasured"]     # this torch has no CUDA
    out = capsys.readouterr().out
    assert "GOAL NOT MEASURED" in out and out.count(" ok ") == 5   # every rung right
    ctx = g.Context(False, np.random.default_rng(0), "Tesla T4", None,
                    sizes=dict(reduction=64, repeats=1, block=32))
    assert g.section_reduction(ctx) == ["reduction_goal_unmeasured"]
    assert "GOAL NOT MEASURED" in capsys.readouterr().out
    ctx.quick = True                                                 # --quick: no goals
    assert g.section_reduction(ctx) == []


def test_every_matmul_case_has_full_and_cut_tiles():
    """The GPU correctness pass takes each kernel's unguarded full-tile path and its guarded
    one: c's rows, columns and k each hold at least one whole block tile and a cut one."""
    from labkit.kernels.ops import BLOCKED_2D

    g = _module()
    (m, k), (k2, n) = g.MATMUL_SHAPES
    assert k == k2
    cases = g.matmul_cases()
    assert [kw["blocked"] for v, kw in cases[-len(g.REGISTER2D_TRIALS):]] == list(
        g.REGISTER2D_TRIALS)
    assert ("register2d", dict(blocked=dict(bm=128, bn=128, bk=8, tm=8, tn=8))) in cases
    assert g.REGISTER2D_TRIALS[0] == BLOCKED_2D            # the default shape is checked
    for variant, kw in cases:
        if variant == "register2d":
            p = dict(BLOCKED_2D, **kw.get("blocked", {}))
            rows, cols, depth = p["bm"], p["bn"], p["bk"]
        else:
            rows = cols = depth = kw["tile"]
        sizes = [(m, rows), (n, cols)] + ([(k, depth)] if variant != "naive"
                                          and variant != "coalesced" else [])
        for size, tile in sizes:
            assert size > tile and size % tile, (variant, kw, size, tile)
