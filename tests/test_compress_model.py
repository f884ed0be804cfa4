"""labkit.compress.model against torch, closed forms and the papers' numbers."""
import numpy as np
import pytest
import torch

from labkit.compress.model import (QuantLinear, conv_cost, dequantize, fake_quant, kd_loss,
                                   magnitude_mask, overflow_fraction, qparams, quant_error_curve,
                                   quantize, relative_error, safe_log2_scales, separable_ratio,
                                   structured_mask, underflow_fraction, update_loss_scale)
from labkit.numerics import FORMATS, round_to, unit_roundoff


def test_asymmetric_qparams_closed_form_and_zero_exact():
    x = np.array([-1.0, 0.5, 2.0])
    qp = qparams(x, 8)
    assert float(qp.scale) == pytest.approx(3.0 / 255) and int(qp.zero_point) == 85
    assert dequantize(quantize(np.array([0.0]), qp), qp)[0] == 0.0
    pos = qparams(np.array([1.0, 3.0]), 8)            # range widened to include 0
    assert int(pos.zero_point) == 0 and float(pos.scale) == pytest.approx(3.0 / 255)


def test_matches_torch_fake_quantize_per_tensor_affine():
    x = torch.randn(200, generator=torch.Generator().manual_seed(0)) * 2
    qp = qparams(x.numpy(), 8)
    ref = torch.fake_quantize_per_tensor_affine(x, float(qp.scale), int(qp.zero_point), 0, 255)
    assert np.allclose(fake_quant(x.numpy(), 8), ref.numpy(), atol=1e-6)


def test_error_halves_per_bit_and_per_channel_beats_per_tensor():
    w = np.random.default_rng(0).normal(size=(32, 64)) * np.geomspace(0.01, 1, 32)[:, None]
    err = [np.sqrt(np.mean((fake_quant(w, b, True) - w) ** 2)) for b in (4, 5, 6, 7, 8)]
    ratios = np.array(err[:-1]) / np.array(err[1:])
    assert np.allclose(ratios, 2.0, rtol=0.2)         # one more bit halves the step
    pt = np.abs(fake_quant(w, 8, True) - w)[:4].mean()
    pc = np.abs(fake_quant(w, 8, True, axis=0) - w)[:4].mean()
    assert pc < pt / 10
    # symmetric error bounded by half a step
    qp = qparams(w, 8, True, axis=0)
    assert np.all(np.abs(fake_quant(w, 8, True, 0) - w) <= qp.scale / 2 + 1e-12)


def test_quant_linear_close_to_float_and_smaller():
    rng = np.random.default_rng(1)
    w, b, x = rng.normal(size=(32, 64)), rng.normal(size=32), rng.normal(size=(10, 64))
    ql = QuantLinear(w, b)
    y = x @ w.T + b
    assert np.abs(ql(x) - y).max() < 0.02 * np.abs(y).max()
    assert ql.wq.dtype == np.int8 and ql.nbytes == 32 * 64 + 4 * 32 + 4 * 32
    with pytest.raises(ValueError, match="x"):
        ql(rng.normal(size=(3, 5)))


def test_float_formats_against_numpy_and_torch():
    assert unit_roundoff("fp16") == 2 ** -11 and unit_roundoff("bf16") == 2 ** -8
    assert FORMATS["fp16"].decimal_digits == pytest.approx(3.31, abs=0.01)
    assert FORMATS["bf16"].decimal_digits == pytest.approx(2.41, abs=0.01)
    f16 = np.finfo(np.float16)
    assert FORMATS["fp16"].max == float(f16.max) and FORMATS["fp16"].min_normal == float(f16.tiny)
    assert FORMATS["fp16"].min_subnormal == 2.0 ** -24
    bf = torch.finfo(torch.bfloat16)
    assert FORMATS["bf16"].max == bf.max and FORMATS["bf16"].min_normal == bf.tiny
    x = np.random.default_rng(2).normal(size=5000) * 10.0 ** np.random.default_rng(3).integers(-30, 30, 5000)
    want = torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).double().numpy()
    assert np.array_equal(round_to(x, "bf16"), want)
    assert round_to(1 + 2 ** -9, "bf16") == 1.0 and round_to(1 + 3 * 2 ** -9, "bf16") == 1 + 2 ** -7
    with pytest.raises(ValueError, match="fmt"):
        round_to(1.0, "fp8")


