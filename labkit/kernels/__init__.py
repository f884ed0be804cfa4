"""GPU kernels written once as ``fn(cuda)`` and run two ways.

A kernel is a function ``fn(cuda)`` that returns the kernel body (the GPU-Puzzles idea).
labkit runs it

* with its own tracing executor (:mod:`labkit.kernels.tracer`), which records every global,
  shared and local-memory read and write and every warp shuffle of every thread, for
  traffic counts, coalescing, bank conflicts, divergence, races and pictures
  (:mod:`labkit.kernels.analysis`); and
* compiled by ``numba.cuda`` (:func:`run_numba`), on a real GPU or Numba's CUDA simulator.

Each kernel family's variants (matmul, reduction, transpose, softmax, attention) are
listed once, in :data:`labkit.kernels.registry.KERNELS`: factory, launch rule, closed forms.

Importing this package is cheap: numba and matplotlib are imported only where used.
"""
from labkit.kernels.library.elementwise import vector_add  # noqa: F401
from labkit.kernels.numba_run import run_numba  # noqa: F401
