"""labkit.kernels.timing, the parts that run without a GPU: the device-name key, the ladder's
launch shapes, and a matmul timed on Numba's simulator (its events mean nothing there; the
correctness check and the NaN fill do)."""
import labkit  # noqa: F401  (selects the simulator before numba is imported)
import numpy as np
import pytest

from labkit.kernels import timing
from labkit.kernels.models import LADDER, LADDER_SHAPES


@pytest.mark.parametrize("name, key", [("NVIDIA H100 80GB HBM3", "H100"),
                                       ("NVIDIA H200", "H200"),
                                       ("NVIDIA A100-SXM4-80GB", "A100"),
                                       ("Tesla V100-SXM2-32GB", "V100"),
                                       ("Tesla V100-SXM2-16GB", "V100"),  # same sheet
                                       ("Tesla T4", None),
                                       ("NVIDIA GeForce RTX 4090", None),
                                       # other boards of a sheet's chip: not the SXM sheet
                                       ("NVIDIA H100 PCIe", None),
                                       ("NVIDIA H100 NVL", None),
                                       ("NVIDIA H200 NVL", None),
                                       ("NVIDIA A100 80GB PCIe", None),
                                       ("Tesla V100-PCIE-32GB", None),
                                       ("NVIDIA A100-SXM4-40GB", None),   # 1.56 TB/s
                                       ("NVIDIA GH200 480GB", None),      # not an H200
                                       ("NVIDIA H800", None)])
def test_hardware_key_of_a_device_name(name, key):
    assert timing.hardware_key(name) == key
    assert timing.hardware_key(name, "H100") == (key or "H100")


def test_gpu_key_without_a_gpu_is_the_default():
    if timing.on_gpu():
        pytest.skip("a real GPU is present")
    assert timing.gpu_key() is None and timing.gpu_key("H100") == "H100"


def test_launch_shapes_are_the_ladders():
    for variant in LADDER:
        kw = timing.launch_shape(variant)
        assert kw == ({"blocked": LADDER_SHAPES[variant]} if variant == "register2d"
                      else LADDER_SHAPES[variant])
    assert timing.launch_shape("tiled", dict(tile=8)) == {"tile": 8}


def test_time_matmul_checks_every_output_on_the_simulator():
    if timing.on_gpu():
        pytest.skip("the simulator path")
    from numba import cuda
    a = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    want = a.astype(np.float64) @ a.astype(np.float64)
    da, dc = cuda.to_device(a), cuda.device_array((16, 16), dtype=np.float32)
    run = timing.time_matmul("tiled", da, da, dc, want, 1, dict(tile=8))
    assert run.correct and run.variant == "tiled"
    np.testing.assert_allclose(dc.copy_to_host(), want, rtol=1e-4, atol=1e-4)
    # a launch that never runs leaves the NaN fill: the stale right answer cannot pass
    idle = timing.time_matmul("tiled", da, da, dc, want, 1, dict(tile=8),
                              timer=lambda launch, repeats: 1e-3)
    assert not idle.correct and np.isnan(dc.copy_to_host()).all()
    assert idle.tflops == pytest.approx(2 * 16 ** 3 / 1e-3 / 1e12)
    assert not timing.time_matmul("tiled", da, da, dc, want + 1.0, 1, dict(tile=8)).correct


def test_torch_matmul_seconds_needs_cuda_and_a_valid_repeats():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA torch: gpu_check times it")
    a = np.ones((4, 4), np.float32)
    with pytest.raises(RuntimeError, match="no CUDA"):
        timing.torch_matmul_seconds(a, 1)
    with pytest.raises(ValueError, match="repeats"):
        timing.torch_matmul_seconds(a, 0)
