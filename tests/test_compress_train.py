"""Chapter 08's torch experiments on digits, and the widgets."""
import matplotlib
import numpy as np
import pytest
import torch

from labkit.compress import train as T
from labkit.compress import widgets
from labkit.data import load_digits
from widget_checks import first_slider_test

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def trained():
    split = load_digits()
    return split, T.train_mlp((64, 64, 10), split, epochs=10)


def test_quantized_models_keep_accuracy_and_shrink(trained):
    split, m = trained
    rows = T.compare_int8(m, split, repeats=2)
    fp32, lab, dyn = rows
    assert fp32.accuracy > 0.9
    assert lab.accuracy >= fp32.accuracy - 0.02 and dyn.accuracy >= fp32.accuracy - 0.02
    assert lab.nbytes < fp32.nbytes / 3 and dyn.nbytes < fp32.nbytes
    acc = T.accuracy_vs_bits(m, split, bits=(8, 2))
    assert acc["per channel"][0] >= fp32.accuracy - 0.02 and acc["per tensor"][1] < 0.8


def test_pruning_curves_fall(trained):
    split, m = trained
    un = T.prune_curve(m, split, [0.0, 0.5, 0.99])
    st = T.prune_curve(m, split, [0.0, 0.5, 0.99], "structured")
    assert un[0] == st[0] and un[2] < un[0] and st[2] < 0.5
    with pytest.raises(ValueError, match="kind"):
        T.prune_curve(m, split, [0.5], "random")


def test_distillation_uses_the_transfer_set(trained):
    split, teacher = trained
    alone = T.train_mlp((64, 16, 10), split, epochs=30, labelled=60)
    kd = T.train_mlp((64, 16, 10), split, epochs=10, labelled=60, teacher=teacher, alpha=0.9)
    assert T.accuracy(kd, split.x_test, split.y_test) > T.accuracy(alone, split.x_test, split.y_test)


def test_sparse_timing_and_autocast():
    t = T.sparse_matmul_timing(n=128, batch=16, repeats=1)
    assert len(t) == 4 and all(v > 0 for v in t.values())
    d = T.autocast_dtypes()
    assert d["linear"] == "bfloat16" and d["matmul"] == "bfloat16"
    assert d["cross_entropy"] == "float32" and d["mse_loss"] == "float32"


def test_fusion_timing_bandwidth_and_speedup():
    from labkit.kernels.cpu import EPILOGUE_ARRAY_TRAFFIC
    r = T.fusion_timing(n=4096, repeats=2)
    assert r.n == 4096 and r.numpy_s > 0 and r.fused_s > 0
    assert r.traffic == EPILOGUE_ARRAY_TRAFFIC == {"numpy": 11, "fused": 3}
    assert r.bandwidth("numpy") == 11 * 4 * 4096 / r.numpy_s
    assert r.bandwidth("fused") == 3 * 4 * 4096 / r.fused_s
    assert r.speedup == r.numpy_s / r.fused_s
    fixed = T.FusionTiming(10, 2.0, 0.5, {"numpy": 11, "fused": 3})
    assert fixed.speedup == 4.0 and fixed.bandwidth("numpy") == 11 * 4 * 10 / 2.0
    with pytest.raises(ValueError, match="which must be one of"):
        fixed.bandwidth("torch")
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        T.fusion_timing(n=0)


def test_parameter_counts_from_torch():
    from labkit.compress.model import conv_cost
    from labkit.memory.measure import count_params
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    assert count_params(mlp) == 64 * 16 + 16 + 16 * 10 + 10
    for k, m, n in ((3, 32, 64), (5, 16, 24), (1, 8, 8)):
        assert T.torch_separable_params(k, m, n) == k * k * m + m * n \
            == conv_cost(k, m, n, 7).separable_params


test_first_slider_changes_output = first_slider_test(widgets, ["quant_widget", "scaling_widget"],
                                                     steps=2)


def test_widget_functions_numbers(capsys):
    lost, over = widgets.show_scaling(0, np.array([1e-8, 1e-3]))
    assert lost == 0.5 and over == 0.0
    lost, over = widgets.show_scaling(30, np.array([1e-8, 1e-3]))
    assert lost == 0.0 and over == 0.5
    rel = widgets.show_quant(8, True, True)
    assert rel.max() < 0.01
    with pytest.raises(ValueError, match="grads"):
        widgets.scaling_widget(grads=[])
    with pytest.raises(ValueError, match=r"log2_scale must be an integer in \[0, 40\]"):
        widgets.scaling_widget(log2_scale=41)
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 8\]"):
        widgets.quant_widget(bits=1)
    with pytest.raises(TypeError, match="per_channel must be True or False"):
        widgets.quant_widget(per_channel=1)
    matplotlib.pyplot.close("all")
