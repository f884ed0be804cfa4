"""Chapter 12's scorecard: seed 002's metrics of a model as data, and their table."""
import pytest

from labkit.data import load_digits
from labkit.perf import metrics, scorecard


@pytest.fixture(scope="module")
def data():
    return load_digits(seed=0)


@pytest.fixture(scope="module")
def tiny(data):
    """A 64-8-10 MLP "trained" for 2 epochs in 0.5 s (values chosen, not measured)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10)).eval()
    acc = metrics.accuracy(model, data.x_test, data.y_test)
    return metrics.Trained("tiny", 0, model, acc, 0.5, 2)


@pytest.fixture(scope="module")
def card(tiny, data):
    return scorecard.score_model(tiny, data, peak=1e9, energy=metrics.Energy(3.0, 0.5, "fixed"),
                                 requests=10, batch=32, activation_batch=16)


def test_score_model_against_closed_forms(card, tiny, data):
    assert card.name == "tiny" and card.test_accuracy == tiny.test_accuracy
    # forward: 2 FLOPs per multiply-add of each Linear, + 1 per ReLU output (bias adds free)
    assert card.forward_flops == 2 * (64 * 8 + 8 * 10) + 8
    assert card.parameter_bytes == 4 * (64 * 8 + 8 + 8 * 10 + 10)
    # saved for backward: the input (16×64) and the ReLU output (16×8), fp32
    assert card.saved_activation_bytes == 4 * 16 * (64 + 8)
    rate = len(data.y_train) * 2 / 0.5
    assert card.train_samples_per_s == pytest.approx(rate)
    assert card.mfu == pytest.approx(3 * card.forward_flops * rate / 1e9)
    assert len(card.latency.samples) == 10 and card.latency.p50 <= card.latency.p99
    assert card.throughput > 0


def test_table_has_one_column_per_model_and_the_values(card):
    # MFU 50 %: the training rate at which 3 × forward FLOPs × rate is half the peak
    other = scorecard.Scorecard(**{**card.__dict__, "energy": None,
                                   "train_samples_per_s": 0.5 * 1e9 / (3 * 1192)})
    table = scorecard.format_scorecards({"mlp": card, "cnn": other})
    lines = table.splitlines()
    assert lines[0] == "| metric | MLP | CNN |" and lines[1] == "|---|---:|---:|"
    assert len(lines) == 2 + 8
    cells = [[x.strip() for x in ln.strip("|").split("|")] for ln in lines[2:]]
    rows = {c[0]: c[1:] for c in cells}
    assert rows["forward FLOPs per sample"] == ["1,192", "1,192"]
    assert rows["parameters, kB"] == ["2.4", "2.4"]
    assert rows["training MFU (vs this machine's peak)"] == [f"{card.mfu:.2%}", "50.00%"]
    assert rows["training energy, J"] == ["3.0 (fixed)", "not measured"]
    p50, p95, p99 = (float(x) for x in rows["latency p50 / p95 / p99, µs"][0].split(" / "))
    assert p50 == round(card.latency.p50 * 1e6) and p50 <= p95 <= p99
    assert "inference throughput (batch 32), samples/s" in rows
    assert "activations saved for backward (batch 16), kB" in rows


def test_bad_arguments(card, tiny, data):
    with pytest.raises(ValueError, match="peak must be > 0"):
        scorecard.score_model(tiny, data, peak=0)
    with pytest.raises(TypeError, match="trained must be a labkit.perf.metrics.Trained"):
        scorecard.score_model(tiny.model, data, peak=1e9)
    with pytest.raises(TypeError, match="energy must be"):
        scorecard.score_model(tiny, data, peak=1e9, energy=3.0)
    with pytest.raises(ValueError, match="model name must be one of"):
        scorecard.score_models({"resnet": 1}, peak=1e9, data=data)
    with pytest.raises(TypeError, match="epochs must be a non-empty dict"):
        scorecard.score_models({}, peak=1e9, data=data)
    with pytest.raises(TypeError, match=r"cards\['x'\] must be a Scorecard"):
        scorecard.format_scorecards({"x": 1})
    other = scorecard.Scorecard(**{**card.__dict__, "batch": 64})
    with pytest.raises(ValueError, match="must share batch"):
        scorecard.format_scorecards({"a": card, "b": other})


def test_score_models_trains_measures_energy_and_scores(data):
    cards = scorecard.score_models({"mlp": 1}, peak=1e11, data=data, warmup=False)
    c = cards["mlp"]
    assert list(cards) == ["mlp"] and c.trained.epochs == 1 and c.test_accuracy > 0.5
    assert c.energy.seconds > 0 and c.energy.joules > 0
    assert c.parameter_bytes == 4 * (64 * 128 + 128 + 128 * 10 + 10)
    assert (c.batch, c.activation_batch) == (256, 64)


def test_mfu_line_names_the_peak(card):
    line = scorecard.format_mfu({"mlp": card}, "this machine (1 thread of 2 cores, measured)")
    assert line == (f"training MFU: MLP {card.mfu:.1%} of {card.peak / 1e9:.1f} GFLOP/s, the "
                    f"peak of this machine (1 thread of 2 cores, measured)")
    with pytest.raises(TypeError, match="cards must be a non-empty dict"):
        scorecard.format_mfu({}, "x")
