"""Chapter 06's allocator lab (exercises 6.6, 6.3, 6.7: best fit, split, merge on free), what
its checks in :mod:`labkit.check.ch06` run: each rule's cases and hints, and
:func:`replay_check`, which replays traces through labkit's
:class:`~labkit.memory.allocator.CachingAllocator` and asks the learner's rule, decision by
decision, every question the allocator asked labkit's rule on the way — random alloc/free
sequences of both pools around the 1 MiB boundary, with ``max_split_size_mb``, expandable
segments and a capacity, and the chapter's recorded training step (:func:`core_traces`).
The replay is recorded on the reference's side, so that no rule of labkit's runs in the
checker.
"""
from __future__ import annotations

import copy
from functools import lru_cache

import numpy as np

from labkit.check.core import Wrong
from labkit.memory import core as C
from labkit.memory import core_replay as R
from labkit.memory.config import NO_LIMIT
from labkit.memory.constants import K_LARGE_BUFFER, MiB, format_size
from labkit.memory.record import StepSpec, record_training_step


@lru_cache(maxsize=1)
def recorded_events() -> tuple:
    """The chapter's recorded training step (``record_training_step(StepSpec())``: an MLP
    with Adam built and trained for two steps) as core events; the same on every run."""
    return tuple(R.trace_events(record_training_step(StepSpec())))


def core_traces(rng) -> list[tuple[str, list, dict]]:
    """What a core rule is replayed on: random sequences of both pools (plain, with
    ``max_split_size_mb``, with expandable segments, on a device that fills up) and the
    chapter's recorded step."""
    ms = int(rng.choice([20, 24, 32, 48]))
    return [
        ("a random trace", R.random_events(rng, 160), {}),
        (f"a random trace with max_split_size_mb={ms}", R.random_events(rng, 160, large=0.3),
         {"max_split_size_mb": ms}),
        ("a random trace with expandable segments", R.random_events(rng, 120),
         {"expandable_segments": True}),
        ("a random trace on a 160 MiB device", R.random_events(rng, 160, large=0.3),
         {"capacity": 160 * MiB}),
        ("the chapter's recorded training step", list(recorded_events()), {}),
    ]


def _event(events, i) -> str:
    kind, key, size = events[i]
    return f"alloc #{key} of {format_size(size)}" if kind == "alloc" else f"free #{key}"


def hex_block(block):
    """A block dict of the merge rule with its addresses in hex."""
    return None if block is None else {
        k: (hex(v) if k in ("addr", "segment") else v) for k, v in block.items()}


def _limit(ms) -> str:
    return "unset" if ms == NO_LIMIT else format_size(ms)


def _question(role: str, name: str, args) -> str:
    """One of the allocator's calls of a rule, as the learner would write it."""
    if role == "best_fit":
        free, size, ms, rounding = args
        blocks = ", ".join(f"{format_size(s)} at 0x{a:x}" for a, s in free[:6])
        more = f", … ({len(free)} blocks)" if len(free) > 6 else ""
        return (f"{name}([{blocks}{more}], {format_size(size)}, max_split_size="
                f"{_limit(ms)}, rounding={format_size(rounding)})")
    if role == "should_split":
        block, size, small, ms = args
        return (f"{name}({format_size(block)}, {format_size(size)}, small={small}, "
                f"max_split_size={_limit(ms)})")
    return f"{name}({', '.join(str(hex_block(b)) for b in args)})"


def allocator_takes(role: str, args, decision):
    """What labkit's CachingAllocator makes of a rule's answer to ``args`` (the checks it
    runs on a core's answers, :mod:`labkit.memory.core`; CoreError when it cannot)."""
    if role == "best_fit":
        return decision, C.best_fit_taken(args[0], args[1], decision)
    if role == "should_split":
        return C.split_taken(decision)
    return C.merge_taken(*args, decision)


def _outcome(role: str, args, taken) -> str:
    """The blocks that an answer the allocator took (:func:`allocator_takes`) leaves."""
    if role == "best_fit":
        addr, size = taken
        return ("takes no cached block (the allocator cudaMallocs a new segment)"
                if addr is None else f"takes the cached {format_size(size)} block at 0x{addr:x}")
    if role == "should_split":
        block, size = args[0], args[1]
        return (f"cuts the {format_size(block)} block into the {format_size(size)} handed out "
                f"and a free {format_size(block - size)} block" if taken else
                f"hands out the whole {format_size(block)} block, {format_size(block - size)} "
                f"more than the {format_size(size)} asked for")
    addr, size, absorbed = taken
    what = " and ".join({"before": "the free block before it",
                         "after": "the free block after it"}[n] for n in absorbed)
    return (f"leaves one free block of {format_size(size)} at 0x{addr:x} (the freed block"
            f"{' with ' + what if what else ' alone'})")


