"""Chapter 11 widgets build, their first slider changes what they show, and the plots draw.

``interactive`` runs its function when built and on every control change; the tests read
the printed output of those runs."""
import matplotlib
import pytest

from labkit.cluster import faults, plots, stragglers, widgets
from labkit.cluster.jobs import generate_jobs
from labkit.cluster.scheduler import Cluster, simulate
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    {"policy_widget": lambda: widgets.policy_widget(jobs=100),
     "checkpoint_widget": widgets.checkpoint_widget,
     "straggler_widget": widgets.straggler_widget}, steps=4)


def test_widget_numbers(capsys):
    m = widgets.show_policies(0.8, 100)
    out = capsys.readouterr().out
    assert [x.policy for x in m] == ["fifo", "sjf", "priority", "easy"]
    assert "100 jobs, offered load 0.80" in out and "kWh" in out
    assert "idle not counted" in out and "busy 400 W (TDP)" in out      # A100: 400 W
    widgets.show_policies(0.8, 100, gpu="H200", idle_percent=10)
    out = capsys.readouterr().out
    assert "busy 700 W (TDP), idle 70 W (10 % of TDP" in out
    sw = widgets.show_checkpointing(8.0, 2.0, 5.0, trials=50)
    out = capsys.readouterr().out
    assert f"Young τ = {sw.young / 60:.1f} min" in out and "Young τ = 43.8 min" in out
    widgets.show_stragglers(16, 0, 0.05, 3.0)
    out = capsys.readouterr().out
    assert "closed form 2.120" in out            # 1 + 2(1 − 0.95^16)
    matplotlib.pyplot.close("all")


def test_widget_argument_errors():
    with pytest.raises(ValueError, match="load"):
        widgets.policy_widget(load=5)
    with pytest.raises(ValueError, match="placement"):
        widgets.policy_widget(placement="random")
    with pytest.raises(ValueError, match="idle_percent"):
        widgets.policy_widget(idle_percent=80)
    with pytest.raises(ValueError, match="mtbf_hours"):
        widgets.checkpoint_widget(mtbf_hours=0)
    with pytest.raises(ValueError, match="workers"):
        widgets.straggler_widget(workers=0)


def test_plots_return_figures():
    jobs = generate_jobs(30, total_gpus=16, load=0.9, seed=0, max_gpus=8)
    rs = [simulate(jobs, Cluster(2, 8), p) for p in ("fifo", "easy")]
    fig = plots.plot_gantt(rs[1])
    assert len(fig.axes[0].patches) == len(rs[1].segments)
    fig = plots.plot_utilisation(rs)
    assert len(fig.axes[0].lines) == 2
    sw = faults.interval_sweep(86400.0, 60.0, 60.0, 3600.0, points=5, trials=20)
    fig = plots.plot_checkpoint_sweep(sw)
    assert len(fig.axes[0].lines) == 5
    tl = faults.simulate_timeline(86400.0, 1800.0, 60.0, 60.0, 3 * 3600.0)
    fig = plots.plot_timeline(tl)
    assert len(fig.axes[0].patches) >= len(tl.events)
    sims = [stragglers.simulate_steps(8, backups=b, steps=100) for b in (0, 2)]
    assert plots.plot_stragglers(sims).axes
    assert plots.plot_backup_tradeoff(stragglers.backup_tradeoff(8, 4)).axes
    matplotlib.pyplot.close("all")
