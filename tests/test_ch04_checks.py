"""Chapter 04's checkers: right kernels written independently pass; missing ones are
missing; wrong, serial, uncoalesced, racy and wasteful ones fail with their hint; labkit's
own kernels are refused."""
import re

import labkit  # noqa: F401
import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get, stub
from labkit.check.ch04 import launch_report
from labkit.kernels import library as lib
from labkit.validate import ceil_div
from check_basics import first_thread, one_thread, reference_and_missing_test, stub_kernel
from mutants import mutant

KERNELS = ["4.1", "4.2", "4.3", "4.4", "4.5", "4.7", "4.8"]

test_reference_passes_and_missing_is_missing = reference_and_missing_test(
    KERNELS, stub_kernel, stub(lambda cuda: None))


@pytest.mark.parametrize("ex, kernel", [
    ("4.1", lib.add_ten), ("4.2", lib.add_2d), ("4.2", lib.add_2d_transposed),
    ("4.3", lib.broadcast_add), ("4.4", lib.conv1d_shared(32, 2)), ("4.4", lib.conv1d_naive),
    ("4.4", lib.conv1d_shared(16, 2)), ("4.5", lib.transpose_shared(32, 8, 1)),
    ("4.5", lib.transpose_shared(32, 8, 0)), ("4.5", lib.transpose_naive),
    ("4.7", lib.histogram_shared(16)), ("4.7", lib.histogram_global),
    ("4.8", lib.blur_shared(16, 8)), ("4.8", lib.blur_naive)])
def test_labkits_own_kernels_are_refused(ex, kernel):
    v = evaluate(ex, kernel)
    assert v.status == FAIL and "labkit's implementation" in v.message, v.message


# ---- right answers, written independently of the references -------------------------------

def add_ten_grid(cuda):
    def kernel(a, out):
        i = cuda.grid(1)
        if i >= out.size:
            return
        out[i] = 10.0 + a[i]
    return kernel


def add_2d_grid(cuda):
    def kernel(a, b, out):
        col, row = cuda.grid(2)
        if row < out.shape[0]:
            if col < out.shape[1]:
                out[row, col] = b[row, col] + a[row, col]
    return kernel


def broadcast_grid(cuda):
    def kernel(col, row, out):
        x, y = cuda.grid(2)
        if y < col.size and x < row.size:
            out[y, x] = row[x] + col[y]
    return kernel


def conv_halo_at_both_ends(cuda):
    """Another way to load the halo: the first RADIUS threads load the left one, the
    last RADIUS threads the right one."""
    from labkit.check.ch04 import BLOCK, RADIUS

    def kernel(a, w, out):
        buf = cuda.shared.array(BLOCK + 2 * RADIUS, cuda.float32)
        t = cuda.threadIdx.x
        g = cuda.blockIdx.x * BLOCK + t
        buf[RADIUS + t] = a[g] if g < a.size else 0.0
        if t < RADIUS:
            buf[t] = a[g - RADIUS] if g >= RADIUS else 0.0
        if t >= BLOCK - RADIUS:
            j = g + RADIUS
            buf[t + 2 * RADIUS] = a[j] if j < a.size else 0.0
        cuda.syncthreads()
        if g < out.size:
            s = 0.0
            for k in range(2 * RADIUS + 1):
                s += buf[t + k] * w[k]
            out[g] = s
    return kernel


def transpose_padded(cuda):
    def kernel(a, out):
        buf = cuda.shared.array((32, 33), cuda.float32)
        x, y = cuda.threadIdx.x, cuda.threadIdx.y
        r0, c0 = cuda.blockIdx.y * 32, cuda.blockIdx.x * 32
        for k in range(y, 32, 8):
            if r0 + k < a.shape[0] and c0 + x < a.shape[1]:
                buf[k, x] = a[r0 + k, c0 + x]
        cuda.syncthreads()
        for k in range(y, 32, 8):
            if c0 + k < out.shape[0] and r0 + x < out.shape[1]:
                out[c0 + k, r0 + x] = buf[x, k]
    return kernel


def histogram_privatized(cuda):
    def kernel(a, counts):
        local = cuda.shared.array(16, cuda.int32)
        t = cuda.threadIdx.x
        for b in range(t, 16, cuda.blockDim.x):     # zeroed by a block-stride loop
            local[b] = 0
        cuda.syncthreads()
        for i in range(cuda.grid(1), a.size, cuda.gridsize(1)):
            cuda.atomic.add(local, a[i], 1)
        cuda.syncthreads()
        if t < 16 and local[t] > 0:
            cuda.atomic.add(counts, t, local[t])
    return kernel


