"""Chapter 12's metrics, profiling, framework comparison and deployment."""
import numpy as np
import pytest

from labkit.data import load_digits
from labkit.perf import deploy, frameworks, metrics, profiling, stack
from labkit.torch_models import digits_cnn


@pytest.fixture(scope="module")
def data():
    return load_digits(seed=0)


@pytest.fixture(scope="module")
def mlp(data):
    return metrics.train("mlp", seed=0, epochs=4, data=data)


def test_trained_mlp_and_its_memory(mlp, data):
    assert mlp.test_accuracy > 0.9
    assert metrics.parameter_bytes(mlp.model) == 4 * (64 * 128 + 128 + 128 * 10 + 10)
    # saved for backward: x (64x64) and the ReLU output (64x128), shared by the 2nd addmm
    assert metrics.saved_activation_bytes(mlp.model, data.x_train[:64]) == 4 * (64 * 64 + 64 * 128)
    assert metrics.forward_flops(mlp.model, data.x_test[:1]) == 2 * (64 * 128 + 128 * 10) + 128


def test_saved_activation_bytes_of_the_cnn_count_each_storage_once(data):
    cnn = digits_cnn(0)
    b = 64
    # conv1 saves the input (64 pixels, seen through Unflatten's view); each ReLU output
    # (16 and 32 channels x 64 pixels) once, though two ops keep it; max-pool its int64
    # indices (32 x 16); the Linear its input, a Flatten view of the pool output (32 x 16)
    fp32 = b * (64 + 16 * 64 + 32 * 64 + 32 * 16)
    assert metrics.saved_activation_bytes(cnn, data.x_train[:b]) == 4 * fp32 + 8 * b * 32 * 16
    assert not cnn.training


def test_top1_accuracy_closed_form_ties_and_shapes():
    scores = np.array([[0.1, 0.9], [2.0, 2.0], [5.0, -1.0], [0.0, 1.0]])
    assert metrics.top1_accuracy(scores, [1, 0, 0, 1]) == 1.0
    assert metrics.top1_accuracy(scores, [1, 1, 0, 1]) == 0.75     # a tie goes to class 0
    assert metrics.top1_accuracy(scores, [0, 1, 1, 0]) == 0.0
    with pytest.raises(ValueError, match=r"labels must have shape \(4\)"):
        metrics.top1_accuracy(scores, [[1], [0], [0], [1]])        # (n, 1) would broadcast to n x n
    with pytest.raises(ValueError, match="scores must have 2 dimension"):
        metrics.top1_accuracy([1, 0, 0, 1], [1, 0, 0, 1])          # predicted classes, not scores


def test_every_accuracy_adapter_gives_the_same_number(data):
    import torch

    from labkit.autograd.nn import Linear, mlp
    from labkit.compress import train as compress_train
    from labkit.parallel import compression
    from labkit.training import train as training_train

    net = mlp((64, 16, 10), seed=3, dtype=np.float64)       # labkit's autograd MLP, untrained
    twin = training_train.torch_twin(net)                    # the same weights in torch
    w1, b1, w2, b2 = (p.data for layer in net.layers if isinstance(layer, Linear)
                      for p in (layer.weight, layer.bias))
    x, y = data.x_test.astype(np.float64), data.y_test
    with torch.no_grad():
        want = float(np.mean(twin(torch.from_numpy(x)).numpy().argmax(1) == y))
    got = {"training": training_train.accuracy(net, x, y),
           "parallel": compression.accuracy([w1, b1, w2, b2], x, y),
           "perf": metrics.accuracy(twin, x, y),
           "compress (torch)": compress_train.accuracy(twin, x, y),
           "compress (numpy)": compress_train.accuracy(
               lambda a: np.maximum(a @ w1 + b1, 0) @ w2 + b2, x, y)}
    assert 0.02 < want < 0.98 and got == dict.fromkeys(got, want)


def test_latency_percentiles_are_ordered(mlp, data):
    lat = metrics.latency(mlp.model, data.x_test, requests=30, warmup=2)
    assert len(lat.samples) == 30 and lat.p50 <= lat.p95 <= lat.p99
    assert metrics.throughput(mlp.model, data.x_test, batch=32, repeats=2) > 0


def test_mfu_closed_form():
    assert metrics.mfu(1e6, 10.0, 3e7) == pytest.approx(1.0)
    assert metrics.mfu(1e6, 10.0, 1e7, training=False) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="peak must be > 0"):
        metrics.mfu(1.0, 1.0, 0.0)


