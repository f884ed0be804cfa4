"""Occupancy, roofline, tensor-core numerics, CPU counterparts and widget views."""
import labkit  # noqa: F401
import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

matplotlib.use("Agg")

from labkit.kernels import cpu, roofline, tensorcore  # noqa: E402
from labkit.kernels.occupancy import A100, H100, occupancy, occupancy_sweep  # noqa: E402


# CUDA C++ Best Practices Guide, "Calculating Occupancy": 37 registers per thread, on a
# device of compute capability 7.0 (V100); the same numbers hold on A100 and H100.
@pytest.mark.parametrize("gpu", ["V100", "A100", "H100"])
def test_best_practices_worked_example(gpu):
    small = occupancy(gpu, 128, 37)
    assert small.blocks_per_sm == 12 and small.occupancy == 0.75
    assert small.limiter == "registers"
    big = occupancy(gpu, 320, 37)
    assert big.blocks_per_sm == 4 and big.occupancy == pytest.approx(40 / 64)


@pytest.mark.parametrize("gpu,threads,regs,smem,blocks,occ,limiter", [
    ("A100", 256, 32, 0, 8, 1.0, "warps"),
    ("A100", 256, 64, 0, 4, 0.5, "registers"),
    ("A100", 32, 16, 0, 32, 0.5, "blocks"),
    ("A100", 256, 32, 48 * 1024, 3, 3 * 8 / 64, "shared memory"),   # 167936 // 50176
    ("H100", 256, 32, 48 * 1024, 4, 4 * 8 / 64, "shared memory"),   # 233472 // 50176
    ("H100", 1024, 255, 0, 0, 0.0, "registers"),                    # 261120 regs > 65536
    ("A100", 96, 40, 1000, 16, 48 / 64, "registers"),             # 3 warps; 48 // 3
])
def test_occupancy_cases(gpu, threads, regs, smem, blocks, occ, limiter):
    o = occupancy(gpu, threads, regs, smem)
    assert (o.blocks_per_sm, o.limiter) == (blocks, limiter)
    assert o.occupancy == pytest.approx(occ)


def test_occupancy_register_rounding():
    # 33 registers round a warp up to 1280 registers, like 40: 12 warps per sub-partition.
    assert occupancy(A100, 128, 33).blocks_per_sm == occupancy(A100, 128, 40).blocks_per_sm
    assert occupancy(A100, 128, 33).blocks_per_sm < occupancy(A100, 128, 32).blocks_per_sm


@settings(max_examples=40, deadline=None)
@given(threads=st.integers(1, 1024), regs=st.integers(1, 254), smem=st.integers(0, 48 * 1024))
def test_occupancy_never_rises_with_more_registers(threads, regs, smem):
    a = occupancy(H100, threads, regs, smem)
    b = occupancy(H100, threads, regs + 1, smem)
    assert b.blocks_per_sm <= a.blocks_per_sm
    assert 0 <= a.occupancy <= 1
    assert a.active_warps * 32 <= H100.max_threads_per_sm


@pytest.mark.parametrize("kwargs,param", [
    (dict(threads_per_block=0), "threads_per_block"),
    (dict(threads_per_block=2048), "threads_per_block"),
    (dict(threads_per_block=128, registers_per_thread=300), "registers_per_thread"),
    (dict(threads_per_block=128, shared_per_block=200 * 1024), "shared_per_block"),
])
def test_occupancy_rejects_bad_input(kwargs, param):
    with pytest.raises(ValueError, match=param):
        occupancy("A100", **kwargs)
    with pytest.raises(ValueError, match="gpu"):
        occupancy("TPU", 128)


def test_occupancy_sweep_covers_block_sizes():
    sweep = occupancy_sweep("A100", 64)
    assert [o.threads_per_block for o in sweep][:3] == [32, 64, 96]
    assert max(o.occupancy for o in sweep) == 0.5


def test_this_machine_is_perf_machines_measurement():
    from labkit.hardware import measure_machine

    roof = measure_machine()
    m = roofline.hardware("this machine")
    assert m.peak("fp32") == roof.peak > 1e6 and m.bandwidth == roof.bandwidth > 1e6
    assert m.measured and "measured" in m.name and m.ridge() == roof.ridge
    with pytest.raises(ValueError, match=r"this machine \(measured\) has no bf16 rate"):
        m.peak("bf16")


