"""Chapter 01's stack: layers of profiler rows, a profiled step, Little's law, experiment 1."""
import pytest

from labkit.check.ch01 import LAYER_CASES
from labkit.hardware import GPUS
from labkit.perf import stack


@pytest.mark.parametrize("name, layer", LAYER_CASES + [
    ("cudaMalloc", "runtime"), ("sm90_xmma_gemm_f32f32_tf32f32", "kernel libraries"),
    ("TorchDynamo Cache Lookup", "compiler/graph"), ("aten::empty", "framework")])
def test_layer_of(name, layer):
    assert stack.layer_of(name) == layer


def test_layer_of_rejects_non_strings():
    with pytest.raises(TypeError, match="name must be a profiler row name"):
        stack.layer_of(3)


def test_profiled_step_charges_every_layer_and_shows_the_tree():
    prof = stack.profile_step(stack.simplenet_step(stack.simple_net(), batch=5), steps=3,
                              warmup=1)
    assert set(prof.layer_s) == set(stack.LAYERS)
    assert prof.layer_s["kernel libraries"] > 0 and prof.layer_s["framework"] > 0
    assert prof.layer_s["compiler/graph"] == 0.0
    assert "## forward ##  [application]" in prof.tree and "aten::linear  [framework]" in prof.tree
    names = {r.name for r in prof.rows}
    assert {"aten::addmm", "aten::mm", "Optimizer.step#SGD.step"} <= names
    rows = stack.layer_table(prof, 16500.0, 1e11)
    flops = {r[0]: r[3] for r in rows}
    assert flops["kernel libraries"] == flops["hardware"] == 16500.0
    assert flops["framework"] == flops["application"] == 0.0
    assert dict((r[0], r[1]) for r in rows)["hardware"] == pytest.approx(16500.0 / 1e11)
    assert "| kernel libraries |" in stack.format_layer_table(rows)
    step_s = prof.wall_s / prof.steps
    assert stack.layer_share(rows, "kernel libraries") == pytest.approx(
        prof.layer_s["kernel libraries"] / step_s)
    assert stack.layer_share(rows, "hardware") == pytest.approx(16500.0 / 1e11 / step_s)
    with pytest.raises(ValueError, match="layer must be one of"):
        stack.layer_share(rows, "kernels")
    with pytest.raises(ValueError, match="rows has no row for layer 'runtime'"):
        stack.layer_share(rows[:2], "runtime")


def test_simplenet_step_flops_closed_form_and_validation():
    assert stack.simplenet_step_flops(5) == 3 * 2 * 5 * 500 + 3 * 2 * 5 * 50
    assert stack.simplenet_step_flops(5, input_requires_grad=False) == 16500 - 5000
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        stack.simplenet_step_flops(0)


def test_littles_law_on_the_h100():
    h = GPUS["H100"]
    assert stack.bytes_in_flight(500e-9, h.hbm_bandwidth) == pytest.approx(1.675e6)
    assert stack.loads_in_flight(500e-9, h.hbm_bandwidth, 4) == pytest.approx(418750)
    with pytest.raises(ValueError, match="latency_s must be > 0"):
        stack.bytes_in_flight(0, 1e9)


def test_in_flight_per_sm_on_the_h100():
    """3.35 TB/s × 500 ns = 1.675 MB; over 132 SMs 12.7 kB and 3,172 four-byte loads each,
    more than the 2,048 threads an SM holds."""
    r = stack.in_flight(500e-9)
    assert r.gpu == stack.DEFAULT_GPU == "H100" and r.sm_count == 132
    assert r.bytes == pytest.approx(1.675e6) and r.loads == pytest.approx(418750)
    assert r.bytes_per_sm == pytest.approx(1.675e6 / 132)
    assert r.loads_per_sm == pytest.approx(418750 / 132) and r.max_threads_per_sm == 2048
    assert stack.format_in_flight(r) == (
        "bytes in flight: 1.68 MB = 12.7 kB per SM\n"
        "4-byte loads in flight: 418,750 = 3,172 per SM "
        "(an SM holds at most 2,048 resident threads)")
    a100 = stack.in_flight(500e-9, "A100", bytes_per_load=8)
    assert a100.loads == pytest.approx(500e-9 * GPUS["A100"].hbm_bandwidth / 8)
    assert a100.bytes_per_load == 8 and r.bytes_per_load == 4
    assert stack.format_in_flight(a100).splitlines()[1] == (
        "8-byte loads in flight: 127,438 = 1,180 per SM "
        "(an SM holds at most 2,048 resident threads)")
    with pytest.raises(ValueError, match="gpu must be one of"):
        stack.in_flight(500e-9, "T4")


