"""Chapter 12: seed 002's metrics of a trained model, as data, and their table.

Seed 002 (part 7) judges a system by accuracy, computational efficiency (throughput,
latency), memory, stability and energy. :func:`score_model` measures all but stability
(:func:`labkit.perf.metrics.stability` trains several seeds) for one trained model with the
functions of :mod:`labkit.perf.metrics`:

* training throughput r = training samples × epochs / training seconds;
* MFU = 3 × forward FLOPs per sample × r / peak (Chowdhery et al., "PaLM", 2022, appendix B:
  a training step costs 3 × the forward FLOPs);
* energy of the training run (RAPL counters when readable, else a labelled TDP model).

:func:`format_scorecards` turns the cards into the chapter's markdown table, one column a
model.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit import validate as v
from labkit.timing import Timing
from labkit.data import load_digits
from labkit.perf import metrics
from labkit.timing import threads


@dataclass(frozen=True)
class Scorecard:
    """Seed 002's metrics of one trained model (seconds, bytes, FLOPs, samples/s)."""
    trained: metrics.Trained
    throughput: float                 # inference samples/s at ``batch``
    latency: Timing                   # single requests (p50, p95, p99)
    parameter_bytes: int
    saved_activation_bytes: int       # for backward, one forward pass of ``activation_batch``
    forward_flops: float              # per sample
    train_samples_per_s: float
    peak: float                       # FLOP/s
    energy: metrics.Energy | None     # of the training run; None when not measured
    batch: int
    activation_batch: int

    @property
    def name(self) -> str:
        return self.trained.name

    @property
    def test_accuracy(self) -> float:
        return self.trained.test_accuracy

    @property
    def mfu(self) -> float:
        """Training MFU against ``peak``: :func:`labkit.perf.metrics.mfu` of the forward
        FLOPs per sample and the training throughput."""
        return metrics.mfu(self.forward_flops, self.train_samples_per_s, self.peak)


def train_with_energy(name: str = "mlp", epochs: int = 8, seed: int = 0, data=None):
    """Train ``name`` (:func:`labkit.perf.metrics.train`) under
    :func:`labkit.perf.metrics.measure_energy`: returns (Trained, Energy)."""
    box = []
    energy = metrics.measure_energy(
        lambda: box.append(metrics.train(name, seed=seed, epochs=epochs, data=data)))
    return box[0], energy


def score_model(trained: metrics.Trained, data, peak: float,
                energy: metrics.Energy | None = None, requests: int = 100, batch: int = 256,
                activation_batch: int = 64) -> Scorecard:
    """Measure the metrics of ``trained`` on ``data`` (a :class:`labkit.data.Split`): latency
    of ``requests`` single requests and throughput at ``batch``, both on one thread
    (:class:`labkit.perf.threads`); memory; forward FLOPs; training MFU against ``peak``."""
    if not isinstance(trained, metrics.Trained):
        raise TypeError(f"trained must be a labkit.perf.metrics.Trained, got "
                        f"{type(trained).__name__}")
    if energy is not None and not isinstance(energy, metrics.Energy):
        raise TypeError(f"energy must be a labkit.perf.metrics.Energy or None, got "
                        f"{type(energy).__name__}")
    peak = v.positive("peak", peak)
    requests = v.integer("requests", requests, low=2)
    batch = v.integer("batch", batch, low=1)
    activation_batch = v.integer("activation_batch", activation_batch, low=1)
    m = trained.model
    with threads(1):
        lat = metrics.latency(m, data.x_test, requests=requests)
        thr = metrics.throughput(m, data.x_test, batch=batch)
    flops = metrics.forward_flops(m, data.x_test[:1])
    rate = len(data.y_train) * trained.epochs / trained.train_seconds
    return Scorecard(trained, thr, lat, metrics.parameter_bytes(m),
                     metrics.saved_activation_bytes(m, data.x_train[:activation_batch]),
                     flops, rate, peak, energy, batch, activation_batch)


