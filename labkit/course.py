"""The chapter map: one list that chapter 00's table, the tests and the README use."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


CHAPTERS = (
    Chapter(0, "start_here", "Start here", "environment and device report; widgets, checks, grading"),
    Chapter(1, "dl_systems_stack", "The DL systems stack", "a training step traced from Python down; rooflines; CPU vs GPU"),
    Chapter(2, "autodiff", "Computation graphs and autodiff", "build autograd; forward vs reverse mode; static graphs and passes"),
    Chapter(3, "training_vs_inference", "Training vs inference", "FLOPs and saved activations per phase; precision; batch size"),
    Chapter(4, "gpu_cuda", "GPU architecture and CUDA", "SIMT, divergence, coalescing, bank conflicts, occupancy"),
    Chapter(5, "fast_kernels", "Writing fast kernels", "reduction, scan, matmul from naive to tiled; roofline"),
    Chapter(6, "memory", "Memory management", "training-memory budget; caching allocator; checkpointing"),
    Chapter(7, "data_pipelines", "Data pipelines", "finding a data-loading bottleneck; workers, prefetch, caching"),
    Chapter(8, "compute_efficiency", "Compute efficiency", "fusion, mixed precision, quantization, pruning, distillation"),
    Chapter(9, "data_parallel", "Data parallelism and collectives", "AllReduce algorithms and cost; real gloo runs; DP vs DDP"),
    Chapter(10, "model_parallel", "Model parallelism", "pipeline schedules, tensor parallelism, ZeRO, 3D planner"),
    Chapter(11, "scheduling_faults", "Scheduling and fault tolerance", "cluster scheduling, stragglers, checkpoint interval"),
    Chapter(12, "performance_eval", "Performance evaluation", "benchmarking method, profiling, deployment"),
)


def chapter_map(notebooks: Path = REPO / "notebooks") -> str:
    """Markdown table of the chapters, linking those whose notebook exists."""
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
    # ch02
    # ch03
    # ch04
    # ch05
    # ch06
    # ch07
    # ch08
    # ch09
    # ch10
    # ch11
    # ch12
}