def replay_check(answer, ref, rng, role: str, name: str, hint: str) -> None:
    """Replay :func:`core_traces` through labkit's CachingAllocator with labkit's rules and
    ask the answer each question the allocator asked its ``role`` rule, in order.

    The replay is recorded on labkit's side (``ref.derive(R.rule_calls, ...)``: every call
    of the rule, with the event during which it was made and labkit's answer), so no rule
    of labkit's runs here; each question goes to the answer as plain data
    (``answer(*args)``, one call per malloc or free, only the learner's function watched).
    The questions up to the first answer that differs are exactly those a replay with the
    learner's rule inside the allocator would ask (the rest of the allocator is the same),
    so that answer is where the two allocators would first hold different blocks (with
    expandable segments, where the allocator moves best fit's block along one more rule,
    no later); the message shows the question and the blocks each answer leaves."""
    for what, events, options in core_traces(rng):
        want = ref.derive(R.rule_calls, role, events, options)
        for event, args, expected in want["calls"]:
            got = answer(*copy.deepcopy(args))
            head = (f"replaying {what} with your {name} inside labkit's CachingAllocator: at "
                    f"event {event} ({_event(events, event)})")
            theirs = allocator_takes(role, args, expected)
            try:
                mine = allocator_takes(role, args, got)
            except C.CoreError as exc:
                raise Wrong(f"{head} the allocator refuses your answer: CoreError: "
                            f"{exc}") from None
            if mine == theirs:
                continue
            raise Wrong(f"{head} the allocator asked {_question(role, name, args)}: yours "
                        f"{_outcome(role, args, mine)}; labkit's "
                        f"{_outcome(role, args, theirs)}. {hint}")



# ---- 6.6 best fit: the cases and the hints ------------------------------------------

