"""Bad input at labkit.autograd's, labkit.training's and the memory estimator's entry points
(issue 16): each call raises ValueError or TypeError whose message names the parameter.

A table of rows (callable, arguments that work, parameters to sweep) is fed the values a
hostile but fair user would try; Hypothesis then draws more of them for the integer
parameters of the estimator. A deep error (AttributeError, ZeroDivisionError, numpy's
"invalid literal") or a silently returned value fails.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from labkit.autograd import Tensor, functional as F, graph_nodes, grad, jvp, vjp
from labkit.autograd.gradcheck import gradcheck
from labkit.autograd.nn import Linear, mlp
from labkit.autograd.optim import SGD, Adam
from labkit.autograd.trace import trace
from labkit.grid import blocks_needed
from labkit.memory import estimator as est, scenarios
from labkit.memory.record import StepSpec
from labkit.training import inference

BAD_NUMBERS = (None, "abc", "3", True, math.nan, math.inf, -math.inf, 0, -1, 2.5, [], {})
BAD_ARRAYS = (None, "abc", [[1.0, 2.0], [3.0]], np.array(["a", "b"]), object(), {})


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


@dataclass(frozen=True)
class Row:
    name: str
    fn: Callable[..., Any]
    kwargs: dict
    sweep: tuple[str, ...]
    accepted: dict = field(default_factory=dict)     # param -> bad values that are valid
    arrays: tuple[str, ...] = ()                     # swept with BAD_ARRAYS


def _param():
    return [Tensor(np.ones(2), requires_grad=True)]


ROWS = [
    # ---- the engine ----
    Row("Tensor", Tensor, {"data": [1.0, 2.0]}, ("data", "requires_grad"), arrays=("data",),
        accepted={"requires_grad": (True,)}),
    Row("Tensor.sum", lambda axis: Tensor(np.ones((2, 3))).sum(axis=axis), {"axis": 0},
        ("axis",), accepted={"axis": (None, 0, -1, [])}),   # axis=[]: no axis reduced
    Row("Tensor.reshape", lambda shape: Tensor(np.ones(6)).reshape(shape), {"shape": 6},
        ("shape",), accepted={"shape": (-1,)}),
    Row("softmax", F.softmax, {"x": Tensor(np.ones((2, 3))), "axis": -1}, ("x", "axis"),
        accepted={"axis": (0, -1)}),
    Row("log_softmax", F.log_softmax, {"x": Tensor(np.ones((2, 3))), "axis": -1}, ("x", "axis"),
        accepted={"axis": (0, -1)}),
    Row("relu", F.relu, {"x": Tensor(np.ones(3))}, ("x",)),
    Row("cross_entropy", F.cross_entropy, {"logits": Tensor(np.ones((2, 3))),
                                           "targets": np.array([0, 1])}, ("logits", "targets"),
        arrays=("targets",)),
    Row("mse_loss", F.mse_loss, {"pred": Tensor(np.ones(3)), "target": np.ones(3)},
        ("pred", "target"), arrays=("target",)),
    Row("graph_nodes", graph_nodes, {}, (), ),
    Row("jvp", jvp, {"fn": lambda a: a * 2, "primals": (np.ones(3),), "tangents": (np.ones(3),)},
        ("fn", "primals", "tangents")),
    Row("vjp", vjp, {"fn": lambda a: a * 2, "primals": (np.ones(3),), "cotangent": np.ones(3)},
        ("fn", "primals", "cotangent"), arrays=("cotangent",)),
    Row("grad", grad, {"fn": lambda a: (a * a).sum(), "argnums": 0}, ("fn", "argnums"),
        accepted={"argnums": (0,)}),
    Row("gradcheck", lambda fn, eps, atol: gradcheck(fn, np.ones(2), eps=eps, atol=atol),
        {"fn": lambda a: (a * a).sum(), "eps": 1e-6, "atol": 1e-5}, ("fn", "eps", "atol"),
        accepted={"eps": (2.5,), "atol": (0, 2.5)}),
    Row("trace", lambda fn, x: trace(fn, x), {"fn": lambda a: a * 2, "x": np.ones(3)}, ("fn",)),
    Row("Linear", Linear, {"in_features": 3, "out_features": 2, "bias": True},
        ("in_features", "out_features", "bias"), accepted={"bias": (True,)}),
    Row("mlp", mlp, {"sizes": (4, 3, 2), "seed": 0}, ("sizes", "seed"),
        accepted={"seed": (0,)}),
    Row("SGD", lambda lr, momentum, weight_decay: SGD(_param(), lr, momentum, weight_decay),
        {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0}, ("lr", "momentum", "weight_decay"),
        accepted={"lr": (2.5,), "momentum": (0,), "weight_decay": (0, 2.5)}),
    Row("Adam", lambda lr, eps: Adam(_param(), lr, eps=eps), {"lr": 1e-3, "eps": 1e-8},
        ("lr", "eps"), accepted={"lr": (2.5,), "eps": (0, 2.5)}),
    # ---- the training experiments ----
    Row("kv_cache_bytes_per_token_per_layer", inference.kv_cache_bytes_per_token_per_layer,
        {"n_kv_heads": 8, "head_dim": 128, "dtype_bytes": 2},
        ("n_kv_heads", "head_dim", "dtype_bytes")),
    Row("kv_cache_bytes", inference.kv_cache_bytes,
        {"model": inference.DECODERS["Llama-2-7B"], "seq": 16, "batch": 1},
        ("model", "seq", "batch"), accepted={"seq": (0,)}),
    Row("weight_reuse", inference.weight_reuse, {"batch": 4, "itemsize": 2},
        ("batch", "itemsize")),
    # ---- the memory estimator ----
    Row("model_state_bytes", est.model_state_bytes,
        {"num_params": 1000, "precision": "mixed", "optimizer": "adam", "zero_stage": 1, "dp": 4},
        ("num_params", "precision", "optimizer", "zero_stage", "dp"),
        accepted={"num_params": (0,), "zero_stage": (0,)}),
    Row("activation_bytes_per_layer", est.activation_bytes_per_layer,
        {"seq": 16, "batch": 2, "hidden": 64, "heads": 4, "tp": 2, "sequence_parallel": False,
         "recompute": "none"},
        ("seq", "batch", "hidden", "heads", "tp", "sequence_parallel", "recompute"),
        accepted={"sequence_parallel": (True,)}),
    Row("activation_terms", est.activation_terms, {"seq": 16, "batch": 2, "hidden": 64,
                                                   "heads": 4}, ("seq", "batch", "hidden", "heads")),
    Row("checkpoint_memory_units", est.checkpoint_memory_units, {"num_layers": 8, "segments": 2},
        ("num_layers", "segments")),
    Row("sqrt_checkpoint_segments", est.sqrt_checkpoint_segments, {"num_layers": 8},
        ("num_layers",)),
    Row("mlp_saved_bytes", est.mlp_saved_bytes, {"batch": 4, "widths": (3, 2),
                                                 "bytes_per_element": 4},
        ("batch", "widths", "bytes_per_element")),
    Row("training_memory", est.training_memory,
        {"num_params": 10**6, "num_layers": 2, "seq": 16, "batch": 2, "hidden": 64, "heads": 4},
        ("num_params", "num_layers", "seq", "batch", "hidden", "heads"),
        accepted={"num_params": (0,)}),
    Row("request_walkthrough", lambda size, then_mb: scenarios.request_walkthrough(
        [size], then_mb=then_mb), {"size": 3.0, "then_mb": 1.0}, ("then_mb",),
        accepted={"then_mb": (None, 2.5)}),
    Row("request_walkthrough sizes", lambda sizes_mb: scenarios.request_walkthrough(sizes_mb),
        {"sizes_mb": [3.0]}, ("sizes_mb",)),
    Row("growing_batch_pattern", scenarios.growing_batch_pattern,
        {"capacity_mb": 1024, "steps": 2, "start_mb": 8.0, "growth_mb": 1.0, "kept_mb": 1.0},
        ("capacity_mb", "steps", "start_mb", "growth_mb", "kept_mb"),
        accepted={"start_mb": (2.5,), "growth_mb": (0, 2.5), "kept_mb": (2.5,)}),
    Row("holes_oom_pattern", scenarios.holes_oom_pattern,
        {"capacity_mb": 768, "big_mb": 512, "n_small": 4, "small_mb": 16, "final_mb": 300},
        ("capacity_mb", "big_mb", "n_small", "small_mb", "final_mb")),
    Row("StepSpec", StepSpec, {"widths": (4, 3), "batch": 2, "steps": 1, "seed": 0},
        ("widths", "batch", "steps", "seed"), accepted={"seed": (0,)}),
    # ---- grid arithmetic ----
    Row("blocks_needed", blocks_needed, {"n": 10, "threads_per_block": 4},
        ("n", "threads_per_block")),
]


def _cases():
    for row in ROWS:
        for param in row.sweep:
            for bad in (BAD_ARRAYS if param in row.arrays else BAD_NUMBERS):
                if any(_same(bad, ok) for ok in row.accepted.get(param, ())):
                    continue
                yield pytest.param(row, param, bad, id=f"{row.name}-{param}-{bad!r:.12}")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_good_arguments_work(row):
    row.fn(**row.kwargs)


@pytest.mark.parametrize("row, param, bad", list(_cases()))
def test_bad_value_gets_a_clear_error(row, param, bad):
    kwargs = dict(row.kwargs, **{param: bad})
    with pytest.raises((ValueError, TypeError)) as info:
        row.fn(**kwargs)
    assert param.split("[")[0] in str(info.value), f"message does not name {param}: {info.value}"


# ---- the examples of issue 16, one by one ---------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: Tensor("abc"), TypeError, "data"),
    (lambda: Tensor(None), TypeError, "data"),
    (lambda: Tensor([[1.0, 2.0], [3.0]]), ValueError, "rectangular"),
    (lambda: Tensor([1.0], requires_grad="yes"), TypeError, "requires_grad"),
    (lambda: F.softmax(np.array([1.0, 2.0])), TypeError, "labkit Tensor"),
    (lambda: graph_nodes("x"), TypeError, "labkit Tensor"),
    (lambda: Tensor(np.ones(3)).sum(axis="a"), TypeError, "axis"),
    (lambda: jvp(lambda a: a, np.ones(3), np.ones(3)), TypeError, "tuple or list"),
    (lambda: F.mse_loss(Tensor(np.ones(3)), np.ones((3, 1))), ValueError, "shape"),
    (lambda: est.activation_bytes_per_layer(16, 1, 64, heads=8, tp=3), ValueError, "divide"),
    (lambda: est.activation_bytes_per_layer(16, 1, 1024, heads=8, tp=128), ValueError, "divide"),
])
def test_issue_examples(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_right_answers_where_the_issue_wants_them():
    # 7.5e9 is how people type 7.5 billion: accepted as a count
    a = est.model_state_bytes(7.5e9, "mixed", "adam", 3, 64)
    b = est.model_state_bytes(7_500_000_000, "mixed", "adam", 3, 64)
    assert a == b and round(a.total / 1e9, 2) == 1.88          # ZeRO paper Figure 1: 1.88 GB
    # a one-argument jvp written as the issue intends
    _, t = jvp(lambda a: a * 2, (np.ones(3),), (np.ones(3),))
    assert t.tolist() == [2.0, 2.0, 2.0]
    # mse_loss of equal shapes is torch's value
    assert F.mse_loss(Tensor(np.array([1.0, 2.0])), np.array([0.0, 0.0])).item() == 2.5


@settings(max_examples=60, deadline=None)
@given(bad=st.one_of(st.none(), st.text(max_size=3), st.booleans(),
                     st.floats(allow_nan=True, allow_infinity=True).filter(
                         lambda x: not (math.isfinite(x) and x == int(x) and x >= 1)),
                     st.integers(max_value=0)),
       param=st.sampled_from(["seq", "batch", "hidden", "heads"]))
def test_estimator_integer_parameters_reject_drawn_bad_values(bad, param):
    kwargs = dict(seq=16, batch=2, hidden=64, heads=4)
    kwargs[param] = bad
    with pytest.raises((ValueError, TypeError), match=param):
        est.activation_bytes_per_layer(**kwargs)


@settings(max_examples=40, deadline=None)
@given(data=st.one_of(
    st.lists(st.lists(st.floats(allow_nan=False), min_size=1, max_size=3), min_size=2,
             max_size=3).filter(lambda rows: len({len(r) for r in rows}) > 1),
    st.text(min_size=1, max_size=4), st.none(),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)))
def test_tensor_rejects_drawn_non_arrays(data):
    with pytest.raises((ValueError, TypeError), match="data"):
        Tensor(data)
