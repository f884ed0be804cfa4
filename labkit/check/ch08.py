"""Chapter 08's exercises: quantization, loss scaling, pruning, efficient convolutions."""
from __future__ import annotations

import numpy as np

from labkit.check.core import Wrong, exercise, expect_close
from labkit.compress.loss_scaling import gradscaler_step
from labkit.compress.model import conv_cost, qparams, quantize, structured_mask


def scale_zero_point(x, bits):
    """Reference: asymmetric per-tensor (scale, zero point) of ``x`` for ``bits`` bits."""
    qp = qparams(x, bits, symmetric=False)
    return float(qp.scale), int(qp.zero_point)


def quantize_per_channel(w, bits):
    """Reference: symmetric per-row quantization of a (out, in) weight → (q, scales)."""
    qp = qparams(w, bits, symmetric=True, axis=0)
    return quantize(w, qp), qp.scale.reshape(-1)


# Reference: one GradScaler update → (scale, good_steps, skipped)
loss_scale_step = gradscaler_step


def separable_cost(kernel, in_ch, out_ch, feature):
    """Reference: (weights, multiply-adds) of a depthwise-separable convolution."""
    c = conv_cost(kernel, in_ch, out_ch, feature)
    return c.separable_params, c.separable_macs


@exercise("8.1", "scale and zero point", reference=scale_zero_point, binds="scale_zero_point")
def _(answer):
    rng = np.random.default_rng(1)
    cases = [(np.array([-1.0, 0.5, 2.0]), 8), (rng.uniform(0.2, 3.0, 50), 8),
             (rng.uniform(-5.0, -1.0, 40), 8), (rng.normal(0.3, 1.0, 100), 4),
             (np.array([-0.1, 6.0]), 8), (rng.normal(0, 2, 30), 3)]
    for x, b in cases:
        s, z = answer(x.copy(), b)
        ws, wz = scale_zero_point(x, b)
        if np.isclose(s, ws, rtol=1e-9) and int(z) == wz and float(z) == int(z):
            continue
        lo, hi = x.min(), x.max()
        if np.isclose(s, (hi - lo) / (2 ** b - 1)) and not np.isclose(s, ws):
            raise Wrong(f"x in [{lo:.3g}, {hi:.3g}]: the range must include 0 so that 0 is exact "
                        f"(zero padding, ReLU outputs): use min(x.min(), 0) and max(x.max(), 0).")
        if np.isclose(s, ws * (2 ** b - 1) / 2 ** b):
            raise Wrong(f"{b} bits give 2^b - 1 = {2 ** b - 1} steps between 0 and 2^b - 1, "
                        f"not 2^b: scale = (max - min) / (2^b - 1).")
        if not np.isclose(s, ws, rtol=1e-9):
            raise Wrong(f"scale {s:.6g}, expected {ws:.6g} for x in [{lo:.3g}, {hi:.3g}], "
                        f"{b} bits: scale = (max - min) / (2^b - 1).")
        if float(z) != int(z) or int(z) != wz:
            raise Wrong(f"zero point {z}, expected {wz}: Z = round(-min / scale), an integer "
                        f"in [0, 2^b - 1], so that the real value 0 maps exactly to Z.")


@exercise("8.2", "quantize per channel", reference=quantize_per_channel, binds="quantize_per_channel")
def _(answer):
    rng = np.random.default_rng(2)
    for shape, b in (((6, 10), 8), ((4, 7), 4), ((8, 3), 8), ((5, 12), 3)):
        w = rng.normal(size=shape) * np.geomspace(0.01, 1.0, shape[0])[:, None]
        q, s = answer(w.copy(), b)
        q, s = np.asarray(q), np.asarray(s, dtype=float).reshape(-1)
        wq, ws = quantize_per_channel(w, b)
        qmax = 2 ** (b - 1) - 1
        if s.size == 1 or (s.size == shape[0] and np.allclose(s, s[0])):
            raise Wrong("one scale for the whole tensor: that is per-tensor quantization; the "
                        "small rows lose all their precision. Give each output channel (row) "
                        "its own scale max|w_row| / (2^(b-1) - 1).")
        if s.size == shape[1]:
            raise Wrong(f"{s.size} scales: you reduced over the wrong axis; one scale per "
                        f"output channel = per row of the (out, in) weight.")
        if s.size != shape[0]:
            raise Wrong(f"expected {shape[0]} scales (one per row), got {s.size}.")
        if np.abs(q).max() > qmax:
            raise Wrong(f"|q| reaches {np.abs(q).max()}; symmetric {b}-bit values lie in "
                        f"[-{qmax}, {qmax}]: scale = max|w| / (2^(b-1) - 1), and clip.")
        if np.allclose(s, ws * qmax / 2 ** (b - 1)):
            raise Wrong(f"scale = max|w| / 2^(b-1) wastes part of the range; use / (2^(b-1) - 1) "
                        f"= / {qmax}.")
        expect_close(s, ws, f"scales ({shape}, {b} bits)", rtol=1e-9,
                     hint="scale of row i = max_j |w_ij| / (2^(b-1) - 1).")
        expect_close(q, wq, f"q ({shape}, {b} bits)",
                     hint="q = clip(round(w / scale_row), -(2^(b-1) - 1), 2^(b-1) - 1).")