def test_energy_uses_rapl_when_readable(tmp_path, monkeypatch):
    f = tmp_path / "intel-rapl:0"
    f.mkdir()
    counter = f / "energy_uj"
    counter.write_text("1000000")
    monkeypatch.setattr(metrics, "RAPL_GLOB", str(tmp_path / "intel-rapl:*" / "energy_uj"))
    e = metrics.measure_energy(lambda: counter.write_text("3500000"))
    assert e.joules == pytest.approx(2.5) and e.method.startswith("RAPL")
    monkeypatch.setattr(metrics, "RAPL_GLOB", str(tmp_path / "none" / "energy_uj"))
    e = metrics.measure_energy(lambda: None, busy_cores=2, watts_per_core=10.0)
    assert "TDP model" in e.method and "NOT measured" in e.method
    assert e.joules == pytest.approx(e.seconds * 20.0)


def test_per_sample_loss_is_the_same_loss_with_many_more_ops(data):
    import torch
    x, y = data.x_train[:16], data.y_train[:16]
    slow = profiling.loss_step(metrics.digits_mlp(), x, y, batched=False)
    fast = profiling.loss_step(metrics.digits_mlp(), x, y, batched=True)
    assert torch.allclose(slow(), fast(), atol=1e-6)
    p = stack.profile_step(slow, steps=2, warmup=0)
    calls = {n: c for n, c, _ in profiling.top_ops(p, 50)}
    assert calls.get("aten::nll_loss_forward") == 16


