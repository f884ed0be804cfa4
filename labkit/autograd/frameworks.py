"""One function, three static graphs: labkit's ``trace``, TorchDynamo's FX graph and the
jaxpr ``jax.jit`` traces (seed 000 §2: static and dynamic graphs across frameworks).

The function is written once, :func:`seed_layer`, and each framework passes its own
``tanh``. Each captures it differently:

* labkit's :func:`~labkit.autograd.trace.trace` runs it once on Tensors and records the ops
  executed (as ``torch.jit.trace`` does);
* TorchDynamo, ``torch.compile``'s front end, reads the function's bytecode and hands the
  back end an FX graph (Ansel et al., "PyTorch 2", ASPLOS 2024, sec. 3);
* ``jax.jit`` calls it with *tracers*, stand-ins that carry only a shape and a dtype, and
  records the primitives they meet as a jaxpr, JAX's typed, functional intermediate language
  that ``jit`` compiles and ``grad`` transforms (JAX docs, "Tracing" and "JAX internals: the
  jaxpr language"). Because a tracer has no value, a Python ``if`` on a traced value cannot
  be decided: ``jax.jit`` raises ``TracerBoolConversionError`` where Dynamo breaks the graph
  (JAX docs, "Control flow and logical operators with JIT").

JAX is imported inside the functions that use it: it is a heavy import (XLA's runtime).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from labkit.autograd import functional as F
from labkit.autograd.fx_passes import dynamo_capture
from labkit.autograd.tensor import Tensor
from labkit.autograd.trace import trace
from labkit.validate import integer, one_of


def seed_layer(x, w, b, tanh):
    """h = tanh(x @ w + b); returns sum(h * h). Written once; ``tanh`` is the framework's."""
    h = tanh(x @ w + b)
    return (h * h).sum()


@dataclass(frozen=True)
class ThreeGraphs:
    """What each framework captured from :func:`seed_layer` on the same float32 inputs."""
    labkit: str                 # labkit's traced Graph, printed
    dynamo: str                 # the Python code of the FX graph Dynamo handed the back end
    jaxpr: str                  # the jaxpr jax.jit traced, printed
    grad_jaxpr: str             # the jaxpr of jax.grad with respect to (w, b): the backward
    ops: dict                   # framework -> op nodes / call nodes / equations
    values: dict                # framework -> the function's value
    jax_version: str

    def primitives(self, which: str = "grad_jaxpr") -> dict:
        """How often each primitive occurs in ``jaxpr`` or ``grad_jaxpr`` (``add_any``: two
        gradient contributions meeting at a value used twice; ``reduce_sum`` over axis 0: the
        adjoint of broadcasting ``b`` over the batch)."""
        text = getattr(self, one_of("which", which, ("jaxpr", "grad_jaxpr")))
        return dict(Counter(re.findall(r"= ([a-z_]+)", text)))

    @property
    def agree(self) -> bool:
        """The three values agree to float32 rounding."""
        v = list(self.values.values())
        return bool(np.allclose(v, v[0], rtol=1e-5))


def _inputs(batch: int, width: int, seed: int):
    rng = np.random.default_rng(integer("seed", seed, low=0))
    batch = integer("batch", batch, low=1, high=64)
    width = integer("width", width, low=1, high=64)
    return tuple(a.astype(np.float32) for a in (rng.normal(size=(batch, width)),
                                                 rng.normal(size=(width, width)),
                                                 rng.normal(size=width)))


def three_graphs(batch: int = 4, width: int = 3, seed: int = 0) -> ThreeGraphs:
    """Capture :func:`seed_layer` with labkit's trace, TorchDynamo and ``jax.make_jaxpr``
    (what ``jax.jit`` traces) on the same seeded inputs, and run each."""
    import jax            # deferred: a heavy import (XLA's runtime), needed only here
    import jax.numpy as jnp
    import torch

    x, w, b = _inputs(batch, width, seed)
    graph = trace(lambda x, w, b: seed_layer(x, w, b, F.tanh), x, w, b, names=("x", "w", "b"))
    cap = dynamo_capture(lambda x, w, b: seed_layer(x, w, b, torch.tanh),
                         *(torch.from_numpy(a) for a in (x, w, b)))
    jax_fn = lambda x, w, b: seed_layer(x, w, b, jnp.tanh)  # noqa: E731
    closed = jax.make_jaxpr(jax_fn)(x, w, b)
    backward = jax.make_jaxpr(jax.grad(jax_fn, argnums=(1, 2)))(x, w, b)
    values = {"labkit": float(seed_layer(*(Tensor(a) for a in (x, w, b)), F.tanh).item()),
              "torch": float(seed_layer(*(torch.from_numpy(a) for a in (x, w, b)),
                                        torch.tanh)),
              "jax": float(jax.jit(jax_fn)(x, w, b))}
    return ThreeGraphs(str(graph), cap.graphs[0], closed.pretty_print(use_color=False),
                       backward.pretty_print(use_color=False),   # str() colours in a kernel
                       {"labkit": graph.stats().kernels, "dynamo": cap.ops[0],
                        "jax": len(closed.jaxpr.eqns)},
                       values, jax.__version__)


def jax_graph_break_step(x):
    """:func:`~labkit.autograd.fx_passes.graph_break_step` in jax.numpy: the same data-dependent
    ``if``."""
    import jax.numpy as jnp   # deferred: a heavy import

    y = jnp.tanh(x) * 2
    if y.sum() > 0:            # data-dependent Python control flow
        y = y + 1
    return jnp.sin(y)


@dataclass(frozen=True)
class JitOutcome:
    eager_ok: bool          # the function runs without jit (JAX executes op by op)
    error: str              # the exception's class name when jax.jit traced it ("" if none)
    message: str            # its first line


def jit_data_dependent_if(n: int = 7) -> JitOutcome:
    """Run :func:`jax_graph_break_step` eagerly, then under ``jax.jit``: tracing reaches the
    ``if`` with a tracer, which has no value to decide it."""
    import jax            # deferred: a heavy import
    import jax.numpy as jnp

    x = jnp.linspace(-1.0, 2.0, integer("n", n, low=1, high=1000))
    eager = bool(np.isfinite(np.asarray(jax_graph_break_step(x))).all())
    try:
        jax.jit(jax_graph_break_step)(x)
    except Exception as exc:      # noqa: BLE001 - the outcome is what we report
        return JitOutcome(eager, type(exc).__name__, str(exc).strip().splitlines()[0])
    return JitOutcome(eager, "", "")