def test_roofline_lines():
    from labkit.kernels.roofline import datasheet
    lines = stack.format_rooflines([datasheet("H100", "fp32"), datasheet("A100", "bf16")])
    h100, a100 = lines.splitlines()
    assert h100.split() == ["H100", "fp32", "(data", "sheet)", "peak", "67.000", "TFLOP/s",
                            "bandwidth", "3350", "GB/s", "ridge", "20.0", "FLOP/byte"]
    assert a100.split()[5] == f"{GPUS['A100'].peak('bf16') / 1e12:.3f}"
    with pytest.raises(TypeError, match="roofs must hold Roofline"):
        stack.format_rooflines([3])


def test_seed_example3_trains_on_the_devices_there_are():
    import torch
    losses, ids = stack.seed_example3(epochs=2, n=256)
    assert ids == list(range(torch.cuda.device_count())) and losses[1] < losses[0]


def test_gpu_prediction_is_labelled_and_launches_cost_time():
    p0 = stack.predict_cnn(32, "H100")
    p5 = stack.predict_cnn(32, "H100", launch_s=5e-6)
    assert not p0.measured and "prediction" in p0.note and "predicted" in p0.device
    calls = sum(o.calls for o in stack.cnn_step_counts(32).ops)
    assert p5.step_s - p0.step_s == pytest.approx(calls * 5e-6)
    assert p0.copy_s == pytest.approx(32 * (3 * 32 * 32 * 4 + 8) / stack.PCIE5_X16)
    assert stack.launch_half_batch(5e-6) >= 2
    # the defaults are the stated DEFAULT_GPU's
    assert stack.predict_cnn(32) == stack.predict_cnn(32, stack.DEFAULT_GPU) == p0


def test_predicted_curve_is_predict_cnn_at_each_batch():
    curve = stack.predict_cnn_curve("A100", 2e-6, batches=(1, 64))
    assert curve == (stack.predict_cnn(1, "A100", launch_s=2e-6),
                     stack.predict_cnn(64, "A100", launch_s=2e-6))
    assert [r.batch for r in stack.predict_cnn_curve()] == list(stack.CURVE_BATCHES)
    assert stack.CURVE_BATCHES[0] == 1 and stack.CURVE_BATCHES[-1] == 1024
    with pytest.raises(ValueError, match="batches must be a non-empty tuple"):
        stack.predict_cnn_curve(batches=())


def test_run_cnn_on_the_cpu_is_measured():
    r = stack.run_cnn(4, steps=1, peak=1e11)
    assert r.measured and r.copy_s == 0.0 and r.samples_per_s > 0 and r.flops > 0
    with pytest.raises(ValueError, match="device must be one of"):
        stack.run_cnn(4, device="tpu")


@pytest.mark.gpu
def test_cnn_on_the_gpu_is_measured_with_its_copy():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a real CUDA GPU")
    r = stack.run_cnn(64, steps=3, device="cuda", peak=GPUS["H100"].peak("fp32"))
    assert r.measured and 0 < r.copy_share < 1 and r.samples_per_s > 0
    prof = stack.profile_step(stack.simplenet_step(stack.simple_net().cuda(), device="cuda"),
                              steps=3, warmup=1)
    layers = {r.layer for r in prof.rows}
    assert {"runtime", "kernel libraries", "framework"} <= layers


