"""labkit.autograd: a small autograd engine to build, measure and take apart (chapters 2, 3, 12).

    from labkit.autograd import Tensor, no_grad
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(); x.grad   # Tensor([2., 4.])

Only numpy is imported here; torch and matplotlib are imported by the submodules that use
them (``fx_passes``, ``draw``, ``plots``, ``widgets``). The experiments built on the engine
(FLOPs and saved bytes per phase, precision, batch size, train/eval modes, the leak) live in
:mod:`labkit.training`. :mod:`labkit.autograd.rules` swaps a learner's gradient rules into
the engine (chapter 02's lab); :mod:`labkit.autograd.frameworks` sets labkit's static graph
beside TorchDynamo's and the jaxpr ``jax.jit`` traces.
"""
from labkit.autograd.tensor import (  # noqa: F401
    Tensor, accumulate_grad, apply, enable_grad, graph_bytes, graph_nodes, is_grad_enabled,
    local_vjp, no_grad, tensor, topological_order,
)
from labkit.autograd.counters import count  # noqa: F401
from labkit.autograd.forward import Dual, grad, jvp, vjp  # noqa: F401
from labkit.autograd import functional  # noqa: F401