def test_frameworks_agree_and_onnx_matches_torch(tmp_path):
    same = frameworks.check_same(steps=3)
    ref = np.array(same["torch eager"])
    for k, losses in same.items():
        np.testing.assert_allclose(losses, ref, rtol=1e-5, err_msg=k)
    assert ref[2] < ref[0]
    pytest.importorskip("onnxruntime")
    import torch
    params = frameworks.init_params(0)
    m = frameworks.torch_model(params).eval()
    sess = frameworks.onnx_session(m, tmp_path / "m.onnx")
    x, _ = frameworks.batch(8)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, m(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_rows_round_trip_and_table(tmp_path):
    rows = [frameworks.FrameworkRow("torch eager", 2e-3, (1e-3, 3e-3), 1e-3),
            frameworks.FrameworkRow("ONNX Runtime", None, None, 5e-4, "inference only")]
    path = frameworks.save_rows(rows, tmp_path / "x.json")
    assert frameworks.load_rows(path) == rows
    assert frameworks.load_rows(tmp_path / "missing.json") is None
    table = frameworks.format_rows(rows)
    assert "| ONNX Runtime | - | - | 500 | 2.00 | inference only |" in table
    comp = frameworks.FrameworkRow("torch.compile", 1e-3, (9e-4, 2e-3), 4e-4, "", 3.5)
    path = frameworks.save_rows(rows + [comp], tmp_path / "y.json")
    assert frameworks.load_rows(path)[-1].cold_s == 3.5
    assert frameworks.fastest_trainer(rows) == "torch eager"
    assert frameworks.fastest_trainer(rows + [comp]) == "torch.compile"
    with pytest.raises(ValueError, match="at least one row with a training time"):
        frameworks.fastest_trainer(rows[1:])
    from labkit import timing
    assert frameworks.whose(timing.benchmark) == "labkit's benchmark"
    assert frameworks.whose(timing.interleaved) == "labkit's interleaved"

    def benchmark(fn, **kw):
        return timing.benchmark(fn, **kw)
    assert frameworks.whose(benchmark) == "your benchmark()"


def test_compare_times_every_implementation_with_the_harness_it_is_given():
    from labkit import timing
    calls = []

    def bench(fn, **kw):
        calls.append(kw)
        return timing.benchmark(fn, **kw)
    rows = frameworks.compare(hidden=32, batch_size=16, bench=bench, interleave=False,
                              repeats=3, onnx=False, include_jax=False)
    assert [r.name for r in rows] == ["numpy (by hand)", "labkit.autograd", "torch eager"]
    assert len(calls) == 6 and all(c == {"repeats": 3, "warmup": 2} for c in calls)
    assert all(r.train_ci[0] <= r.train_s <= r.train_ci[1] for r in rows)
    seen = []

    def interleave(fns, **kw):
        seen.append(sorted(fns))
        return timing.interleaved(fns, **kw)
    rows = frameworks.compare(hidden=32, batch_size=16, interleave=interleave, repeats=3,
                              onnx=False, grads=frameworks.numpy_grads)
    assert seen == [sorted(r.name for r in rows)] * 2
    jax_row = rows[-1]
    assert jax_row.name == "JAX (jit)" and jax_row.cold_s > jax_row.train_s > 0
    assert jax_row.note.startswith("first call (compiles)")
    with pytest.raises(TypeError, match="bench must be a function"):
        frameworks.compare(bench=3)


def test_numpy_gradients_equal_torch_for_any_depth():
    import torch
    from torch.nn import functional as F
    rng = np.random.default_rng(0)
    for sizes in ((5, 3), (6, 8, 4), (7, 9, 5, 3)):
        params = [(rng.standard_normal((a, b)), rng.standard_normal(b))
                  for a, b in zip(sizes[:-1], sizes[1:])]
        x, y = rng.standard_normal((11, sizes[0])), rng.integers(0, sizes[-1], 11)
        loss, grads = frameworks.numpy_grads(params, x, y)
        ps = [(torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True))
              for w, b in params]
        a = torch.tensor(x)
        for i, (w, b) in enumerate(ps):
            a = a @ w + b
            a = a.relu() if i < len(ps) - 1 else a
        t = F.cross_entropy(a, torch.tensor(y))
        t.backward()
        assert loss == pytest.approx(float(t), rel=1e-12)
        for (gw, gb), (w, b) in zip(grads, ps):
            np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(gb, b.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_papers_set_labkits_numbers_beside_the_published_ones():
    from labkit.memory.estimator import activation_bytes_per_layer as act, model_state_bytes
    from labkit.perf import papers
    from labkit.training.inference import kv_cache_bytes_per_token_per_layer as kv
    zero = {f"stage {s}": model_state_bytes(7_500_000_000, "mixed", "adam", zero_stage=s,
                                            dp=64).total / 1e9 for s in range(4)}
    kept = {k: 1 - act(2048, 1, h, a, sequence_parallel=True, recompute="selective")
            / act(2048, 1, h, a, sequence_parallel=True)
            for k, (h, a) in {"GPT-3 175B": (12288, 96), "MT-NLG 530B": (20480, 128)}.items()}
    opt = kv(40, 128, 2) * 40
    vllm = {"KB per token": opt / 1024, "GB per 2048-token request": opt * 2048 / 2 ** 30}
    for key, ours in (("zero", zero), ("korthikanti", kept), ("vllm", vllm)):
        text = papers.format_reproduction(key, ours)
        assert "DIFFERS" not in text and text.count("agrees") == len(papers.paper(key).published)
    assert "DIFFERS" in papers.format_reproduction("vllm", {"KB per token": 819.2})
    assert "not computed yet" in papers.format_reproduction("zero", None)
    assert "Pick a paper" in papers.format_reproduction(None, None)
    with pytest.raises(ValueError, match="paper must be one of"):
        papers.paper("gpipe")
    with pytest.raises(TypeError, match="reproduced must be a dict"):
        papers.format_reproduction("zero", [1.0])



def test_int8_sizes_and_budget(mlp):
    layers = [(64, 128), (128, 10)]
    assert deploy.int8_linear_bytes(layers) == 64 * 128 + 128 * 10 + 4 * 138 + 16
    assert deploy.fp32_linear_bytes(layers) == 4 * (64 * 128 + 128 * 10 + 138)
    import torch
    mlp.model.train()
    q = deploy.quantize_int8(mlp.model)
    assert mlp.model.training and not q.training       # a quantized copy; the model is as it was
    assert type(mlp.model[0]) is torch.nn.Linear and type(q[0]) is not torch.nn.Linear
    mlp.model.eval()
    assert deploy.state_bytes(mlp.model) / deploy.state_bytes(q) > 2.5
    vs = [deploy.Variant("a", 40_000, 1e-4, 0.9), deploy.Variant("b", 10_000, 2e-4, 0.9)]
    res = deploy.fits(vs, deploy.Budget("edge", 30e3, 1e-3, 10))
    assert [ok for _, ok, _ in res] == [False, False]
    assert "40.0 kB > 30.0 kB" in res[0][2] and "2.00 ms > 1.00 ms" in res[1][2]
    assert [ok for _, ok, _ in deploy.fits(vs, deploy.CLOUD)] == [True, True]
    assert deploy.fitting(res) == "none"
    assert deploy.fitting(deploy.fits(vs, deploy.CLOUD)) == "a and b"
    assert deploy.fitting(deploy.fits(vs, deploy.Budget("b", 30e3, 3e-3, 10))) == "b"
    assert deploy.format_payload(layers) == "payload: fp32 38,440 B, int8 10,040 B (ratio 3.83)"
    assert deploy.format_payload(layers, 9610).endswith("int8 9,610 B (ratio 4.00)")
    prog = deploy.export_program(mlp.model)
    targets = [str(n.target) for n in prog.graph.nodes if n.op == "call_function"]
    assert len(targets) == 3 and "relu" in targets[1]
    assert deploy.graph_ops(prog) == ["linear.default", "relu.default", "linear.default"]
