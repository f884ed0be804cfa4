"""A graph pass on PyTorch's own static graphs (``torch.fx``), next to labkit's passes.

``torch.fx.symbolic_trace`` records a module's forward as a graph of nodes (placeholder,
call_module, call_function, output) that a pass may rewrite before ``recompile()`` turns it
back into Python (Reed et al., "torch.fx: Practical Program Capture and Transformation for
Deep Learning in Python", MLSys 2022, sec. 4).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass


def swap_modules(module, module_type, fn):
    """Trace ``module`` and replace every call of a ``module_type`` submodule by ``fn``
    (e.g. ReLU → ``torch.nn.functional.gelu``). Returns the rewritten ``GraphModule`` and
    how many calls were replaced; ``module`` itself is unchanged."""
    import torch.fx as fx  # deferred: torch

    if not isinstance(module_type, type):
        raise ValueError(f"module_type must be a class such as torch.nn.ReLU, got "
                         f"{module_type!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    gm = fx.symbolic_trace(module)
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and isinstance(gm.get_submodule(node.target), module_type):
            with gm.graph.inserting_after(node):
                new = gm.graph.call_function(fn, node.args, node.kwargs)
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
            replaced += 1
    gm.graph.lint()
    gm.recompile()
    return gm, replaced


@dataclass(frozen=True)
class DynamoCapture:
    """What ``torch.compile``'s front end (TorchDynamo) captured from a Python function."""
    graphs: tuple[str, ...]   # the Python code of each FX graph handed to the backend
    ops: tuple[int, ...]      # call nodes in each graph
    matches_eager: bool       # the compiled function returned what eager PyTorch returns

    @property
    def graph_breaks(self) -> int:
        return len(self.graphs) - 1


def dynamo_capture(fn, *inputs) -> DynamoCapture:
    """Run ``torch.compile(fn)`` with a backend that only records the graphs Dynamo captures.

    Dynamo reads the function's bytecode and cuts a static graph of tensor ops; where Python
    needs a tensor's *value* (``if x.sum() > 0``) it ends the graph, runs that bit of Python,
    and starts another one — a *graph break* (Ansel et al., "PyTorch 2", ASPLOS 2024, sec. 3).
    No code is generated, so this takes about a second, not the tens of seconds Inductor's
    first C++ compile takes on a CPU.
    """
    import torch  # deferred: torch

    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        raise ValueError("inputs must be one or more torch tensors")
    captured = []

    def record(gm, example_inputs):
        captured.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=record, dynamic=False)(*inputs)
    torch._dynamo.reset()
    want = fn(*inputs)
    outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
    same = len(outs) == len(wants) and all(torch.allclose(a, b) for a, b in zip(outs, wants))
    return DynamoCapture(tuple(gm.code.strip() for gm in captured),
                         tuple(sum(n.op.startswith("call") for n in gm.graph.nodes)
                               for gm in captured), same)


@dataclass(frozen=True)
class SwapResult:
    traced: str      # the graph symbolic_trace records from the module, printed
    code: str        # the Python the rewritten GraphModule runs
    replaced: int    # calls of the module type replaced
    changed: bool    # the rewritten module gives a different output on the probe input


def swap_and_compare(module, module_type, fn, x) -> SwapResult:
    """:func:`swap_modules` plus what a reader checks: the graph before, the code after,
    and whether the rewrite changed the module's output on the probe input ``x``."""
    import torch  # deferred: torch
    import torch.fx as fx

    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch tensor (the probe input), got {type(x).__name__}")
    traced = str(fx.symbolic_trace(module).graph)
    gm, replaced = swap_modules(module, module_type, fn)
    with torch.no_grad():
        changed = not torch.allclose(gm(x), module(x))
    return SwapResult(traced, gm.code, replaced, changed)


def graph_break_step(x):
    import torch  # deferred: torch

    y = torch.tanh(x) * 2
    if y.sum() > 0:            # data-dependent Python control flow
        y = y + 1
    return y.sin()


def inductor_cpp_compiler() -> str | None:
    """Path of the C++ compiler TorchInductor would run on this CPU, or None.

    Inductor takes the first of ``torch._inductor.config.cpp.cxx`` that runs — on Linux
    ``(None, $CXX or "g++")``, where ``None`` stands for a conda-installed g++, tried only
    when ``TORCH_INDUCTOR_INSTALL_GXX`` is set (``torch/_inductor/cpp_builder.py``:
    ``get_cpp_compiler``, ``cpp_compiler_search``)."""
    from torch._inductor import config  # deferred: torch

    search = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    for name in search:
        if name is not None and shutil.which(name):
            return shutil.which(name)
    return None