def test_round_to_float64_inputs_rounding_and_overflow():
    # fp16 rounds a float64 once: 1 + 2^-11 + 2^-40 is above the tie, so up to 1 + 2^-10
    # (torch casts through float32, loses the 2^-40 and ties to even: 1.0)
    assert round_to(1 + 2 ** -11 + 2 ** -40, "fp16") == 1 + 2 ** -10
    # bf16 rounds a float64 through float32, as torch does: the same input class ties to 1.0
    x = 1 + 2 ** -8 + 2 ** -30
    assert round_to(x, "bf16") == torch.tensor([x], dtype=torch.float64).to(torch.bfloat16).item() == 1.0
    with np.errstate(all="raise", under="ignore"):
        big = round_to([1e39, -1e39, 7e4, np.nan], "bf16")
        assert np.array_equal(round_to([7e4, 65519.0], "fp16"), [np.inf, 65504.0])
        assert round_to(1e39, "fp32") == np.inf
    assert big[:2].tolist() == [np.inf, -np.inf] and big[2] == 70144.0 and np.isnan(big[3])
    assert round_to(np.float32(1.5), "bf16").dtype == np.float64


def test_relative_error_whole_and_per_row():
    w = np.array([[3.0, 4.0], [0.0, 1.0]])
    wq = np.array([[3.0, 4.5], [0.0, 1.5]])
    # ‖(0, .5, 0, .5)‖ / ‖(3, 4, 0, 1)‖ = √0.5 / √26; rows: 0.5 / 5 and 0.5 / 1
    assert relative_error(w, wq) == pytest.approx(np.sqrt(0.5 / 26))
    np.testing.assert_allclose(relative_error(w, wq, axis=1), [0.1, 0.5])
    x = np.random.default_rng(0).normal(size=(8, 16))
    xq = fake_quant(x, 4, True)
    rms = np.sqrt(np.mean((xq - x) ** 2)) / np.sqrt(np.mean(x ** 2))   # chapter 08's form
    assert relative_error(x, xq) == pytest.approx(rms, rel=1e-12)
    with pytest.raises(ValueError, match="axis must be None, 0 or 1"):
        relative_error(w, wq, axis=2)
    with pytest.raises(ValueError, match="wq"):
        relative_error(w, wq[:1])


def test_quant_error_curve_per_channel_wins_and_halves_per_bit():
    w = np.random.default_rng(0).normal(size=(16, 64)) * np.geomspace(0.02, 1.0, 16)[:, None]
    err = quant_error_curve(w, [4, 5, 6, 7, 8])
    assert list(err) == ["per tensor", "per channel"]
    assert err["per tensor"][0] == relative_error(w, fake_quant(w, 4, True))
    assert err["per channel"][-1] == relative_error(w, fake_quant(w, 8, True, 0))
    assert all(c < t for t, c in zip(err["per tensor"], err["per channel"]))
    assert np.allclose(np.array(err["per tensor"][:-1]) / err["per tensor"][1:], 2.0, rtol=0.2)
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 16\]"):
        quant_error_curve(w, [1])


def test_overflow_fraction_is_past_the_formats_max():
    g = np.array([1.0, -1.0, 100.0, 0.0])
    assert overflow_fraction(g, "fp16") == 0.0
    assert overflow_fraction(g, "fp16", scale=FORMATS["fp16"].max / 100) == 0.0   # = max
    assert overflow_fraction(g, "fp16", scale=1000.0) == pytest.approx(0.25)     # 1e5
    assert overflow_fraction(g, "fp16", scale=2.0 ** 16) == pytest.approx(0.75)  # |±1|·2^16
    assert overflow_fraction(g, "bf16", scale=2.0 ** 16) == 0.0
    # past max but rounded to it, not to inf: fp16 has no number between 65504 and 65536,
    # and round to nearest even sends everything below the midpoint 65520 down to 65504
    assert overflow_fraction([65505.0, 65519.0, 65520.0, -65536.0], "fp16") == 0.5
    assert overflow_fraction([65505.0], "fp16") == 0.0
    with pytest.raises(ValueError, match="fmt must be one of"):
        overflow_fraction(g, "fp8")


