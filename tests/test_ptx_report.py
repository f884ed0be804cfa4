"""benchmarks/ptx_report.py: its SASS reading on a hand-made listing (the toolchain itself
is not installed for tests), and its exit without a toolchain."""
import importlib
import re
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


# A phase loop (0x10-0xd0) whose tile load has a path for full tiles: a uniform branch
# (0x20) to the unguarded load (0x70), else the guarded one (0x30-0x60) jumps over it.
FULL_PATH = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                /* 0x0000 */
        /*0010*/                   ISETP.GT.U32.AND P1, PT, R5, R6, PT ; /* 0x0000 */
        /*0020*/              @!P1 BRA 0x70 ;                            /* 0x0000 */
        /*0030*/                   ISETP.GE.U32.AND P2, PT, R7, R8, PT ; /* 0x0000 */
        /*0040*/                   ISETP.GE.OR.EX P2, PT, R9, R8, P2, PT ; /* 0x0000 */
        /*0050*/              @!P2 LDG.E R2, desc[UR4][R4.64] ;          /* 0x0000 */
        /*0060*/                   BRA 0x80 ;                            /* 0x0000 */
        /*0070*/                   LDG.E R2, desc[UR4][R4.64] ;          /* 0x0000 */
        /*0080*/                   STS [R3], R2 ;                        /* 0x0000 */
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;         /* 0x0000 */
        /*00a0*/                   FFMA R6, R8, R9, R6 ;                 /* 0x0000 */
        /*00b0*/               @P0 BRA 0xa0 ;                            /* 0x0000 */
        /*00c0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;         /* 0x0000 */
        /*00d0*/              @!P3 BRA 0x10 ;                            /* 0x0000 */
        /*00e0*/                   EXIT ;                                /* 0x0000 */
"""


def test_a_phase_with_a_full_tile_path_counts_that_path(pr):
    instrs = pr.parse_sass(FULL_PATH)
    guarded = pr.conditional(FULL_PATH)
    assert guarded == {0x20, 0xb0, 0xd0}          # the BRA at 0x60 and the EXIT are not
    inner = pr.inner_loop(instrs)
    assert [a for a, _, _ in inner] == [0xa0, 0xb0]
    phase = pr.phase_loop(instrs, inner)
    path = pr.loading_path(phase, guarded, inner)
    assert [a for a, _, _ in path] == [0x10, 0x20, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0]
    # 4 FMAs a phase: the k loop (2 instructions) 4 times, 7 instructions around it
    assert pr.phase_cost(instrs, inner, 4, guarded) == (15.0, 4)
    assert pr.phase_cost(instrs, inner, 4) == (19.0, 4)       # every instruction, both paths
    # with the branch to the full path unguarded, the guarded load is dead code
    always = guarded - {0x20}
    assert pr.phase_cost(instrs, inner, 4, always) == (15.0, 4)
    # without it (both paths guarded by a fall-through only) the guarded one is the path
    no_full = [x for x in instrs if x[0] != 0x20]
    assert [a for a, _, _ in pr.loading_path(pr.phase_loop(no_full, inner), guarded, inner)
            ][:5] == [0x10, 0x30, 0x40, 0x50, 0x60]


# A grid-stride loop (0x20-0x90) of two loads, the first index with numba's wrap-around.
GRID_STRIDE = """
        /*0000*/                   S2R R0, SR_TID.X ;                    /* 0x0000 */
        /*0010*/                   LDG.E R9, desc[UR4][R2.64] ;          /* 0x0000 */
        /*0020*/                   SHF.R.S32.HI R5, RZ, 0x1f, R3 ;       /* 0x0000 */
        /*0030*/                   LOP3.LUT R5, R5, UR6, RZ, 0xc0, !PT ; /* 0x0000 */
        /*0040*/                   IADD3 R4, P0, R4, R5, RZ ;            /* 0x0000 */
        /*0050*/                   LDG.E R6, desc[UR4][R4.64] ;          /* 0x0000 */
        /*0060*/                   LDG.E R7, desc[UR4][R4.64+0x400] ;    /* 0x0000 */
        /*0070*/                   FADD R8, R6, R8 ;                     /* 0x0000 */
        /*0080*/                   SHF.R.S32.HI R5, RZ, 0x2, R3 ;        /* 0x0000 */
        /*0090*/              @!P1 BRA 0x20 ;                            /* 0x0000 */
        /*00a0*/                   EXIT ;                                /* 0x0000 */