def test_bf16_rounding_to_nearest_even():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -9, -2.5], np.float32)
    got = tensorcore.round_to(x, "bf16")
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0); 1 + 3*2^-8 -> 1 + 2^-6
    np.testing.assert_array_equal(got, [1.0, 1.0, 1.0 + 2 ** -6, 1.0, -2.5])
    assert tensorcore.round_to(np.float32(1 + 2 ** -11), "fp16") == 1.0


# float32 bit patterns at the edges: NaNs whose payload sits in the dropped bits (one
# negative, whose rounding carries out of 32 bits), ±inf, ±0, the largest finite float32,
# subnormals of float32 and of bf16, bf16 ties (1 + 2^-8, 1 + 3·2^-8), fp16's overflow
# threshold (65520 rounds to inf, just below it to 65504) and its smallest subnormal's half.
AWKWARD_BITS = [0x7F800001, 0xFF800001, 0xFFFFFFFF, 0x7FC00000, 0x7F800000, 0xFF800000,
                0x00000000, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x00008000,
                0x00018000, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x477FF000, 0x477FEFFF,
                0x33000000, 0x33000001, 0x387FE000, 0x387FF000]


@pytest.mark.parametrize("fmt, dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_round_to_matches_torch_on_awkward_and_random_float32(fmt, dtype):
    import torch
    rng = np.random.default_rng(0)
    bits = np.concatenate([np.array(AWKWARD_BITS, np.uint32),
                           rng.integers(0, 2 ** 32, 100_000, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    with np.errstate(all="raise", under="ignore"):   # numpy warns of no inf or NaN
        got = tensorcore.round_to(x, fmt)
    want = torch.from_numpy(x.copy()).to(getattr(torch, dtype)).float().numpy()
    assert got.dtype == np.float32
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)      # a NaN stays a NaN, never inf or 0
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    same = tensorcore.round_to(x, "fp32")                 # fp32: the identity (NaN stays NaN)
    np.testing.assert_array_equal(same[~nan].view(np.uint32), bits[~nan])
    assert np.isnan(same[nan]).all()


def test_emulated_matmul_exact_on_representable_inputs():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), np.float32)
    for inputs in tensorcore.FORMATS:
        np.testing.assert_array_equal(tensorcore.emulated_matmul(a, b, inputs), a @ b)


def test_fp16_accumulation_error_grows_with_k_and_fp32_does_not():
    r = tensorcore.error_vs_k((16, 256, 4096), size=8)
    pure = r.errors["fp16 in, fp16 accumulate"]
    tc = r.errors["fp16 in, fp32 accumulate (tensor core)"]
    assert pure[-1] > 10 * pure[0]
    assert tc[-1] < 1e-3 and pure[-1] > 100 * tc[-1]
    # input rounding dominates tensor-core error: bounded by the fp16 unit roundoff
    assert tc.max() < 4 * tensorcore.UNIT_ROUNDOFF["fp16"]
    bf = r.errors["bf16 in, fp32 accumulate (tensor core)"]
    assert bf.max() < 4 * tensorcore.UNIT_ROUNDOFF["bf16"] and bf.max() > tc.max()
    with pytest.raises(ValueError, match="ks"):
        tensorcore.error_vs_k((0,))
    with pytest.raises(ValueError, match="fmt"):
        tensorcore.round_to(np.ones(2), "fp8")


def test_error_growth_names_the_fp16_accumulator():
    r = tensorcore.error_vs_k((16, 4096))
    for label, e in r.errors.items():
        assert r.growth[label] == pytest.approx(e[-1] / e[0])
    # pure fp16 grows ~150x from K=16 to 4096; fp32 accumulation (x13) and tensor cores less
    assert r.growth["fp16 in, fp16 accumulate"] > 100 > r.growth["fp32 in, fp32 accumulate"]
    assert r.fastest_growing == "fp16"
    fp32_only = tensorcore.ErrorVsK(r.ks, {k: v for k, v in r.errors.items()
                                           if "fp16 accumulate" not in k}, r.distribution)
    assert fp32_only.fastest_growing == "fp32"


def test_whole_gpu_counts_from_the_white_papers():
    # A100 white paper: 6912 FP32 CUDA cores (108 SMs); H100 SXM5: 16896 (132 SMs)
    assert A100.cuda_cores == 6912 and H100.cuda_cores == 16896
    assert A100.max_resident_threads == 108 * 2048 and H100.max_resident_threads == 132 * 2048


def test_ratios_of_two_machines():
    h100, a100 = roofline.PRESETS["H100"], roofline.PRESETS["A100"]
    r = roofline.ratios(h100, a100)
    assert r["peak"] == pytest.approx(67 / 19.5) and r["bandwidth"] == pytest.approx(3350 / 2039)
    assert r["ridge"] == pytest.approx(h100.ridge() / a100.ridge())
    assert roofline.ratios(h100, a100, "bf16")["peak"] == pytest.approx(989.5 / 312)
    with pytest.raises(ValueError, match="no bf16 rate"):
        roofline.ratios(h100, roofline.Hardware("cpu", {"fp32": 1e12}, 1e11), "bf16")


def test_ladder_predictions_and_speedup():
    from labkit.kernels import models
    for gpu, used in ((None, "H100"), ("V100", "H100"), ("A100", "A100"), ("H200", "H200")):
        preds = models.predict_ladder(1024, gpu)
        assert [p.variant for p in preds] == list(models.LADDER)
        assert {p.gpu for p in preds} == {used}
        assert preds[2].seconds == models.predict_matmul(1024, "tiled", used).seconds
    h100 = {p.variant: p for p in models.predict_ladder(4096, "H100")}
    speedup = models.predicted_speedup(4096, "register2d", "tiled", "H100")
    assert speedup == pytest.approx(h100["register2d"].tflops / h100["tiled"].tflops)
    assert speedup > 1 and models.predicted_speedup(4096, "tiled", "tiled") == 1.0


def test_cpu_comparisons_time_both_sides_on_the_same_inputs():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 32)).astype(np.float32)
    b = rng.standard_normal((32, 24)).astype(np.float32)
    mm = cpu.compare_matmul(a, b, repeats=2)
    assert mm.agrees and mm.flops == 2 * 48 * 32 * 24
    assert len(mm.ours.samples) == len(mm.baseline.samples) == 2
    assert mm.ratio == mm.baseline.median / mm.ours.median
    assert mm.gflops == pytest.approx(mm.flops / mm.ours.median / 1e9)
    x = rng.standard_normal(1000).astype(np.float32)
    ep = cpu.compare_epilogue(x, x, repeats=2)
    assert ep.agrees and ep.flops == 0 and ep.baseline_name == "numpy unfused"
    with pytest.raises(ValueError, match="repeats"):
        cpu.compare_matmul(a, b, repeats=0)


