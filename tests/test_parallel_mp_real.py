"""PyTorch's own model-parallel APIs, run for real in 2 gloo processes on CPU, equal the
single-process reference to 1e-6 (float64, so in fact to ~1e-15). One launch for all three:
each process start costs seconds here."""
import numpy as np
import pytest

from labkit.parallel import mp_real


@pytest.fixture(scope="module")
def runs():
    return {r.name: r for r in mp_real.run_all()}


@pytest.mark.slow
def test_dtensor_tensor_parallel_equals_reference(runs):
    r = runs["tensor parallel MLP"]
    assert r.max_error < 1e-6 and "16 of 32" in r.detail


@pytest.mark.slow
def test_fully_shard_equals_reference(runs):
    r = runs["sharded data parallel"]
    assert r.max_error < 1e-6 and "16 of 32" in r.detail


@pytest.mark.slow
def test_pipelining_equals_reference(runs):
    r = runs["two-stage pipeline"]
    assert r.max_error < 1e-6 and "544 + 528" in r.detail


def test_reference_step_is_sgd():
    ref = mp_real.reference(lr=0.1)
    again = mp_real.reference(lr=0.0)
    np.testing.assert_allclose(ref["w0_after"], again["w0_after"] - 0.1 * ref["grad0"], atol=1e-15)
    assert ref["loss"] == pytest.approx(again["loss"])


@pytest.mark.parametrize("kw, word", [({"world": 3}, "world"), ({"microbatches": 3}, "microbatches")])
def test_bad_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        mp_real.run_all(**kw)


@pytest.mark.slow
def test_run_pipeline_alone():
    r = mp_real.run_pipeline()
    assert r.max_error < 1e-12 and "544 + 528" in r.detail
