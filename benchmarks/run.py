"""``make bench``: run every ``benchmarks/bench_*.py`` and print one table.

Ratios are measured in one run on this machine (labkit vs PyTorch/numpy, fused vs unfused);
they are never asserted in tests. ``python benchmarks/run.py NAME`` runs the modules whose
file name contains NAME.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

import labkit  # noqa: F401  (selects the CUDA simulator before numba is imported)
from labkit.perf.bench import Row, format_table

HERE = Path(__file__).parent


def main(argv: list[str]) -> int:
    rows: list[Row] = []
    failed = 0
    for path in sorted(HERE.glob("bench_*.py")):
        if argv and not any(a in path.stem for a in argv):
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            got = list(module.rows())
        except Exception:
            failed += 1
            print(f"{path.name} failed:", file=sys.stderr)
            traceback.print_exc()
            continue
        print(f"{path.name}: {len(got)} row(s)", file=sys.stderr)
        rows.extend(got)
    print(format_table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
