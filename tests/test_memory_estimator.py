"""Estimator against hand-derived values, the papers' numbers and torch measurements."""
import pytest

from labkit.memory import (
    activation_bytes_per_layer, activation_terms, checkpoint_memory_units, mlp_saved_bytes,
    model_state_bytes, sqrt_checkpoint_segments,
)
from labkit.memory import measure


def test_seed_exercise_100m_params():
    st = model_state_bytes(100_000_000, "fp32", "adam")
    assert (st.params, st.grads, st.optimizer, st.total) == (4e8, 4e8, 8e8, 1.6e9)
    assert model_state_bytes(100_000_000, "fp32", "sgd").total == 8e8
    assert model_state_bytes(100_000_000, "fp32", "momentum").optimizer == 4e8


def test_zero_paper_figure_1():
    """7.5B parameters, Nd = 64, mixed-precision Adam: 120, 31.4, 16.6, 1.9 GB."""
    psi, nd = 7_500_000_000, 64
    got = [model_state_bytes(psi, "mixed", "adam", s, nd).total / 1e9 for s in range(4)]
    assert got == pytest.approx([120.0, 31.4, 16.6, 1.9], abs=0.06)
    st = model_state_bytes(psi, "mixed", "adam")
    assert (st.params, st.grads, st.optimizer) == (2 * psi, 2 * psi, 12 * psi)
    # partitions are ceil(psi / dp) elements
    assert model_state_bytes(10, "mixed", "adam", 3, 3).total == 16 * 4


def test_activation_table_2():
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert activation_bytes_per_layer(s, b, h, a) == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert sum(activation_terms(s, b, h, a).values()) == sbh * 34 + 5 * a * s * s * b
    assert activation_bytes_per_layer(s, b, h, a, tp=t) == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=True) == \
        pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert activation_bytes_per_layer(s, b, h, a, tp=t, recompute="selective") == \
        pytest.approx(sbh * (10 + 24 / t))
    assert activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=True,
                                      recompute="selective") == pytest.approx(sbh * 34 / t)
    assert activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * sbh


def test_sqrt_checkpointing():
    assert sqrt_checkpoint_segments(16) == 4 and checkpoint_memory_units(16, 4) == 8
    assert checkpoint_memory_units(16, 1) == 16 and sqrt_checkpoint_segments(100) == 10
    assert sqrt_checkpoint_segments(1) == 1


@pytest.mark.parametrize("call", [
    lambda: model_state_bytes(-1), lambda: model_state_bytes(10, precision="fp8"),
    lambda: model_state_bytes(10, optimizer="lamb"), lambda: model_state_bytes(10, zero_stage=4),
    lambda: model_state_bytes(10, dp=0), lambda: activation_bytes_per_layer(0, 1, 64, 4),
    lambda: activation_bytes_per_layer(8, 1, 64, 5), lambda: activation_bytes_per_layer(
        8, 1, 64, 4, recompute="some"), lambda: checkpoint_memory_units(4, 5),
    lambda: mlp_saved_bytes(3, [4])])
def test_bad_input(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("hidden", [64, 96])
def test_param_count_of_a_real_block(hidden):
    block = measure.make_transformer_block(hidden, 4)
    assert measure.count_params(block) == measure.transformer_block_params(hidden) == \
        12 * hidden ** 2 + 13 * hidden


@pytest.mark.parametrize("batch, widths", [(37, [23, 61, 45, 7]), (5, [300, 17]),
                                           (64, [128, 256, 256, 256, 10])])
def test_mlp_saved_bytes_match_torch(batch, widths):
    assert measure.mlp_saved(batch, widths).total_bytes == mlp_saved_bytes(batch, widths)


@pytest.mark.parametrize("s, b, h, a", [(16, 2, 64, 4), (24, 3, 96, 6), (20, 1, 80, 5)])
def test_transformer_saved_bytes_match_korthikanti_plus_cpu_extras(s, b, h, a):
    got = measure.transformer_block_saved(s, b, h, a).total_bytes
    paper = activation_bytes_per_layer(s, b, h, a)
    extra = sum(measure.transformer_extra_terms(s, b, h, a).values())
    assert got == paper + extra
    assert extra == a * s * s * b + 2 * s * b * h + 8 * s * b


def test_checkpointing_and_accumulation_measured():
    res = measure.measure_checkpointing(num_layers=8, width=64, batch=512, segments=(0, 4),
                                        repeats=1)
    assert res[1].peak_bytes < 0.8 * res[0].peak_bytes
    acc = measure.measure_accumulation(batch=64, widths=(32, 128, 10), micro_batches=(1, 4))
    assert acc[1].peak_bytes < acc[0].peak_bytes and acc[1].max_grad_diff < 1e-6


@pytest.mark.parametrize("call, name", [
    (lambda: measure.measure_checkpointing(num_layers=0), "num_layers"),
    (lambda: measure.measure_checkpointing(width=-4), "width"),
    (lambda: measure.measure_checkpointing(segments=(0, 99)), "segments"),
    (lambda: measure.measure_accumulation(batch=0), "batch"),
    (lambda: measure.measure_accumulation(batch=64, micro_batches=(3,)), "micro_batches")])
def test_measurements_reject_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_extra_terms_are_named_and_read_as_labelled_bytes():
    # 6.4's hints read the terms by name: dropout masks (as²b + 2sbh) and LayerNorm
    # statistics 4sb·2 for bf16, whatever order the labels are printed in
    s, b, h, a = 24, 3, 96, 6
    extra = measure.transformer_extra_terms(s, b, h, a)
    assert (extra.masks, extra.layernorm) == (a * s * s * b + 2 * s * b * h, 8 * s * b)
    assert extra.total == extra.masks + extra.layernorm == sum(extra.values())
    assert extra.as_dict() == dict(extra.items()) and len(extra) == 2
    assert extra["LayerNorm mean and rstd: 4sb·itemsize"] == 8 * s * b
    assert measure.transformer_extra_terms(s, b, h, a, itemsize=1).masks == 0      # 1-byte masks
