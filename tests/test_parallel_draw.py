"""Plots take results and return figures; widgets build and redraw from labkit functions."""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from labkit.parallel import all_reduce, compression, coverage, dp_sim, draw  # noqa: E402
from labkit.parallel.launch import fit_alpha_beta  # noqa: E402


def test_collective_step_picture_and_clipping():
    run = all_reduce(draw.demo_data(4), "ring")
    fig = draw.plot_collective_step(run, 99)            # clipped to the end
    assert "step 6/6 (done)" in fig.axes[0].get_title()
    plt.close(fig)
    fig = draw.plot_collective_step(run, 0)
    assert "4 messages" in fig.axes[0].get_title()
    plt.close(fig)
    cov = coverage(run)
    assert cov.shape == (7, 4, 4) and (cov[0] == 1).all() and (cov[-1] == 4).all()
    assert (np.diff(cov.sum(axis=(1, 2))) >= 0).all()


def test_other_plots_return_figures():
    figs = [draw.plot_link_bytes(all_reduce(draw.demo_data(3), "tree")),
            draw.plot_cost_curves(draw.cost_curves("all_reduce", 6, np.geomspace(1e2, 1e8, 5),
                                                   alpha=1e-5, beta=1e-9), mark=1e4)]
    n = np.geomspace(1e3, 1e7, 5)
    fit = fit_alpha_beta(n, 1e-5 + n * 1e-9, 2)
    figs.append(draw.plot_fit(n, 1e-5 + n * 1e-9, fit))
    m, hw = dp_sim.MODELS["ResNet-50"], dp_sim.HARDWARE["8× A100 PCIe 4.0"]
    figs.append(draw.plot_timeline(dp_sim.simulate_step(m, hw, 4, "dp")))
    figs.append(draw.plot_scaling([dp_sim.scaling(m, hw, (1, 2, 4), "ddp")], real=([1, 2], [1, .5])))
    task = compression.digits_task(0)
    figs.append(draw.plot_compression([compression.train_sync(None, task=task, steps=3)]))
    for f in figs:
        assert isinstance(f, matplotlib.figure.Figure)
        plt.close(f)
    # non-powers of two skip power-of-two-only algorithms
    assert set(draw.cost_curves("all_gather", 6, [1e3], alpha=0, beta=1).seconds) == {"ring"}


def test_demo_data_errors():
    with pytest.raises(ValueError, match="world"):
        draw.demo_data(0)
