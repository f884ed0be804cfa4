"""Chapter 06 widgets build, their first slider changes what they show, and the plots draw.

``interactive`` runs its function when built and on every control change; the tests read
the printed output of those runs."""
import matplotlib

from labkit.memory import plots, widgets
from labkit.memory.constants import MiB
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    widgets, ["walkthrough_widget", "budget_widget", "activation_widget"], steps=4)


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
    matplotlib.pyplot.close("all")
