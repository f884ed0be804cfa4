"""The shared torch reference MLP."""
import pytest

from labkit.torch_models import torch_mlp


def test_mlp_layers_parameters_and_seed():
    import torch

    model = torch_mlp((8, 16, 3), seed=1)
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    assert sum(p.numel() for p in model.parameters()) == 8 * 16 + 16 + 16 * 3 + 3
    again = torch_mlp((8, 16, 3), seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    assert torch_mlp((4, 2), dtype=torch.float64)[0].weight.dtype == torch.float64
    with pytest.raises(ValueError, match="sizes must list at least two positive widths"):
        torch_mlp((8,))


def test_mlp_activation_and_dropout():
    import torch

    model = torch_mlp((4, 6, 5, 2), seed=3, activation="tanh", dropout=0.25)
    assert [type(m).__name__ for m in model] == ["Linear", "Tanh", "Dropout", "Linear", "Tanh",
                                                 "Dropout", "Linear"]
    assert model[2].p == 0.25
    torch.manual_seed(3)
    first = torch.nn.Linear(4, 6)                 # the same draws, in the same order
    assert torch.equal(model[0].weight, first.weight)
    with pytest.raises(ValueError, match="activation"):
        torch_mlp((4, 2), activation="gelu")
    with pytest.raises(ValueError, match="dropout"):
        torch_mlp((4, 3, 2), dropout=1.5)