def blur_tiled(cuda):
    """The halo loaded as a centre element per thread plus edge strips."""
    def kernel(img, out):
        tile = cuda.shared.array((10, 18), cuda.float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        c, r = cuda.grid(2)
        h, w = img.shape

        def at(rr, cc):
            return img[rr, cc] if 0 <= rr < h and 0 <= cc < w else 0.0
        tile[ty + 1, tx + 1] = at(r, c)
        if ty == 0:
            tile[0, tx + 1] = at(r - 1, c)
        if ty == 7:
            tile[9, tx + 1] = at(r + 1, c)
        if tx == 0:
            tile[ty + 1, 0] = at(r, c - 1)
        if tx == 15:
            tile[ty + 1, 17] = at(r, c + 1)
        if tx == 0 and ty == 0:
            tile[0, 0] = at(r - 1, c - 1)
            tile[0, 17] = at(r - 1, c + 16)
            tile[9, 0] = at(r + 8, c - 1)
            tile[9, 17] = at(r + 8, c + 16)
        cuda.syncthreads()
        if r < h and c < w:
            total = 0.0
            for k in range(9):                      # the 3 x 3 window, row by row
                total += tile[ty + k // 3, tx + k % 3]
            out[r, c] = total / 9.0
    return kernel


@pytest.mark.parametrize("ex, kernel", [
    ("4.1", add_ten_grid), ("4.2", add_2d_grid), ("4.3", broadcast_grid),
    ("4.4", conv_halo_at_both_ends), ("4.5", transpose_padded),
    ("4.7", histogram_privatized), ("4.8", blur_tiled)])
def test_an_independent_right_kernel_passes(ex, kernel):
    v = evaluate(ex, kernel)
    assert v.status == PASS, v.message


# ---- thread (0, 0) of block (0, 0) doing everything ---------------------------------------

serial_add_ten = one_thread("serial_add_ten", lambda a, ix: a[ix] + 10)
serial_add_2d = one_thread("serial_add_2d", lambda a, b, ix: a[ix] + b[ix])
serial_broadcast = one_thread("serial_broadcast",
                              lambda col, row, ix: col[ix[0]] + row[ix[1]])
serial_conv = one_thread("serial_conv", lambda a, w, ix: sum(
    (w[k] * a[ix[0] + k - 2] for k in range(w.size) if 0 <= ix[0] + k - 2 < a.size), 0.0))
serial_transpose = one_thread("serial_transpose", lambda a, ix: a[ix[::-1]])  # out[c, r] = a[r, c]


def _window_mean(img, ix):
    """The 3 x 3 mean around ``ix``, zero outside the image."""
    (r, c), (h, w) = ix, img.shape
    return sum((img[rr, cc] for rr in range(max(r - 1, 0), min(r + 2, h))
                for cc in range(max(c - 1, 0), min(c + 2, w))), 0.0) / 9.0


serial_blur = one_thread("serial_blur", _window_mean)


def serial_histogram(cuda):
    def kernel(a, counts):
        if first_thread(cuda):
            for i in range(a.size):
                counts[a[i]] += 1
    return kernel


@pytest.mark.parametrize("ex, kernel", [
    ("4.1", serial_add_ten), ("4.2", serial_add_2d), ("4.3", serial_broadcast),
    ("4.4", serial_conv), ("4.5", serial_transpose), ("4.7", serial_histogram),
    ("4.8", serial_blur)])
def test_one_thread_doing_every_element_fails(ex, kernel):
    v = evaluate(ex, kernel)
    assert v.status == FAIL and "one thread made" in v.message, v.message
    assert "not spread over the threads" in v.message


def local_copy_add_ten(cuda):
    """Thread 0 copies a into a local array (a runtime index: local memory), then writes
    out from there: a read once from global memory, but all in one thread."""
    def kernel(a, out):
        if first_thread(cuda):
            buf = cuda.local.array(512, cuda.float32)
            for i in range(a.size):
                buf[i] = a[i]
            for i in range(out.size):
                out[i] = buf[i] + 10
    return kernel


def test_a_local_copy_by_one_thread_counts_its_local_traffic():
    v = evaluate("4.1", local_copy_add_ten)
    assert v.status == FAIL and "local memory (cuda.local.array)" in v.message, v.message


# ---- 4.1 - 4.3 ----------------------------------------------------------------------------

def test_4_1_unguarded_kernel_gets_the_guard_hint():
    unguarded = mutant(lib.add_ten, """
        if i < out.size:
            out[i] = a[i] + 10
    """, "out[i] = a[i] + 10")
    v = evaluate("4.1", unguarded)
    assert v.status == FAIL and "guard" in v.message and "OutOfBounds" not in v.message


def test_4_1_wrong_value_and_wasteful_reads():
    plus_one = mutant(lib.add_ten, "out[i] = a[i] + 10", "out[i] = a[i] + 1")
    reads_twice = mutant(lib.add_ten, "out[i] = a[i] + 10", """
        out[i] = a[i] + 5
        out[i] = a[i] + 10
    """)
    v = evaluate("4.1", plus_one)
    assert v.status == FAIL and "a[i] + 10" in v.message
    v = evaluate("4.1", reads_twice)
    assert v.status == FAIL and "read 2 times" in v.message and "written 2 times" in v.message


def test_4_2_transposed_mapping_fails():
    v = evaluate("4.2", lib.add_2d_transposed, refuse=False)
    assert v.status == FAIL


def test_4_2_uncoalesced_but_correct_kernel_fails_the_budget():
    def column_walk(cuda):
        # correct values, but each block walks a column: lanes stride whole rows
        def kernel(a, b, out):
            bx = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            by = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
            flat = by * (cuda.gridDim.x * cuda.blockDim.x) + bx
            span = cuda.gridDim.y * cuda.blockDim.y
            r = flat % span
            c = flat // span
            if r < out.shape[0] and c < out.shape[1]:
                out[r, c] = a[r, c] + b[r, c]
        return kernel
    v = evaluate("4.2", column_walk)
    assert v.status == FAIL and "not coalesced" in v.message, v.message


def test_4_3_broadcast_with_the_wrong_sign_fails():
    subtracted = mutant(lib.broadcast_add, "col[r] + row[c]", "col[r] - row[c]")
    assert evaluate("4.3", subtracted).status == FAIL


# ---- 4.4 ----------------------------------------------------------------------------------

CONV = get("4.4").reference


def test_4_4_naive_convolution_is_over_budget():
    v = evaluate("4.4", lib.conv1d_naive, refuse=False)
    assert v.status == FAIL and "read 5 times" in v.message


def test_4_4_missing_halo_is_wrong():
    no_halo = mutant(CONV, """
        left = i - radius
        tile[t] = a[left] if left >= 0 else 0.0
        right = i + block
        tile[t + block + radius] = a[right] if right < a.size else 0.0
    """, """
        tile[t] = 0.0                       # the halo zeroed, not loaded
        tile[t + block + radius] = 0.0
    """)
    v = evaluate("4.4", no_halo)
    assert v.status == FAIL and "halo" in v.message


def test_4_4_missing_barrier_is_a_race_not_a_lucky_value():
    v = evaluate("4.4", mutant(CONV, "cuda.syncthreads()\n", ""))
    assert v.status == FAIL and "shared-memory race" in v.message, v.message
    assert "tile[" in v.message and "syncthreads" in v.message


def test_4_4_unpadded_right_halo_reads_unwritten_shared_memory():
    """Without the `else 0.0`, a full last block reads its right halo from shared memory
    nobody wrote: garbage on a GPU, NaN in the tracer (seen at n = 2 * BLOCK)."""
    unpadded = mutant(CONV,
                      "tile[t + block + radius] = a[right] if right < a.size else 0.0", """
                      if right < a.size:
                          tile[t + block + radius] = a[right]
                      """)
    v = evaluate("4.4", unpadded)
    assert v.status == FAIL and "n=64" in v.message and "holds NaN" in v.message, v.message


# ---- 4.5 ----------------------------------------------------------------------------------

def test_4_5_unpadded_tile_has_bank_conflicts():
    v = evaluate("4.5", lib.transpose_shared(32, 8, 0), refuse=False)
    # the column read of a [32][32] tile: the tile's rows (up to 32) all in one bank
    assert v.status == FAIL and "bank-conflict replays" in v.message, v.message
    assert re.search(r"up to (1[6-9]|2\d|3[0-2])-way shared-memory bank conflicts", v.message)


def test_4_5_transpose_without_shared_memory_is_uncoalesced():
    def direct(cuda):                  # right values, writes strided by a whole row
        def kernel(a, out):
            c = cuda.blockIdx.x * 32 + cuda.threadIdx.x
            for k in range(0, 32, 8):
                r = cuda.blockIdx.y * 32 + cuda.threadIdx.y + k
                if r < a.shape[0] and c < a.shape[1]:
                    out[c, r] = a[r, c]
        return kernel
    v = evaluate("4.5", direct)
    assert v.status == FAIL and "sectors per warp request" in v.message, v.message


def test_4_5_one_row_per_thread_leaves_the_tile_unfinished():
    v = evaluate("4.5", lib.transpose_naive, refuse=False)    # 8 of each tile's 32 rows
    assert v.status == FAIL and "loop k" in v.message


# ---- 4.6 ----------------------------------------------------------------------------------

def test_4_6_occupancy_prediction():
    assert evaluate("4.6", get("4.6").reference, refuse=False).status == PASS
    assert evaluate("4.6", None).status == MISSING

    def no_granularity(threads, regs, smem):
        warps = ceil_div(threads, 32)
        return min(64 // warps, 32, 65536 // (regs * threads),
                   (164 * 1024) // (smem + 1024))
    v = evaluate("4.6", no_granularity)
    assert v.status == FAIL and "units of 256" in v.message

    def no_reserve(threads, regs, smem):
        warps = ceil_div(threads, 32)
        per_warp = ceil_div(regs * 32, 256) * 256
        limits = [64 // warps, 32, (65536 // 4 // per_warp) * 4 // warps]
        if smem:
            limits.append((164 * 1024) // smem)
        return min(limits)
    v = evaluate("4.6", no_reserve)
    assert v.status == FAIL and "reserves 1 KB" in v.message

    def no_block_cap(threads, regs, smem):
        warps = ceil_div(threads, 32)
        per_warp = ceil_div(regs * 32, 256) * 256
        return min(64 // warps, (65536 // 4 // per_warp) * 4 // warps,
                   (164 * 1024) // (ceil_div(smem + 1024, 128) * 128))
    v = evaluate("4.6", no_block_cap)
    assert v.status == FAIL and "32 blocks" in v.message

    v = evaluate("4.6", lambda t, r, s: 2048 // t)          # warps only
    assert v.status == FAIL and "take the minimum" in v.message, v.message


def test_4_6_inputs_are_drawn_per_seed():
    from labkit.check.ch04 import OCCUPANCY_CASES, occupancy_cases
    fixed = {c for c in OCCUPANCY_CASES}
    drawn = [set(occupancy_cases(np.random.default_rng(s))) - fixed for s in (1, 2)]
    assert drawn[0] and drawn[0] != drawn[1]

    def known_answers(threads, regs, smem):       # right on the fixed cases only
        table = {c: get("4.6").reference(*c) for c in OCCUPANCY_CASES}
        return table.get((threads, regs, smem), 1)
    assert evaluate("4.6", known_answers).status == FAIL


# ---- 4.7 ----------------------------------------------------------------------------------

HIST = get("4.7").reference


def test_4_7_global_atomics_per_element_fail_the_atomic_budget():
    v = evaluate("4.7", lib.histogram_global, refuse=False)
    assert v.status == FAIL and "global atomics on counts" in v.message, v.message


@pytest.mark.parametrize("barrier", ["first", "second"])
def test_4_7_a_missing_barrier_is_a_race(barrier):
    text = ("            hist[t] = 0\n        cuda.syncthreads()" if barrier == "first" else
            "            i += step\n        cuda.syncthreads()")
    racy = mutant(HIST, text, text.replace("\n        cuda.syncthreads()", ""))
    v = evaluate("4.7", racy)
    assert v.status == FAIL and "shared-memory race" in v.message, v.message
    assert "atomically updates" in v.message


def test_4_7_one_element_per_thread_misses_most_of_a():
    one_each = mutant(HIST, "i += step", "i = a.size")
    v = evaluate("4.7", one_each)
    assert v.status == FAIL and "gridDim.x * blockDim.x" in v.message


# ---- 4.8 ----------------------------------------------------------------------------------

def test_4_8_the_naive_blur_reads_each_element_nine_times():
    v = evaluate("4.8", lib.blur_naive, refuse=False)
    assert v.status == FAIL and "was read 9 times" in v.message, v.message


def test_4_8_halo_not_zeroed_outside_the_image_is_wrong():
    no_zero = mutant(get("4.8").reference, "img[rr, cc] if inside else 0.0",
                     "img[min(max(rr, 0), img.shape[0] - 1), min(max(cc, 0), img.shape[1] - 1)]")
    v = evaluate("4.8", no_zero)
    assert v.status == FAIL and "outside the image counting 0" in v.message, v.message


# ---- the derive function ----------------------------------------------------------------

def test_launch_report_is_plain_data_and_leaves_its_arguments_alone():
    from labkit.check import plain
    a = np.arange(40, dtype=np.float32)
    out = np.zeros_like(a)
    rep = launch_report(lib.add_ten, 2, 32, a, out)
    assert plain.same(plain.loads(plain.dumps(rep)), rep)
    assert not out.any() and np.array_equal(rep["arrays"][1], a + 10)
    assert (rep["total_sectors"], rep["busiest"], rep["races"]) == (2 * 5, 2, 0)
    assert rep["per_array"] == [{"max_reads": 1, "reads": 40, "max_writes": 0, "writes": 0,
                                 "atomics": 0},
                                {"max_reads": 0, "reads": 0, "max_writes": 1, "writes": 40,
                                 "atomics": 0}]
    bad = launch_report(mutant(lib.add_ten, "if i < out.size:\n    out[i] = a[i] + 10",
                               "out[i] = a[i] + 10"), 2, 32, a, out)
    assert bad["error"] == "bounds" and "a[40]" in bad["message"]
