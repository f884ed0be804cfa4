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
    # the tree shows who issued a row and, where it differs, who its self time is charged to
    assert "## forward ##  [application]" in prof.tree and "aten::linear  [framework]" in prof.tree
    assert "aten::addmm  [framework → kernel libraries]" in prof.tree
    assert "aten::empty_like  [framework → runtime]" in prof.tree
    names = {r.name for r in prof.rows}
    assert {"aten::addmm", "aten::mm", "Optimizer.step#SGD.step"} <= names
    assert prof.plain_s > 0 and prof.overhead_s >= 0 and 0 < prof.busy_s < prof.wall_s
    rows = stack.layer_table(prof, 16500.0, 1e11)
    flops = {r[0]: r[3] for r in rows}
    assert flops["kernel libraries"] == flops["hardware"] == 16500.0
    assert flops["framework"] == flops["application"] == 0.0
    assert dict((r[0], r[1]) for r in rows)["hardware"] == pytest.approx(16500.0 / 1e11)
    assert rows[-1][0] == stack.OVERHEAD_ROW and rows[-1][1] == pytest.approx(prof.overhead_s)
    assert "| kernel libraries |" in stack.format_layer_table(rows)
    step_s = prof.wall_s / prof.steps
    assert stack.layer_share(rows, "kernel libraries") == pytest.approx(
        prof.layer_s["kernel libraries"] / step_s)
    assert stack.layer_share(rows, "hardware") == pytest.approx(16500.0 / 1e11 / step_s)
    with pytest.raises(ValueError, match="layer must be one of"):
        stack.layer_share(rows, "kernels")
    with pytest.raises(ValueError, match="rows has no row for layer 'runtime'"):
        stack.layer_share(rows[:2], "runtime")


def test_the_step_rows_charged_by_a_learners_function_are_the_table():
    """profile_step charges each step with the function it is given, and keeps the first
    step's plain rows: their self times, charged by labkit's rules, are that step's layers."""
    seen = []

    def charge(rows, on_cpu):
        seen.append(on_cpu)
        return stack.charge_layers(rows, on_cpu)
    prof = stack.profile_step(stack.simplenet_step(stack.simple_net(), batch=5), steps=2,
                              warmup=1, charge=charge, unprofiled=False)
    assert seen == [True, True] and prof.plain_s is None and prof.overhead_s == 0.0
    names = [r["name"] for r in prof.step_rows]
    assert names[:2] == ["Optimizer.zero_grad#SGD.zero_grad", "## forward ##"]
    charged = stack.charge_layers(prof.step_rows)
    assert charged["kernel libraries"] > 0 and charged["compiler/graph"] == 0.0
    fwd = prof.step_rows[1]
    assert fwd["start_s"] <= fwd["children"][0]["start_s"] <= fwd["children"][0]["end_s"] \
        <= fwd["end_s"]


def test_charge_of_and_the_charging_walk():
    assert stack.charge_of("aten::addmm") == "kernel libraries"
    assert stack.charge_of("aten::addmm", on_cpu=False) == "framework"
    assert stack.charge_of("aten::empty") == stack.charge_of("aten::empty", False) == "runtime"
    assert stack.charge_of("aten::t") == "framework"
    assert stack.charge_of("cudaLaunchKernel") == "runtime"
    rows = [{"name": "## f ##", "self_s": 1.0, "start_s": 0, "end_s": 10, "children": [
        {"name": "aten::addmm", "self_s": 2.0, "start_s": 1, "end_s": 4, "children": [
            {"name": "aten::empty", "self_s": 0.5, "start_s": 2, "end_s": 3, "children": []}]},
        {"name": "aten::t", "self_s": 0.25, "start_s": 5, "end_s": 6, "children": []}]}]
    assert stack.charge_layers(rows) == {"application": 1.0, "kernel libraries": 2.0,
                                         "runtime": 0.5, "framework": 0.25,
                                         "compiler/graph": 0.0}
    assert stack.charge_layers(rows, False)["framework"] == 2.25
    assert stack.kernel_intervals(rows) == [(1, 4)] and stack.kernel_intervals(rows, False) == []
    deep = [{"name": "x", "self_s": 1.0, "start_s": 0, "end_s": 1, "children": []}]
    for _ in range(3000):                      # deeper than the recursion limit
        deep = [{"name": "x", "self_s": 1.0, "start_s": 0, "end_s": 1, "children": deep}]
    assert stack.charge_layers(deep)["application"] == 3001.0


