"""ZeRO/FSDP: memory from the estimator, traffic from the collectives' logs equals the
paper's 2Ψ (stages 1-2) and 3Ψ (stage 3) (Rajbhandari et al. SC'20 §7), the sharded step
equals plain data parallelism."""
import numpy as np
import pytest

from labkit.memory.estimator import model_state_bytes
from labkit.parallel import zero


@pytest.mark.parametrize("dp", [2, 4, 8, 64])
def test_traffic_matches_paper(dp):
    psi = 10 ** 9
    f = (dp - 1) / dp
    for name, want in (("ddp", 2), ("zero1", 2), ("zero2", 2), ("zero3", 3), ("fsdp", 3)):
        tr = zero.step_traffic(name, psi, dp)
        assert tr.psi_units == pytest.approx(want * f, rel=1e-12), name
    assert zero.step_traffic("zero3", psi, dp).elements_per_rank == pytest.approx(
        1.5 * zero.step_traffic("ddp", psi, dp).elements_per_rank)


def test_table_memory_and_bytes():
    rows = {r.name: r for r in zero.zero_table(7_500_000_000, 64)}
    psi = 7_500_000_000
    assert rows["ddp"].memory.total == 16 * psi
    assert rows["zero1"].memory.total == 4 * psi + 12 * -(-psi // 64)
    assert rows["zero3"].memory == model_state_bytes(psi, "mixed", "adam", 3, 64)
    assert rows["zero3"].memory.total == 16 * -(-psi // 64)
    assert rows["fsdp"].memory == rows["zero3"].memory
    assert rows["zero3"].comm_bytes == pytest.approx(3 * 63 / 64 * psi * 2)


@pytest.mark.parametrize("strategy", zero.STRATEGIES)
@pytest.mark.parametrize("dp", [1, 3, 4])
def test_sharded_step_equals_ddp(strategy, dp):
    rng = np.random.default_rng(dp)
    p = rng.normal(size=13)
    g = [rng.normal(size=13) for _ in range(dp)]
    got, sent = zero.zero_sgd_step(p, g, 0.1, strategy)
    assert np.max(np.abs(got - (p - 0.1 * np.mean(g, axis=0)))) < 1e-12


@pytest.mark.parametrize("call, word", [
    (lambda: zero.step_traffic("zero4", 10, 2), "strategy"),
    (lambda: zero.step_traffic("zero1", 10, 0), "dp"),
    (lambda: zero.zero_table(0, 2), "num_params"),
    (lambda: zero.zero_sgd_step(np.ones(3), [np.ones(2)], 0.1), "grads"),
])
def test_bad_arguments(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_plot():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel.mp_plots import plot_zero
    fig = plot_zero(zero.zero_table(10 ** 9, 8))
    assert len(fig.axes) == 2 and len(fig.axes[1].patches) == 5
    matplotlib.pyplot.close("all")