def test_loss_scaling_rescues_underflow():
    g = np.array([1e-8, 3e-8, 1e-6, 1e-3])
    assert underflow_fraction(g, "fp16") == pytest.approx(0.25)     # 1e-8 < 2^-25 rounds to 0
    assert underflow_fraction(g, "fp16", scale=2.0 ** 10) == 0.0
    assert underflow_fraction(g, "bf16") == 0.0                      # bf16 has fp32's range
    assert update_loss_scale(65536.0, True, 10) == (32768.0, 0, True)
    assert update_loss_scale(1.0, False, 1999) == (2.0, 0, False)
    assert update_loss_scale(1.0, False, 5) == (1.0, 6, False)


def test_safe_log2_scales_exercise_1():
    """Chapter 08's exercise 1 on the demo gradients (2^N(-24, 5), 20,000 of them): 2^10
    loses 1.43 % to underflow, 2^11 0.87 %; 2^20 overflows none, 2^21 three of them."""
    from labkit.compress.widgets import demo_gradients
    g = demo_gradients()
    assert safe_log2_scales(g) == list(range(11, 21))
    assert underflow_fraction(g, "fp16", 2.0 ** 10) == pytest.approx(0.0143)
    assert underflow_fraction(g, "fp16", 2.0 ** 11) == pytest.approx(0.0087)
    assert overflow_fraction(g, "fp16", 2.0 ** 21) == pytest.approx(3 / 20000)
    # by hand: 2^-30 needs 2^6 to reach fp16's 2^-24 (2^5 gives 2^-25, a tie rounded to 0);
    # 2^4 · 2^12 = 65536 overflows, 2^4 · 2^11 does not
    assert safe_log2_scales([2.0 ** -30, 2.0 ** 4], max_lost=0.5) == list(range(6, 12))
    with pytest.raises(ValueError, match="high must be an integer >= 5"):
        safe_log2_scales(g, low=5, high=4)


def test_pruning_masks():
    w = np.array([[0.1, -3.0, 0.2], [2.0, 0.05, -0.3]])
    assert magnitude_mask(w, 0.5).tolist() == [[False, True, False], [True, False, True]]
    w2 = np.array([[3.0, 0.0], [0.5, 0.5], [1.0, 1.0]])
    assert structured_mask(w2, 1 / 3)[:, 0].tolist() == [True, False, True]
    assert structured_mask(w2, 0).all() and not structured_mask(w2, 1).any()


def test_conv_cost_matches_torch_and_mobilenet_ratio():
    k, m, n, f = 3, 32, 64, 112
    c = conv_cost(k, m, n, f)
    std = torch.nn.Conv2d(m, n, k, padding=1, bias=False)
    dw = torch.nn.Conv2d(m, m, k, padding=1, groups=m, bias=False)
    pw = torch.nn.Conv2d(m, n, 1, bias=False)
    assert c.standard_params == std.weight.numel()
    assert c.separable_params == dw.weight.numel() + pw.weight.numel()
    assert c.ratio == pytest.approx(1 / n + 1 / k ** 2)
    for k2, m2, n2, f2 in ((3, 32, 64, 112), (5, 16, 24, 56), (1, 8, 8, 4)):
        assert separable_ratio(k2, n2) == pytest.approx(conv_cost(k2, m2, n2, f2).ratio)
    with pytest.raises(ValueError, match="out_ch must be an integer >= 1"):
        separable_ratio(3, 0)


def test_kd_loss_against_torch():
    rng = np.random.default_rng(5)
    s, t, y = rng.normal(size=(6, 10)), rng.normal(size=(6, 10)) * 3, rng.integers(0, 10, 6)
    T, a = 3.0, 0.7
    st, tt = torch.tensor(s), torch.tensor(t)
    F = torch.nn.functional
    kl = F.kl_div(F.log_softmax(st / T, 1), F.log_softmax(tt / T, 1), log_target=True,
                  reduction="batchmean")
    want = a * T * T * kl + (1 - a) * F.cross_entropy(st, torch.tensor(y))
    assert kd_loss(s, t, y, T, a) == pytest.approx(float(want))
