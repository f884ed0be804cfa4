"""benchmarks/ptx_report.py: its SASS reading on a hand-made listing (the toolchain itself
is not installed for tests), and its exit without a toolchain."""
import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# A k loop (0x40-0x80: 2 FFMAs) inside a phase loop (0x10-0xa0: tile load, barriers).
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                /* 0x0000 */
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;          /* 0x0000 */
        /*0020*/                   STS [R3], R2 ;                        /* 0x0000 */
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;         /* 0x0000 */
        /*0040*/                   LDS.128 R8, [R3+0x10] ;               /* 0x0000 */
        /*0050*/                   FFMA R6, R8, R9, R6 ;                 /* 0x0000 */
        /*0060*/                   FFMA R7, R8, R10, R7 ;                /* 0x0000 */
        /*0070*/                   UIADD3 UR5, UR5, 0x1, URZ ;           /* 0x0000 */
        /*0080*/               @P0 BRA 0x40 ;                            /* 0x0000 */
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;         /* 0x0000 */
        /*00a0*/              @!P1 BRA 0x10 ;                            /* 0x0000 */
        /*00b0*/                   STL [R1], R6 ;                        /* 0x0000 */
        /*00c0*/                   EXIT ;                                /* 0x0000 */
"""


@pytest.fixture(scope="module")
def pr():
    sys.path.insert(0, str(BENCHMARKS))      # a script folder, not a package
    try:
        return importlib.import_module("ptx_report")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_inner_loop_phase_and_mix(pr):
    instrs = pr.parse_sass(SASS)
    assert len(instrs) == 13 and instrs[8] == (0x80, "BRA", "BRA 0x40")   # guard dropped
    inner = pr.inner_loop(instrs)
    assert [a for a, _, _ in inner] == [0x40, 0x50, 0x60, 0x70, 0x80]
    cols, ops = pr.mix(inner)
    assert dict(cols) == {"LDS": 1, "FFMA": 2, "integer": 1, "other": 1, "total": 5}
    assert ops["LDS.128"] == 1 and ops["UIADD3"] == 1
    assert len(pr.phase_loop(instrs, inner)) == 10
    # 8 FMAs per phase: the k loop runs 4 times (20) plus the 5 instructions around it
    assert pr.phase_cost(instrs, inner, 8) == (25.0, 8)
    assert pr.phase_cost(instrs, inner, None) == (5.0, 2)     # no phases: the loop itself
    assert pr.category("STL") == pr.category("LDL.64") == "LDL/STL"
    assert pr.category("IMAD.WIDE.U32") == "integer" and pr.category("F2F.F64.F32") == "other"


def test_unrolled_k_steps_make_the_loop_one_phase(pr):
    # the same listing without the inner branch: the phase loop is the innermost with FMAs
    instrs = [x for x in pr.parse_sass(SASS) if x[0] != 0x80]
    inner = pr.inner_loop(instrs)
    assert len(inner) == 9 and pr.phase_loop(instrs, inner) is inner
    assert pr.phase_cost(instrs, inner, 2) == (9.0, 2)
    assert pr.phase_cost(instrs, inner, 4) == (18.0, 4)        # two phases per trip


def test_without_a_toolchain_it_says_so_and_exits_0(pr, monkeypatch, capsys):
    monkeypatch.setattr(pr, "find_tools", lambda cuda_bin=None: {})
    assert pr.main([]) == 0
    assert "skipped: ptxas not found" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        pr.main(["--blocked", "128,128,8"])
    assert "five integers" in capsys.readouterr().err


def test_limits_read_the_ptx_and_the_register_cap(pr, monkeypatch, tmp_path):
    ptx = ".visible .entry k(\n)\n.maxntid 256, 1, 1\n.minnctapersm 2\n{\n}\n"
    assert pr.limits(ptx) == "256/2"
    assert pr.limits(ptx.replace(".minnctapersm 2\n", "").replace("256, 1, 1", "16, 16, 1"),
                     128) == "256,r128"
    assert pr.limits(".visible .entry k()\n{\n}\n") == "-"
    assert pr.limits(".visible .entry k()\n{\n}\n", 96) == "r96"
    # the cap reaches ptxas as -maxrregcount, as numba's linker passes max_registers
    calls = []

    class Done:
        returncode, stderr = 0, ""
        stdout = "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nUsed 96 registers"

    monkeypatch.setattr(pr.subprocess, "run", lambda args, **kw: calls.append(args) or Done())
    stats, sass = pr.assemble(ptx, {"ptxas": "ptxas"}, "sm_90", tmp_path, "k", 96)
    assert "-maxrregcount=96" in calls[0] and stats["registers"] == 96 and sass is None
    pr.assemble(ptx, {"ptxas": "ptxas"}, "sm_90", tmp_path, "k")
    assert not any(a.startswith("-maxrregcount") for a in calls[1])
