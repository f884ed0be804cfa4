"""Chapter 06's tables: pure functions that assemble what a cell shows, and their formatters.

* :func:`model_state_rows` — bytes per parameter and total for each precision × optimizer
  (:func:`labkit.memory.estimator.model_state_bytes`); :func:`zero_stage_totals` — the
  per-GPU total of ZeRO stages 0-3 (Rajbhandari et al., *ZeRO*, 2020, Figure 1:
  Ψ = 7.5B, N_d = 64, K = 12 gives 120, 31.4, 16.6 and 1.9 GB).
* :func:`compare_block_activations` — Korthikanti et al. (2022) §4.1 term by term against
  the bytes torch saves for :func:`labkit.memory.measure.make_transformer_block`, and the
  difference explained by :func:`labkit.memory.measure.transformer_extra_terms`.
* :func:`checkpoint_table` — measured checkpointing runs relative to the run without it.

torch is imported only by :func:`compare_block_activations` (through ``measure``).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.memory.constants import format_size
from labkit.memory.estimator import (
    OPTIMIZERS, PRECISIONS, activation_bytes_per_layer, activation_terms, model_state_bytes,
)
from labkit.memory.measure import ExtraTerms
from labkit.validate import integer


@dataclass(frozen=True)
class StateRow:
    precision: str
    optimizer: str
    num_params: int
    total: int          # bytes of parameters + gradients + optimizer states

    @property
    def bytes_per_param(self) -> float:
        return self.total / self.num_params


def model_state_rows(num_params: int, precisions=PRECISIONS,
                     optimizers=OPTIMIZERS) -> list[StateRow]:
    """One row per (precision, optimizer), without ZeRO: 4+4+{0,4,8} bytes per parameter in
    fp32, 2+2+{4,8,12} in mixed precision (fp32 master weights and states; ZeRO §3.1)."""
    psi = integer("num_params", num_params, low=1)
    return [StateRow(p, o, psi, model_state_bytes(psi, p, o).total)
            for p in precisions for o in optimizers]


def format_model_states(rows: list[StateRow]) -> str:
    return "\n".join(f"{r.precision:5s} {r.optimizer:8s}: {r.bytes_per_param:4.0f} bytes/parameter, "
                     f"{r.total / 1e9:.2f} GB" for r in rows)


def zero_stage_totals(num_params: int, precision: str = "mixed", optimizer: str = "adam",
                      dp: int = 64) -> tuple[int, ...]:
    """Model-state bytes per GPU for ZeRO stages 0, 1, 2 and 3 (ZeRO §5, Figure 1)."""
    return tuple(model_state_bytes(num_params, precision, optimizer, s, dp).total
                 for s in range(4))


@dataclass(frozen=True)
class BlockComparison:
    terms: dict[str, int]          # Korthikanti's terms (activation_terms)
    paper: float                   # their sum, sbh(34 + 5as/h)
    saved: int                     # bytes torch saved for backward
    extra: ExtraTerms              # what torch saves beyond the paper, by cause
    params: int                    # parameters of the torch block
    params_formula: int            # 12h² + 13h

    @property
    def difference(self) -> float:
        return self.saved - self.paper

    @property
    def unexplained(self) -> float:
        """Bytes of the difference that no extra term accounts for (0 when fully explained)."""
        return self.difference - self.extra.total


def compare_block_activations(seq: int, batch: int, hidden: int, heads: int) -> BlockComparison:
    """Korthikanti et al. (2022) §4.1 against the bytes torch saves for the bfloat16 block
    of :func:`labkit.memory.measure.make_transformer_block` (CPU, training mode)."""
    from labkit.memory import measure

    s, b, h, a = seq, batch, hidden, heads
    return BlockComparison(
        terms=activation_terms(s, b, h, a),
        paper=activation_bytes_per_layer(s, b, h, a),
        saved=measure.transformer_block_saved(s, b, h, a).total_bytes,
        extra=measure.transformer_extra_terms(s, b, h, a),
        params=measure.count_params(measure.make_transformer_block(h, a)),
        params_formula=measure.transformer_block_params(h))


def format_block_comparison(c: BlockComparison) -> str:
    lines = [f"{name:40s} {nbytes:>8,}" for name, nbytes in c.terms.items()]
    lines += ["", f"Korthikanti: {c.paper:,.0f} B; torch saved: {c.saved:,} B; "
                  f"difference {c.difference:,.0f} B"]
    lines += [f"  explained by {name}: {v:,}" for name, v in c.extra.items()]
    lines.append(f"parameters of the block: {c.params} = 12h² + 13h = {c.params_formula}")
    return "\n".join(lines)


@dataclass(frozen=True)
class CheckpointRow:
    segments: int           # 0 = no checkpointing
    peak_bytes: int
    peak_ratio: float       # peak / peak without checkpointing
    time_ratio: float       # seconds / seconds without checkpointing


def checkpoint_table(results) -> list[CheckpointRow]:
    """Each :class:`labkit.memory.measure.CheckpointResult` relative to the first one (the
    run without checkpointing, ``segments=0``)."""
    results = list(results)
    if not results or results[0].segments != 0:
        raise ValueError("results must start with the run without checkpointing (segments=0)")
    base = results[0]
    return [CheckpointRow(r.segments, r.peak_bytes, r.peak_bytes / base.peak_bytes,
                          r.seconds / base.seconds) for r in results]


def format_checkpoint_table(rows: list[CheckpointRow]) -> str:
    return "\n".join(f"segments {r.segments if r.segments else 'none':>4}: peak "
                     f"{format_size(r.peak_bytes):>10s} ({r.peak_ratio:.0%}), "
                     f"time ×{r.time_ratio:.2f}" for r in rows)
