"""Chapter 00's warm-up exercise."""
from __future__ import annotations

from labkit.check.core import Wrong, exercise
from labkit.grid import blocks_needed

CASES = [(1, 1), (1, 256), (255, 256), (256, 256), (257, 256), (1000, 256), (4096, 128),
         (10**6 + 3, 1024), (7, 3), (31, 32), (33, 32)]


def fresh_cases(rng) -> list[tuple[int, int]]:
    """Inputs drawn per run: random sizes, and a multiple of a block and one past it."""
    cases = [(int(rng.integers(1, 10**7)), int(rng.choice([32, 64, 128, 256, 512, 1024])))
             for _ in range(4)]
    t, k = int(rng.choice([64, 96, 128, 256])), int(rng.integers(2, 5000))
    return cases + [(k * t, t), (k * t + 1, t)]


@exercise("0.1", "blocks needed to cover n elements", reference=blocks_needed,
          binds="blocks_needed", answers=("labkit.validate:ceil_div",))
def _(answer, ref, rng):
    for n, t in [*CASES, *fresh_cases(rng)]:
        got, want = answer(n, t), ref(n, t)
        if got == want:
            if not isinstance(got, int) or isinstance(got, bool):
                raise Wrong(f"blocks_needed({n}, {t}) returned {type(got).__name__}; a launch "
                            f"needs an int (use // not /).")
            continue
        if got == n // t:
            left = n - got * t
            which = "the last element gets" if left == 1 else f"the last {left} elements get"
            raise Wrong(f"blocks_needed({n}, {t}) = {got}, expected {want}: you rounded down, "
                        f"so {which} no thread. Round up.")
        if got == n // t + 1 and n % t == 0:
            raise Wrong(f"blocks_needed({n}, {t}) = {got}, expected {want}: when n is a "
                        f"multiple of the block size, no extra block is needed.")
        raise Wrong(f"blocks_needed({n}, {t}) = {got!r}, expected {want}.")