def test_cpu_blocked_matmul_matches_numpy():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((67, 45)).astype(np.float32)
    b = rng.standard_normal((45, 29)).astype(np.float32)
    np.testing.assert_allclose(cpu.matmul_blocked(a, b, block=16), a @ b, rtol=1e-4,
                               atol=1e-4)
    with pytest.raises(ValueError, match="a.shape"):
        cpu.matmul_blocked(a, a)


def test_cpu_fused_epilogue_matches_unfused():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(1001).astype(np.float32)
    r = rng.standard_normal(1001).astype(np.float32)
    want = np.maximum(x * 1.5 - 0.25, 0) * 0.5 + r
    np.testing.assert_allclose(cpu.epilogue_fused(x, r), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cpu.epilogue_numpy(x, r), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="residual"):
        cpu.epilogue_fused(x, r[:5])


def test_gpu_timing_refuses_the_simulator():
    from labkit.kernels import timing
    if timing.on_gpu():
        pytest.skip("a real GPU is present")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        timing.time_events(lambda: None)
    with pytest.raises(ValueError, match="repeats"):
        timing.time_events(lambda: None, repeats=0)


@pytest.mark.gpu
def test_ladder_measured_on_a_gpu():
    from labkit.kernels import timing
    if not timing.on_gpu():
        pytest.skip("needs a CUDA GPU")
    measured = timing.measure_ladder(512, repeats=1)
    assert set(measured) == {"naive", "coalesced", "tiled", "register", "register2d"}
    assert timing.gpu_key() in (None, "V100", "A100", "H100", "H200")
    assert all(tf > 0 for tf in measured.values())
