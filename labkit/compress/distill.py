"""Knowledge distillation with its controls (chapter 08): is it the soft targets, or the
teacher labelling images that have no label?

**The loss** (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a Neural Network",
§2): soft targets p_t^T = softmax(z_t / T); the student minimises a weighted average of the
cross-entropy with the soft targets at the same temperature and the cross-entropy with the
correct labels at T = 1,

    L = α · T² · KL(p_t^T ‖ p_s^T) + (1 − α) · CE(y, softmax(z_s)),

"Since the magnitudes of the gradients produced by the soft targets scale as 1/T² it is
important to multiply them by T² when using both hard and soft targets" (§2; the gradient
is eq. 2 of §2.1, (1/T)(q_i − p_i), and a further 1/T comes from z/T). KL and the
cross-entropy with the soft targets differ by the teacher's entropy, a constant of the
student, so they have the same gradients.

**The controls** (:func:`distill_controls`): a student that may see only ``labelled`` of
the training labels is trained with each of these targets for the other images, everything
else equal (the same batches — ``labelled_per_batch`` labelled images and the rest from the
unlabelled pool —, the same steps, initial weights, optimizer and α):

* ``labelled only``: the labelled images' cross-entropy alone (the unlabelled part of each
  batch gets no target);
* ``soft, T = …``: ``kd_loss`` at the chapter's T, and at T = 1;
* ``teacher argmax``: α·CE(argmax z_t) + (1 − α)·CE(y): the teacher labels every image with
  a hard pseudo-label (:func:`hard_target_loss`; equal to ``kd_loss`` at T = 1 with a one-hot
  teacher);
* ``all true labels``: the same with the true labels of every image — what the teacher's
  labels are worth at best.

If soft targets carry the gain, ``soft`` beats ``teacher argmax``; if the gain is the
teacher labelling more images, the two agree within the spread over seeds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from labkit import validate as V
from labkit.compress.train import _t, accuracy, batch_stream
from labkit.timing import threads
from labkit.torch_models import torch_mlp

NO_LABEL = -100      # ``F.cross_entropy``'s default ``ignore_index``: the image has no label


def kd_loss(student_logits, teacher_logits, labels, T: float = 4.0, alpha: float = 0.9):
    """α·T²·KL(softmax(t/T) ‖ softmax(s/T)) + (1 − α)·CE(labels, softmax(s)) in torch, both
    terms batch means (KL: ``F.kl_div(..., reduction="batchmean")``); a label ``NO_LABEL``
    (−100) leaves its image out of the CE term, whose mean is over the labelled images
    (``F.cross_entropy``'s ``ignore_index``). Hinton et al. 2015, §2. The numpy version is
    :func:`labkit.compress.model.kd_loss`."""
    import torch.nn.functional as F  # deferred: torch

    kl = F.kl_div(F.log_softmax(student_logits / T, dim=1),
                  F.log_softmax(teacher_logits / T, dim=1), log_target=True,
                  reduction="batchmean")
    return alpha * T * T * kl + (1 - alpha) * F.cross_entropy(student_logits, labels)


def hard_target_loss(student_logits, targets, labels, alpha: float = 0.9):
    """α·CE(targets) + (1 − α)·CE(labels): distillation's loss with the teacher's soft
    targets replaced by one-hot ``targets`` (at T = 1 the KL to a one-hot is the
    cross-entropy, the one-hot's entropy being 0)."""
    import torch.nn.functional as F  # deferred: torch

    return alpha * F.cross_entropy(student_logits, targets) + \
        (1 - alpha) * F.cross_entropy(student_logits, labels)


@dataclass(frozen=True)
class DistillRow:
    condition: str
    accuracies: tuple          # test accuracy per seed

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies))

    @property
    def std(self) -> float:
        """Sample standard deviation over the seeds (0 for one seed)."""
        a = np.asarray(self.accuracies)
        return float(a.std(ddof=1)) if len(a) > 1 else 0.0


@dataclass(frozen=True)
class DistillTable:
    rows: tuple
    teacher_accuracy: float
    labelled: int
    transfer: int              # training images without a label (the transfer set)
    steps: int
    T: float
    alpha: float
    seeds: tuple

    def row(self, condition: str) -> DistillRow:
        names = [r.condition for r in self.rows]
        return self.rows[names.index(V.one_of("condition", condition, names))]

    def better(self, a: str, b: str) -> str:
        """Which of two conditions gave the better student: ``a`` or ``b`` if its mean
        accuracy is higher by more than the two standard deviations over the seeds added
        together, else ``"equal within the spread"``."""
        ra, rb = self.row(a), self.row(b)
        if abs(ra.mean - rb.mean) <= ra.std + rb.std:
            return "equal within the spread"
        return a if ra.mean > rb.mean else b


