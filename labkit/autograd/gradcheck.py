"""Check reverse-mode gradients against central differences in float64.

Central difference: df/dx_i ~ (f(x + eps e_i) - f(x - eps e_i)) / (2 eps), error O(eps^2)
(Nocedal & Wright, *Numerical Optimization*, 2nd ed., sec. 8.1). Every Jacobian entry is
compared, as ``torch.autograd.gradcheck`` does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.autograd.tensor import Tensor
from labkit.validate import array, nonnegative, positive


def numeric_vjp(f, xs, g, eps: float = 1e-6) -> list:
    """Central differences of <g, f(*xs)> with respect to each array of ``xs`` (numpy
    functions and float64 arrays): the vector-Jacobian product a backward rule must give,
    each entry (⟨g, f(x + eps e_i)⟩ − ⟨g, f(x − eps e_i)⟩) / (2 eps), error O(eps²)."""
    if not callable(f):
        raise TypeError(f"f must be a function, got {type(f).__name__} {f!r}")
    eps = positive("eps", eps)
    xs = [array(f"xs[{i}]", x, dtype=np.float64, finite=True) for i, x in enumerate(xs)]
    g = np.asarray(g, dtype=np.float64)
    out = []
    for i, x in enumerate(xs):
        grad = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            plus, minus = [a.copy() for a in xs], [a.copy() for a in xs]
            plus[i][j] += eps
            minus[i][j] -= eps
            grad[j] = (np.sum(g * f(*plus)) - np.sum(g * f(*minus))) / (2 * eps)
        out.append(grad)
    return out


@dataclass(frozen=True)
class GradcheckResult:
    ok: bool
    max_abs_error: float
    analytic: tuple[np.ndarray, ...]    # one Jacobian (m, n_i) per input
    numeric: tuple[np.ndarray, ...]

    def __bool__(self) -> bool:
        return self.ok


def gradcheck(fn, *inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_on_failure: bool = False) -> GradcheckResult:
    """Compare fn's reverse-mode Jacobians with central differences (inputs cast to float64)."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__} {fn!r}")
    if not inputs:
        raise ValueError("gradcheck needs at least one input")
    eps = positive("eps", eps)
    atol, rtol = nonnegative("atol", atol), nonnegative("rtol", rtol)
    xs = [array(f"inputs[{i}]", getattr(x, "data", x), dtype=np.float64, finite=True)
          for i, x in enumerate(inputs)]
    f = lambda *a: np.asarray(fn(*[Tensor(v) for v in a]).data, dtype=np.float64)  # noqa: E731
    out = f(*xs)
    m = out.size
    numeric = []
    for k, x in enumerate(xs):
        jac = np.zeros((m, x.size))
        for i in range(x.size):
            plus = [v.copy() for v in xs]
            minus = [v.copy() for v in xs]
            plus[k].flat[i] += eps
            minus[k].flat[i] -= eps
            jac[:, i] = ((f(*plus) - f(*minus)) / (2 * eps)).ravel()
        numeric.append(jac)
    analytic = [np.zeros((m, x.size)) for x in xs]
    for j in range(m):
        ts = [Tensor(v, requires_grad=True) for v in xs]
        y = fn(*ts)
        e = np.zeros(y.shape)
        e.flat[j] = 1
        y.backward(e)
        for k, t in enumerate(ts):
            if t.grad is not None:
                analytic[k][j] = t.grad.data.ravel()
    err = max(float(np.max(np.abs(a - n), initial=0)) for a, n in zip(analytic, numeric))
    ok = all(np.allclose(a, n, atol=atol, rtol=rtol) for a, n in zip(analytic, numeric))
    if raise_on_failure and not ok:
        raise AssertionError(f"gradcheck failed: max |analytic - numeric| = {err:.3g}")
    return GradcheckResult(ok, err, tuple(analytic), tuple(numeric))
