"""One function, three static graphs (labkit.autograd.frameworks): labkit's trace,
TorchDynamo's FX graph and the jaxpr jax.jit traces agree in value and differ where the
frameworks differ (explicit broadcasting in JAX; a data-dependent if)."""
import numpy as np
import pytest

from labkit.autograd.frameworks import jit_data_dependent_if, seed_layer, three_graphs


def test_three_graphs_of_seed_layer():
    r = three_graphs(batch=4, width=3, seed=0)
    assert r.agree and set(r.values) == {"labkit", "torch", "jax"}
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    assert r.ops == {"labkit": 5, "dynamo": 5, "jax": 6}      # JAX writes the broadcast out
    assert "broadcast_in_dim" in r.jaxpr and "dot_general" in r.jaxpr
    assert "a:f32[4,3] b:f32[3,3] c:f32[3]" in r.jaxpr and "\x1b" not in r.jaxpr  # no colour
    assert "matmul(%x, %w)" in r.labkit and "torch.tanh" in r.dynamo
    prims = r.primitives("grad_jaxpr")
    assert prims["add_any"] >= 1             # h * h: the two contributions to tanh(...) added
    assert "reduce_sum[axes=(0,)" in r.grad_jaxpr            # the bias broadcast's adjoint
    assert r.primitives("jaxpr")["reduce_sum"] == 1
    h = np.tanh(x @ np.eye(3) + 1.0)                      # written once, run by numpy too
    assert seed_layer(x, np.eye(3), np.ones(3), np.tanh) == pytest.approx((h * h).sum())
    with pytest.raises(ValueError, match="which"):
        r.primitives("fx")
    with pytest.raises(ValueError, match="batch"):
        three_graphs(batch=0)
    assert r.jax_version.split(".")[0].isdigit()


def test_jax_jit_refuses_a_data_dependent_if_that_runs_eagerly():
    out = jit_data_dependent_if(7)
    assert out.eager_ok and out.error == "TracerBoolConversionError"
    assert "boolean conversion" in out.message
    with pytest.raises(ValueError, match="n"):
        jit_data_dependent_if(0)
