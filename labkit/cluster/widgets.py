"""Widgets of chapter 11: each wires controls to a labkit function and a labkit plot."""
from __future__ import annotations

from labkit.cluster.energy import PowerModel, schedule_energy
from labkit.cluster.faults import interval_sweep
from labkit.cluster.jobs import generate_jobs
from labkit.cluster.metrics import summarize
from labkit.cluster.plots import plot_checkpoint_sweep, plot_policy_comparison, plot_stragglers
from labkit.cluster.scheduler import POLICIES, Cluster, simulate
from labkit.cluster.stragglers import expected_step_bernoulli, simulate_steps
from labkit.controls import dropdown, fixed, float_slider, int_slider, interactive, log_slider
from labkit.hardware import GPUS
from labkit.show import show

CLUSTER_NODES, CLUSTER_GPN = 8, 8


def show_policies(load: float, jobs: int, placement: str = "pack", gpu: str = "A100",
                  idle_percent: float = 0.0, seed: int = 0):
    """Simulate the same seeded jobs under every policy; print and draw the metrics. Idle
    GPUs draw ``idle_percent`` % of ``gpu``'s TDP (no data sheet gives it: 0 leaves idle
    energy out)."""
    cluster = Cluster(CLUSTER_NODES, CLUSTER_GPN)
    js = generate_jobs(jobs, total_gpus=cluster.total_gpus, load=load, seed=seed,
                       max_gpus=cluster.total_gpus // 2)
    power = PowerModel(gpu, idle_percent / 100)
    results = [simulate(js, cluster, p, placement=placement) for p in POLICIES]
    metrics = [summarize(r) for r in results]
    energies = [schedule_energy(r, power) for r in results]
    print(f"{jobs} jobs, offered load {load:.2f}, {cluster.nodes}×{cluster.gpus_per_node} "
          f"{gpu} GPUs, placement {placement}; busy {power.busy_watts:.0f} W (TDP), idle "
          + (f"{power.idle_watts:.0f} W ({idle_percent:g} % of TDP, your number)"
             if idle_percent else "not counted (set the idle power you measured)"))
    for m, e in zip(metrics, energies):
        print(f"{m.row()}  energy {e.total_kwh:8.0f} kWh (idle {e.idle_share:.0%})")
    show(plot_policy_comparison(metrics, energies))
    return metrics


def policy_widget(load: float = 0.8, jobs: int = 300, placement: str = "pack",
                  gpu: str = "A100", idle_percent: float = 0.0):
    """Sliders: offered load, number of jobs; dropdowns: placement, GPU model; idle power
    in % of that GPU's TDP (0: idle energy not counted)."""
    return interactive(show_policies,
                       load=float_slider("load", load, 0.3, 1.2, 0.05, "load"),
                       jobs=int_slider("jobs", jobs, 20, 3000, "jobs", step=20),
                       placement=dropdown("placement", placement, ("pack", "spread"),
                                          "placement"),
                       gpu=dropdown("gpu", gpu, GPUS, "GPU"),
                       idle_percent=float_slider("idle_percent", idle_percent, 0, 50, 1,
                                                 "idle % TDP"),
                       seed=fixed(0))


def show_checkpointing(mtbf_hours: float, checkpoint_min: float, restart_min: float,
                       trials: int = 300):
    """Young, Daly and the simulated optimum for a 30-day job; the sweep plotted."""
    m, c, r = mtbf_hours * 3600, checkpoint_min * 60, restart_min * 60
    sw = interval_sweep(30 * 86400, c, r, m, points=25, trials=trials)
    print(f"MTBF {mtbf_hours:g} h, checkpoint {checkpoint_min:g} min, restart "
          f"{restart_min:g} min: Young τ = {sw.young / 60:.1f} min, Daly τ = "
          f"{sw.daly / 60:.1f} min, simulated best ≈ {sw.best_simulated / 60:.1f} min; "
          f"overhead at Daly's τ {100 * (sw.simulated_at(sw.daly) / sw.work - 1):.1f} %")
    show(plot_checkpoint_sweep(sw))
    return sw


def checkpoint_widget(mtbf_hours: float = 8.0, checkpoint_min: float = 2.0,
                      restart_min: float = 5.0):
    """MTBF (log slider, hours), checkpoint and restart time (minutes) → the sweep."""
    return interactive(
        show_checkpointing,
        mtbf_hours=log_slider("mtbf_hours", mtbf_hours, 0.5, 200, 0.05, "MTBF (h)"),
        checkpoint_min=float_slider("checkpoint_min", checkpoint_min, 0.1, 60, 0.1,
                                    "ckpt (min)"),
        restart_min=float_slider("restart_min", restart_min, 0, 60, 0.5, "restart (min)"),
        trials=fixed(300))


def show_stragglers(workers: int, backups: int, p: float, slowdown: float):
    """Bernoulli stragglers: simulated and closed-form step time with and without backups."""
    sims = [simulate_steps(workers, backups=b, model="bernoulli", p=p, slowdown=slowdown,
                           steps=4000) for b in sorted({0, backups})]
    for s in sims:
        exact = expected_step_bernoulli(workers, 1.0, p, slowdown, s.backups)
        print(f"N={workers:3d}, b={s.backups:2d}: mean step {s.mean_step:.3f} s (closed form "
              f"{exact:.3f}), {s.slowdown:.2f}× one worker's mean, "
              f"{s.gpu_seconds_per_step:.1f} GPU-s per step")
    show(plot_stragglers(sims))
    return sims


def straggler_widget(workers: int = 16, backups: int = 2, p: float = 0.05,
                     slowdown: float = 3.0):
    """Workers, backup workers, straggling probability and slowdown → step times."""
    return interactive(show_stragglers,
                       workers=int_slider("workers", workers, 1, 256, "workers N"),
                       backups=int_slider("backups", backups, 0, 32, "backups b"),
                       p=float_slider("p", p, 0, 0.5, 0.01, "P(straggle)"),
                       slowdown=float_slider("slowdown", slowdown, 1, 10, 0.5, "slowdown"))