def test_busy_time_is_the_union_of_the_intervals():
    assert stack.busy_time([]) == 0.0
    assert stack.busy_time([(5, 9), (0, 1), (0.5, 2)]) == 6.0
    assert stack.busy_time([(0, 10), (2, 3)]) == 10.0 and stack.busy_time([(0, 1), (1, 2)]) == 2


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
    from labkit.hardware import datasheet
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


def test_the_pipeline_model_and_its_calibration():
    assert stack.pipeline_step([1, 1, 1], [5, 0, 0]) == 6.0          # the device behind
    assert stack.pipeline_step([4] * 4, [1] * 4) == 17.0               # host-bound: n·h + d
    assert stack.pipeline_step([1] * 4, [4] * 4) == 17.0               # device-bound: h + Σd
    with pytest.raises(ValueError):
        stack.pipeline_step([1, 2], [1])
    # [50, 1, 1] µs of device time and a 130 µs step: the host is behind after the first
    # kernel, so the step is 3h + 1 µs: h = 43 µs (below the first kernel's 50)
    h = stack.calibrate_host([50e-6, 1e-6, 1e-6], 130e-6)
    assert h == pytest.approx(43e-6, rel=1e-9)
    assert stack.pipeline_step([h] * 3, [50e-6, 1e-6, 1e-6]) == pytest.approx(130e-6, rel=1e-12)


def test_the_gpu_prediction_is_calibrated_on_the_h200_and_labelled():
    """At batch 8 the calibrated model gives the H200's measured step (it was calibrated
    there); at 32 and 128 it stays within 10 % of the measurements, while the roofline alone
    (no host time) is over a hundred times too fast."""
    h = stack.calibrated_host_s()
    p8 = stack.predict_cnn(8)
    assert p8.samples_per_s == pytest.approx(stack.H200_MEASURED[8], rel=1e-6)
    assert not p8.measured and "predicted" in p8.device and f"{h * 1e6:.1f} µs" in p8.note
    for b in (32, 128):
        assert stack.predict_cnn(b).samples_per_s == pytest.approx(stack.H200_MEASURED[b],
                                                                   rel=0.10)
    assert stack.predict_cnn(8, host_s=0.0).samples_per_s > 100 * stack.H200_MEASURED[8]
    counts = stack.cnn_step_counts(32)
    assert len(counts.sequence) == sum(o.calls for o in counts.ops)
    assert sum(o.flops for o in counts.sequence) == pytest.approx(counts.flops)
    p0 = stack.predict_cnn(32, host_s=0.0)
    assert p0.busy_s == pytest.approx(p0.step_s - p0.copy_s, rel=1e-9)   # device-bound
    assert p0.copy_s == pytest.approx(32 * (3 * 32 * 32 * 4 + 8) / stack.PCIE5_X16)
    assert 0 < p0.mfu < p0.busy_share <= 1
    assert stack.host_half_batch(5e-6) >= 2
    table = stack.format_h200().splitlines()
    assert table[2].startswith("| 8 | 4,995 | 4,995 |") and len(table) == 2 + 4


def test_convolutions_are_held_to_the_tf32_peak_on_ampere():
    a100, v100 = dict(GPUS["A100"].flops), dict(GPUS["V100"].flops)
    assert stack.op_precision("convolution", a100) == "tf32"
    assert stack.op_precision("convolution_backward", a100, cudnn_tf32=False) == "fp32"
    assert stack.op_precision("mm", a100) == "fp32"
    assert stack.op_precision("mm", a100, matmul_tf32=True) == "tf32"
    assert stack.op_precision("convolution", v100) == "fp32"
    assert stack.op_precision("relu", a100, True, True) == "fp32"
    counts = stack.cnn_step_counts(16)
    g = GPUS["H100"]
    want = sum(o.flops / g.peak("tf32" if o.name in stack.CONV_OPS else "fp32")
               for o in counts.ops)
    assert stack.ideal_seconds(counts, "H100") == pytest.approx(want, rel=1e-12)
    assert stack.ideal_seconds(counts, None, 1e11) == pytest.approx(counts.flops / 1e11)


def test_predicted_curve_is_predict_cnn_at_each_batch():
    curve = stack.predict_cnn_curve("A100", 2e-6, batches=(1, 64))
    assert curve == (stack.predict_cnn(1, "A100", 2e-6), stack.predict_cnn(64, "A100", 2e-6))
    assert [r.batch for r in stack.predict_cnn_curve()] == list(stack.CURVE_BATCHES)
    assert stack.CURVE_BATCHES[0] == 1 and stack.CURVE_BATCHES[-1] == 1024
    with pytest.raises(ValueError, match="batches must be a non-empty tuple"):
        stack.predict_cnn_curve(batches=())


