"""Widgets of chapter 11: each wires controls to a labkit function and a labkit plot."""
from __future__ import annotations

from labkit import validate as v
from labkit.hardware import GPUS

CLUSTER_NODES, CLUSTER_GPN = 8, 8


def show_policies(load: float, jobs: int, placement: str = "pack", gpu: str = "A100",
                  seed: int = 0):
    """Simulate the same seeded jobs under every policy; print and draw the metrics."""
    import matplotlib.pyplot as plt

    from labkit.cluster.energy import PowerModel, schedule_energy
    from labkit.cluster.jobs import generate_jobs
    from labkit.cluster.metrics import summarize
    from labkit.cluster.plots import plot_policy_comparison
    from labkit.cluster.scheduler import POLICIES, Cluster, simulate

    cluster = Cluster(CLUSTER_NODES, CLUSTER_GPN)
    js = generate_jobs(jobs, total_gpus=cluster.total_gpus, load=load, seed=seed,
                       max_gpus=cluster.total_gpus // 2)
    power = PowerModel(gpu)
    results = [simulate(js, cluster, p, placement=placement) for p in POLICIES]
    metrics = [summarize(r) for r in results]
    energies = [schedule_energy(r, power) for r in results]
    print(f"{jobs} jobs, offered load {load:.2f}, {cluster.nodes}×{cluster.gpus_per_node} "
          f"{gpu} GPUs, placement {placement}")
    for m, e in zip(metrics, energies):
        print(f"{m.row()}  energy {e.total_kwh:8.0f} kWh (idle {e.idle_share:.0%})")
    fig = plot_policy_comparison(metrics, energies)
    plt.show()
    plt.close(fig)
    return metrics


def policy_widget(load: float = 0.8, jobs: int = 300, placement: str = "pack",
                  gpu: str = "A100"):
    """Sliders: offered load, number of jobs; dropdowns: placement, GPU model."""
    import ipywidgets as w

    load = v.number("load", load, low=0.3, high=1.2)
    jobs = v.integer("jobs", jobs, low=20, high=3000)
    placement = v.one_of("placement", placement, ("pack", "spread"))
    gpu = v.one_of("gpu", gpu, tuple(GPUS))
    return w.interactive(
        show_policies,
        load=w.FloatSlider(value=load, min=0.3, max=1.2, step=0.05, description="load"),
        jobs=w.IntSlider(value=jobs, min=20, max=3000, step=20, description="jobs"),
        placement=w.Dropdown(options=["pack", "spread"], value=placement,
                             description="placement"),
        gpu=w.Dropdown(options=list(GPUS), value=gpu, description="GPU"),
        seed=w.fixed(0))


def show_checkpointing(mtbf_hours: float, checkpoint_min: float, restart_min: float,
                       trials: int = 300):
    """Young, Daly and the simulated optimum for a 30-day job; the sweep plotted."""
    import matplotlib.pyplot as plt

    from labkit.cluster.faults import interval_sweep
    from labkit.cluster.plots import plot_checkpoint_sweep

    m, c, r = mtbf_hours * 3600, checkpoint_min * 60, restart_min * 60
    sw = interval_sweep(30 * 86400, c, r, m, points=25, trials=trials)
    print(f"MTBF {mtbf_hours:g} h, checkpoint {checkpoint_min:g} min, restart "
          f"{restart_min:g} min: Young τ = {sw.young / 60:.1f} min, Daly τ = "
          f"{sw.daly / 60:.1f} min, simulated best ≈ {sw.best_simulated / 60:.1f} min; "
          f"overhead at Daly's τ {100 * (sw.simulated_at(sw.daly) / sw.work - 1):.1f} %")
    fig = plot_checkpoint_sweep(sw)
    plt.show()
    plt.close(fig)
    return sw


def checkpoint_widget(mtbf_hours: float = 8.0, checkpoint_min: float = 2.0,
                      restart_min: float = 5.0):
    import ipywidgets as w

    mtbf_hours = v.number("mtbf_hours", mtbf_hours, low=0.5, high=200)
    checkpoint_min = v.number("checkpoint_min", checkpoint_min, low=0.1, high=60)
    restart_min = v.number("restart_min", restart_min, low=0, high=60)
    return w.interactive(
        show_checkpointing,
        mtbf_hours=w.FloatLogSlider(value=mtbf_hours, base=10, min=-0.3, max=2.3, step=0.05,
                                    description="MTBF (h)"),
        checkpoint_min=w.FloatSlider(value=checkpoint_min, min=0.1, max=60, step=0.1,
                                     description="ckpt (min)"),
        restart_min=w.FloatSlider(value=restart_min, min=0, max=60, step=0.5,
                                  description="restart (min)"),
        trials=w.fixed(300))


def show_stragglers(workers: int, backups: int, p: float, slowdown: float):
    """Bernoulli stragglers: simulated and closed-form step time with and without backups."""
    import matplotlib.pyplot as plt

    from labkit.cluster.plots import plot_stragglers
    from labkit.cluster.stragglers import expected_step_bernoulli, simulate_steps

    sims = [simulate_steps(workers, backups=b, model="bernoulli", p=p, slowdown=slowdown,
                           steps=4000) for b in sorted({0, backups})]
    for s in sims:
        exact = expected_step_bernoulli(workers, 1.0, p, slowdown, s.backups)
        print(f"N={workers:3d}, b={s.backups:2d}: mean step {s.mean_step:.3f} s (closed form "
              f"{exact:.3f}), {s.slowdown:.2f}× one worker's mean, "
              f"{s.gpu_seconds_per_step:.1f} GPU-s per step")
    fig = plot_stragglers(sims)
    plt.show()
    plt.close(fig)
    return sims


def straggler_widget(workers: int = 16, backups: int = 2, p: float = 0.05,
                     slowdown: float = 3.0):
    import ipywidgets as w

    workers = v.integer("workers", workers, low=1, high=256)
    backups = v.integer("backups", backups, low=0, high=32)
    p = v.number("p", p, low=0, high=0.5)
    slowdown = v.number("slowdown", slowdown, low=1, high=10)
    return w.interactive(
        show_stragglers,
        workers=w.IntSlider(value=workers, min=1, max=256, description="workers N"),
        backups=w.IntSlider(value=backups, min=0, max=32, description="backups b"),
        p=w.FloatSlider(value=p, min=0, max=0.5, step=0.01, description="P(straggle)"),
        slowdown=w.FloatSlider(value=slowdown, min=1, max=10, step=0.5, description="slowdown"))
