"""The suite's order for `make test`: the longest files first.

`make test` gives each of its pytest-xdist workers whole files (`--dist loadfile`) and turns
off xdist's own reordering (`--no-loadscope-reorder`), which sends the files with the most
tests first: the grading tests, a few tests of minutes each, then ran last, one worker busy
for ten minutes while the others had finished (fresh-clone run of 2026-12-03). Longest
first (LPT) lets the short files fill in around them. The list is a schedule, not a claim:
a file missing from it, or slower than its place, changes when it starts, never a verdict.
"""

# seconds of each file's tests in the fresh-clone run of 2026-12-04 (3 workers, 2 cores;
# the whole `make test` 11 min 8 s)
LONGEST_FIRST = [
    "tests/test_browser.py",                      # 198 s
    "tests/test_grade_paths.py",                  # 193 s
    "tests/test_grade_class.py",                  # 108 s
    "tests/test_release.py",                      # 100 s
    "tests/test_grade_cheats.py",                 # 70 s
    "tests/test_cluster_ft.py",                   # 50 s
    "solutions/12_performance_eval.ipynb",        # 45 s
    "tests/test_ch11_checks.py",                  # 43 s
    "notebooks/07_data_pipelines.ipynb",          # 38 s
    "tests/test_kernels_checks_load.py",          # 35 s
    "tests/test_grade_samples.py",                # 34 s
    "solutions/08_compute_efficiency.ipynb",      # 34 s
    "tests/test_kernels_tracer.py",               # 34 s
    "tests/test_ch05_checks.py",                  # 34 s
    "solutions/05_fast_kernels.ipynb",            # 33 s
    "solutions/09_data_parallel.ipynb",           # 32 s
    "notebooks/12_performance_eval.ipynb",        # 32 s
    "solutions/07_data_pipelines.ipynb",          # 29 s
    "notebooks/09_data_parallel.ipynb",           # 26 s
    "tests/test_kernels_labs.py",                 # 26 s
    "tests/test_ch06_checks.py",                  # 22 s
    "notebooks/05_fast_kernels.ipynb",            # 22 s
    "notebooks/08_compute_efficiency.ipynb",      # 19 s
    "tests/test_parallel_real.py",                # 15 s
]
RANK = {path: k for k, path in enumerate(LONGEST_FIRST)}

# Files whose tests run JAX in the worker's own process. JAX starts threads, and a process
# that forks after that may deadlock (JAX warns so): a worker hands out DataLoader workers
# (tests/test_dataload_measure.py) and forked ranks. Sent last, a worker that has run one
# of these gets only these after it (xdist hands files out in this order).
JAX_LAST = ["tests/test_autograd_frameworks.py", "tests/test_perf_machine.py",
            "tests/test_perf_metrics.py"]


def pytest_collection_modifyitems(session, config, items):
    """Files of LONGEST_FIRST first, in its order; the rest after, as collected; JAX_LAST's
    at the end (a stable sort: every worker computes the same order, as xdist requires)."""
    def key(item):
        path = item.nodeid.split("::", 1)[0]
        return path in JAX_LAST, RANK.get(path, len(RANK))
    items.sort(key=key)
