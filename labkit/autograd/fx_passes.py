"""A graph pass on PyTorch's own static graphs (``torch.fx``), next to labkit's passes.

``torch.fx.symbolic_trace`` records a module's forward as a graph of nodes (placeholder,
call_module, call_function, output) that a pass may rewrite before ``recompile()`` turns it
back into Python (Reed et al., "torch.fx: Practical Program Capture and Transformation for
Deep Learning in Python", MLSys 2022, sec. 4).
"""
from __future__ import annotations


def swap_modules(module, module_type, fn):
    """Trace ``module`` and replace every call of a ``module_type`` submodule by ``fn``
    (e.g. ReLU → ``torch.nn.functional.gelu``). Returns the rewritten ``GraphModule`` and
    how many calls were replaced; ``module`` itself is unchanged."""
    import torch.fx as fx

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
