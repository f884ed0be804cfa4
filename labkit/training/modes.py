"""BatchNorm and Dropout in train vs eval mode, and the bug of forgetting ``model.eval()``.

BatchNorm normalizes with the batch's own mean and variance while training and with running
averages in eval mode (Ioffe & Szegedy, ICML 2015, Alg. 1-2). Dropout zeroes each unit with
probability p while training and scales survivors by 1/(1-p), and is the identity in eval
mode (Srivastava et al., JMLR 2014; "inverted" dropout). A model left in train mode at test
time makes predictions that depend on the other samples in the batch, and on chance.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def batchnorm_eval(x, running_mean, running_var, gamma, beta, eps: float = 1e-5):
    """Inference-mode BatchNorm: gamma (x - running_mean) / sqrt(running_var + eps) + beta."""
    return gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta


def inverted_dropout(x, keep_mask, p: float):
    """Training-mode dropout with a given keep mask: x * mask / (1 - p); p in [0, 1)."""
    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    return x * keep_mask / (1 - p)


@lru_cache(maxsize=4)
def train_bn_dropout_model(p: float = 0.5, hidden: int = 128, epochs: int = 12, seed: int = 0):
    """A digits classifier Linear-BatchNorm-ReLU-Dropout-Linear trained in torch (cached)."""
    import torch

    from labkit.data import batches, load_digits

    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    data = load_digits(seed=seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.BatchNorm1d(hidden),
                                torch.nn.ReLU(), torch.nn.Dropout(p), torch.nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        for idx in batches(len(y), 64, rng):
            if len(idx) < 2:
                continue
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model, data


@dataclass(frozen=True)
class ModeAccuracy:
    p: float
    batch_sizes: tuple[int, ...]
    acc_train_mode: tuple[float, ...]
    acc_eval_mode: tuple[float, ...]


def forgot_eval_experiment(p: float = 0.5, batch_sizes=(2, 4, 16, 64, 256), seed: int = 0
                           ) -> ModeAccuracy:
    """Test accuracy, batch by batch, with the trained model in train() and in eval() mode."""
    import torch

    batch_sizes = tuple(int(b) for b in batch_sizes)
    if not batch_sizes or min(batch_sizes) < 2:
        raise ValueError(f"batch_sizes must be integers >= 2 (BatchNorm in train mode needs "
                         f"two samples), got {batch_sizes}")
    model, data = train_bn_dropout_model(float(p), seed=seed)
    x, y = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    acc = {True: [], False: []}
    for training in (True, False):
        for b in batch_sizes:
            torch.manual_seed(seed)
            model.train(training)
            correct = 0
            with torch.no_grad():
                for i in range(0, len(y), b):
                    xb = x[i:i + b]
                    if len(xb) < 2:
                        xb = x[i - 1:i + 1][-2:]
                        correct += int((model(xb).argmax(1)[-1:] == y[i:i + 1]).sum())
                        continue
                    correct += int((model(xb).argmax(1) == y[i:i + b]).sum())
            acc[training].append(correct / len(y))
            model.load_state_dict(state)   # train-mode BatchNorm updated its running stats
    model.eval()
    return ModeAccuracy(float(p), batch_sizes, tuple(acc[True]), tuple(acc[False]))
