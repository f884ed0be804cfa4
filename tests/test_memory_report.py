"""Chapter 06's tables (labkit.memory.report) and the helpers its cells call."""
import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from labkit.memory import measure, report, scenarios
from labkit.memory.measure import CheckpointResult, count_params
from labkit.memory.plots import plot_walkthrough
from labkit.memory.record import StepSpec
from labkit.memory.trace import MemoryTrace
from labkit.validate import ceil_div


def test_model_state_rows_give_the_zero_papers_bytes_per_parameter():
    rows = report.model_state_rows(100_000_000)
    per = {(r.precision, r.optimizer): r.bytes_per_param for r in rows}
    # fp32: 4 + 4 + {0, 4, 8}; mixed: 2 + 2 + {4 master, 8 master+momentum, 12 master+m+v}
    assert per == {("fp32", "sgd"): 8, ("fp32", "momentum"): 12, ("fp32", "adam"): 16,
                   ("mixed", "sgd"): 8, ("mixed", "momentum"): 12, ("mixed", "adam"): 16}
    assert rows[2].total == 1_600_000_000
    text = report.format_model_states(rows)
    assert text.splitlines()[0] == "fp32  sgd     :    8 bytes/parameter, 0.80 GB"
    assert text.splitlines()[-1] == "mixed adam    :   16 bytes/parameter, 1.60 GB"
    with pytest.raises(ValueError, match="num_params"):
        report.model_state_rows(0)


def test_zero_stage_totals_match_figure_1_of_the_zero_paper():
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, Nd = 64, K = 12 -> 120, 31.4, 16.6, 1.9 GB
    totals = report.zero_stage_totals(7_500_000_000, "mixed", "adam", 64)
    assert [round(t / 1e9, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]
    shard = ceil_div(7_500_000_000, 64)
    assert totals[1] == 4 * 7_500_000_000 + 12 * shard
    assert totals[3] == 16 * shard


def test_step_spec_counts_the_parameters_torch_builds():
    from labkit.torch_models import torch_mlp

    spec = StepSpec(widths=(256, 512, 512, 10))
    assert spec.num_params == 399_370
    assert spec.num_params == count_params(torch_mlp(spec.widths))


def test_allocations_by_phase_counts_allocations_not_frees():
    t = MemoryTrace(np.array([1, 1, 0, 1, 1, 0, 0, 0]), np.array([1, 2, 1, 3, 4, 4, 2, 3]),
              np.array([10, 20, 10, 5, 7, 7, 20, 5]),
              phases=("setup", "forward", "forward", "backward", "", "", "backward",
                      "zero_grad"))
    assert t.allocations_by_phase() == {"setup": (1, 10), "forward": (1, 20),
                                        "backward": (1, 5), "zero_grad": (0, 0)}
    assert list(t.allocations_by_phase()) == ["setup", "forward", "backward", "zero_grad"]


def test_block_comparison_is_fully_explained_by_the_extra_terms():
    c = report.compare_block_activations(24, 3, 96, 6)
    s, b, h, a = 24, 3, 96, 6
    assert c.paper == s * b * h * (34 + 5 * a * s / h) == 286_848
    assert sum(c.terms.values()) == c.paper
    assert c.saved == 311_616
    assert c.difference == 24_768
    assert c.unexplained == 0
    assert c.extra == measure.transformer_extra_terms(s, b, h, a)     # as it is, not a dict
    assert c.extra.total == c.difference
    assert c.params == c.params_formula == 12 * h * h + 13 * h
    text = report.format_block_comparison(c)
    assert "Korthikanti: 286,848 B; torch saved: 311,616 B; difference 24,768 B" in text
    assert text.endswith("parameters of the block: 111840 = 12h² + 13h = 111840")


def test_checkpoint_table_is_relative_to_the_run_without_checkpointing():
    rows = report.checkpoint_table([CheckpointResult(0, 1000, 2.0),
                                    CheckpointResult(4, 500, 3.0)])
    assert [(r.peak_ratio, r.time_ratio) for r in rows] == [(1.0, 1.0), (0.5, 1.5)]
    assert report.format_checkpoint_table(rows).splitlines()[1] == \
        "segments    4: peak  500 bytes (50%), time ×1.50"
    with pytest.raises(ValueError, match="segments=0"):
        report.checkpoint_table([CheckpointResult(4, 500, 3.0)])


def test_plot_walkthrough_draws_one_map_per_step():
    import matplotlib.pyplot as plt

    steps = scenarios.request_walkthrough([30, 3, 0.5], free_indices=[0], then_mb=12)
    fig = plot_walkthrough(steps)
    assert [ax.get_title() for ax in fig.axes] == [s.action for s in steps]
    plt.close(fig)
    with pytest.raises(ValueError, match="steps"):
        plot_walkthrough([])
