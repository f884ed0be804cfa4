"""Widgets of chapter 08: each wires controls to a labkit.compress function and a plot."""
from __future__ import annotations

import numpy as np

from labkit import validate as V
from labkit.compress.model import fake_quant, overflow_fraction, relative_error, underflow_fraction
from labkit.compress.plots import plot_gradients, plot_quant
from labkit.controls import checkbox, fixed, int_slider, interactive
from labkit.numerics import FORMATS
from labkit.show import show


def demo_weights(seed: int = 0) -> np.ndarray:
    """A (16, 64) weight matrix whose rows have very different ranges (as real layers do)."""
    rng = np.random.default_rng(V.integer("seed", seed, low=0))
    return rng.normal(size=(16, 64)) * np.geomspace(0.02, 1.0, 16)[:, None]


def demo_gradients(seed: int = 0, n: int = 20000) -> np.ndarray:
    """Gradient magnitudes spread over many binades, centred near 2^-24 (fp16's
    smallest subnormal), as in Micikevicius et al. 2018, Fig. 3."""
    rng = np.random.default_rng(V.integer("seed", seed, low=0))
    n = V.integer("n", n, low=1, high=10**8)
    return rng.choice([-1.0, 1.0], size=n) * 2.0 ** rng.normal(-24, 5, size=n)


def show_quant(bits: int, symmetric: bool, per_channel: bool, w=None):
    w = demo_weights() if w is None else V.array("w", w, ndim=2)
    wq = fake_quant(w, bits, symmetric, 0 if per_channel else None)
    rel = relative_error(w, wq, axis=1)
    print(f"{bits}-bit {'symmetric' if symmetric else 'asymmetric'} "
          f"{'per channel' if per_channel else 'per tensor'}: relative error per row "
          f"median {np.median(rel):.3f}, worst {rel.max():.3f}; distinct values {np.unique(wq).size}")
    show(plot_quant(w, wq, f"{bits} bits, {'per channel' if per_channel else 'per tensor'}"))
    return rel


def quant_widget(bits: int = 4, symmetric: bool = True, per_channel: bool = False):
    """bits (first slider), symmetric, per channel → quantized weights and their error."""
    return interactive(show_quant, bits=int_slider("bits", bits, 2, 8, "bits"),
                       symmetric=checkbox("symmetric", symmetric, "symmetric"),
                       per_channel=checkbox("per_channel", per_channel, "per channel"),
                       w=fixed(None))


def show_scaling(log2_scale: int, grads=None):
    g = demo_gradients() if grads is None else V.array("grads", grads)
    s = 2.0 ** log2_scale
    lost = underflow_fraction(g, "fp16", s)
    over = overflow_fraction(g, "fp16", s)
    print(f"loss scale 2^{log2_scale}: {lost:.1%} of the gradients underflow to 0 in fp16, "
          f"{over:.1%} overflow to inf")
    f16 = FORMATS["fp16"]
    show(plot_gradients(g, s, f16.min_subnormal, f16.max, f"loss scale 2^{log2_scale}"))
    return lost, over


def scaling_widget(grads=None, log2_scale: int = 0):
    """log2 of the loss scale (first slider) → share of fp16 gradients lost."""
    if grads is not None:
        grads = V.array("grads", grads)
    return interactive(show_scaling,
                       log2_scale=int_slider("log2_scale", log2_scale, 0, 40, "log2 scale"),
                       grads=fixed(grads))
