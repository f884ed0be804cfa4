"""No labkit module over 600 lines (issue 26): a file that long holds more than one thing
(split by what it holds, as kernels/library/, check/ch02_graphs and parallel/zero_lab were)."""
from pathlib import Path

LIMIT = 600
PACKAGE = Path(__file__).resolve().parents[1] / "labkit"


def test_no_module_over_the_limit():
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
               for p in sorted(PACKAGE.rglob("*.py"))}
    assert len(lengths) > 100
    assert {p: n for p, n in lengths.items() if n > LIMIT} == {}


def test_ceiling_division_is_written_once():
    """CONTRIBUTING's shared helpers: ⌈a/b⌉ is ``labkit.validate.ceil_div`` (or
    ``labkit.grid.blocks_needed`` for a grid), not ``-(-a // b)`` written again."""
    import re
    spelled = re.compile(r"-\(-.*//")
    found = [f"{p.relative_to(PACKAGE)}:{k}" for p in sorted(PACKAGE.rglob("*.py"))
             for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if spelled.search(line.split("#")[0]) and p.name != "validate.py"]
    assert found == []
