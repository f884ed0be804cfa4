"""nn + optim against torch, the digits MLP, counters and the leak experiment."""
import numpy as np
import pytest
import torch

from labkit.autograd import Tensor, count, functional as F, no_grad
from labkit.training.leak import labkit_leak, torch_leak
from labkit.autograd.nn import Linear, mlp
from labkit.autograd.optim import SGD, Adam
from labkit.training.train import train_digits


def torch_twin(model):
    layers = []
    for layer in model.layers:
        if isinstance(layer, Linear):
            lin = torch.nn.Linear(*layer.weight.shape).double()
            with torch.no_grad():
                lin.weight.copy_(torch.tensor(layer.weight.data.T))
                lin.bias.copy_(torch.tensor(layer.bias.data))
            layers.append(lin)
        else:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_training_steps_match_torch(opt_name):
    model = mlp((5, 7, 3), seed=1, dtype=np.float64)
    twin = torch_twin(model)
    if opt_name == "sgd":
        opt, topt = (SGD(model.parameters(), lr=0.1, momentum=0.9),
                     torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9))
    else:
        opt, topt = Adam(model.parameters(), lr=0.01), torch.optim.Adam(twin.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, y = rng.normal(size=(6, 5)), rng.integers(0, 3, 6)
        opt.zero_grad()
        topt.zero_grad()
        F.cross_entropy(model(Tensor(x)), y).backward()
        torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(y)).backward()
        opt.step()
        topt.step()
    np.testing.assert_allclose(model.layers[0].weight.data, twin[0].weight.detach().numpy().T,
                               rtol=1e-7, atol=1e-9)


def test_optimizer_argument_errors():
    p = mlp((2, 2)).parameters()
    with pytest.raises(ValueError, match="lr"):
        SGD(p, lr=0)
    with pytest.raises(ValueError, match="momentum"):
        SGD(p, momentum=1.0)
    with pytest.raises(ValueError, match="params"):
        Adam([])
    with pytest.raises(ValueError, match="weight_decay"):
        SGD(p, weight_decay=-0.1)
    with pytest.raises(ValueError, match="betas"):
        Adam(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        Adam(p, eps=-1e-8)
    with pytest.raises(ValueError, match="sizes"):
        mlp((3,))


def test_mlp_on_digits_beats_95_percent():
    res = train_digits(seed=0)
    assert res.test_accuracy > 0.95
    assert res.losses[-1] < res.losses[0] / 5


def test_digits_gradients_match_torchs_and_a_missing_one_is_infinite():
    from labkit.training.train import (digits_gradients, torch_digits_gradients,
                                       torch_gradient_error)

    got, want = digits_gradients(seed=2), torch_digits_gradients(seed=2)
    assert [g.shape for g in got] == [(64, 32), (32,), (32, 10), (10,)]
    assert all(np.allclose(g, w, atol=1e-12) for g, w in zip(got, want))
    assert torch_gradient_error(seed=2) < 1e-12
    assert torch_gradient_error(lambda loss: None) == float("inf")    # no gradient at all


def test_counters_match_closed_forms_and_no_grad_saves_nothing():
    B, sizes = 8, (5, 6, 3)
    model = mlp(sizes, seed=0)
    x = np.random.default_rng(0).normal(size=(B, 5)).astype(np.float32)
    y = np.arange(B) % 3
    with count() as c:
        F.cross_entropy(model(Tensor(x)), y).backward()
    mm = 2 * B * (5 * 6 + 6 * 3)
    assert c.forward["matmul"] == mm
    # first layer: only dW (the input needs no grad); second: dW and dx
    assert c.backward["matmul"] == 2 * B * 5 * 6 + 2 * 2 * B * 6 * 3
    # saved activations: the input x, the ReLU output (reused by the next matmul),
    # and the log_softmax output
    assert c.saved_bytes == 4 * B * (5 + 6 + 3)
    assert c.saved_parameter_bytes == 4 * (5 * 6 + 6 * 3)
    with no_grad(), count() as c2:
        model(Tensor(x))
    assert c2.saved_bytes == 0 and c2.forward["matmul"] == mm
    assert "matmul" in c.table()


def test_leak_grows_only_when_the_loss_tensor_is_kept():
    keep = labkit_leak(4, "tensor")
    assert keep.kept_bytes[-1] == 4 * keep.kept_bytes[0] > 0
    assert labkit_leak(4, "item").kept_bytes == (0, 0, 0, 0)
    assert labkit_leak(3, "detach").per_step == 0
    t = torch_leak(3, "tensor", backward=False)
    # x (64x64), ReLU output (64x256) and log_softmax output (64x10) in float32, plus targets
    assert t.per_step >= 4 * 64 * (64 + 256 + 10)
    assert torch_leak(3, "tensor", backward=True).kept_bytes == (0, 0, 0)
    assert torch_leak(3, "detach", backward=False).kept_bytes == (0, 0, 0)
    with pytest.raises(ValueError, match="strategy"):
        labkit_leak(2, "list")
