"""The chapter map: one list that chapter 00's table, the tests and the README use.

The list itself is data, :data:`CHAPTERS_CSV` (``labkit/chapters.csv``); a new chapter is a
row there."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from labkit.validate import path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    experiments: str

    @property
    def filename(self) -> str:
        return f"{self.number:02d}_{self.slug}.ipynb"


CHAPTERS_CSV = Path(__file__).with_name("chapters.csv")
_COLUMNS = ["number", "slug", "title", "experiments"]


def _read_chapters(table: Path = CHAPTERS_CSV) -> tuple[Chapter, ...]:
    """The chapters listed in ``table`` (``labkit/chapters.csv``: one row per chapter, columns
    number, slug, title, experiments), checked: that header, numbers 0, 1, 2, … in order, and
    no empty field (a ValueError names the file, the row and what is wrong)."""
    with open(table, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != _COLUMNS:
        raise ValueError(f"{table}: the header must be {','.join(_COLUMNS)}, "
                         f"got {','.join(rows[0]) if rows else 'an empty file'}")
    chapters = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(_COLUMNS) or not all(field.strip() for field in row):
            raise ValueError(f"{table}, line {line}: a chapter needs all of "
                             f"{', '.join(_COLUMNS)}, none empty; got {row}")
        if row[0] != str(len(chapters)):
            raise ValueError(f"{table}, line {line}: chapters are numbered 0, 1, 2, … in "
                             f"order; expected {len(chapters)}, got {row[0]!r}")
        chapters.append(Chapter(int(row[0]), *row[1:]))
    if not chapters:
        raise ValueError(f"{table}: no chapter rows below the header")
    return tuple(chapters)


CHAPTERS = _read_chapters()


def chapter_map(notebooks: Path = REPO / "notebooks") -> str:
    """Markdown table of the chapters, linking those whose notebook exists."""
    notebooks = path("notebooks", notebooks)
    lines = ["| # | chapter | what you will do |", "|---|---|---|"]
    for ch in CHAPTERS:
        ready = (notebooks / ch.filename).exists()
        title = f"[{ch.title}]({ch.filename})" if ready else f"{ch.title} *(in preparation)*"
        lines.append(f"| {ch.number:02d} | {title} | {ch.experiments} |")
    return "\n".join(lines)


# Seed item -> (solution notebook file name, cell id) that teaches it. Keys: "000/exercise/N",
# "000/experiment/N", "000/example/N" for seed 000's exercises, experiments and code
# examples; "002/<section>" and "004/<section>" for the sections of seeds 002 and 004.
# Items whose chapter is not written yet are absent. A test checks every entry's cell exists.
SEED_COVERAGE: dict[str, tuple[str, str]] = {
    # ch00
    # ch01
    "000/example/1": ("01_dl_systems_stack.ipynb", "seed-ex1"),
    "000/example/2": ("01_dl_systems_stack.ipynb", "seed-ex2"),
    "000/experiment/1": ("01_dl_systems_stack.ipynb", "seed-exp1"),
    # ch02
    "000/exercise/1": ("02_autodiff.ipynb", "seed-ex1"),
    "000/exercise/2": ("02_autodiff.ipynb", "seed-ex2"),
    "000/exercise/7": ("02_autodiff.ipynb", "seed-ex7"),
    # ch03
    # ch04
    "000/exercise/3": ("04_gpu_cuda.ipynb", "seed-ex3"),
    "000/exercise/6": ("04_gpu_cuda.ipynb", "seed-ex6"),
    # ch05
    # ch06
    "000/exercise/5": ("06_memory.ipynb", "seed-ex5"),
    "002/memory-management": ("06_memory.ipynb", "seed-002-3-4"),
    # ch07
    "000/exercise/8": ("07_data_pipelines.ipynb", "seed-ex8"),
    "002/data-flow": ("07_data_pipelines.ipynb", "seed-002-dataflow"),
    "002/data-preprocessing": ("07_data_pipelines.ipynb", "seed-002-dataflow"),
    "002/data-sharding-and-caching": ("07_data_pipelines.ipynb", "formats-caching"),
    "002/compute-storage-overlap": ("07_data_pipelines.ipynb", "loader-knobs"),
    # ch08
    "002/compute-efficiency": ("08_compute_efficiency.ipynb", "seed-002-compute"),
    "002/pruning": ("08_compute_efficiency.ipynb", "pruning"),
    "002/quantization": ("08_compute_efficiency.ipynb", "quantization"),
    "002/knowledge-distillation": ("08_compute_efficiency.ipynb", "distillation"),
    "002/depthwise-separable-convolution": ("08_compute_efficiency.ipynb", "depthwise-separable"),
    "002/mixed-precision-training": ("08_compute_efficiency.ipynb", "mixed-precision"),
    # ch09
    "000/exercise/4": ("09_data_parallel.ipynb", "cell-047"),
    "000/experiment/2": ("09_data_parallel.ipynb", "cell-030"),
    "000/example/3": ("09_data_parallel.ipynb", "cell-033"),
    "002/gradient-compression": ("09_data_parallel.ipynb", "cell-041"),
    "002/asynchronous-updates": ("09_data_parallel.ipynb", "cell-041"),
    "002/efficient-communication-protocols": ("09_data_parallel.ipynb", "cell-014"),
    # ch10
    "000/exercise/9": ("10_model_parallel.ipynb", "seed-ex9"),
    "002/model-splitting": ("10_model_parallel.ipynb", "pipeline-intro"),
    "002/parallel-framework-support": ("10_model_parallel.ipynb", "real-runs"),
    # ch11
    "002/resource-management": ("11_scheduling_faults.ipynb", "seed-002-resources"),
    "002/task-scheduling": ("11_scheduling_faults.ipynb", "seed-002-scheduling"),
    "002/resource-allocation-optimization": ("11_scheduling_faults.ipynb", "placement"),
    "002/load-balancing": ("11_scheduling_faults.ipynb", "seed-002-load-balance"),
    "002/fault-tolerance": ("11_scheduling_faults.ipynb", "seed-002-fault-tolerance"),
    "002/energy-efficiency": ("11_scheduling_faults.ipynb", "seed-002-energy"),
    # ch12
    "000/exercise/10": ("12_performance_eval.ipynb", "seed-ex10"),
    "002/evaluation-metrics": ("12_performance_eval.ipynb", "seed002-metrics"),
    "004/performance-comparison": ("12_performance_eval.ipynb", "frameworks"),
    "004/deployment": ("12_performance_eval.ipynb", "deploy"),
}

# What each seed-000 item asks (seed 000, sections 四 "code examples", 六 "experiments" and
# 八 "exercises"), in English, for the map chapter 00 shows.
SEED_000_ITEMS: dict[str, str] = {
    "000/exercise/1": "static vs dynamic computation graphs: differences, strengths, uses",
    "000/exercise/2": "why reverse-mode AD suits deep learning (complexity)",
    "000/exercise/3": "the GPU memory hierarchy and what each level is for",
    "000/exercise/4": "what the cost of gradient synchronisation depends on; AllReduce time",
    "000/exercise/5": "memory of a 100M-parameter FP32 model: parameters, gradients, Adam",
    "000/exercise/6": "how Tensor Cores work and what using them requires",
    "000/exercise/7": "`.detach()` vs `torch.no_grad()`",
    "000/exercise/8": "an experiment to diagnose a data-loading bottleneck",
    "000/exercise/9": "pipeline vs tensor parallelism: when to choose which",
    "000/exercise/10": "read a recent MLSys paper and summarise its technique",
    "000/experiment/1": "CPU vs GPU training performance",
    "000/experiment/2": "scaling efficiency of parallel strategies (DP vs DDP)",
    "000/example/1": "inspecting a PyTorch computation graph (SimpleNet)",
    "000/example/2": "monitoring GPU memory",
    "000/example/3": "simple data-parallel training",
}


def _seed_key_order(key: str) -> tuple:
    seed, kind, *rest = key.split("/") + [""]
    num = rest[0]
    return (seed, kind, int(num) if num.isdigit() else 0, num)


def seed_coverage_map(notebooks: Path = REPO / "notebooks") -> str:
    """Markdown table: each seed item in :data:`SEED_COVERAGE` and the notebook cell that
    teaches it (linked when the notebook exists); seed-000 items not yet covered are listed
    as in preparation."""
    notebooks = path("notebooks", notebooks)
    lines = ["| seed item | what it asks | where it is taught |", "|---|---|---|"]
    keys = sorted(set(SEED_COVERAGE) | set(SEED_000_ITEMS), key=_seed_key_order)
    for key in keys:
        what = SEED_000_ITEMS.get(key, key.split("/", 1)[1].replace("-", " "))
        if key in SEED_COVERAGE:
            nb, cell = SEED_COVERAGE[key]
            where = f"[{nb}]({nb}), cell `{cell}`" if (notebooks / nb).exists() else \
                f"{nb}, cell `{cell}`"
        else:
            where = "*(chapter in preparation)*"
        lines.append(f"| {key} | {what} | {where} |")
    return "\n".join(lines)