@exercise("8.3", "dynamic loss scaling", reference=loss_scale_step, binds="loss_scale_step")
def _(answer):
    cases = [(65536.0, True, 17, 2000), (65536.0, False, 0, 2000), (1024.0, False, 1998, 2000),
             (1024.0, False, 1999, 2000), (8.0, True, 0, 3), (8.0, False, 2, 3), (2.0, False, 0, 1)]
    for scale, inf, good, gi in cases:
        got = answer(scale, inf, good, gi)
        if not isinstance(got, tuple) or len(got) != 3:
            raise Wrong("return (scale, good_steps, skipped).")
        s, g, skip = got
        ws, wg, wskip = loss_scale_step(scale, inf, good, gi)
        where = f"scale={scale:g}, found_inf={inf}, good_steps={good}, growth_interval={gi}"
        if inf and not skip:
            raise Wrong(f"{where}: an inf/NaN gradient must not reach the optimizer: skip the step.")
        if inf and s != ws:
            raise Wrong(f"{where}: on overflow halve the scale (backoff 0.5), got {s:g}.")
        if inf and g != 0:
            raise Wrong(f"{where}: an overflow resets the count of good steps to 0, got {g}.")
        if not inf and skip:
            raise Wrong(f"{where}: finite gradients: take the step.")
        if (s, g) != (ws, wg):
            raise Wrong(f"{where}: got (scale {s:g}, good_steps {g}), expected (scale {ws:g}, "
                        f"good_steps {wg}): count this good step first; when the count reaches "
                        f"growth_interval, double the scale and reset the count.")


@exercise("8.4", "a structured pruning mask", reference=structured_mask, binds="structured_mask")
def _(answer):
    rng = np.random.default_rng(4)
    # two hand-made weights where the L2 norm disagrees with L-infinity (row 0: one big
    # entry, norm 2; row 1: four of 1.2, norm 2.4, max 1.2) and with L1 (row 0: four ones,
    # norm 2, sum 4; row 1: one 2.1)
    by_hand = [np.array([[2, 0, 0, 0], [1.2] * 4, [3] * 4, [4] * 4], dtype=float),
               np.array([[1] * 4, [2.1, 0, 0, 0], [3] * 4, [4] * 4], dtype=float)]
    cases = [(rng.normal(size=shape), sp) for shape, sp in (
        ((8, 5), 0.5), ((10, 4), 0.3), ((7, 9), 0.25), ((6, 6), 0.0), ((5, 3), 1.0))]
    for w, _ in cases:
        w[0] *= 0.05                 # a weak row whose entries are not all the smallest
        w[1, 0] = 0.001              # a strong row holding the smallest single entry
        w[1, 1:] *= 4
    for w, sp in cases + [(w, 0.25) for w in by_hand]:
        shape = w.shape
        got = np.asarray(answer(w.copy(), sp))
        want = structured_mask(w, sp)
        if got.shape != w.shape:
            raise Wrong(f"mask shape {got.shape}; return a boolean mask shaped like w {w.shape}.")
        got = got.astype(bool)
        rows_whole = np.all(got == got[:, :1], axis=1).all()
        if not rows_whole:
            raise Wrong("your mask removes single weights; structured pruning removes whole "
                        "output channels (rows), so the layer really becomes smaller.")
        kept = got[:, 0]
        k = int(round(sp * shape[0]))
        if (~kept).sum() != k:
            raise Wrong(f"{shape[0]} rows, sparsity {sp}: prune round(sparsity · rows) = {k} "
                        f"rows, you pruned {(~kept).sum()}.")
        if not np.array_equal(got, want):
            raise Wrong(f"wrong rows pruned ({shape}, sparsity {sp}): drop the rows with the "
                        f"smallest L2 norm ‖w_i‖₂, keep the strongest.")


@exercise("8.5", "depthwise-separable cost", reference=separable_cost, binds="separable_cost")
def _(answer):
    for k, m, n, f in ((3, 32, 64, 112), (3, 512, 512, 14), (5, 16, 24, 56), (1, 8, 8, 4),
                       (7, 3, 3, 9)):
        p, macs = answer(k, m, n, f)
        wp, wm = separable_cost(k, m, n, f)
        if (p, macs) == (wp, wm):
            continue
        where = f"kernel {k}, M={m}, N={n}, D_F={f}"
        if p == k * k * m and macs == k * k * m * f * f:
            raise Wrong(f"{where}: that is only the depthwise part; add the 1×1 pointwise "
                        f"convolution (M·N weights, M·N·D_F² multiply-adds).")
        if p == k * k * m * n + m * n:
            raise Wrong(f"{where}: a depthwise filter sees one input channel: D_K²·M weights, "
                        f"not D_K²·M·N.")
        if macs == k * k * m + m * n:
            raise Wrong(f"{where}: every weight is applied at all D_F² output positions.")
        raise Wrong(f"{where}: got ({p}, {macs}), expected ({wp}, {wm}): weights D_K²·M + M·N, "
                    f"multiply-adds D_K²·M·D_F² + M·N·D_F² (Howard et al. 2017, §3.1).")
