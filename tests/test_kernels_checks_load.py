"""Kernel checks count work, never seconds (issue 21): every kernel check of chapters 04
and 05, run on a right and a wrong answer while busy-loop processes saturate the CPU,
gives the same verdicts and the same messages as without them. (Under the tracer a
kernel's threads are OS threads, scheduled however the load makes them; the traces, and so
the verdicts, must not care.)"""
import os
import subprocess
import sys

import labkit  # noqa: F401
import pytest

from labkit.check import FAIL, PASS, evaluate
from test_ch04_checks import (add_2d_grid, add_ten_grid, blur_tiled, broadcast_grid,
                              conv_halo_at_both_ends, histogram_privatized, serial_add_2d,
                              serial_add_ten, serial_blur, serial_broadcast, serial_conv,
                              serial_histogram, serial_transpose, transpose_padded)
from test_ch05_checks import (early_return_tree, flash, last_warp_unrolled, register_blocked,
                              scan_two_buffers, serial_matmul, serial_rows, serial_sum,
                              tiled_for_phases, flash_racy, warp_softmax,
                              shared_memory_combine, online_softmax_rescaling_once,
                              one_thread_per_row_in_warp_blocks, serial_scan)

# exercise, a right answer, a wrong one (right values, wrong work; or a race)
CASES = [
    ("4.1", add_ten_grid, serial_add_ten), ("4.2", add_2d_grid, serial_add_2d),
    ("4.3", broadcast_grid, serial_broadcast), ("4.4", conv_halo_at_both_ends, serial_conv),
    ("4.5", transpose_padded, serial_transpose), ("4.7", histogram_privatized, serial_histogram),
    ("4.8", blur_tiled, serial_blur), ("5.1", early_return_tree, last_warp_unrolled(False)),
    ("5.2", tiled_for_phases, serial_matmul), ("5.3", online_softmax_rescaling_once, serial_rows),
    ("5.5", scan_two_buffers, serial_scan), ("5.6", register_blocked, serial_matmul),
    ("5.7", warp_softmax, one_thread_per_row_in_warp_blocks), ("5.8", flash, flash_racy),
]
EXTRA_WRONG = [("5.1", serial_sum), ("5.7", shared_memory_combine)]


def _verdicts() -> dict[tuple[str, str], tuple[str, str]]:
    """(exercise, answer) -> (status, message) of every case."""
    out = {}
    answers = [(ex, a) for ex, right, wrong in CASES for a in (right, wrong) if a is not None]
    for ex, answer in answers + EXTRA_WRONG:
        v = evaluate(ex, answer)
        out[ex, answer.__qualname__] = (v.status, v.message)
    return out


@pytest.fixture
def busy():
    """Busy loops on every core but the one the tracer's threads share (the tracer runs
    under the GIL): the machine is saturated. One to two, until this test kills them."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(min(max((os.cpu_count() or 2) - 1, 1), 2))]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_kernel_verdicts_do_not_depend_on_the_load(request):
    idle = _verdicts()
    for ex, right, wrong in CASES:
        assert idle[ex, right.__qualname__][0] == PASS, (ex, idle[ex, right.__qualname__])
        if wrong is not None:
            assert idle[ex, wrong.__qualname__][0] == FAIL, (ex, idle[ex, wrong.__qualname__])
    procs = request.getfixturevalue("busy")
    loaded = _verdicts()
    assert all(p.poll() is None for p in procs)       # they spun the whole time
    assert loaded == idle
