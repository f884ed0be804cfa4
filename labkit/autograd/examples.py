"""Small programs the chapters trace, draw and optimize."""
from __future__ import annotations

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.tensor import Tensor


def layered_program(depth: int = 2, width: int = 4, seed: int = 0):
    """(fn, example_x): ``depth`` layers of tanh(x W * (2 s) + b) with a dead branch each.

    ``2 s`` is a constant subexpression (foldable), the dead branch is removable and the
    elementwise tail of each layer is fusible -- one of each pass's targets per layer.
    """
    if not isinstance(depth, (int, np.integer)) or not 1 <= depth <= 8:
        raise ValueError(f"depth must be an integer in [1, 8], got {depth!r}")
    if not isinstance(width, (int, np.integer)) or not 1 <= width <= 64:
        raise ValueError(f"width must be an integer in [1, 64], got {width!r}")
    rng = np.random.default_rng(seed)
    ws = [Tensor(rng.normal(size=(width, width)) / np.sqrt(width)) for _ in range(depth)]
    ss = [Tensor(rng.uniform(0.5, 1.0, width)) for _ in range(depth)]
    bs = [Tensor(rng.normal(size=width) * 0.1) for _ in range(depth)]

    def fn(x):
        for w, s, b in zip(ws, ss, bs):
            _debug = (x * x).sum()           # computed, never used: dead code
            x = (x @ w * (s * 2.0) + b).tanh()
        return F.softmax(x, -1)

    return fn, rng.normal(size=(3, width))
