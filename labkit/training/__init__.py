"""labkit.training: experiments on what training and inference cost (chapters 2 and 3).

Built on the engine in :mod:`labkit.autograd` (and on PyTorch where the experiment compares
with it), kept apart from it so the engine package holds only the engine:

* :mod:`~labkit.training.phases` -- FLOPs and saved bytes of a forward and a backward pass;
* :mod:`~labkit.training.inference` -- batch size vs latency/throughput, precision, KV cache;
* :mod:`~labkit.training.decoder` -- a small numpy decoder (chapter 03's lab);
  :mod:`~labkit.training.kv_cache` -- its KV cache and cached decoding;
  :mod:`~labkit.training.decoder_traces`, :mod:`~labkit.training.decoder_measure` -- a
  learner's answers run on plain data (for the checks) and measured (bytes, work, time);
* :mod:`~labkit.training.modes` -- BatchNorm and Dropout in train and eval modes;
* :mod:`~labkit.training.leak` -- the memory a list of kept losses pins;
* :mod:`~labkit.training.train` -- training labkit's MLP on the digits;
* :mod:`~labkit.training.plots`, :mod:`~labkit.training.widgets` -- their figures and widgets.

Importing this package imports nothing heavy; torch is imported by the functions that use it.
"""