def score_models(epochs: dict, peak: float, data=None, seed: int = 0,
                 warmup: bool = True) -> dict[str, Scorecard]:
    """Train each model of ``epochs`` (name → epochs, e.g. {"mlp": 8, "cnn": 3}) with its
    energy measured, then score it. ``warmup`` first trains the MLP for one epoch, unmeasured,
    so that first-call costs (thread pools, allocator) are not charged to the first model."""
    if not isinstance(epochs, dict) or not epochs:
        raise TypeError(f"epochs must be a non-empty dict of model name -> epochs, got "
                        f"{epochs!r}")
    for name, n in epochs.items():
        v.one_of("model name", name, tuple(metrics.MODELS))
        v.integer(f"epochs[{name!r}]", n, low=1)
    peak = v.positive("peak", peak)
    data = data or load_digits(seed=0)
    if v.boolean("warmup", warmup):
        metrics.train("mlp", seed=seed, epochs=1, data=data)
    cards = {}
    for name, n in epochs.items():
        trained, energy = train_with_energy(name, n, seed, data)
        cards[name] = score_model(trained, data, peak, energy)
    return cards


# (label, value) rows of the table; a label may name the card's batch sizes
_ROWS = (
    ("test accuracy", lambda c: f"{c.test_accuracy:.3f}"),
    ("inference throughput (batch {batch}), samples/s", lambda c: f"{c.throughput:,.0f}"),
    ("latency p50 / p95 / p99, µs",
     lambda c: " / ".join(f"{x * 1e6:.0f}" for x in (c.latency.p50, c.latency.p95,
                                                      c.latency.p99))),
    ("parameters, kB", lambda c: f"{c.parameter_bytes / 1e3:.1f}"),
    ("activations saved for backward (batch {activation_batch}), kB",
     lambda c: f"{c.saved_activation_bytes / 1e3:.1f}"),
    ("forward FLOPs per sample", lambda c: f"{c.forward_flops:,.0f}"),
    ("training MFU (vs this machine's peak)", lambda c: f"{c.mfu:.2%}"),
    ("training energy, J",
     lambda c: "not measured" if c.energy is None
     else f"{c.energy.joules:.1f} ({c.energy.method})"),
)


def format_scorecards(cards: dict) -> str:
    """Markdown table of ``cards`` (name → :class:`Scorecard`): a row a metric, a column a
    model (headed by its name in capitals). The cards must share their batch sizes."""
    if not isinstance(cards, dict) or not cards:
        raise TypeError(f"cards must be a non-empty dict of name -> Scorecard, got {cards!r}")
    for name, c in cards.items():
        if not isinstance(c, Scorecard):
            raise TypeError(f"cards[{name!r}] must be a Scorecard, got {type(c).__name__}")
    sizes = {(c.batch, c.activation_batch) for c in cards.values()}
    if len(sizes) > 1:
        raise ValueError(f"cards must share batch and activation_batch to share a table, got "
                         f"{sorted(sizes)}")
    batch, activation_batch = sizes.pop()
    lines = ["| metric | " + " | ".join(n.upper() for n in cards) + " |",
             "|---" + "|---:" * len(cards) + "|"]
    for label, value in _ROWS:
        label = label.format(batch=batch, activation_batch=activation_batch)
        lines.append(f"| {label} | " + " | ".join(value(c) for c in cards.values()) + " |")
    return "\n".join(lines)


def format_mfu(cards: dict, peak_name: str) -> str:
    """One line: each card's training MFU (:attr:`Scorecard.mfu`) and the peak it is
    against (``peak_name``, e.g. the measured roofline's name, which states its threads)."""
    if not isinstance(cards, dict) or not cards:
        raise TypeError(f"cards must be a non-empty dict of name -> Scorecard, got {cards!r}")
    parts = ", ".join(f"{name.upper()} {c.mfu:.1%}" for name, c in cards.items())
    peak = next(iter(cards.values())).peak
    return f"training MFU: {parts} of {peak / 1e9:.1f} GFLOP/s, the peak of {peak_name}"
