"""Chapter 07 widgets change their output when the first slider moves and validate their
arguments; the plots draw every result kind."""
import matplotlib
import numpy as np
import pytest

from labkit.dataload import compare, plots, widgets
from labkit.dataload.sim import PipelineConfig, simulate
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    {"machine_widget": lambda: widgets.machine_widget(PipelineConfig(batches=30)),
     "steps_widget": lambda: widgets.steps_widget(PipelineConfig(batches=30)),
     "queue_widget": lambda: widgets.queue_widget(PipelineConfig(batches=30))}, steps=3)


def test_widget_arguments_validated():
    with pytest.raises(ValueError, match="max_workers"):
        widgets.machine_widget(max_workers=0)
    for builder in (widgets.steps_widget, widgets.machine_widget, widgets.queue_widget):
        with pytest.raises(TypeError, match="base"):
            builder(base=3)
    # a config the sliders cannot show is an error, not a slider silently clamped
    with pytest.raises(ValueError, match=r"base.cores must be an integer in \[1, 64\]"):
        widgets.machine_widget(PipelineConfig(cores=128))
    with pytest.raises(ValueError, match=r"base.num_workers .*\[0, 32\]"):
        widgets.steps_widget(PipelineConfig(num_workers=33))
    with pytest.raises(ValueError, match=r"base.prefetch_factor .*\[1, 8\]"):
        widgets.steps_widget(PipelineConfig(prefetch_factor=9))
    with pytest.raises(ValueError, match=r"base.jitter .*\[0.0, 2.0\]"):
        widgets.queue_widget(PipelineConfig(jitter=3.0))


def test_cost_sliders_start_at_the_config(capsys):
    w = widgets.machine_widget(PipelineConfig(batch_size=16, decode_s=1e-3, augment_s=2e-3,
                                              compute_s=0.2, batches=30))
    load, step = w.children[1], w.children[2]
    assert (load.value, load.max) == (48.0, 100.0) and (step.value, step.max) == (200.0, 400.0)
    w = widgets.machine_widget(PipelineConfig(decode_s=0, augment_s=0, batches=30))
    assert w.children[1].value == w.children[1].min == 0.5     # below the slider: its end
    assert capsys.readouterr().out
    matplotlib.pyplot.close("all")


def test_show_machine_numbers(capsys):
    base = PipelineConfig(batch_size=16, decode_s=4e-4, augment_s=6e-4, compute_s=6e-3)
    rates = widgets.show_machine(2, 16.0, 6.0, False, 2, base, max_workers=3)
    assert rates[0] == pytest.approx(16 / 0.022, rel=0.01)
    assert rates[3] == pytest.approx(16 * 2 / 0.022, rel=0.03)        # two cores bind
    out = capsys.readouterr().out
    assert "2 cores" in out and "the step alone allows 2,667" in out
    matplotlib.pyplot.close("all")


def test_show_queue_reports_the_steady_rate_the_bound_and_the_queue(capsys):
    base = PipelineConfig(batch_size=16, decode_s=1e-4, augment_s=1e-4, compute_s=8e-3,
                          compute_on_cpu=False, cores=8, batches=30)
    r = widgets.show_queue(2, 4, 0.0, base)
    out = capsys.readouterr().out
    assert r.config.batches >= 2 * 8 + 64                      # made long enough
    assert "2,000 samples/s in steady state (bound 2,000)" in out
    assert "first batch after 3.2 ms" in out and "7." in out.split("queue holds")[1]
    matplotlib.pyplot.close("all")


def test_plots_return_figures():
    from labkit.dataload.formats import FormatTiming
    r = simulate(PipelineConfig(batches=40), num_workers=1)
    cfg = PipelineConfig(batch_size=32, cores=2, decode_s=2e-4, augment_s=5e-4, compute_s=0.008)
    rows = compare.compare_trials({0: [1000.0, 1100.0], 1: [1200.0, 1300.0]}, [cfg, cfg])
    for fig in (plots.plot_throughput(np.arange(3), [1, 2, 3], measured=[1, 2], bound=[1, 2, 3]),
                plots.plot_throughput(np.arange(2), [1, 2], measured=[1, 2],
                                      measured_range=([0.5, 1.5], [1.5, 2.5])),
                plots.plot_agreement(rows), plots.plot_steps(r), plots.plot_queue(r),
                plots.plot_queue(simulate(PipelineConfig(batches=20))),
                plots.plot_formats([FormatTiming("per_file", 1e-4, 3, 9)])):
        assert fig.axes
    assert len(plots.plot_queue(r).axes) == 2
    matplotlib.pyplot.close("all")
