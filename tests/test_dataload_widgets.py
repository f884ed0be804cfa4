"""Chapter 07 widgets change their output when the first slider moves; plots draw; the
real DataLoader measurement and its calibration work."""
import matplotlib
import numpy as np
import pytest

from labkit.dataload import plots, widgets
from labkit.dataload.sim import PipelineConfig, simulate
from widget_checks import first_slider_test

matplotlib.use("Agg")


test_first_slider_changes_output = first_slider_test(
    {"machine_widget": lambda: widgets.machine_widget(PipelineConfig(batches=30)),
     "steps_widget": lambda: widgets.steps_widget(PipelineConfig(batches=30))}, steps=3)


def test_widget_arguments_validated():
    with pytest.raises(ValueError, match="max_workers"):
        widgets.machine_widget(max_workers=0)
    with pytest.raises(TypeError, match="base"):
        widgets.steps_widget(base=3)
    with pytest.raises(TypeError, match="base"):
        widgets.machine_widget(base=3)
    # a config the sliders cannot show is an error, not a slider silently clamped
    with pytest.raises(ValueError, match=r"base.cores must be an integer in \[1, 64\]"):
        widgets.machine_widget(PipelineConfig(cores=128))
    with pytest.raises(ValueError, match=r"base.num_workers .*\[0, 32\]"):
        widgets.steps_widget(PipelineConfig(num_workers=33))
    with pytest.raises(ValueError, match=r"base.prefetch_factor .*\[1, 8\]"):
        widgets.steps_widget(PipelineConfig(prefetch_factor=9))


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


def test_plots_return_figures(tmp_path):
    from labkit.dataload.formats import FormatTiming
    r = simulate(PipelineConfig(batches=10), num_workers=1)
    for fig in (plots.plot_throughput(np.arange(3), [1, 2, 3], measured=[1, 2], bound=[1, 2, 3]),
                plots.plot_steps(r), plots.plot_formats([FormatTiming("per_file", 1e-4, 3, 9)])):
        assert fig.axes
    matplotlib.pyplot.close("all")


def test_measure_loader_and_calibration():
    from labkit.dataload.measure import calibrated_config, measure_loader, measure_stage_costs
    from labkit.dataload.model import EncodedImages, make_images
    imgs, labels = make_images(64, seed=0)
    ds = EncodedImages(imgs, labels)
    r0 = measure_loader(ds, batch_size=16, num_workers=0)
    assert len(r0.wait_s) == 4 and (r0.wait_s > 0).all() and 0 < r0.wait_fraction < 1
    r1 = measure_loader(ds, batch_size=16, num_workers=1, prefetch_factor=2,
                        persistent_workers=True, epochs=2)
    assert len(r1.wait_s) == 8 and len(r1.epoch_first_batch_s) == 2
    costs = measure_stage_costs(ds, batch_size=16, repeats=2)
    assert costs.decode_s > 0 and costs.augment_s > costs.decode_s and costs.compute_s > 0
    cfg = calibrated_config(r0, costs, cores=2, shared=False)
    assert cfg.load_cpu_s == pytest.approx(np.median(r0.wait_s[r0.steady]))
    assert 0 < r0.cpu_share <= 1.2 and r0.wall_s >= r0.wait_s.sum() + r0.compute_s.sum()
    shared = calibrated_config(r0, costs, cores=2)
    s = min(r0.cpu_share, 1.0) if shared.background else 1.0
    assert shared.compute_s == pytest.approx(cfg.compute_s * s)
    with pytest.raises(ValueError, match="num_workers=0"):
        calibrated_config(r1, costs)
    with pytest.raises(ValueError, match="num_workers > 0"):
        measure_loader(ds, num_workers=0, persistent_workers=True)


def test_background_processes_from_cpu_share():
    from labkit.dataload.measure import background_processes
    assert background_processes(1.0, 2) == 0 and background_processes(0.95, 2) == 0
    assert background_processes(0.5, 2) == 3 and background_processes(0.25, 2) == 7
    with pytest.raises(ValueError, match="cpu_share"):
        background_processes(0.0, 2)
