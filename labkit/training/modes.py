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

from labkit.data import batches, load_digits
from labkit.timing import threads
from labkit.validate import integer, number


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
    """A digits classifier Linear-BatchNorm-ReLU-Dropout-Linear trained in torch (cached), on
    one thread (on a small shared machine torch's second thread waiting for a busy core
    makes these small operations many times slower: :class:`labkit.perf.threads`)."""
    with threads(1):
        return _train_bn_dropout_model(p, hidden, epochs, seed)


def _train_bn_dropout_model(p, hidden, epochs, seed):
    import torch  # deferred: torch

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

    @property
    def smallest_vs_largest(self) -> str:
        """Train-mode accuracy at the first (smallest) test batch compared with the last:
        "higher", "lower" or "the same"."""
        small, large = self.acc_train_mode[0], self.acc_train_mode[-1]
        return "higher" if small > large else "lower" if small < large else "the same"


def forgot_eval_experiment(p: float = 0.5, batch_sizes=(2, 4, 16, 64, 256), seed: int = 0
                           ) -> ModeAccuracy:
    """Test accuracy, batch by batch, with the trained model in train() and in eval() mode
    (torch on one thread, as in :func:`train_bn_dropout_model`)."""
    import torch  # deferred: torch

    batch_sizes = tuple(int(b) for b in batch_sizes)
    if not batch_sizes or min(batch_sizes) < 2:
        raise ValueError(f"batch_sizes must be integers >= 2 (BatchNorm in train mode needs "
                         f"two samples), got {batch_sizes}")
    model, data = train_bn_dropout_model(float(p), seed=seed)
    x, y = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    with threads(1):
        acc = _mode_accuracies(model, x, y, batch_sizes, seed)
    model.eval()
    return ModeAccuracy(float(p), batch_sizes, tuple(acc[True]), tuple(acc[False]))


def _mode_accuracies(model, x, y, batch_sizes, seed) -> dict:
    """Accuracy at each test batch size, in train mode (True) and eval mode (False)."""
    import torch  # deferred: torch

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
    return acc


@dataclass(frozen=True)
class ModeRulesCheck:
    dropout_mean: float             # mean of dropout_train(ones, mask, p): ≈ 1 if scaled by 1/(1-p)
    batchnorm_matches_torch: bool   # batchnorm_eval == torch's BatchNorm1d in eval mode


def mode_rules_vs_torch(batchnorm_eval, dropout_train, p: float = 0.3, seed: int = 1
                        ) -> ModeRulesCheck:
    """Run a dropout rule on a (1000, 100) block of ones with a seeded keep mask (kept with
    probability 1 - p): inverted dropout keeps the mean at 1. Compare a BatchNorm eval rule
    with ``torch.nn.BatchNorm1d(4).eval()`` whose running statistics and affine parameters
    are seeded random values (not the 0/1 defaults, which hide a swapped argument)."""
    import torch  # deferred: torch

    for name, fn in (("batchnorm_eval", batchnorm_eval), ("dropout_train", dropout_train)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
    p = number("p", p, low=0, high=1, high_open=True)
    rng = np.random.default_rng(integer("seed", seed, low=0))
    ones = np.ones((1000, 100))
    mask = (rng.random(ones.shape) >= p).astype(float)
    mean = float(np.mean(dropout_train(ones, mask, p)))
    bn = torch.nn.BatchNorm1d(4).eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.from_numpy(rng.normal(size=4)))
        bn.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, 4)))
        bn.weight.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, 4)))
        bn.bias.copy_(torch.from_numpy(rng.normal(size=4)))
        xs = rng.normal(size=(3, 4)).astype(np.float32)
        want = bn(torch.from_numpy(xs)).numpy()
    got = np.asarray(batchnorm_eval(xs, bn.running_mean.numpy(), bn.running_var.numpy(),
                                    bn.weight.detach().numpy(), bn.bias.detach().numpy()))
    return ModeRulesCheck(mean, bool(got.shape == want.shape
                                     and np.allclose(got, want, atol=1e-5)))
