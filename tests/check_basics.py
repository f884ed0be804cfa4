"""What every chapter's check tests (``tests/test_chNN_checks.py``) repeat, written once.

* ``reference_and_missing_test(ids, ...)``: the parametrized test that labkit's reference
  passes each exercise (unrefused), that labkit's own is refused where asked, and that a
  missing answer (None, and any stand-ins given) is reported missing; a module binds it to
  its test's name (``test_reference_passes_and_missing_is_missing = ...``).
* ``assert_fails(ex, answer, *hints)``: the answer fails, with every hint in the message;
  ``mutants_fail_test(ex, right, table)`` the parametrized test that ``right`` with each
  ``(old, new, hint)`` of ``table`` applied (``mutants.mutant``) fails with its hint.
* ``stub_kernel``: a learner notebook's kernel before it is written (it raises
  NotImplementedError), which a check reports missing.
* ``first_thread(cuda)`` and ``one_thread(name, value)``: the wrong kernel in which thread (0, 0)
  of block (0, 0) does every element alone.
"""
from __future__ import annotations

import numpy as np
import pytest

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from mutants import mutant


def reference_and_missing_test(ids, *missing, refused=False, handles=False):
    """A test over ``ids``: the reference passes (``refuse=False``), is refused as labkit's
    own (``refused``), None and each of ``missing`` are missing, and the exercise's checker
    is a handles checker (``handles``)."""
    @pytest.mark.parametrize("ex", ids)
    def test(ex):
        e = get(ex)
        if handles:
            assert e.handles, f"{ex} is still a legacy (answer) checker"
        assert evaluate(ex, e.reference, refuse=False).status == PASS
        if refused:
            assert evaluate(ex, e.reference).status == FAIL          # labkit's own: refused
        for answer in (None, *missing):
            assert evaluate(ex, answer).status == MISSING, answer
    return test


def assert_fails(ex, answer, *hints, refuse=True, statuses=(FAIL,)):
    """``answer`` to exercise ``ex`` gets a verdict in ``statuses`` whose message holds
    every one of ``hints``; the verdict."""
    v = evaluate(ex, answer, refuse=refuse)
    assert v.status in statuses, v.message
    for hint in hints:
        assert hint in v.message, (hint, v.message)
    return v


def stub_kernel(cuda):
    """The kernel factory a learner notebook ships: its kernel raises NotImplementedError."""
    def kernel(*args):
        raise NotImplementedError("write this")
    return kernel


def mutants_fail_test(ex, right, table):
    """A test over ``table``'s ``(old, new, hint)``: ``mutant(right, old, new)`` fails
    exercise ``ex`` with ``hint`` in its message."""
    @pytest.mark.parametrize("old, new, hint", table)
    def test(old, new, hint):
        assert_fails(ex, mutant(right, old, new), hint)
    return test


def first_thread(cuda) -> bool:
    """Whether this is thread (0, 0) of block (0, 0)."""
    return (cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0 and cuda.blockIdx.x == 0
            and cuda.blockIdx.y == 0)


def one_thread(name, value):
    """A kernel factory (``fn(cuda)``) named ``name`` whose kernel takes the inputs and then
    the output; thread (0, 0) of block (0, 0) alone writes every element of the output in
    row-major order, ``out[ix] = value(*inputs, ix)`` (``ix`` an index tuple), and the other
    threads do nothing: the serial loop a learner new to CUDA writes."""
    def factory(cuda):
        def kernel(*arrays):
            *inputs, out = arrays
            if first_thread(cuda):
                for ix in np.ndindex(*out.shape):
                    out[ix] = value(*inputs, ix)
        return kernel
    factory.__name__ = factory.__qualname__ = name
    return factory
