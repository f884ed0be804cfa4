"""labkit.compress: compute efficiency (chapter 08) — quantization, pruning, distillation,
floating-point formats and loss scaling, depthwise-separable convolution costs.

:mod:`labkit.compress.model` is numpy only; :mod:`labkit.compress.loss_scaling` runs dynamic loss
scaling (GradScaler's rule) over simulated gradients; :mod:`labkit.compress.train` uses torch
(trained digits models, PyTorch dynamic quantization, timings); :mod:`plots` matplotlib.
"""
from labkit.compress.model import (  # noqa: F401
    FORMATS, QParams, QuantLinear, conv_cost, dequantize, fake_quant, kd_loss, magnitude_mask,
    qparams, quantize, round_to, structured_mask, underflow_fraction, unit_roundoff,
    update_loss_scale,
)