def test_run_cnn_on_the_cpu_is_measured():
    r = stack.run_cnn(4, steps=2, peak=1e11, threads=1)
    assert r.measured and r.copy_s == 0.0 and r.samples_per_s > 0 and r.flops > 0
    assert r.threads == 1 and r.ci[0] <= r.step_s <= r.ci[1]
    assert 0 < r.busy_share <= 1 and r.mfu == pytest.approx(r.flops / 1e11 / r.step_s)
    with pytest.raises(ValueError, match="device must be one of"):
        stack.run_cnn(4, device="tpu")


@pytest.mark.gpu
def test_cnn_on_the_gpu_is_measured_with_its_copy():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a real CUDA GPU")
    r = stack.run_cnn(64, steps=3, device="cuda")
    assert r.measured and 0 < r.copy_share < 1 and r.samples_per_s > 0
    assert 0 < r.busy_share <= 1 and 0 < r.mfu < 1
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
    used = []

    def pipeline(h, d):
        used.append(len(d))
        return stack.pipeline_step(h, d)
    r = stack.seed_experiment1((2, 4), cpu_peak=1e11, cpu_steps=1, progress=False,
                               pipeline=pipeline)
    assert r.gpu_key == "H200" and r.cpu_peak == 1e11 and used
    assert [c.batch for c in r.cpu] == [2, 4] and all(c.measured for c in r.cpu)
    assert all(c.threads == 1 for c in r.cpu)
    want = stack.predict_cnn(4, "H200")
    assert r.gpu[-1] == want and not any(g.measured for g in r.gpu)
    assert r.speedup == pytest.approx(want.samples_per_s / r.cpu[-1].samples_per_s)
    table = stack.format_cnn_runs(r.cpu + r.gpu, r.gpu_label).splitlines()
    assert len(table) == 2 + 4 + 2
    assert table[2].startswith("| cpu | 1 | 2 | ") and table[2].endswith("| measured |")
    assert table[5] == (f"| H200 (predicted) | - | 4 | {want.samples_per_s:,.0f} | "
                        f"{want.copy_share:.0%} | {want.busy_share:.1%} | {want.mfu:.2%} | "
                        f"PREDICTED, not measured |")
    assert table[-1].startswith("GPU rows PREDICTED on the H200") and "convolutions TF32" in \
        table[-1] and "matmuls FP32" in table[-1] and "100.0 GFLOP/s" in table[-1]
    for bad in ((), 8):
        with pytest.raises(ValueError, match="batches must be a non-empty tuple"):
            stack.seed_experiment1(bad, cpu_peak=1e11)
    with pytest.raises(TypeError, match="runs must hold CnnRun rows"):
        stack.format_cnn_runs([3])


def test_seed_example2_reads_this_process_memory():
    m = stack.process_memory()
    assert m.source == "/proc/self/status" and m.peak >= m.rss > 0
    assert "resident" in stack.memory_report() and "MiB" in stack.memory_report()
    text = "Name:\tpython\nVmHWM:\t   2048 kB\nVmRSS:\t  1024 kB\nThreads:\t4\n"
    assert stack.status_bytes(text) == {"VmHWM": 2 ** 21, "VmRSS": 2 ** 20}
    seen = []
    rows = stack.memory_through_step(parse=lambda t: seen.append(1) or stack.status_bytes(t),
                                     width=3072, batch=64)
    assert len(seen) == len(rows) and rows[1].expected == 4 * (3072 * 3072 + 3072
                                                                   + 3072 * 10 + 10)
    change = {r.phase: r.rss - p.rss for p, r in zip(rows, rows[1:])}
    params = rows[1].expected
    # the weights are mapped from the kernel (above glibc's mmap threshold): the resident
    # set follows them within a MiB
    assert abs(change["model built"] - params) < 2 ** 20
    assert abs(change["optimizer step (Adam's two states)"] - 2 * params) < 2 * 2 ** 20
    assert abs(change["zero_grad (gradients freed)"] + params) < 2 ** 20
    assert "| model built |" in stack.format_memory_phases(rows)
    with pytest.raises(TypeError, match="text must be"):
        stack.status_bytes(3)


@pytest.mark.gpu
def test_seed_experiment1_on_a_gpu_measures_against_its_own_peak():
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a real CUDA GPU")
    from labkit.hardware import hardware_key
    r = stack.seed_experiment1((8,), cpu_peak=1e11, cpu_steps=1, gpu_steps=2, progress=False)
    assert r.gpu[0].measured and r.gpu[0].device == "cuda"
    key = hardware_key(torch.cuda.get_device_name(), None) or stack.DEFAULT_GPU
    assert r.gpu_key == key and r.gpu_label.startswith(f"GPU rows measured on the {key}")