def _pretend_gpu(monkeypatch, name):
    """Make torch see a GPU called ``name`` (numba is not asked: see the next test)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)


@pytest.mark.parametrize("name, key", [("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100"),
                                       ("NVIDIA H100 80GB HBM3", "H100"),
                                       ("Tesla V100-SXM2-32GB", "V100")])
def test_gpu_peak_is_the_peak_of_the_gpu_present(monkeypatch, name, key):
    _pretend_gpu(monkeypatch, name)
    p = stack.gpu_peak("fp32")
    assert p.key == key and p.peak == GPUS[key].peak("fp32")
    assert p.label.startswith(f"{key} fp32 peak (the GPU present")
    assert stack.gpu_peak("fp16").peak == GPUS[key].peak("fp16")


def test_gpu_peak_asks_torch_not_numba(monkeypatch):
    """numba's simulator on a GPU machine (NUMBA_ENABLE_CUDASIM=1), or numba imported before
    labkit on a CPU one, must not change the answer: the GPU rows are run by torch."""
    import torch

    from labkit.kernels import timing
    _pretend_gpu(monkeypatch, "NVIDIA H200")
    monkeypatch.setattr(timing, "on_gpu", lambda: False)          # numba: simulator
    assert stack.gpu_peak().key == "H200"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(timing, "on_gpu", lambda: True)           # numba: "a GPU"

    def no_device(*a):
        raise RuntimeError("no CUDA device")
    monkeypatch.setattr(torch.cuda, "get_device_name", no_device)
    monkeypatch.setattr(timing, "device_name", no_device)
    assert stack.gpu_peak().label == "H100 fp32 peak (stated default: no GPU)"


def test_gpu_peak_of_an_unknown_gpu_is_the_labelled_default(monkeypatch):
    _pretend_gpu(monkeypatch, "Tesla T4")
    p = stack.gpu_peak("fp32")
    assert p.key == stack.DEFAULT_GPU == "H100" and p.peak == GPUS["H100"].peak("fp32")
    assert "stated default: a GPU labkit.hardware does not list" in p.label
    assert stack.gpu_peak(default="A100").peak == GPUS["A100"].peak("fp32")
    with pytest.raises(ValueError, match="gpu must be one of"):
        stack.gpu_peak(default="T4")


def test_seed_experiment1_without_a_gpu_predicts_and_says_so(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = stack.seed_experiment1((2, 4), cpu_peak=1e11, cpu_steps=1, progress=False)
    assert r.gpu_peak.key == "H100" and r.gpu_peak.label == "H100 fp32 peak (stated default: no GPU)"
    assert [c.batch for c in r.cpu] == [2, 4] and all(c.measured for c in r.cpu)
    assert all(c.peak == 1e11 for c in r.cpu)
    want = stack.predict_cnn(4, "H100", "fp32", launch_s=stack.MEASURED_LAUNCH_S)
    assert r.gpu[-1] == want and not any(g.measured for g in r.gpu)
    assert r.speedup == pytest.approx(want.samples_per_s / r.cpu[-1].samples_per_s)
    table = stack.format_cnn_runs(r.cpu + r.gpu, r.gpu_peak.label).splitlines()
    assert len(table) == 2 + 4 + 2
    assert table[2].startswith("| cpu | 2 | ") and table[2].endswith("| measured |")
    u = want.flops / want.step_s / GPUS["H100"].peak("fp32")
    assert table[5] == (f"| H100 (predicted) | 4 | {want.samples_per_s:,.0f} | "
                        f"{want.copy_share:.0%} | {u:.1%} | PREDICTED, not measured |")
    assert table[-1] == "GPU utilisation against the H100 fp32 peak (stated default: no GPU)."
    for bad in ((), 8):
        with pytest.raises(ValueError, match="batches must be a non-empty tuple"):
            stack.seed_experiment1(bad, cpu_peak=1e11)
    with pytest.raises(TypeError, match="runs must hold CnnRun rows"):
        stack.format_cnn_runs([3])


@pytest.mark.gpu
def test_seed_experiment1_on_a_gpu_measures_against_its_own_peak():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a real CUDA GPU")
    from labkit.kernels.timing import hardware_key
    r = stack.seed_experiment1((8,), cpu_peak=1e11, cpu_steps=1, gpu_steps=2, progress=False)
    assert r.gpu[0].measured and r.gpu[0].device == "cuda"
    key = hardware_key(torch.cuda.get_device_name(), None) or stack.DEFAULT_GPU
    assert r.gpu_peak.key == key and r.gpu[0].peak == GPUS[key].peak("fp32")
