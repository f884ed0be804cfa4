"""Chapter 06 widgets build, their first slider changes what they show, and the plots draw.

``interactive`` runs its function when built and on every control change; the tests read
the printed output of those runs."""
import matplotlib
import pytest

from labkit.memory import plots, widgets
from labkit.memory.constants import MiB
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    widgets, ["walkthrough_widget", "budget_widget", "activation_widget", "kv_cache_widget"],
    steps=4)


@pytest.mark.parametrize("build, exc, name", [
    (lambda: widgets.walkthrough_widget(first_mb=500), ValueError, "first_mb"),
    (lambda: widgets.walkthrough_widget(max_split_size_mb="32"), ValueError, "max_split"),
    (lambda: widgets.walkthrough_widget(core="mine"), TypeError, "core"),
    (lambda: widgets.budget_widget(precision="bf16"), ValueError, "precision"),
    (lambda: widgets.budget_widget(zero_stage=4), ValueError, "zero_stage"),
    (lambda: widgets.activation_widget(tp=3), ValueError, "tp"),
    (lambda: widgets.kv_cache_widget(block_tokens=3), ValueError, "block_tokens"),
    (lambda: widgets.kv_cache_widget(usage=5), TypeError, "usage"),
])
def test_builders_reject_bad_arguments_before_building(build, exc, name):
    with pytest.raises(exc, match=name):
        build()


def test_walkthrough_runs_a_given_core(capsys):
    from labkit.memory.core import allocator_core

    calls = []

    def best_fit(free, size, ms, rounding):
        calls.append(size)
        fits = sorted((s, a) for a, s in free if s >= size)
        return fits[0][1] if fits else None
    widgets.show_walkthrough(30.0, 3.0, 12.0, "unset", False,
                             core=allocator_core(best_fit=best_fit))
    assert "allocated 15.50 MiB, reserved 52.00 MiB" in capsys.readouterr().out
    assert 12 * MiB in calls
    matplotlib.pyplot.close("all")


def test_kv_cache_numbers(capsys):
    r = widgets.show_kv_cache(16, 2048, 48, 300.0)
    out = capsys.readouterr().out
    assert f"{r.contiguous_waste:.1%} empty" in out and r.paged_waste < 0.05
    matplotlib.pyplot.close("all")


def test_walkthrough_numbers(capsys):
    # 30 MiB and 3 MiB get their own large segments (30 and 20 MiB), 0.5 MiB a 2 MiB small
    # one; the freed 30 MiB block is reused and split for the 12 MiB request
    widgets.show_walkthrough(30.0, 3.0, 12.0, "unset", False)
    out = capsys.readouterr().out
    assert "allocated 15.50 MiB, reserved 52.00 MiB" in out and "segments 3" in out
    widgets.show_walkthrough(30.0, 3.0, 12.0, "unset", True)
    assert "segments 3" not in capsys.readouterr().out      # expandable: one per pool
    matplotlib.pyplot.close("all")


def test_budget_and_activation_numbers(capsys):
    widgets.show_budget(8.0, "fp32", "adam", 0, 1)
    assert "total 1.49 GiB" in capsys.readouterr().out     # 1.6e9 bytes
    widgets.show_activations(2048, 4096, 32, 1, 1, False)
    out = capsys.readouterr().out
    # full recomputation keeps 2sbh = 2 * 2048 * 4096 bytes = 16 MiB
    assert "recompute=full     : 16.00 MiB" in out
    widgets.show_activations(2048, 4096, 24, 1, 1, False)
    assert "must be a multiple of heads" in capsys.readouterr().out
    matplotlib.pyplot.close("all")


def test_plots_return_figures():
    from labkit.memory.measure import CheckpointResult

    fig = plots.plot_recompute_activations({"none": 3 * MiB, "full": MiB})
    assert len(fig.axes[0].patches) == 2
    fig = plots.plot_model_state({"parameters": 4e8, "gradients": 4e8})
    assert "0.75 GiB" in fig.axes[0].get_title()
    fig = plots.plot_checkpointing([CheckpointResult(0, 8 * MiB, 0.01),
                                    CheckpointResult(4, 3 * MiB, 0.013)])
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 2
    from labkit.memory.paged import RequestStream, simulate
    fig = plots.plot_kv_cache(simulate(RequestStream(requests=6, max_len=256), 8))
    assert len(fig.axes[0].lines) == 2 and "8 tokens/block" in fig.axes[0].get_legend_handles_labels()[1][1]
    matplotlib.pyplot.close("all")
