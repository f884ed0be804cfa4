"""What chapter 03's cells (and chapter 02's leak cell) show, computed by labkit."""
import numpy as np
import pytest

from labkit.training.inference import (DECODERS, BatchPoint, BatchSweep, dtype_facts,
                                       format_dtype_facts, format_kv_cache_rows,
                                       format_precision, kv_cache_bytes, kv_cache_rows,
                                       precision_scan)
from labkit.training.leak import (STRATEGIES, format_leak_table, labkit_leak, leak_table,
                                  torch_leak, worst_strategy)
from labkit.training.modes import ModeAccuracy, mode_rules_vs_torch
from labkit.training.phases import labkit_phase_costs, mlp_matmul_flops, torch_phase_costs


def _layer_flops(batch, k, n, input_requires_grad):
    fwd = 2 * batch * k * n
    return fwd, fwd * (2 if input_requires_grad else 1)


def test_mlp_matmul_flops_sums_the_layers_as_torch_counts_them():
    sizes = (64, 256, 256, 10)
    tor = torch_phase_costs(sizes, 64)
    assert mlp_matmul_flops(sizes, 64, _layer_flops) == (tor.matmul_forward_flops,
                                                          tor.matmul_backward_flops)
    # the first layer's dX counted too: backward exactly 2x forward, more than torch counts
    fwd, bwd = mlp_matmul_flops(sizes, 64, lambda b, k, n, need: (2 * b * k * n, 4 * b * k * n))
    assert bwd == 2 * fwd and bwd - tor.matmul_backward_flops == 2 * 64 * 64 * 256
    with pytest.raises(TypeError, match="layer_flops"):
        mlp_matmul_flops(sizes, 64, None)


def test_parameter_bytes_are_the_closed_form_in_both_engines():
    sizes = (64, 256, 256, 10)
    want = 4 * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    assert want == 340008
    assert labkit_phase_costs(sizes, 2).parameter_bytes == want
    assert torch_phase_costs(sizes, 2).parameter_bytes == want


def test_leak_table_rows_match_the_single_runs_and_the_worst_strategy():
    rows = leak_table(steps=3)
    assert [(r.backward, r.strategy) for r in rows] == (
        [(True, s) for s in STRATEGIES] + [(False, s) for s in STRATEGIES])
    first = rows[0]
    assert first.labkit == labkit_leak(3, "tensor", backward=True)
    assert first.torch == torch_leak(3, "tensor", backward=True)
    by = {(r.backward, r.strategy): r for r in rows}
    assert by[False, "item"].torch.per_step == 0 and by[False, "detach"].torch.per_step == 0
    assert by[False, "tensor"].torch.per_step > 64 * 256 * 4       # at least the hidden layer
    assert worst_strategy(rows, "torch", backward=False) == "tensor"
    assert worst_strategy(rows, "labkit", backward=True) == "tensor"
    with pytest.raises(ValueError, match="engine"):
        worst_strategy(rows, "jax")
    with pytest.raises(ValueError, match="backward=False"):
        worst_strategy(rows[:3], backward=False)
    with pytest.raises(TypeError, match="backwards"):
        leak_table(2, backwards=(1,))
    lines = format_leak_table(rows).splitlines()
    assert len(lines) == 6 and f"labkit {first.labkit.per_step / 1024:7.1f} KiB/step" in lines[0]
    assert lines[0] == "backward= True keep=tensor: labkit   199.8 KiB/step, torch    0.0 KiB/step"
    assert lines[-1] == "backward=False keep=item  : labkit     0.0 KiB/step, torch    0.0 KiB/step"


def test_dtype_facts_are_the_ieee_closed_forms():
    f = {d.name: d for d in dtype_facts()}
    assert f["float32"].unit_roundoff == 2.0 ** -24 and f["float32"].bits == 32
    assert f["bfloat16"].unit_roundoff == 2.0 ** -8 and f["bfloat16"].bits == 16
    assert f["float16"].unit_roundoff == 2.0 ** -11 and f["float16"].max == 65504
    assert f["bfloat16"].digits == pytest.approx(8 * np.log10(2))           # ≈ 2.4
    assert f["float16"].digits == pytest.approx(11 * np.log10(2))           # ≈ 3.3
    assert all(d.eps == 2 * d.unit_roundoff for d in f.values())
    with pytest.raises(ValueError, match="names"):
        dtype_facts(("float8",))
    lines = format_dtype_facts(dtype_facts()).splitlines()
    assert lines[0] == (" float32: 32 bits, largest 3.40282e+38, eps 1.19e-07, unit roundoff "
                        "5.96e-08 (~7.2 significant digits)")
    assert lines[-1] == (" float16: 16 bits, largest 65504, eps 0.000977, unit roundoff "
                         "0.000488 (~3.3 significant digits)")


