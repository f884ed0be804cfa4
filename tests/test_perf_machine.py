"""This machine's measurements and operator counts: PyTorch's flop counter, closed forms.
The roofline model itself is tested in test_kernels_roofline.py."""
import pytest
import torch

from labkit.hardware.machine import measure_bandwidth, measure_peak_flops
from labkit.perf.ops import count_ops
from labkit.perf.stack import simplenet_counts, simplenet_step_flops, cnn_step_counts


def test_measurements_are_positive_and_validated():
    assert measure_peak_flops(64, repeats=1) > 0
    assert measure_peak_flops(64, repeats=1, backend="numpy") > 0
    assert measure_bandwidth(1, repeats=1) > 0
    with pytest.raises(ValueError, match="n must be an integer"):
        measure_peak_flops(8)
    with pytest.raises(ValueError, match="backend must be one of"):
        measure_peak_flops(64, backend="jax")


@pytest.mark.parametrize("batch, rg", [(5, True), (5, False), (33, True)])
def test_simplenet_flops_match_the_dispatcher_and_torch(batch, rg):
    counts = simplenet_counts(batch, input_requires_grad=rg)
    assert counts.matmul_flops == simplenet_step_flops(batch, input_requires_grad=rg)
    model = torch.nn.Sequential(torch.nn.Linear(10, 50), torch.nn.ReLU(), torch.nn.Linear(50, 1))
    x = torch.randn(batch, 10, requires_grad=rg)
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fc:
        model(x).sum().backward()
    assert fc.get_total_flops() == simplenet_step_flops(batch, input_requires_grad=rg)


def test_count_ops_bytes_of_one_addmm():
    a, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    c = count_ops(lambda: torch.addmm(b, a, w)).by_name()["addmm"]
    assert c.calls == 1 and c.flops == 2 * 8 * 16 * 4
    assert c.bytes == 4 * (4 + 8 * 16 + 16 * 4 + 8 * 4)


def test_cnn_first_conv_flops():
    conv = cnn_step_counts(2).by_name()["convolution"]
    # conv1: 2 · (B·16·32·32 outputs) · 3·3·3 ; conv2: 2 · (B·32·16·16) · 16·3·3
    assert conv.flops == 2 * 2 * 16 * 32 * 32 * 27 + 2 * 2 * 32 * 16 * 16 * 144


def test_the_machine_roofline_names_the_threads_its_peak_ran_on():
    from labkit.hardware.machine import measure_machine
    one = measure_machine(threads=1)
    assert one.name.startswith("this machine (1 thread of ") and one.measured
    assert "1 thread(s)" in one.source and measure_machine(threads=1) is one
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert measure_machine() is one              # None: torch's current setting
    finally:
        torch.set_num_threads(before)


def test_count_ops_keeps_the_calls_in_dispatch_order():
    a, w = torch.randn(4, 8), torch.randn(8, 3)
    counts = count_ops(lambda: torch.relu(a @ w).sum())
    assert [o.name for o in counts.sequence] == ["mm", "relu", "sum"]
    assert all(o.calls == 1 for o in counts.sequence)
    assert counts.sequence[0].flops == counts.by_name()["mm"].flops == 2 * 4 * 8 * 3
