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
    fp32, lab, dyn, dyn_pc = rows
    assert fp32.accuracy > 0.9
    for r in (lab, dyn, dyn_pc):
        assert r.accuracy >= fp32.accuracy - 0.02 and r.nbytes < fp32.nbytes
    assert lab.nbytes < fp32.nbytes / 3 and dyn.nbytes < dyn_pc.nbytes     # per channel: more scales
    acc = T.accuracy_vs_bits(m, split, bits=(8, 2))
    assert acc["per channel"][0] >= fp32.accuracy - 0.02 and acc["per tensor"][1] < 0.8


def test_int8_weight_schemes_torch_default_is_per_tensor(trained):
    """quantize_dynamic's default qconfig quantizes weights per tensor (MinMaxObserver,
    per_tensor_symmetric, range [-128, 127]: scale = max|w| / 127.5); labkit's QuantLinear
    per output channel over [-127, 127] (max|w_row| / 127)."""
    _, m = trained
    lab, dflt, pc = T.int8_weight_schemes(m)
    assert (lab.qscheme, lab.scales) == ("per_channel_symmetric", 64)
    assert lab.levels == pytest.approx(127.0, rel=1e-12)
    assert (dflt.qscheme, dflt.scales) == ("per_tensor_affine", 1)
    assert (pc.qscheme, pc.scales) == ("per_channel_affine", 64)
    assert dflt.levels == pytest.approx(127.5, rel=1e-6) and pc.levels == pytest.approx(127.5, rel=1e-6)


def test_pruning_masks_have_the_exact_sparsity(trained):
    _, m = trained
    sizes = [(lin.out_features, lin.in_features) for lin in T.linears(m)[:-1]]
    for s in (0.0, 0.3, 0.5, 0.9, 1.0):
        pruned, masks = T.prune(m, s)
        for (rows, cols), (wm, bm), lin in zip(sizes, masks, T.linears(pruned)):
            assert int((wm == 0).sum()) == int((lin.weight == 0).sum()) == round(s * rows * cols)
            assert bm is None
        pruned, masks = T.prune(m, s, "structured")
        for (rows, cols), (wm, bm), lin in zip(sizes, masks, T.linears(pruned)):
            k = round(s * rows)
            assert int((lin.weight == 0).all(dim=1).sum()) == k == int((bm == 0).sum())
            assert int((lin.bias[bm == 0] != 0).sum()) == 0
    assert T.zero_fraction(T.prune(m, 0.5)[0]) == 0.5
    # the last layer is never pruned, the model itself is left as it was
    assert not (T.linears(T.prune(m, 0.9)[0])[-1].weight == 0).any()
    assert not (T.linears(m)[0].weight == 0).any()


def test_prune_finetune_measures_the_recovery(trained):
    split, m = trained
    c = T.prune_finetune(m, split, sparsities=(0.0, 0.9), steps=(0, 60), kind="unstructured")
    assert c.steps == (0, 60) and c.accuracy.shape == (2, 2)
    assert c.zeros == (0.0, round(0.9 * 64 * 64) / (64 * 64))     # exact after fine-tuning
    assert c.dense_accuracy == c.accuracy[0, 0] == T.accuracy(m, split.x_test, split.y_test)
    assert c.accuracy[1, 0] == T.prune_curve(m, split, [0.9])[0]       # just pruned
    assert c.accuracy[1, 1] > c.accuracy[1, 0] + 0.05                 # 60 steps recover
    st = T.prune_finetune(m, split, sparsities=(0.5,), steps=(0, 30), kind="structured")
    assert st.zeros == (0.5,)                       # whole rows, still exactly zero
    text = T.format_finetune(c)
    assert "k = 60" in text and f"{c.accuracy[1, 1]:.3f}" in text
    assert c.at(0.9, 60) == c.accuracy[1, 1] and c.at(0, 0) == c.dense_accuracy
    with pytest.raises(ValueError, match="sparsity must be one of"):
        c.at(0.5, 60)
    with pytest.raises(ValueError, match="steps must be one of"):
        c.at(0.9, 25)
    calls = []

    def learners_mask(w, sparsity):
        calls.append(w.shape)
        return T.magnitude_mask(w, sparsity)
    same = T.prune_finetune(m, split, sparsities=(0.9,), steps=(0, 60), mask_fn=learners_mask)
    assert calls == [(64, 64)] and np.array_equal(same.accuracy, c.accuracy[1:])
    with pytest.raises(ValueError, match="steps must be increasing"):
        T.prune_finetune(m, split, steps=(10, 0))
    with pytest.raises(ValueError, match="mask_fn returned a mask of shape"):
        T.prune(m, 0.5, mask_fn=lambda w, s: np.ones(3, bool))


def test_batch_stream_draws_every_index_equally_often():
    g = torch.Generator().manual_seed(0)
    batches = list(T.batch_stream(10, 4, 7, g))       # 28 draws: 2 or 3 of each index
    assert len(batches) == 7 and all(len(b) == 4 for b in batches)
    counts = np.bincount(torch.cat(batches).numpy(), minlength=10)
    assert counts.sum() == 28 and counts.min() == 2 and counts.max() == 3
    first = torch.cat(batches)[:10].sort().values.tolist()
    assert first == list(range(10))                  # the first epoch is a permutation
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        T.batch_stream(10, 0, 3, g)


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
    # torch.amp docs, "CPU Ops that can autocast to bfloat16" / "... to float32"
    assert d["linear (fp32 input)"] == d["matmul (fp32 input)"] == "bfloat16"
    assert d["cross_entropy (bf16 input)"] == d["mse_loss (bf16 input)"] == "float32"
    assert d["prod (bf16 input)"] == "float32"
    # not on the CPU float32 list (the CUDA list has them): they follow their input
    for op in ("layer_norm", "sum", "softmax", "relu"):
        assert d[f"{op} (bf16 input)"] == "bfloat16", op
    assert d["layer_norm (fp32 input)"] == d["sum (fp32 input)"] == "float32"
    h = T.autocast_dtypes("float16")              # "float16 shares the lists of bfloat16"
    assert h["linear (fp32 input)"] == h["layer_norm (fp16 input)"] == "float16"
    assert h["prod (fp16 input)"] == "float32"
    with pytest.raises(ValueError, match="dtype must be one of"):
        T.autocast_dtypes("float64")


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


def test_fusion_trials_and_speedups():
    r = T.fusion_trials(trials=2, n=4096, repeats=1)
    assert len(r.values) == 2 and all(v > 0 for v in r.values)
    sp = T.Speedups("x", (2.3, 3.5, 2.9))
    assert (sp.low, sp.median, sp.high) == (2.3, 2.9, 3.5)
    assert str(sp) == "x: 2.3–3.5× over 3 trials (median 2.9×)"
    with pytest.raises(ValueError, match="trials must be an integer >= 1"):
        T.fusion_trials(trials=0)
    with pytest.raises(ValueError, match="trials must be an integer >= 1"):
        T.compile_timing(trials=0)                 # before compiling anything
    x, r2 = torch.tensor([-1.0, 1.0]), torch.tensor([0.5, 0.5])
    assert T.epilogue_torch(x, r2).tolist() == [0.5, 0.5 + 1.25 * 0.5]


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
