"""Chapter 00's warm-up exercise."""
from __future__ import annotations

from labkit.check.core import Wrong, exercise
from labkit.grid import blocks_needed

CASES = [(1, 1), (1, 256), (255, 256), (256, 256), (257, 256), (1000, 256), (4096, 128),
         (10**6 + 3, 1024), (7, 3), (31, 32), (33, 32)]


@exercise("0.1", "blocks needed to cover n elements", reference=blocks_needed,
          binds="blocks_needed")
def _(answer):
    for n, t in CASES:
        got = answer(n, t)
        want = blocks_needed(n, t)
        if got == want:
            continue
        if got == n // t:
            raise Wrong(f"blocks_needed({n}, {t}) = {got}, expected {want}: you rounded down, "
                        f"so the last {n - got * t} elements get no thread. Round up.")
        if got == n // t + 1 and n % t == 0:
            raise Wrong(f"blocks_needed({n}, {t}) = {got}, expected {want}: when n is a "
                        f"multiple of the block size, no extra block is needed.")
        raise Wrong(f"blocks_needed({n}, {t}) = {got!r}, expected {want}.")
    for n, t in CASES[:3]:
        if not isinstance(answer(n, t), int):
            raise Wrong(f"blocks_needed({n}, {t}) returned {type(answer(n, t)).__name__}; "
                        f"a launch needs an int (use // not /).")