def _conditions(T, alpha, loss):
    import torch.nn.functional as F  # deferred: torch

    def soft(temperature):
        return lambda s, t, y, y_all, pseudo: loss(s, t, y, temperature, alpha)
    return {
        "labelled only": lambda s, t, y, y_all, pseudo: F.cross_entropy(s, y),
        f"soft, T = {T:g}": soft(T),
        "soft, T = 1": soft(1.0),
        "teacher argmax": lambda s, t, y, y_all, pseudo: hard_target_loss(s, pseudo, y, alpha),
        "all true labels": lambda s, t, y, y_all, pseudo: hard_target_loss(s, y_all, y, alpha),
    }


def distill_controls(split, teacher, *, seeds=(0, 1, 2), labelled: int = 60,
                     sizes=(64, 16, 10), steps: int = 300, batch: int = 64,
                     labelled_per_batch: int = 16, lr: float = 3e-3, T: float = 4.0,
                     alpha: float = 0.9, loss: Callable = kd_loss) -> DistillTable:
    """Train a ``sizes`` student under each control (module docstring) for each seed and
    return the test accuracies. The first ``labelled`` training images keep their labels;
    the others are the transfer set. Each step's batch is ``labelled_per_batch`` labelled
    images and ``batch − labelled_per_batch`` transfer images (:func:`batch_stream`, one
    generator seeded by ``seed``); the student starts from ``torch_mlp(sizes, seed)``; Adam,
    one thread. ``loss(student_logits, teacher_logits, labels, T, alpha)`` is the
    distillation loss of the soft rows (a learner's :func:`kd_loss`); labels of transfer
    images are ``NO_LABEL``. The teacher's logits are computed once, in float32."""
    import torch  # deferred: torch

    if not isinstance(teacher, torch.nn.Module):
        raise TypeError(f"teacher must be a torch.nn.Module, got {type(teacher).__name__}")
    if not callable(loss):
        raise TypeError(f"loss must be a function (student_logits, teacher_logits, labels, T, "
                        f"alpha) -> loss, got {type(loss).__name__}")
    n = len(split.y_train)
    labelled = V.integer("labelled", labelled, low=1, high=n - 1)
    steps = V.integer("steps", steps, low=1)
    batch = V.integer("batch", batch, low=2)
    labelled_per_batch = V.integer("labelled_per_batch", labelled_per_batch, low=1,
                                   high=min(batch - 1, labelled))
    T = V.positive("T", T)
    alpha = V.fraction("alpha", alpha)
    lr = V.positive("lr", lr)
    seeds = tuple(V.integer("seed", s, low=0) for s in seeds)
    if not seeds:
        raise ValueError("seeds must list at least one seed, got ()")
    x, y_all = _t(split.x_train), _t(split.y_train)
    with torch.no_grad():
        t_all = teacher.eval()(x).float()
    y = torch.where(torch.arange(n) < labelled, y_all, torch.tensor(NO_LABEL))
    pseudo = t_all.argmax(dim=1)
    accs = {name: [] for name in _conditions(T, alpha, loss)}
    with threads(1):
        for seed in seeds:
            for name, fn in _conditions(T, alpha, loss).items():
                student = torch_mlp(sizes, seed=seed)
                opt = torch.optim.Adam(student.parameters(), lr=lr)
                g = torch.Generator().manual_seed(seed)
                lab = batch_stream(labelled, labelled_per_batch, steps, g)
                rest = batch_stream(n - labelled, batch - labelled_per_batch, steps, g)
                for i, j in zip(lab, rest):
                    idx = torch.cat([i, j + labelled])
                    out = fn(student(x[idx]), t_all[idx], y[idx], y_all[idx], pseudo[idx])
                    opt.zero_grad(set_to_none=True)
                    out.backward()
                    opt.step()
                accs[name].append(accuracy(student.eval(), split.x_test, split.y_test))
    rows = tuple(DistillRow(name, tuple(a)) for name, a in accs.items())
    return DistillTable(rows, accuracy(teacher, split.x_test, split.y_test), labelled,
                        n - labelled, steps, T, alpha, seeds)


def format_distill(table: DistillTable) -> str:
    """The controls as a text table: mean ± sample standard deviation over the seeds, the
    lowest and highest, and each seed's accuracy."""
    if not isinstance(table, DistillTable):
        raise TypeError(f"table must be a DistillTable, got {type(table).__name__}")
    head = (f"teacher {table.teacher_accuracy:.3f}; student sees {table.labelled} labels, "
            f"{table.transfer} transfer images, {table.steps} steps, α = {table.alpha:g}, "
            f"{len(table.seeds)} seeds")
    lines = [head, f"{'targets for the unlabelled images':34s} {'mean ± std':>13s}  "
                   f"{'min–max':>11s}  per seed"]
    for r in table.rows:
        lines.append(f"{r.condition:34s} {r.mean:.3f} ± {r.std:.3f}  "
                     f"{min(r.accuracies):.3f}–{max(r.accuracies):.3f}  "
                     + " ".join(f"{a:.3f}" for a in r.accuracies))
    return "\n".join(lines)
