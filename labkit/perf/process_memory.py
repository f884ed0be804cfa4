"""Seed examples 2 and 3 (chapter 01): this process's memory read from ``/proc/self/status``
through a training step, and nn.DataParallel on the devices there are."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from labkit import validate as v
from labkit.memory.measure import saved_tensor_bytes
from labkit.torch_models import torch_mlp

STATUS = "/proc/self/status"


def status_bytes(text: str) -> dict:
    """Every ``Name:  value kB`` line of a ``/proc/<pid>/status`` file as bytes (name ->
    int). Linux writes these sizes in kB of 1024 bytes (``fs/proc/task_mmu.c`` shifts page
    counts by PAGE_SHIFT − 10); ``VmRSS`` is the resident set, ``VmHWM`` its peak ("high
    water mark"), ``RssAnon`` the anonymous pages — where tensors live (proc_pid_status(5));
    lines of other forms (``Threads: 3``, ``Name: python``) are skipped."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the status file's text (str), got {type(text).__name__}")
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * 1024
    return out


@dataclass(frozen=True)
class ProcessMemory:
    rss: int | None            # bytes resident now (None where /proc is not there)
    peak: int                  # bytes, the largest resident set so far
    source: str


def process_memory(parse=None) -> ProcessMemory:
    """This process's resident memory: ``parse`` (default :func:`status_bytes`) of
    ``/proc/self/status`` (``VmRSS``, ``VmHWM``) on Linux; elsewhere the peak from
    ``resource.getrusage`` (``ru_maxrss``: KiB on Linux, bytes on macOS) and no current
    value."""
    parse = status_bytes if parse is None else parse
    if os.path.exists(STATUS):
        with open(STATUS, encoding="ascii", errors="replace") as fh:
            fields = parse(fh.read())
        return ProcessMemory(int(fields["VmRSS"]), int(fields["VmHWM"]), STATUS)
    import resource  # deferred: resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ProcessMemory(None, int(peak if sys.platform == "darwin" else peak * 1024),
                         "resource.getrusage (peak only)")


def memory_report(parse=None) -> str:
    """Seed example 2 on the devices there are: the CUDA caching allocator's counters on a
    GPU; on a CPU, where no caching allocator holds tensors (PyTorch's CPU allocator asks
    the C library and the kernel), the process's resident memory (:func:`process_memory`)."""
    import torch  # deferred: torch

    if torch.cuda.is_available():
        a = torch.cuda.memory_allocated() / 2 ** 20
        r = torch.cuda.memory_reserved() / 2 ** 20
        return f"allocated {a:.2f} MiB, reserved {r:.2f} MiB, cached-free {r - a:.2f} MiB"
    m = process_memory(parse)
    now = "unknown" if m.rss is None else f"{m.rss / 2 ** 20:.1f} MiB"
    return (f"no GPU: this process holds {now} resident, {m.peak / 2 ** 20:.1f} MiB at its "
            f"peak ({m.source})")


@dataclass(frozen=True)
class MemoryPhase:
    phase: str
    rss: int                  # bytes resident after the phase
    expected: int | None      # bytes the phase's new tensors take, where they are known


def memory_through_step(parse=None, width: int = 3072, batch: int = 256,
                        seed: int = 0) -> tuple[MemoryPhase, ...]:
    """The process's resident memory (:func:`process_memory` with ``parse``) through one
    Adam training step of Linear(width, width) → ReLU → Linear(width, 10), phase by phase,
    with what each phase's new tensors take: the parameters (4 bytes each), the
    activations autograd saves (``labkit.memory.measure.saved_tensor_bytes``), the
    gradients (one per parameter) and Adam's two state tensors per parameter (created on its
    first step); ``zero_grad()`` frees the gradients (set to None). A weight of 3072² floats
    is 36 MiB, above glibc's largest mmap threshold (32 MiB, mallopt(3)), so the C library
    maps it from the kernel and gives it back when freed: the resident set follows the
    tensors. Needs ``/proc/self/status`` (Linux)."""
    import torch  # deferred: torch
    from torch import nn

    width = v.integer("width", width, low=1, high=8192)
    batch = v.integer("batch", batch, low=1)

    def rss():
        m = process_memory(parse)
        if m.rss is None:
            raise ValueError("memory_through_step needs /proc/self/status (Linux)")
        return m.rss

    def build():
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    warm = nn.Linear(8, 2)                  # load the code paths first: they cost memory too
    torch.optim.Adam(warm.parameters()).step()
    nn.functional.cross_entropy(warm(torch.zeros(1, 8)), torch.zeros(1, dtype=torch.long)).backward()
    out = [MemoryPhase("start (the batch in memory)", rss(), None)]
    model = build()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    out.append(MemoryPhase("model built", rss(), params))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    box = []
    saved = saved_tensor_bytes(lambda: box.append(nn.functional.cross_entropy(model(x), y)),
                               exclude=list(model.parameters())).total_bytes
    loss = box.pop()
    out.append(MemoryPhase("forward (activations saved)", rss(), saved))
    loss.backward()
    del loss
    out.append(MemoryPhase("backward (gradients)", rss(), params))
    opt.step()
    out.append(MemoryPhase("optimizer step (Adam's two states)", rss(), 2 * params))
    opt.zero_grad(set_to_none=True)
    out.append(MemoryPhase("zero_grad (gradients freed)", rss(), -params))
    del model, opt
    return tuple(out)


def format_memory_phases(rows) -> str:
    """Markdown table of :func:`memory_through_step`: resident MiB after each phase, its
    change, and what the phase's new tensors take."""
    lines = ["| after | resident MiB | change MiB | new tensors MiB |", "|---|---:|---:|---:|"]
    prev = None
    for r in v.instances("rows", rows, MemoryPhase):
        change = "" if prev is None else f"{(r.rss - prev) / 2 ** 20:+.1f}"
        exp = "" if r.expected is None else f"{r.expected / 2 ** 20:+.1f}"
        lines.append(f"| {r.phase} | {r.rss / 2 ** 20:.1f} | {change} | {exp} |")
        prev = r.rss
    return "\n".join(lines)


def seed_example3(epochs: int = 3, seed: int = 0, n: int = 1000, batch_size: int = 32):
    """Seed example 3, run on the devices there are: nn.DataParallel over every visible GPU
    (with none, DataParallel has no device_ids and simply calls the module). Returns the
    mean loss per epoch and the devices used."""
    import torch  # deferred: torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    epochs = v.integer("epochs", epochs, low=1)
    model = torch_mlp((100, 256, 10), seed=v.integer("seed", seed, low=0))
    cuda = torch.cuda.is_available()
    model = nn.DataParallel(model)
    device = "cuda" if cuda else "cpu"
    model = model.to(device)
    x = torch.randn(n, 100)
    y = torch.randint(0, 10, (n,))
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    crit = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for bx, by in loader:
            bx, by = bx.to(device), by.to(device)
            opt.zero_grad()
            loss = crit(model(bx), by)
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total / len(loader))
    return losses, list(model.device_ids)
