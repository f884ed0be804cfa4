"""Chapter 06's tables: pure functions that assemble what a cell shows, and their formatters.

* :func:`model_state_rows` — bytes per parameter and total for each precision × optimizer
  (:func:`labkit.memory.estimator.model_state_bytes`); :func:`zero_stage_totals` — the
  per-GPU total of ZeRO stages 0-3 (Rajbhandari et al., *ZeRO*, 2020, Figure 1:
  Ψ = 7.5B, N_d = 64, K = 12 gives 120, 31.4, 16.6 and 1.9 GB).
* :func:`compare_block_activations` — Korthikanti et al. (2022) §4.1 term by term against
  the bytes torch saves for :func:`labkit.memory.measure.make_transformer_block`, and the
  difference explained by :func:`labkit.memory.measure.transformer_extra_terms`.
* :func:`checkpoint_table` — measured checkpointing runs relative to the run without it,
  beside the k + n/k model (Chen et al., 2016) for n blocks.
* :func:`format_agreement` — a core's replay of a trace against labkit's allocator
  (:func:`labkit.memory.core_replay.core_agreement`).

torch is imported only by :func:`compare_block_activations` (through ``measure``).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.memory import measure
from labkit.memory.constants import format_size
from labkit.memory.estimator import (
    OPTIMIZERS, PRECISIONS, activation_bytes_per_layer, activation_terms,
    checkpoint_memory_units, model_state_bytes,
)
from labkit.memory.measure import ExtraTerms
from labkit.validate import instances, integer, one_of


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
    precisions = [one_of("precisions", p, PRECISIONS)
                  for p in instances("precisions", precisions, str, "names")]
    optimizers = [one_of("optimizers", o, OPTIMIZERS)
                  for o in instances("optimizers", optimizers, str, "names")]
    return [StateRow(p, o, psi, model_state_bytes(psi, p, o).total)
            for p in precisions for o in optimizers]


def format_model_states(rows: list[StateRow]) -> str:
    rows = instances("rows", rows, StateRow)
    return "\n".join(f"{r.precision:5s} {r.optimizer:8s}: {r.bytes_per_param:4.0f} bytes/parameter, "
                     f"{r.total / 1e9:.2f} GB" for r in rows)


def format_model_state(num_params: int, precision: str = "fp32",
                       optimizer: str = "adam") -> str:
    """Parameters, gradients and optimizer states of ``num_params`` parameters, one line."""
    st = model_state_bytes(num_params, precision, optimizer)
    return (f"{precision} {optimizer}: parameters {format_size(st.params)}, gradients "
            f"{format_size(st.grads)}, optimizer states {format_size(st.optimizer)}; total "
            f"{format_size(st.total)} = {st.total / 1e9:.1f} GB")


def bytes_per_param_per_gpu(precision: str, optimizer: str, zero_stage: int = 0,
                            dp: int = 1) -> float:
    """Model-state bytes each GPU keeps per parameter (ZeRO §5): 10⁹ parameters' total / 10⁹."""
    return model_state_bytes(10**9, precision, optimizer, zero_stage, dp).total / 10**9


def activation_fraction(seq: int, batch: int, hidden: int, heads: int, tp: int,
                        sequence_parallel: bool) -> float:
    """A layer's activations per GPU with tensor (and sequence) parallelism, as a share of
    the layer's without (Korthikanti et al., 2022, Table 2)."""
    return (activation_bytes_per_layer(seq, batch, hidden, heads, tp, sequence_parallel)
            / activation_bytes_per_layer(seq, batch, hidden, heads))


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


def compare_block_activations(seq: int, batch: int, hidden: int, heads: int,
                              counter=None) -> BlockComparison:
    """Korthikanti et al. (2022) §4.1 against the bytes torch saves for the bfloat16 block
    of :func:`labkit.memory.measure.make_transformer_block` (CPU, training mode), counted
    by ``counter(fn, exclude)`` → ``(storages, bytes)`` (labkit's hook when None)."""
    s, b, h, a = seq, batch, hidden, heads
    return BlockComparison(
        terms=activation_terms(s, b, h, a),
        paper=activation_bytes_per_layer(s, b, h, a),
        saved=measure.transformer_block_saved(s, b, h, a, counter=counter).total_bytes,
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
    model_ratio: float | None = None   # (k + n/k) / n, the model's peak / no checkpointing


def checkpoint_table(results, num_blocks: int | None = None) -> list[CheckpointRow]:
    """Each :class:`labkit.memory.measure.CheckpointResult` relative to the first one (the
    run without checkpointing, ``segments=0``); with ``num_blocks`` n, also the model's
    ratio (k + ⌈n/k⌉)/n (:func:`labkit.memory.estimator.checkpoint_memory_units`): k stored
    segment inputs plus one segment's n/k activations, against n without checkpointing."""
    results = list(results)
    if not results or results[0].segments != 0:
        raise ValueError("results must start with the run without checkpointing (segments=0)")
    if num_blocks is not None:
        num_blocks = integer("num_blocks", num_blocks, low=1)
    base = results[0]

    def model(k):
        if num_blocks is None:
            return None
        return 1.0 if k == 0 else checkpoint_memory_units(num_blocks, k) / num_blocks
    return [CheckpointRow(r.segments, r.peak_bytes, r.peak_bytes / base.peak_bytes,
                          r.seconds / base.seconds, model(r.segments)) for r in results]


def format_checkpoint_table(rows: list[CheckpointRow]) -> str:
    rows = instances("rows", rows, CheckpointRow)
    return "\n".join(f"segments {r.segments if r.segments else 'none':>4}: peak "
                     f"{format_size(r.peak_bytes):>10s} ({r.peak_ratio:.0%}"
                     + ("" if r.model_ratio is None else f"; k + n/k predicts {r.model_ratio:.0%}")
                     + f"), time ×{r.time_ratio:.2f}" for r in rows)


def format_agreement(a) -> str:
    """A :class:`labkit.memory.core_replay.Agreement` as a sentence."""
    if a.identical:
        return (f"your core and labkit's CachingAllocator agree after every one of the "
                f"{a.events} events: the same blocks and segments ({a.segments[1]} at the "
                f"end), peak reserved {format_size(a.peak_reserved[1])}")
    why = f" (the allocator stopped: {a.error})" if a.error else ""
    return (f"your core agrees with labkit's CachingAllocator for {a.agree} of {a.events} "
            f"events, then differs at event {a.first_difference}{why}")
