"""tests/mutants.py: a wrong answer made as "the reference with one change" behaves like a
hand-written one (plain functions, kernel factories with closures, the tracer, Numba's
simulator), and a mutation that no longer matches the reference fails loudly."""
import inspect

import labkit  # noqa: F401  (selects Numba's simulator before numba is imported)
import numpy as np
import pytest

from labkit.check import ch11
from labkit.kernels import library as lib
from labkit.kernels import run_numba
from labkit.kernels.tracer import run_traced
from mutants import mutant

A = np.random.default_rng(0).standard_normal(100).astype(np.float32)


def _sample(x):
    """Sum of the odd k < x; total += k."""
    total = 0
    for k in range(x):
        if k % 2:
            total += k
    return total


def test_plain_function_mutant_changes_only_the_copy():
    reference = ch11._can_backfill_first_end
    strict = mutant(reference, "now + est <= shadow", "now + est < shadow")
    # head needs 4 (3 free, 1 more at t=10); the job ends exactly at the shadow time
    case = (0.0, 3, [(10.0, 1)], 4, 2, 10.0)
    assert reference(*case) is True and strict(*case) is False
    assert ch11._can_backfill_first_end is reference      # the module is untouched
    assert "__mutant_scope__" not in vars(ch11)
    assert "_can_backfill_first_end_mutant" not in vars(ch11)
    assert strict.__globals__ is reference.__globals__    # same module globals
    assert strict.__name__ == "_can_backfill_first_end_mutant"
    assert strict.__doc__ == reference.__doc__


def test_source_shows_the_change_and_a_mutant_mutates_again():
    once = mutant(_sample, "if k % 2:", "if k % 2 == 0:")
    twice = mutant(once, "total += k", "total += 2 * k")
    assert (_sample(6), once(6), twice(6)) == (9, 6, 12)
    src = inspect.getsource(twice)
    assert "        if k % 2 == 0:\n            total += 2 * k\n" in src
    assert '"""Sum of the odd k < x; total += k."""' in src        # docstring untouched


def test_block_replacement_keeps_relative_indentation():
    # old and new may be written at any indentation; old may start deeper than it ends
    m = mutant(_sample, """
                total += k
        return total
    """, """
            total -= k
    return -total
    """)
    assert m(6) == 9
    assert "            total -= k\n    return -total\n" in inspect.getsource(m)
    deleted = mutant(_sample, """
        if k % 2:
            total += k
    """, "total += k")
    assert deleted(6) == 15


def test_missing_ambiguous_and_empty_mutations_are_errors():
    with pytest.raises(ValueError, match=r"occurs 0 times in the source of .*_sample, "
                                         r"expected 1: did the reference change\?"):
        mutant(_sample, "total -= k", "total += k")
    with pytest.raises(ValueError, match=r"occurs 3 times .*source lines \[3, 6, 7\]"):
        mutant(_sample, "total", "acc")
    assert mutant(_sample, "total", "acc", count=3)(6) == 9        # every occurrence
    with pytest.raises(ValueError, match="unchanged"):
        mutant(_sample, "total += k", "total += k")
    with pytest.raises(ValueError, match="blank"):
        mutant(_sample, "  ", "x")
    with pytest.raises(ValueError, match="count"):
        mutant(_sample, "total", "acc", count=0)
    with pytest.raises(TypeError, match="Python function"):
        mutant(len, "x", "y")


def test_docstrings_are_not_searched():
    # add_ten's docstring also says "out[i] = a[i] + 10": only the code line counts
    plus_one = mutant(lib.add_ten, "out[i] = a[i] + 10", "out[i] = a[i] + 1")
    assert "out[i] = a[i] + 10 (a map" in inspect.getsource(plus_one)


@pytest.mark.parametrize("runner", ["tracer", "numba simulator"])
def test_kernel_mutants_run_like_hand_written_kernels(runner):
    run = run_traced if runner == "tracer" else run_numba
    # a plain fn(cuda) kernel
    out = np.zeros_like(A)
    run(mutant(lib.add_ten, "a[i] + 10", "a[i] + 1"), 4, 32, A, out)
    np.testing.assert_allclose(out, A + 1)
    # a cached factory: the mutant keeps its closure (block = 64) and its barriers
    doubled = mutant(lib.reduce_shared(64), "out[cuda.blockIdx.x] = buf[0]",
                     "out[cuda.blockIdx.x] = 2 * buf[0]")
    sums = np.zeros(2, dtype=np.float32)
    run(doubled, 2, 64, A, sums)
    np.testing.assert_allclose(sums, 2 * np.array([A[:64].sum(), A[64:].sum()]), rtol=1e-5)
    ref_sums = np.zeros(2, dtype=np.float32)
    run(lib.reduce_shared(64), 2, 64, A, ref_sums)
    np.testing.assert_allclose(sums, 2 * ref_sums, rtol=1e-6)


def test_a_decorated_builder_is_mutated_undecorated():
    # lib.reduce_shared is lru_cached: the mutant is the bare builder, the cache untouched
    builder = mutant(lib.reduce_shared, 'f"reduce_shared_{block}"', 'f"reduce_mutant_{block}"')
    assert builder(64).__name__ == "reduce_mutant_64"
    assert lib.reduce_shared(64).__name__ == "reduce_shared_64"