"""


def test_the_load_loop_and_its_wrap_around(pr):
    instrs = pr.parse_sass(GRID_STRIDE)
    body = pr.load_loop(instrs)
    assert [a for a, _, _ in body][0::7] == [0x20, 0x90]
    cols, _ = pr.mix(body)
    assert cols["LDG"] == 2 and cols["total"] == 8 and cols["integer"] == 4
    assert pr.wraps(body) == 1                    # the 0x1f shift; a shift by 2 is not one
    straight = [x for x in instrs if x[0] != 0x90]
    assert pr.load_loop(straight) == straight     # no loop: the whole kernel


def test_reduce_shapes_are_checked(pr, monkeypatch, capsys):
    monkeypatch.setattr(pr, "find_tools", lambda cuda_bin=None: {})
    with pytest.raises(SystemExit):
        pr.main(["--reduce", "256"])
    assert "two integers block,unroll" in capsys.readouterr().err
    names = [name for name, _, _ in pr.reductions([dict(block=128, unroll=8)], {"reduce_fast"})]
    assert names == ["reduce_fast_256_4", "reduce_fast_128_8"]


# A phase loop (0x10-0x90) whose guarded load is branched around, not predicated: the
# guard's fail arm (0x20 -> 0x50) stores 0 and skips the LDG; it is the shorter path.
BRANCHED_LOAD = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                /* 0x0000 */
        /*0010*/                   ISETP.GE.U32.AND P2, PT, R7, R8, PT ; /* 0x0000 */
        /*0020*/               @P2 BRA 0x50 ;                            /* 0x0000 */
        /*0030*/                   LDG.E R2, desc[UR4][R4.64] ;          /* 0x0000 */
        /*0040*/                   BRA 0x60 ;                            /* 0x0000 */
        /*0050*/                   MOV R2, RZ ;                          /* 0x0000 */
        /*0060*/                   STS [R3], R2 ;                        /* 0x0000 */
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;         /* 0x0000 */
        /*0080*/                   FFMA R6, R8, R9, R6 ;                 /* 0x0000 */
        /*0090*/              @!P3 BRA 0x10 ;                            /* 0x0000 */
        /*00a0*/                   EXIT ;                                /* 0x0000 */
"""


def test_a_phase_counts_the_path_that_loads_not_the_shortest(pr):
    instrs = pr.parse_sass(BRANCHED_LOAD)
    guarded = pr.conditional(BRANCHED_LOAD)
    phase = [x for x in instrs if 0x10 <= x[0] <= 0x90]
    path = [a for a, _, _ in pr.loading_path(phase, guarded)]
    # the load's arm (8 instructions), not the "store 0" arm (7) that skips the LDG
    assert path == [0x10, 0x20, 0x30, 0x40, 0x60, 0x70, 0x80, 0x90]
    # the same arms without the load (an LDS there instead): the shorter arm wins
    no_load = [(a, "LDS", "LDS R2, [R4]") if a == 0x30 else (a, op, t) for a, op, t in phase]
    assert [a for a, _, _ in pr.loading_path(no_load, guarded)] == [
        0x10, 0x20, 0x50, 0x60, 0x70, 0x80, 0x90]


def test_a_load_is_what_the_ldg_column_counts(pr):
    """LDGDEPBAR (a barrier) and LDGSTS (a copy to shared memory) start with "LDG" but are
    not in the LDG column: the loading path and the load loop do not count them either."""
    assert pr.is_global_load("LDG.E.128") and pr.is_global_load("LDG")
    assert not pr.is_global_load("LDGDEPBAR") and not pr.is_global_load("LDGSTS.E.BYPASS")
    instrs = pr.parse_sass(BRANCHED_LOAD)
    guarded = pr.conditional(BRANCHED_LOAD)
    phase = [x for x in instrs if 0x10 <= x[0] <= 0x90]
    barrier = [(a, "LDGDEPBAR", "LDGDEPBAR") if a == 0x30 else (a, op, t)
               for a, op, t in phase]
    assert pr.mix(barrier)[0]["LDG"] == 0
    # nothing loads on either arm now: the shorter "store 0" arm, as with no load at all
    assert [a for a, _, _ in pr.loading_path(barrier, guarded)] == [
        0x10, 0x20, 0x50, 0x60, 0x70, 0x80, 0x90]
    # a loop whose only LDG-named instructions are barriers loads nothing: no load loop
    looped = pr.parse_sass(re.sub(r"LDG\.E R\d+, desc\S+", "LDGDEPBAR", GRID_STRIDE))
    assert [a for a, op, _ in looped if op == "LDGDEPBAR"] == [0x10, 0x50, 0x60]
    assert pr.load_loop(looped) == looped               # the whole kernel, as with no LDG
