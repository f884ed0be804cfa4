"""Chapter 12, seed 000's exercise 10: reproduce a number of a recent systems paper with labkit.

Seed 000 asks the reader to read a recent MLSys paper. Each entry below is a paper, the
numbers it publishes, the setup they come from, and the labkit model that computes them;
the learner picks one, reads the setup out of the paper, computes the numbers with that
model, and :func:`format_reproduction` sets them beside the paper's.

* ``zero`` — Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", SC 2020, Figure 1: per-GPU memory of model states for Ψ = 7.5 B
  parameters, mixed-precision Adam (K = 12), N_d = 64: 120, 31.4, 16.6, 1.9 GB.
  Model: :func:`labkit.memory.estimator.model_state_bytes`.
* ``korthikanti`` — Korthikanti et al., "Reducing Activation Recomputation in Large
  Transformer Models", MLSys 2023, §5: selective activation recomputation saves 70 % of the
  activation memory of GPT-3 175B (a = 96, s = 2048, h = 12288: 5as/h = 80 against 34)
  and 65 % of MT-NLG 530B's (a = 128, s = 2048, h = 20480). Model:
  :func:`labkit.memory.estimator.activation_bytes_per_layer` with and without
  ``recompute="selective"`` (sequence parallelism on, as in the paper's runs).
* ``vllm`` — Kwon et al., "Efficient Memory Management for Large Language Model Serving
  with PagedAttention", SOSP 2023, §3: the KV cache of one token of OPT-13B takes
  2 (key and value) × 5120 (hidden size) × 40 (layers) × 2 (bytes, FP16) = 800 KB, and a
  2048-token request up to 1.6 GB (its KB and GB are binary: 819,200 B and 1.5625 × 2^30 B).
  Model:
  :func:`labkit.training.inference.kv_cache_bytes_per_token_per_layer` (OPT-13B: 40 heads
  of 128) times the layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.validate import one_of


@dataclass(frozen=True)
class Paper:
    key: str
    cite: str
    claim: str              # what the published numbers are
    published: dict         # label -> the paper's number
    unit: str
    tolerance: float        # the paper's rounding: |ours - paper| allowed
    model: str              # the labkit function to use


PAPERS = {
    "zero": Paper("zero", "Rajbhandari et al., ZeRO, SC 2020, Figure 1",
                  "GB of model states per GPU, Ψ = 7.5 B, mixed-precision Adam, N_d = 64, "
                  "by ZeRO stage",
                  {"stage 0": 120.0, "stage 1": 31.4, "stage 2": 16.6, "stage 3": 1.9}, "GB",
                  0.05, "labkit.memory.estimator.model_state_bytes"),
    "korthikanti": Paper("korthikanti",
                         "Korthikanti et al., Reducing Activation Recomputation, MLSys 2023, §5",
                         "share of activation memory selective recomputation saves",
                         {"GPT-3 175B": 0.70, "MT-NLG 530B": 0.65}, "", 0.005,
                         "labkit.memory.estimator.activation_bytes_per_layer"),
    "vllm": Paper("vllm", "Kwon et al., PagedAttention (vLLM), SOSP 2023, §3",
                  "KV cache of OPT-13B (the paper's KB and GB are 1024 B and 2^30 B)",
                  {"KB per token": 800.0, "GB per 2048-token request": 1.6}, "", 0.05,
                  "labkit.training.inference.kv_cache_bytes_per_token_per_layer"),
}


def paper(key: str) -> Paper:
    """The entry ``key`` of :data:`PAPERS`."""
    return PAPERS[one_of("paper", key, tuple(PAPERS))]


def format_reproduction(key: str | None, reproduced: dict | None) -> str:
    """The paper's numbers beside ``reproduced`` (label -> number), each marked as within
    the paper's rounding or not; a line asking for a choice while ``key`` is None."""
    if key is None:
        return ("Pick a paper: set `paper` to one of " + ", ".join(map(repr, PAPERS)) +
                " and compute its numbers with labkit in `reproduced`.")
    p = paper(key)
    if reproduced is not None and not isinstance(reproduced, dict):
        raise TypeError(f"reproduced must be a dict of label -> number, got "
                        f"{type(reproduced).__name__}")
    unit = f" {p.unit}" if p.unit else ""
    lines = [f"{p.cite}: {p.claim}"]
    for label, value in p.published.items():
        ours = None if reproduced is None else reproduced.get(label)
        if ours is None:
            lines.append(f"  {label}: paper {value:g}{unit} | yours: not computed yet")
            continue
        ours = float(ours)
        ok = abs(ours - value) <= p.tolerance + 1e-12
        lines.append(f"  {label}: paper {value:g}{unit} | yours {ours:.4g}{unit} | "
                     f"{'agrees to the paper' + chr(39) + 's rounding' if ok else 'DIFFERS'}")
    return "\n".join(lines)