def test_precision_scan_finds_the_first_overflowing_scale():
    scan = precision_scan((1e5, 1.0, 1e3), width=32, depth=2)
    assert scan.at(1.0).overflow["float16"] == 0
    assert scan.at(1e5).overflow["float16"] > 0 and scan.at(1e5).overflow["float32"] == 0
    first = scan.first_overflow("float16")
    assert first in (1e3, 1e5) and all(scan.at(s).overflow["float16"] == 0
                                       for s in scan.scales if s < first)
    assert scan.first_overflow("float32") is None and scan.first_overflow("bfloat16") is None
    with pytest.raises(ValueError, match="scale"):
        scan.at(7.0)
    with pytest.raises(ValueError, match="dtype"):
        scan.first_overflow("int8")
    lines = format_precision(scan, (1.0, 1e5)).splitlines()
    assert len(lines) == 2 and lines[0].startswith("input scale 1: float32 max err ")
    assert lines[0].endswith(f"float16 max err {scan.at(1.0).errors['float16'].max():.2g}, "
                             f"overflows 0")
    assert lines[-1].startswith("input scale 100000: float32 max err ")
    assert lines[-1].endswith(f"overflows {scan.at(1e5).overflow['float16']}")
    with pytest.raises(ValueError, match="scale"):
        format_precision(scan, (7.0,))


def test_batch_sweep_ratios_and_mode_comparison():
    s = BatchSweep((BatchPoint(1, 1e-4, 1e4), BatchPoint(8, 2e-4, 4e4)), width=4, depth=1)
    assert s.latency_growth == pytest.approx(2.0) and s.throughput_gain == pytest.approx(4.0)
    acc = lambda train: ModeAccuracy(0.5, (2, 256), train, (0.9, 0.9))  # noqa: E731
    assert acc((0.5, 0.9)).smallest_vs_largest == "lower"
    assert acc((0.95, 0.9)).smallest_vs_largest == "higher"
    assert acc((0.9, 0.9)).smallest_vs_largest == "the same"


def test_kv_cache_rows_from_a_rule():
    rows = {r.model: r for r in kv_cache_rows()}
    assert rows["Llama-2-70B"].per_token_bytes == 2 * 8 * 128 * 2 * 80 == 327680
    for name, m in DECODERS.items():
        assert rows[name].cache_bytes == kv_cache_bytes(m, 4096, batch=8)
    # a rule caching every query head: Llama-2-70B's cache 8x too big, 7B's unchanged
    heads = {r.model: r for r in kv_cache_rows(lambda nh, nkv, hd, b: 2 * nh * hd * b)}
    assert heads["Llama-2-70B"].cache_bytes == 8 * rows["Llama-2-70B"].cache_bytes
    assert heads["Llama-2-7B"].cache_bytes == rows["Llama-2-7B"].cache_bytes
    with pytest.raises(TypeError, match="rule"):
        kv_cache_rows(3)
    # 7B: 2 (K, V) x 32 heads x 128 x 2 B x 32 layers = 512 KiB/token; x 2048 tokens = 1 GiB
    lines = format_kv_cache_rows(kv_cache_rows(seq=1024, batch=2), seq=1024, batch=2).splitlines()
    assert lines[0] == "Llama-2-7B: 512 KiB per token; batch 2 x 1024 tokens: 1.0 GiB"
    assert lines[-1] == "Llama-2-70B: 320 KiB per token; batch 2 x 1024 tokens: 0.6 GiB"
    with pytest.raises(ValueError, match="batch"):
        format_kv_cache_rows(rows.values(), seq=1024, batch=0)


def test_mode_rules_vs_torch_passes_right_rules_and_catches_wrong_ones():
    def bn(x, mean, var, gamma, beta, eps=1e-5):
        return gamma * (x - mean) / np.sqrt(var + eps) + beta

    def drop(x, mask, p):
        return x * mask / (1 - p)

    right = mode_rules_vs_torch(bn, drop)
    assert right.batchnorm_matches_torch and abs(right.dropout_mean - 1.0) < 0.01
    assert mode_rules_vs_torch(bn, lambda x, mask, p: x * mask).dropout_mean == pytest.approx(
        0.7, abs=0.01)                                   # no 1/(1-p): the mean falls to 1 - p
    assert not mode_rules_vs_torch(lambda x, m, v, g, b, eps=1e-5: g * (x - m) / (v + eps) + b,
                                   drop).batchnorm_matches_torch       # var, not its root
    assert not mode_rules_vs_torch(lambda x, m, v, g, b, eps=1e-5: b * (x - m) / np.sqrt(v + eps)
                                   + g, drop).batchnorm_matches_torch  # gamma and beta swapped
    with pytest.raises(ValueError, match="p must be"):
        mode_rules_vs_torch(bn, drop, p=1.0)
