"""Chapter 06 checkers accept the reference and reject typical mistakes and missing answers."""
import pytest

import labkit.check.ch06 as ch
from labkit.check.core import evaluate, stub
from labkit.memory.constants import MiB

RIGHT = {"6.1": ch.model_state_fp32, "6.2": ch.segment_for, "6.3": ch.splits,
         "6.4": ch.block_saved_bytes, "6.5": ch.layer_activation_bytes}

WRONG = {
    "6.1": [lambda n, o: 8 * n, lambda n, o: {"sgd": 8, "momentum": 12, "adam": 12}[o] * n,
            lambda n, o: {"sgd": 4, "momentum": 8, "adam": 12}[o] * n],
    "6.2": [lambda n: (512 * (n // 512 + 1), "small" if n <= MiB else "large",
                       ch.segment_for(n)[2]),
            lambda n: (ch.segment_for(n)[0], "small" if ch.segment_for(n)[0] < MiB else "large",
                       ch.segment_for(n)[2]),
            lambda n: (ch.segment_for(n)[0], ch.segment_for(n)[1],
                       2 * MiB if ch.segment_for(n)[0] <= MiB else 20 * MiB)],
    "6.3": [lambda b, s, sm, ms: b - s >= 512,
            lambda b, s, sm, ms: b - s >= 512 if sm else b - s >= MiB,
            lambda b, s, sm, ms: b - s >= 512 if sm else b - s > MiB],
    "6.4": [lambda s, b, h, a: s * b * h * (34 + 5 * a * s / h),               # the paper only
            lambda s, b, h, a: s * b * h * (34 + 5 * a * s / h) + 8 * s * b,   # masks 1 byte
            lambda s, b, h, a: s * b * h * (36 + 6 * a * s / h),               # no LayerNorm stats
            lambda s, b, h, a: 36 * s * b * h + 8 * s * b,                     # no attention scores
            lambda s, b, h, a: 2 * ch.block_saved_bytes(s, b, h, a)],          # fp32
    "6.5": [lambda s, b, h, a: 34 * s * b * h, lambda s, b, h, a: s * b * h * (34 + 5 * a * s / h) / 2,
            lambda s, b, h, a: s * b * h * (34 + 5 * a / h)],
}


@pytest.mark.parametrize("ex", sorted(RIGHT))
def test_reference_passes(ex):
    assert evaluate(ex, RIGHT[ex]).status == "pass"


@pytest.mark.parametrize("ex, i", [(ex, i) for ex in WRONG for i in range(len(WRONG[ex]))])
def test_wrong_answers_fail_with_a_hint(ex, i):
    v = evaluate(ex, WRONG[ex][i])
    assert v.status == "fail" and len(v.message) > 20


@pytest.mark.parametrize("ex", sorted(RIGHT))
def test_missing_answers(ex):
    assert evaluate(ex, None).status == "missing"

    @stub
    def f(*args):
        raise NotImplementedError
    assert evaluate(ex, f).status == "missing"


@pytest.mark.parametrize("i, hint", [(0, "Korthikanti's GPU count"), (1, "2 bytes per element"),
                                     (2, "mean and 1/std"), (3, "attention scores"),
                                     (4, "bfloat16")])
def test_block_saved_bytes_hints(i, hint):
    v = evaluate("6.4", WRONG["6.4"][i])
    assert v.status == "fail" and hint in v.message, v.message


def test_block_reference_equals_torch_measurement():
    from labkit.memory.measure import transformer_block_saved
    for s, b, h, a in [(7, 2, 40, 5), (12, 1, 24, 3)]:
        assert ch.block_saved_bytes(s, b, h, a) == transformer_block_saved(s, b, h, a).total_bytes


@pytest.mark.parametrize("wrong, hint", [
    (WRONG["6.1"][0], "parameters + gradients only"),
    (WRONG["6.1"][1], "two states per parameter"),
    (WRONG["6.1"][2], "left out the gradient"),
    (lambda n, o: {"sgd": 2, "momentum": 3, "adam": 4}[o] * n, "count bytes"),   # numbers
    (lambda n, o: {"sgd": 4, "momentum": 6, "adam": 8}[o] * n, "or counted 2 bytes"),
    (lambda n, o: {"sgd": 8, "momentum": 16, "adam": 24}[o] * n, "Adam 2"),   # states as 8 B
])
def test_model_state_hints(wrong, hint):
    v = evaluate("6.1", wrong)
    assert v.status == "fail" and hint in v.message, v.message


@pytest.mark.parametrize("i, hint", [(0, "left out the attention scores"), (1, "do not halve"),
                                     (2, "not 5a/h")])
def test_layer_activation_hints(i, hint):
    v = evaluate("6.5", WRONG["6.5"][i])
    assert v.status == "fail" and hint in v.message, v.message


def test_layer_activation_other_answer_gets_the_formula():
    v = evaluate("6.5", lambda s, b, h, a: s * b * h * 34 + 5 * a * s * s * b / 2)
    assert v.status == "fail" and "sbh(34 + 5as/h)" in v.message, v.message
