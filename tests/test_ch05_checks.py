"""Chapter 05's checkers: right kernels written independently of labkit's pass (written here
or taken from the chapter's solution, a shuffle-finished reduction and a tree whose idle
threads return early among them); missing ones are missing; serial, racy, uncoalesced,
conflicting and wasteful ones fail with their hint; labkit's own kernels are refused."""
import labkit  # noqa: F401
import math

import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check.ch05 import whose
from labkit.kernels import library as lib
from check_basics import first_thread, one_thread, reference_and_missing_test, stub_kernel
from mutants import mutant
from solution_answers import solution_answer
from test_kernels_analysis import thread0_local_copy, unrolled_last_warp

KERNELS = ["5.1", "5.2", "5.3", "5.5", "5.6", "5.7", "5.8"]

test_kernel_reference_passes_and_missing_is_missing = reference_and_missing_test(
    KERNELS, stub_kernel)


@pytest.mark.parametrize("ex, kernel", [
    ("5.1", lib.reduce_shared(64)), ("5.1", lib.reduce_shared(32)),
    ("5.1", lib.reduce_strided(64)), ("5.1", lib.reduce_interleaved(64)),
    ("5.1", lib.reduce_warp(64)),
    ("5.2", lib.matmul_tiled(8)), ("5.2", lib.matmul_naive), ("5.2", lib.matmul_coalesced),
    ("5.2", lib.matmul_register_blocked(8, 2)), ("5.2", lib.matmul_2d_blocked(16, 16, 8, 2, 2)),
    ("5.3", lib.softmax_rows_online), ("5.3", lib.softmax_rows_naive),
    ("5.3", lib.softmax_rows_block(32)), ("5.5", lib.scan_block(64)),
    ("5.6", lib.matmul_register_blocked(16, 4)), ("5.6", lib.matmul_tiled(16)),
    ("5.7", lib.softmax_rows_warp(4)), ("5.7", lib.softmax_rows_online),
    ("5.8", lib.attention_flash(8, 8))])
def test_labkits_own_kernels_are_refused(ex, kernel):
    v = evaluate(ex, kernel)
    assert v.status == FAIL and "labkit's implementation" in v.message, v.message


