"""labkit.compress: compute efficiency (chapter 08) — quantization, pruning, distillation,
floating-point formats and loss scaling, depthwise-separable convolution costs.

:mod:`labkit.compress.model` is numpy only; :mod:`labkit.compress.loss_scaling` runs dynamic loss
scaling (GradScaler's rule) over simulated gradients and as a scaler object;
:mod:`labkit.compress.amp` trains the digits MLP under CPU autocast with a pluggable scaler;
:mod:`labkit.compress.distill` runs distillation and its controls; :mod:`labkit.compress.train`
uses torch (trained digits models, PyTorch dynamic quantization, pruning and fine-tuning,
timings); :mod:`plots` matplotlib.
"""
from labkit.compress.model import (  # noqa: F401
    QParams, QuantLinear, conv_cost, dequantize, fake_quant, kd_loss, magnitude_mask, qparams,
    quantize, safe_log2_scales, structured_mask, underflow_fraction, update_loss_scale,
)
