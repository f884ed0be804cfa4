"""Static graphs: traced and optimized graphs equal eager results on new inputs."""
import matplotlib
import numpy as np
import pytest

from labkit.autograd import Tensor, functional as F
from labkit.autograd.draw import draw_graph, layout
from labkit.autograd.passes import (PASSES, apply_passes, eliminate_dead_code, fold_constants,
                                    fuse_elementwise, optimize)
from labkit.autograd.trace import Graph, Node, graph_of, trace

matplotlib.use("Agg")
RNG = np.random.default_rng(3)
W = Tensor(RNG.normal(size=(5, 7)))


def model(x):
    scale = Tensor(np.linspace(0.5, 1.5, 7)) * 2.0 + 1.0   # constant subgraph
    _unused = (x * 3.0).exp().sum()                          # dead code
    h = (x @ W * scale - 0.25).tanh()                        # fusible chain after matmul
    return F.log_softmax(h * 0.5, -1)


def two_outputs(a, b):
    s = (a * b).sigmoid()
    return s.sum(axis=0), (s + a).relu()


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_pass_preserves_results_on_new_inputs(name):
    g = PASSES[name](trace(model, RNG.normal(size=(4, 5))))
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(4, 5))
        np.testing.assert_allclose(g.run(x), model(Tensor(x)).data, rtol=1e-12)


def test_passes_do_their_job():
    g = trace(model, RNG.normal(size=(4, 5)))
    folded = fold_constants(g)
    assert sum(n.op == "const" for n in folded.nodes) > sum(n.op == "const" for n in g.nodes)
    assert folded.stats().kernels == g.stats().kernels - 2   # mul, add on constants
    dce = eliminate_dead_code(g)
    assert "exp" not in {n.op for n in dce.nodes} and "exp" in {n.op for n in g.nodes}
    fused = fuse_elementwise(eliminate_dead_code(fold_constants(g)))
    labels = [n.label() for n in fused.nodes if n.op == "fused"]
    assert labels == ["fused[mul,sub,tanh,mul]"]
    assert fused.stats().intermediate_bytes < dce.stats().intermediate_bytes
    assert optimize(g).stats() == fused.stats()
    with pytest.raises(ValueError, match="unknown pass"):
        apply_passes(g, ["nope"])


def test_fusion_keeps_values_with_several_users_and_outputs():
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    g = trace(two_outputs, a, b)
    f = fuse_elementwise(g)
    for got, want in zip(f.run(a, b), two_outputs(Tensor(a), Tensor(b))):
        np.testing.assert_allclose(got, want.data)
    # s has two users (sum and add): it must stay materialized
    assert any(n.name == "t1" and n.op == "fused" for n in f.nodes)


def test_graph_printing_errors_and_graph_of():
    g = trace(model, RNG.normal(size=(4, 5)))
    text = str(g)
    assert text.startswith("graph(x):") and "matmul(%x, %c" in text and "return %t" in text
    with pytest.raises(ValueError, match="takes 1 inputs"):
        g.run()
    with pytest.raises(ValueError, match="before they are defined"):
        Graph((Node("a", "exp", ("b",)),), (), ("a",))
    with pytest.raises(ValueError, match="at least one"):
        trace(model)
    x = Tensor(RNG.normal(size=(2, 5)), requires_grad=True)
    ga = graph_of(model(x))
    assert ga.inputs and ga.stats().kernels >= 5


def test_draw_graph_returns_a_figure_with_layered_layout():
    g = optimize(trace(model, RNG.normal(size=(4, 5))))
    pos = layout(g)
    for n in g.nodes:
        for i in n.inputs:
            assert pos[i][0] < pos[n.name][0]
    fig = draw_graph(g)
    assert fig.axes and "kernels" in fig.axes[0].get_title()
    x = Tensor(np.ones((2, 5)), requires_grad=True)
    assert draw_graph(model(x)).axes
    with pytest.raises(ValueError, match="Graph or a Tensor"):
        draw_graph(42)
    matplotlib.pyplot.close("all")


def test_torch_fx_swap_pass_rewrites_the_graph():
    import torch

    from labkit.autograd.fx_passes import swap_modules

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 9), torch.nn.ReLU(), torch.nn.Linear(9, 4),
                              torch.nn.ReLU())
    gm, n = swap_modules(net, torch.nn.ReLU, torch.nn.functional.gelu)
    assert n == 2 and "gelu" in gm.code and "relu" not in gm.code.lower()
    x = torch.randn(5, 6)
    want = torch.nn.functional.gelu(net[2](torch.nn.functional.gelu(net[0](x))))
    torch.testing.assert_close(gm(x), want)
    torch.testing.assert_close(net(x), torch.relu(net[2](torch.relu(net[0](x)))))  # unchanged
    assert swap_modules(net, torch.nn.Tanh, torch.tanh)[1] == 0
    with pytest.raises(ValueError, match="module_type"):
        swap_modules(net, "ReLU", torch.tanh)


def test_dynamo_capture_breaks_the_graph_at_data_dependent_python():
    import torch

    from labkit.autograd.fx_passes import dynamo_capture

    def straight(x):
        return torch.tanh(x) * 2 + x.sin()

    def branchy(x):
        y = torch.tanh(x) * 2
        if y.sum() > 0:          # Python needs the value: Dynamo must end the graph here
            y = y + 1
        return y.sin()

    x = torch.linspace(-1, 2, 7)
    one = dynamo_capture(straight, x)
    assert one.graph_breaks == 0 and one.ops == (4,) and one.matches_eager
    two = dynamo_capture(branchy, x)
    assert two.graph_breaks == 1 and two.matches_eager
    assert "gt" in two.graphs[0] and "sin" in two.graphs[1]
    with pytest.raises(ValueError, match="fn must be callable"):
        dynamo_capture(3, x)
    with pytest.raises(ValueError, match="inputs must be one or more torch tensors"):
        dynamo_capture(straight, [1.0])