def _free_list(rng, n: int, size: int) -> list[tuple[int, int]]:
    """``n`` free blocks in address order, sizes around ``size`` (some equal, some below)."""
    sizes = [max(512, int(size * 2 ** rng.uniform(-1, 1.5)) // 512 * 512) for _ in range(n)]
    if n > 2:
        sizes[int(rng.integers(n))] = sizes[int(rng.integers(n))]      # a tie, sometimes
    addrs = np.sort(rng.choice(4096, n, replace=False)) * (64 * MiB) + (1 << 32)
    return [(int(a), s) for a, s in zip(addrs, sizes)]


def best_fit_cases(rng) -> list[tuple]:
    """(free, size, max_split_size, rounding): the walkthrough's 30 MiB and 17 MiB blocks,
    ties, no fit, the oversize rules, and free lists drawn from ``rng``."""
    a, b, c = 1 << 32, (1 << 32) + 64 * MiB, (1 << 32) + 128 * MiB
    fixed = [
        ([(a, 30 * MiB), (b, 17 * MiB)], 12 * MiB, NO_LIMIT, K_LARGE_BUFFER),
        ([(a, 4 * MiB), (b, 8 * MiB), (c, 4 * MiB)], 3 * MiB, NO_LIMIT, K_LARGE_BUFFER),
        ([(a, 2 * MiB), (b, 3 * MiB)], 4 * MiB, NO_LIMIT, K_LARGE_BUFFER),
        ([], 512, NO_LIMIT, K_LARGE_BUFFER),
        ([(a, 100 * MiB)], 30 * MiB, 64 * MiB, K_LARGE_BUFFER),
        ([(a, 100 * MiB)], 90 * MiB, 64 * MiB, K_LARGE_BUFFER),
        ([(a, 100 * MiB)], 70 * MiB, 64 * MiB, K_LARGE_BUFFER),
        ([(a, 100 * MiB), (b, 40 * MiB)], 30 * MiB, 64 * MiB, K_LARGE_BUFFER),
        ([(a, 100 * MiB)], 70 * MiB, 64 * MiB, 40 * MiB),
    ]
    drawn = []
    for _ in range(6):
        size = int(2 ** rng.uniform(9, 27)) // 512 * 512 + 512
        ms = NO_LIMIT if rng.random() < 0.5 else int(rng.integers(20, 96)) * MiB
        drawn.append((_free_list(rng, int(rng.integers(1, 10)), size), size, ms,
                      K_LARGE_BUFFER))
    return fixed + drawn


def _fits(free, size):
    return [(addr, s) for addr, s in free if s >= size]


def best_fit_hint(got, want, free, size) -> str:
    fits = _fits(free, size)
    if not fits:
        return "no block is big enough: return None (the allocator then cudaMallocs)."
    smallest = min(s for _, s in fits)
    ties = [addr for addr, s in fits if s == smallest]
    if want is None and got in ties:
        return ("that block is oversize: a request below max_split_size never takes a block "
                "of max_split_size or more, and a request of max_split_size or more only "
                "one smaller than size + rounding; return None.")
    if got is None:
        return ("a block fits and it is not oversize: take the smallest one that fits "
                "(oversize: a request below max_split_size with a block of max_split_size "
                "or more, or a request of max_split_size or more with a block of "
                "size + rounding or more).")
    if got == fits[0][0] and fits[0][1] != smallest:
        return ("that is first fit, the lowest address that fits; best fit takes the "
                "smallest block that fits (get_free_block's lower_bound on size).")
    if got == max(fits, key=lambda f: f[1])[0]:
        return "that is the largest block; best fit takes the smallest one that fits."
    if got in ties:
        return ("among equal sizes take the lowest address (the free set orders by size, "
                "then by address).")
    return "best fit: the smallest free block with block size >= size, lowest address first."


# ---- 6.3 split: the cases ----------------------------------------------------------------

SPLIT_CASES = [
    (2 * MiB, 512, True, NO_LIMIT), (2 * MiB, 2 * MiB - 512, True, NO_LIMIT),
    (2 * MiB, 2 * MiB - 1024, True, NO_LIMIT), (2 * MiB, 2 * MiB, True, NO_LIMIT),
    (20 * MiB, 19 * MiB, False, NO_LIMIT), (20 * MiB, 19 * MiB - 512, False, NO_LIMIT),
    (20 * MiB, 3 * MiB, False, NO_LIMIT), (100 * MiB, 50 * MiB, False, 64 * MiB),
    (100 * MiB, 70 * MiB, False, 64 * MiB), (100 * MiB, 64 * MiB, False, 64 * MiB),
    (100 * MiB, 64 * MiB - 512, False, 64 * MiB), (22 * MiB, 20 * MiB + 512, False, NO_LIMIT),
]


def split_cases(rng) -> list[tuple]:
    out = []
    for _ in range(4):
        small = bool(rng.random() < 0.5)
        block = int(rng.integers(2, 4096)) * 512 if small else int(rng.integers(4, 400)) * MiB
        rest = int(rng.choice([0, 512, 1024, MiB - 512, MiB, MiB + 512]))
        size = max(512, block - rest)
        ms = NO_LIMIT if rng.random() < 0.5 else int(rng.integers(20, 200)) * MiB
        out.append((block, size, small, ms))
    return out



# ---- 6.7 merge on free: the cases and the hints -------------------------------------

def merge_cases(rng) -> list[tuple]:
    """(block, before, after): free, allocated and missing neighbours, and neighbours of
    another segment placed right next to it; offsets drawn from ``rng``."""
    base = (1 << 32) + int(rng.integers(1, 64)) * 2 * MiB
    seg, other = base, base - 2 * MiB
    k = int(rng.integers(1, 8)) * 512

    def blk(addr, size, segment, free=None):
        d = {"addr": addr, "size": size, "segment": segment}
        if free is not None:
            d["free"] = free
        return d
    mid = blk(seg + 4 * k, 2 * k, seg)
    left, right = blk(seg, 4 * k, seg, True), blk(seg + 6 * k, 3 * k, seg, True)
    first = blk(seg, 3 * k, seg)
    tail = blk(other + 2 * MiB - 5 * k, 5 * k, other, True)      # ends where `first` begins
    return [
        (mid, None, None), (mid, left, None), (mid, None, right), (mid, left, right),
        (mid, dict(left, free=False), right), (mid, left, dict(right, free=False)),
        (mid, dict(left, free=False), dict(right, free=False)),
        (first, tail, blk(seg + 3 * k, 7 * k, seg, True)), (first, tail, None),
        (blk(seg + 2 * MiB - 2 * k, 2 * k, seg), blk(seg, 2 * MiB - 2 * k, seg, True),
         blk(seg + 2 * MiB, 4 * k, seg + 2 * MiB, True)),
    ]


def merge_hint(got, block, before, after) -> str:
    def can(nb):
        return nb is not None and nb["free"] and nb["segment"] == block["segment"]
    crossed = [nb for nb in (before, after) if nb is not None and nb["segment"]
               != block["segment"] and got is not None and _covers(got, nb)]
    if crossed:
        return ("that merges across segments: the neighbour is in another segment "
                "(cudaMalloc placed it right next to this one). Blocks merge only with "
                "their own segment's prev/next, or no segment could be released alone.")
    taken = [nb for nb in (before, after) if nb is not None and not nb["free"]
             and got is not None and _covers(got, nb)]
    if taken:
        return "an allocated neighbour is in use: merge only with free ones."
    if got is not None and tuple(got) == (block["addr"], block["size"]) and \
            (can(before) or can(after)):
        return ("a free neighbour of the same segment, before or after the block, must be "
                "absorbed, or the freed memory stays cut into pieces no larger request can "
                "use.")
    return "absorb each free neighbour of the same segment, before and after."


def _covers(got, nb) -> bool:
    try:
        addr, size = got
    except (TypeError, ValueError):
        return False
    return addr <= nb["addr"] and nb["addr"] + nb["size"] <= addr + size