def tree_of_labkit(cuda):
    """5.1 written around labkit's device function: the load and the write are the
    learner's, the tree (the exercise) is labkit's."""
    import operator
    from labkit.kernels.library.reductions import sequential_tree
    tree = sequential_tree(cuda, 64, operator.add)

    def kernel(a, out):
        buf = cuda.shared.array(64, cuda.float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * 64 + t
        buf[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
        tree(buf, t)
        if t == 0:
            out[cuda.blockIdx.x] = buf[0]
    return kernel


def warp_of_labkit(cuda):
    """5.1 with labkit's warp sum doing the adds of each warp."""
    from labkit.kernels.library.reductions import warp_sum
    total = warp_sum(cuda)

    def kernel(a, out):
        buf = cuda.shared.array(2, cuda.float32)
        t = cuda.threadIdx.x
        i = cuda.blockIdx.x * 64 + t
        v = total(a[i] if i < a.size else 0.0)
        if t % 32 == 0:
            buf[t // 32] = v
        cuda.syncthreads()
        if t == 0:
            out[cuda.blockIdx.x] = buf[0] + buf[1]
    return kernel


@pytest.mark.parametrize("kernel", [tree_of_labkit, warp_of_labkit])
def test_5_1_a_kernel_built_on_labkits_device_functions_is_refused(kernel):
    v = evaluate("5.1", kernel)
    assert v.status == FAIL and "labkit's implementation" in v.message, v.message
    assert evaluate("5.1", kernel, refuse=False).status == PASS     # it is right otherwise


# ---- 5.1 a block reduction ---------------------------------------------------------------

REDUCE = get("5.1").reference           # lib.reduce_shared(64)
SOLVED = solution_answer("05", "5.1")    # the chapter's tree, then shuffles; BLOCK = 64


def tree_with_for(cuda):
    """The sequential tree written with a for loop over the levels."""
    def kernel(a, out):
        t, g = cuda.threadIdx.x, cuda.grid(1)
        s = cuda.shared.array(64, cuda.float32)
        s[t] = a[g] if g < a.size else 0.0
        cuda.syncthreads()
        for level in range(5, -1, -1):
            half = 1 << level
            if t < half:
                s[t] = s[t] + s[t + half]
            cuda.syncthreads()
        if t == 0:
            out[cuda.blockIdx.x] = s[0]
    return kernel


# The chapter's advice (Harris's last step, as lib.reduce_fast does), the chapter's
# solution: the tree down to 32 values, then shfl_down_sync for those: fewer barriers, and
# right.
tree_then_shuffle = SOLVED

# A correct tree (labkit's) whose idle threads return instead of waiting: the later barriers
# wait only for the threads still running (Volta and later).
early_return_tree = mutant(REDUCE, "if t < s:\n    buf[t] += buf[t + s]",
                           "if t >= s:\n    return\nbuf[t] += buf[t + s]")

# Harris's "unroll the last warp": warp 0 finishes without syncthreads; with syncwarp
# between each step's reads and its write, as the CUDA guide asks since Volta.
last_warp_unrolled = unrolled_last_warp


@pytest.mark.parametrize("kernel", [tree_with_for, tree_then_shuffle, early_return_tree,
                                    last_warp_unrolled(True)],
                         ids=["for-loop", "shuffles", "early-return", "syncwarp"])
def test_5_1_right_reductions_pass(kernel):
    v = evaluate("5.1", kernel)
    assert v.status == PASS, v.message


def test_5_1_conflicting_and_divergent_trees():
    v = evaluate("5.1", lib.reduce_strided(64), refuse=False)
    assert v.status == FAIL and "bank conflicts" in v.message
    # the interleaved tree is correct and conflict-free at this size, but divergent
    v = evaluate("5.1", lib.reduce_interleaved(64), refuse=False)
    assert v.status == FAIL and "SIMT efficiency" in v.message


# thread (0, 0) of block (0, 0) adds every element and writes every partial sum
serial_sum = one_thread("serial_sum", lambda a, ix: sum(
    (a[i] for i in range(64 * ix[0], min(64 * ix[0] + 64, a.size))), 0.0))


def test_5_1_thread_zero_serial_loop_fails():
    serial = mutant(REDUCE, "s = block // 2", """
        if t == 0:                  # thread 0 adds the block in a loop, no barrier ...
            for k in range(1, block):
                buf[0] += buf[k]
        s = 0                       # ... and the tree loop never runs
    """)
    v = evaluate("5.1", serial)
    assert v.status == FAIL and "one thread made" in v.message, v.message
    assert "serial sum" in v.message


def test_5_1_serial_loop_with_barriers_fails():
    # log2(64) barriers, but thread 0 does every level's additions
    serial_synced = mutant(REDUCE, """
        if t < s:
            buf[t] += buf[t + s]
    """, """
        if t == 0:
            for k in range(s):
                buf[k] += buf[k + s]
    """)
    v = evaluate("5.1", serial_synced)
    assert v.status == FAIL and "one thread made" in v.message, v.message


@pytest.mark.parametrize("old, new, hint", [
    pytest.param("""
            buf[t] += buf[t + s]
        cuda.syncthreads()
    """, """
            buf[t] += buf[t + s]
    """, "shared-memory race", id="barrier-free"),
    pytest.param("""
        buf[t] = a[i] if i < a.size else 0.0
        cuda.syncthreads()
    """, """
        buf[t] = a[i] if i < a.size else 0.0
    """, "shared-memory race", id="no-barrier-after-load"),
    # The tracer's shared memory starts poisoned (NaN), as a GPU's starts with garbage: the
    # lanes past the end add NaN, so the values are wrong, not just the SIMT efficiency.
    pytest.param("buf[t] = a[i] if i < a.size else 0.0", """
        if i < a.size:
            buf[t] = a[i]
    """, "holds NaN at index", id="no-zero-padding"),
])
def test_5_1_missing_sync_or_padding_is_wrong(old, new, hint):
    v = evaluate("5.1", mutant(REDUCE, old, new))
    assert v.status == FAIL and hint in v.message, v.message


# ---- 5.2 a tiled matmul ----------------------------------------------------------------

TILED = get("5.2").reference            # lib.matmul_tiled(8)


def tiled_for_phases(cuda):
    """A tiled matmul counting its phases with a for loop."""
    def kernel(a, b, c):
        ta = cuda.shared.array((8, 8), cuda.float32)
        tb = cuda.shared.array((8, 8), cuda.float32)
        x, y = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * 8 + y
        col = cuda.blockIdx.x * 8 + x
        m, kk = a.shape
        total = cuda.float32(0.0)
        for p in range(0, kk, 8):
            ta[y, x] = a[row, p + x] if row < m and p + x < kk else 0.0
            tb[y, x] = b[p + y, col] if p + y < kk and col < b.shape[1] else 0.0
            cuda.syncthreads()
            for e in range(8):
                total += ta[y, e] * tb[e, x]
            cuda.syncthreads()
        if row < m and col < c.shape[1]:
            c[row, col] = total
    return kernel


serial_matmul = one_thread("serial_matmul", lambda a, b, ix: sum(
    (a[ix[0], k] * b[k, ix[1]] for k in range(a.shape[1])), 0.0))


# A right tiled matmul whose threadIdx.x walks the rows: its loads stride rows (8 sectors per
# request against 4) and its tile reads collide in banks (two-way).
tiled_rows_on_x = mutant(tiled_for_phases, "x, y = cuda.threadIdx.x, cuda.threadIdx.y",
                         "y, x = cuda.threadIdx.x, cuda.threadIdx.y")
tiled_rows_on_x.__name__ = "tiled_rows_on_x"


def test_5_2_missing_second_barrier_is_a_race():
    v = evaluate("5.2", mutant(TILED, "cuda.syncthreads()\nk0 += tile", "k0 += tile"))
    assert v.status == FAIL and "shared-memory race" in v.message and "sa[" in v.message


def _wrapped_tiled(mutate: bool):
    """The reference tiled matmul called through a helper (its syncthreads are not in the
    wrapper's own code), optionally with one output zeroed afterwards."""
    def factory(cuda):
        inner = lib.matmul_tiled(8)(cuda)

        def kernel(a, b, c):
            inner(a, b, c)
            if mutate and cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0:
                c[0, 0] = 0.0
        return kernel
    return factory


def test_5_2_wrapped_reference_is_refused_and_runs_in_lockstep():
    # the call watch sees labkit's kernel run inside the wrapper ...
    v = evaluate("5.2", _wrapped_tiled(False))
    assert v.status == FAIL and "calls labkit's implementation" in v.message, v.message
    # ... and unrefused, the tracer runs it in lockstep: it passes, its mutation fails
    assert evaluate("5.2", _wrapped_tiled(False), refuse=False).status == PASS
    v = evaluate("5.2", _wrapped_tiled(True), refuse=False)
    assert v.status == FAIL and "c for a" in v.message


# ---- 5.3 online softmax, one thread per row -------------------------------------------

def online_stats(x, r, start=0, step=1):
    """(max, sum of exp(x - max)) over columns ``start``, ``start + step``, ... of row ``r``,
    online: the sum rescaled only when the maximum grows; each element read once."""
    m, s = -math.inf, 0.0
    for c in range(start, x.shape[1], step):
        v = x[r, c]
        if v > m:
            s = s * math.exp(m - v) + 1.0
            m = v
        else:
            s += math.exp(v - m)
    return m, s


def two_pass_stats(x, r, start=0, step=1):
    """The same in two passes over the columns: each element read twice."""
    m = max((x[r, c] for c in range(start, x.shape[1], step)), default=-math.inf)
    return m, sum(math.exp(x[r, c] - m) for c in range(start, x.shape[1], step))


def online_softmax_rescaling_once(cuda):
    """Online softmax that rescales only when the maximum grows."""
    def kernel(x, out):
        r = cuda.grid(1)
        if r >= x.shape[0]:
            return
        best, total = online_stats(x, r)
        for c in range(x.shape[1]):
            out[r, c] = math.exp(x[r, c] - best) / total
    return kernel


def softmax_row(x, out, r):
    """Row ``r`` of softmax(x) into ``out`` by one thread, online: the maximum and the sum
    of exponentials in one pass, then the outputs."""
    m, d = -math.inf, 0.0
    for c in range(x.shape[1]):
        m_new = max(m, x[r, c])
        d = d * math.exp(m - m_new) + math.exp(x[r, c] - m_new)
        m = m_new
    for c in range(x.shape[1]):
        out[r, c] = math.exp(x[r, c] - m) / d


def serial_rows(cuda):
    """Thread (0, 0) of block (0, 0) does every row, online."""
    def kernel(x, out):
        if first_thread(cuda):
            for r in range(x.shape[0]):
                softmax_row(x, out, r)
    return kernel


def three_pass_over_local_copy(cuda):
    """Each thread copies its row into a local array (x read once from global memory),
    then runs the three passes over the copy."""
    def kernel(x, out):
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r < x.shape[0]:
            row = cuda.local.array(64, cuda.float32)
            n = x.shape[1]
            for c in range(n):
                row[c] = x[r, c]
            m = row[0]
            for c in range(1, n):
                m = max(m, row[c])
            d = 0.0
            for c in range(n):
                d += math.exp(row[c] - m)
            for c in range(n):
                out[r, c] = math.exp(row[c] - m) / d
    return kernel


def test_5_3_three_passes_through_out_count_every_access():
    # reads x only twice, but stores exp into out and reads it back: 3 reads, 2 writes
    exp_in_out = mutant(
        mutant(lib.softmax_rows_naive, "d += math.exp(x[r, c] - m)", """
            e = math.exp(x[r, c] - m)
            out[r, c] = e
            d += e
        """),
        "out[r, c] = math.exp(x[r, c] - m) / d", "out[r, c] = out[r, c] / d")
    v = evaluate("5.3", exp_in_out)
    assert v.status == FAIL and "an element of out was written 2 times" in v.message, v.message


def test_5_3_no_rescale_is_wrong():
    no_rescale = mutant(get("5.3").reference,   # lib.softmax_rows_online
                        "d = d * math.exp(m - m_new) + math.exp(v - m_new)",
                        "d = d + math.exp(v - m_new)")
    v = evaluate("5.3", no_rescale)
    assert v.status == FAIL and "exp(m - m')" in v.message


# ---- 5.4 -------------------------------------------------------------------------------

def test_5_4_intensity():
    assert evaluate("5.4", get("5.4").reference, refuse=False).status == PASS
    assert evaluate("5.4", None).status == MISSING
    elements = lambda n, t: 4 * get("5.4").reference(n, t)  # noqa: E731
    assert "bytes" in evaluate("5.4", elements, refuse=False).message
    naive = lambda n, t: 2 * n ** 3 / (4 * (2 * n ** 3 + n * n))  # noqa: E731
    assert "naive" in evaluate("5.4", naive).message
    no_ceil = lambda n, t: 2 * n ** 3 / (4 * (2 * n * n * (n / t) + n * n))  # noqa: E731
    assert evaluate("5.4", no_ceil).status == FAIL


# ---- 5.5 a block scan ------------------------------------------------------------------

SCAN = get("5.5").reference              # lib.scan_block(64)


def scan_two_buffers(cuda):
    """Hillis-Steele with two named buffers swapped by parity."""
    def kernel(a, out, sums):
        ping = cuda.shared.array(64, cuda.float32)
        pong = cuda.shared.array(64, cuda.float32)
        t = cuda.threadIdx.x
        g = cuda.blockIdx.x * 64 + t
        ping[t] = a[g] if g < a.size else 0.0
        cuda.syncthreads()
        for step in range(6):
            d = 1 << step
            if step % 2 == 0:
                pong[t] = ping[t] + (ping[t - d] if t >= d else 0.0)
            else:
                ping[t] = pong[t] + (pong[t - d] if t >= d else 0.0)
            cuda.syncthreads()
        v = ping[t]                 # six steps: the result is back in ping
        if g < out.size:
            out[g] = v
        if t == 63:
            sums[cuda.blockIdx.x] = v
    return kernel


def serial_scan(cuda):
    """Thread (0, 0) of block (0, 0) scans every block and writes every total."""
    def kernel(a, out, sums):
        if first_thread(cuda):
            for b in range(sums.size):
                acc = 0.0
                for i in range(b * 64, b * 64 + 64):
                    acc += a[i] if i < a.size else 0.0
                    if i < out.size:
                        out[i] = acc
                sums[b] = acc
    return kernel


def test_5_5_thread_zero_serial_scan_fails():
    serial = mutant(SCAN, "d = 1", """
        if t == 0:                  # thread 0 scans the block in a loop ...
            for k in range(1, block):
                buf[0, k] += buf[0, k - 1]
        cuda.syncthreads()
        d = block                   # ... and the Hillis-Steele steps never run
    """)
    v = evaluate("5.5", serial)
    assert v.status == FAIL and "serial scan" in v.message, v.message


def test_5_5_unpadded_load_is_named_as_unwritten_shared_memory():
    """Lanes past the end that store nothing leave NaN (garbage on a GPU) in the scan; the
    hint must point at the load, not at the block total."""
    unpadded = mutant(SCAN, "buf[0, t] = a[i] if i < a.size else 0.0", """
        if i < a.size:
            buf[0, t] = a[i]
    """)
    v = evaluate("5.5", unpadded)
    assert v.status == FAIL and "holds NaN" in v.message and "padding" in v.message, v.message


def test_5_5_exclusive_scan_is_named():
    def exclusive(cuda):
        inner = lib.scan_block(64)(cuda)

        def kernel(a, out, sums):
            inner(a, out, sums)
            i = cuda.blockIdx.x * 64 + cuda.threadIdx.x
            if i < out.size:
                out[i] = out[i] - a[i]
        return kernel
    v = evaluate("5.5", exclusive, refuse=False)
    assert v.status == FAIL and "exclusive" in v.message


# ---- 5.6 the register-blocked matmul -----------------------------------------------------

def register_blocked(cuda):
    """Each thread 4 outputs of one column, the b value reused from a register."""
    def kernel(a, b, c):
        sa = cuda.shared.array((16, 16), cuda.float32)
        sb = cuda.shared.array((16, 16), cuda.float32)
        out = cuda.local.array(4, cuda.float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row0 = cuda.blockIdx.y * 16 + 4 * ty
        col = cuda.blockIdx.x * 16 + tx
        m, n_k = a.shape
        for r in range(4):
            out[r] = 0.0
        for p in range(0, n_k, 16):
            for q in range(4):
                lr = ty + 4 * q
                ar = cuda.blockIdx.y * 16 + lr
                sa[lr, tx] = a[ar, p + tx] if ar < m and p + tx < n_k else 0.0
                sb[lr, tx] = b[p + lr, col] if p + lr < n_k and col < b.shape[1] else 0.0
            cuda.syncthreads()
            for k in range(16):
                bk = sb[k, tx]
                for r in range(4):
                    out[r] += sa[4 * ty + r, k] * bk
            cuda.syncthreads()
        for r in range(4):
            if row0 + r < m and col < c.shape[1]:
                c[row0 + r, col] = out[r]
    return kernel


def test_5_6_four_tiled_products_without_register_reuse_fail():
    no_reuse = mutant(register_blocked, """
                bk = sb[k, tx]
                for r in range(4):
                    out[r] += sa[4 * ty + r, k] * bk
    """, """
                for r in range(4):
                    out[r] += sa[4 * ty + r, k] * sb[k, tx]
    """)
    v = evaluate("5.6", no_reuse)
    assert v.status == FAIL and "shared-memory reads" in v.message, v.message


def test_5_6_accumulators_in_local_memory_fail_the_sector_budget():
    # a while loop over the accumulators: a runtime index, so local memory, not registers
    spilled = mutant(register_blocked, """
                for r in range(4):
                    out[r] += sa[4 * ty + r, k] * bk
    """, """
                r = 0
                while r < 4:
                    out[r] += sa[4 * ty + r, k] * bk
                    r += 1
    """)
    v = evaluate("5.6", spilled)
    assert v.status == FAIL and "of them local memory" in v.message, v.message


# ---- 5.7 softmax, one warp per row -------------------------------------------------------

def warp_softmax(cuda):
    """One warp per row, columns strided by 32, a butterfly of shuffles."""
    def kernel(x, out):
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        r = cuda.blockIdx.x * cuda.blockDim.y + w
        if r >= x.shape[0]:
            return
        m, s = online_stats(x, r, lane, 32)
        for k in (16, 8, 4, 2, 1):
            m2 = cuda.shfl_xor_sync(0xFFFFFFFF, m, k)
            s2 = cuda.shfl_xor_sync(0xFFFFFFFF, s, k)
            top = max(m, m2)
            s = s * math.exp(m - top) + s2 * math.exp(m2 - top)
            m = top
        for c in range(lane, x.shape[1], 32):
            out[r, c] = math.exp(x[r, c] - m) / s
    return kernel


def shared_memory_combine(cuda):
    """Warp per row, but the lanes combine (m, d) through shared memory, lane 0 alone."""
    def kernel(x, out):
        ms = cuda.shared.array((4, 32), cuda.float32)
        ds = cuda.shared.array((4, 32), cuda.float32)
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        r = cuda.blockIdx.x * 4 + w
        m, d = -math.inf, 0.0
        if r < x.shape[0]:
            for c in range(lane, x.shape[1], 32):
                m_new = max(m, x[r, c])
                d = d * math.exp(m - m_new) + math.exp(x[r, c] - m_new)
                m = m_new
        ms[w, lane] = m
        ds[w, lane] = d
        cuda.syncthreads()
        if lane == 0 and r < x.shape[0]:
            big = -math.inf
            for k in range(32):
                big = max(big, ms[w, k])
            tot = 0.0
            for k in range(32):
                tot += ds[w, k] * math.exp(ms[w, k] - big)
            ms[w, 0] = big
            ds[w, 0] = tot
        cuda.syncthreads()
        m, d = ms[w, 0], ds[w, 0]
        if r < x.shape[0]:
            for c in range(lane, x.shape[1], 32):
                out[r, c] = math.exp(x[r, c] - m) / d
    return kernel


def one_thread_per_row_in_warp_blocks(cuda):
    """5.3's mapping under 5.7's launch: lane 0 of each warp does its row alone."""
    def kernel(x, out):
        r = cuda.blockIdx.x * 4 + cuda.threadIdx.y
        if r < x.shape[0] and cuda.threadIdx.x == 0:
            softmax_row(x, out, r)
        cuda.shfl_xor_sync(0xFFFFFFFF, 0.0, 1)
    return kernel


def test_5_7_three_passes_read_x_three_times():
    three = mutant(warp_softmax, "online_stats(x, r, lane, 32)",
                   "two_pass_stats(x, r, lane, 32)")
    # the butterfly combines the maxima only: the sums stay per lane, so the values are wrong
    three = mutant(three, "s = s * math.exp(m - top) + s2 * math.exp(m2 - top)", "pass")
    v = evaluate("5.7", three)
    assert v.status == FAIL


# ---- 5.8 FlashAttention ------------------------------------------------------------------

# Flash attention written from Algorithm 1, as the chapter's solution does: scores of a
# tile in shared memory, each thread one output element of its query row, the statistics in
# registers.
flash = solution_answer("05", "5.8")


def untiled_fused(cuda):
    """Fused (no N x N matrix anywhere) but untiled: each thread reads every key and
    value of its row from global memory."""
    def kernel(q, k, v, o):
        x, y = cuda.threadIdx.x, cuda.threadIdx.y
        n = q.shape[0]
        i = cuda.blockIdx.x * 8 + y
        if i < n:
            m, l, acc = -math.inf, 0.0, 0.0
            for j in range(n):
                s = 0.0
                for e in range(8):
                    s += q[i, e] * k[j, e]
                s /= math.sqrt(8.0)
                m_new = max(m, s)
                l = l * math.exp(m - m_new) + math.exp(s - m_new)
                acc = acc * math.exp(m - m_new) + math.exp(s - m_new) * v[j, x]
                m = m_new
            o[i, x] = acc / l
    return kernel


def scores_in_local_memory(cuda):
    """Each thread keeps its query row's N scores in a local array: no N x N matrix in
    global memory, but N x N x d of it in local memory (device memory)."""
    def kernel(q, k, v, o):
        sk = cuda.shared.array((8, 8), cuda.float32)
        sv = cuda.shared.array((8, 8), cuda.float32)
        s = cuda.local.array(64, cuda.float32)
        x, y = cuda.threadIdx.x, cuda.threadIdx.y
        n = q.shape[0]
        i = cuda.blockIdx.x * 8 + y
        qi = cuda.local.array(8, cuda.float32)
        for e in range(8):
            qi[e] = q[i, e] if i < n else 0.0
        for j0 in range(0, n, 8):
            sk[y, x] = k[j0 + y, x] if j0 + y < n else 0.0
            cuda.syncthreads()
            for c in range(8):
                if j0 + c < n:
                    dot = 0.0
                    for e in range(8):
                        dot += qi[e] * sk[c, e]
                    s[j0 + c] = dot / math.sqrt(8.0)
            cuda.syncthreads()
        m = -math.inf
        for j in range(n):
            m = max(m, s[j])
        l = 0.0
        for j in range(n):
            l += math.exp(s[j] - m)
        acc = 0.0
        for j0 in range(0, n, 8):
            sv[y, x] = v[j0 + y, x] if j0 + y < n else 0.0
            cuda.syncthreads()
            for c in range(8):
                if j0 + c < n:
                    acc += math.exp(s[j0 + c] - m) * sv[c, x]
            cuda.syncthreads()
        if i < n:
            o[i, x] = acc / l
    return kernel


flash_racy = mutant(flash, """
            m = m_tile
            cuda.syncthreads()
""", """
            m = m_tile
""")


def test_5_8_no_rescaling_of_the_output_is_wrong():
    no_rescale = mutant(flash, "acc = alpha * acc + pv", "acc = acc + pv")
    v = evaluate("5.8", no_rescale)
    assert v.status == FAIL and "scaled_dot_product_attention" in v.message, v.message


def test_whose_names_the_kernel_that_ran():
    from labkit.check import stub
    assert whose(flash, "5.8") == "your kernel"
    assert "has not passed" in whose(get("5.3").reference, "5.3")
    assert "finish exercise 5.8 first" in whose(stub(lambda cuda: None), "5.8")


# ---- tables: right kernels written independently, and wrong ones with their hints -------

RIGHT = [("5.2", tiled_for_phases), ("5.3", online_softmax_rescaling_once),
         ("5.5", scan_two_buffers), ("5.6", register_blocked), ("5.7", warp_softmax),
         ("5.8", flash)]


@pytest.mark.parametrize("ex, kernel", RIGHT, ids=[f"{e}-{k.__name__}" for e, k in RIGHT])
def test_an_independent_right_kernel_passes(ex, kernel):
    v = evaluate(ex, kernel)
    assert v.status == PASS, v.message


# (exercise, kernel, refuse labkit's, text each that the message must contain)
WRONG = [
    ("5.1", last_warp_unrolled(False), True,
     ("shared-memory races", "lanes of one warp with no cuda.syncwarp()")),
    ("5.1", serial_sum, True, ("serial sum",)),       # n = 1 first: serial, not busy yet
    ("5.2", lib.matmul_coalesced, False, ("ceil(n / TILE)",)),
    ("5.2", serial_matmul, True, ("one thread made",)),
    # thread 0 copies a and b into local arrays: global reads once, the rest local memory
    ("5.2", thread0_local_copy, True, ("of them local memory", "one thread made")),
    # threadIdx.x on the rows: 8 sectors per warp request instead of 4, two-way conflicts
    ("5.2", tiled_rows_on_x, True, ("sectors per warp request", "2-way")),
    ("5.3", lib.softmax_rows_naive, False, ("read 3 times", "one pass")),
    ("5.3", serial_rows, True, ("one thread made",)),
    ("5.3", three_pass_over_local_copy, True, ("one thread made",)),
    ("5.5", serial_scan, True, ("serial scan",)),
    ("5.5", mutant(SCAN, "buf[1 - src, t] = v", "buf[src, t] = v"), True,
     ("shared-memory race",)),
    ("5.5", mutant(SCAN, "if t >= d:", "if t > d:"), True, ("t >= d",)),
    ("5.6", serial_matmul, True, ("one thread made",)),
    ("5.7", shared_memory_combine, True, ("no warp shuffle",)),
    ("5.7", one_thread_per_row_in_warp_blocks, True, ("one thread made",)),
    ("5.8", untiled_fused, True, ("an element of k was read",)),
    ("5.8", scores_in_local_memory, True, ("of them local memory",)),
    ("5.8", flash_racy, True, ("shared-memory race",)),
]


@pytest.mark.parametrize("ex, kernel, refuse, texts", WRONG,
                         ids=[f"{w[0]}-{getattr(w[1], '__name__', 'mutant')}-{k}"
                              for k, w in enumerate(WRONG)])
def test_a_wrong_kernel_fails_with_its_hint(ex, kernel, refuse, texts):
    v = evaluate(ex, kernel, refuse=refuse)
    assert v.status == FAIL, v.message
    for text in texts:
        assert text in v.message, (text, v.message)
