"""What chapter 02's cells show, computed by labkit: gradients against PyTorch, the pass
pipeline on the layered program, the deep chain, the seed's SimpleNet and the graph break."""
import shutil

import numpy as np
import pytest
import torch

from labkit.autograd.compare import format_rule_errors, rules_vs_torch, two_layer_vs_torch
from labkit.autograd.examples import deep_chain, optimize_program
from labkit.autograd.fx_passes import (dynamo_capture, graph_break_step, inductor_cpp_compiler,
                                       swap_and_compare)
from labkit.perf.stack import simple_net


@pytest.mark.parametrize("seed", [0, 3])
def test_two_layer_gradients_agree_with_torch_and_central_differences(seed):
    r = two_layer_vs_torch(seed=seed)
    assert r.max_abs_diff < 1e-12
    assert r.gradcheck.ok and r.gradcheck.max_abs_error < 1e-6
    assert [j.shape for j in r.gradcheck.analytic] == [(1, 35), (1, 21)]   # W1 5x7, W2 7x3
    with pytest.raises(ValueError, match="sizes"):
        two_layer_vs_torch(sizes=(5, 7))
    with pytest.raises(ValueError, match="batch"):
        two_layer_vs_torch(batch=0)


def test_rules_vs_torch_is_zero_for_right_rules_and_names_the_wrong_ones():
    from labkit.autograd.rules import REFERENCE_FORWARDS, REFERENCES, RuleSet

    rows = rules_vs_torch(RuleSet(**REFERENCES, forward=dict(REFERENCE_FORWARDS)))
    assert [r.op for r in rows] == ["matmul", "add", "mul", "relu", "sum", "mean",
                                    "log_softmax", "getitem", "softmax"]
    assert all(r.max_error < 1e-12 and r.whose == "labkit's reference" for r in rows)

    def unsummed(g, a, b):               # grad_b left with the batch axis: a shape error
        return g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g

    def assigned(g, shape, index):        # repeated indices overwrite: values off
        out = np.zeros(shape)
        out[index] = g
        return out

    def unshifted(x, axis=-1):
        return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))
    with np.errstate(all="ignore"):
        rows = {r.op: r for r in rules_vs_torch(RuleSet(matmul=unsummed, getitem=assigned,
                                                        relu=lambda g, x: g * (x >= 0),
                                                        forward={"log_softmax": unshifted}))}
    assert rows["matmul"].max_error == np.inf and "grad_b has shape (4, 5, 2)" in rows["matmul"].note
    assert rows["getitem"].max_error > 0.1 and rows["relu"].max_error > 0.1
    assert rows["log_softmax forward"].max_error == np.inf and "NaN or infinity" in \
        rows["log_softmax forward"].note
    assert set(rows) == {"matmul", "getitem", "relu", "log_softmax forward"}
    assert "yours" in format_rule_errors(list(rows.values()))
    with pytest.raises(TypeError, match="RuleSet"):
        rules_vs_torch({"matmul": unsummed})


def test_optimize_program_counts_the_kernels_each_pass_removes():
    one = optimize_program(depth=1)
    # per layer: matmul, mul, mul(const), add, tanh + dead mul, sum; then softmax's kernel(s)
    assert one.traced.stats().kernels == 8 and one.optimized.stats().kernels == 3
    assert one.same_on_new_input
    three = optimize_program(depth=3)
    assert (three.traced.stats().kernels, three.optimized.stats().kernels) == (22, 7)
    no_dce = optimize_program(depth=1, dead_code=lambda g: g)
    assert no_dce.optimized.stats().kernels == 5      # the dead mul and sum stay
    assert no_dce.same_on_new_input
    with pytest.raises(TypeError, match="dead_code"):
        optimize_program(dead_code="dce")
    with pytest.raises(ValueError, match="depth"):
        optimize_program(depth=0)


def test_deep_chain_gradient_is_the_closed_form():
    leaf, root = deep_chain(5000, 1.0002)
    assert leaf.data.dtype == np.float32
    bound = 5000 * 2.0 ** -24          # n rounding errors of at most u each (float32)
    assert root.item() == pytest.approx(0.5 * 1.0002 ** 5000, rel=bound)
    root.backward()
    assert leaf.grad.item() == pytest.approx(1.0002 ** 5000, rel=bound)
    with pytest.raises(ValueError, match="depth"):
        deep_chain(0)
    with pytest.raises(ValueError, match="factor"):
        deep_chain(3, float("nan"))


def test_swap_and_compare_on_the_seeds_simple_net():
    net = simple_net(seed=0)
    r = swap_and_compare(net, torch.nn.ReLU, torch.nn.functional.gelu, torch.randn(5, 10))
    assert r.replaced == 1 and r.changed
    assert "call_module[target=relu]" in r.traced and "gelu" in r.code and "relu" not in r.code
    same = swap_and_compare(net, torch.nn.Tanh, torch.tanh, torch.randn(5, 10))
    assert same.replaced == 0 and not same.changed
    with pytest.raises(ValueError, match="x must be a torch tensor"):
        swap_and_compare(net, torch.nn.ReLU, torch.tanh, np.ones((5, 10)))


def test_graph_break_step_breaks_once_and_the_compiler_is_inductors():
    cap = dynamo_capture(graph_break_step, torch.linspace(-1, 2, 7))
    assert cap.graph_breaks == 1 and cap.matches_eager
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler
    try:
        want = shutil.which(get_cpp_compiler())
    except InvalidCxxCompiler:
        want = None
    assert inductor_cpp_compiler() == want


def test_inductor_cpp_compiler_is_none_without_one(monkeypatch):
    from torch._inductor import config
    monkeypatch.setattr(config.cpp, "cxx", (None, "no-such-compiler-labkit"))
    assert inductor_cpp_compiler() is None
