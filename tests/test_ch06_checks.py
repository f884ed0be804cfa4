"""Chapter 06 checkers: a right answer written here or taken from the chapter's solution,
independently of labkit's, passes; a missing one is missing; each named wrong answer and
shortcut fails with its hint."""
import pytest
import torch
from torch.utils.checkpoint import checkpoint

import labkit.check.ch06 as ch
import labkit.check.ch06_allocator as A
from labkit.check.core import evaluate, stub
from labkit.memory import core as C
from labkit.memory import core_replay as R
from labkit.memory.constants import MiB
from mutants import mutant
from replayed import replayed
from solution_answers import solution_answer


# ---- right answers, written for this test ------------------------------------------------

def model_state(n, optimizer):
    return n * {"sgd": 8, "momentum": 12, "adam": 16}[optimizer]


def segment(n):
    r = 512 if n <= 512 else n + (-n) % 512
    if r <= MiB:
        return r, "small", 2 * MiB
    return r, "large", 20 * MiB if r < 10 * MiB else r + (-r) % (2 * MiB)


def best_fit(free, size, max_split, rounding):
    fits = sorted((s, a) for a, s in free if s >= size)
    if not fits:
        return None
    s, a = fits[0]
    oversize = s >= max_split if size < max_split else s >= size + rounding
    return None if oversize else a


def split(block, size, small, max_split):
    rest = block - size
    if small:
        return rest >= 512
    return size < max_split and rest > MiB


def merge(block, before, after):
    lo, hi = block["addr"], block["addr"] + block["size"]
    for nb in (before, after):
        if nb and nb["free"] and nb["segment"] == block["segment"]:
            lo, hi = min(lo, nb["addr"]), max(hi, nb["addr"] + nb["size"])
    return lo, hi - lo


saved = solution_answer("06", "6.4")      # the chapter's saved_storages: a pack hook


def block_bytes(s, b, h, a):
    return 36 * s * b * h + 6 * a * s * s * b + 8 * s * b


def layer_bytes(s, b, h, a):
    return 34 * s * b * h + 5 * a * s * s * b


def ckpt(model, x, k):
    layers = list(model)
    per = len(layers) // k
    for i in range(k - 1):
        def run(h, part=layers[i * per:(i + 1) * per]):
            for layer in part:
                h = layer(h)
            return h
        x = checkpoint(run, x, use_reentrant=False)
    for layer in layers[(k - 1) * per:]:
        x = layer(x)
    return x


def kv(events, b, max_len):
    tables, toks, free, pool, out = {}, {}, [], 0, []
    for r, n in events:
        if n == 0:
            free += tables.pop(r)
            toks.pop(r)
        else:
            t = tables.setdefault(r, [])
            toks[r] = toks.get(r, 0) + n
            while len(t) * b < toks[r]:
                if free:
                    t.append(free.pop())
                else:
                    t.append(pool)
                    pool += 1
        used, tok = sum(map(len, tables.values())), sum(toks.values())
        out.append((used, pool, used * b - tok, len(tables) * max_len - tok))
    return out


RIGHT = {"6.1": model_state, "6.2": segment, "6.3": split, "6.4": saved, "6.5": layer_bytes,
         "6.6": best_fit, "6.7": merge, "6.8": block_bytes, "6.9": ckpt, "6.10": kv}


@pytest.mark.parametrize("ex", sorted(RIGHT))
def test_an_independent_right_answer_passes(ex):
    v = evaluate(ex, RIGHT[ex])
    assert v.status == "pass", v.message


@pytest.mark.parametrize("ex", sorted(RIGHT))
def test_missing_answers(ex):
    assert evaluate(ex, None).status == "missing"

    @stub
    def f(*args, **kwargs):
        raise NotImplementedError
    assert evaluate(ex, f).status == "missing"


def test_right_answers_pass_on_other_seeds():
    for seed in (1, 2):
        for ex in ("6.6", "6.7", "6.10"):
            assert evaluate(ex, RIGHT[ex], seed=seed).status == "pass", (ex, seed)


# ---- the allocator's core: the shortcuts the issue names ----------------------------------

def first_fit(free, size, max_split, rounding):
    return next((a for a, s in free if s >= size), None)


def best_fit_no_oversize(free, size, max_split, rounding):
    return best_fit(free, size, 2**64 - 1, rounding)


def best_fit_last_tie(free, size, max_split, rounding):
    fits = sorted(((s, -a) for a, s in free if s >= size))
    return -fits[0][1] if fits else None


def split_small_remainders(block, size, small, max_split):
    return block - size >= 512                  # the small pool's rule for both pools


def split_at_one_mib(block, size, small, max_split):
    return block - size >= 512 if small else size < max_split and block - size >= MiB


def no_merge(block, before, after):
    return block["addr"], block["size"]


def merge_across_segments(block, before, after):
    lo, hi = block["addr"], block["addr"] + block["size"]
    for nb in (before, after):
        if nb and nb["free"]:
            lo, hi = min(lo, nb["addr"]), max(hi, nb["addr"] + nb["size"])
    return lo, hi - lo


def merge_before_only(block, before, after):
    return merge(block, before, None)


def _replayed(ex, wrong, hint, monkeypatch):
    """Skip the unit cases (as if the wrong rule passed them): the replay must catch it."""
    monkeypatch.setattr(A, {"6.6": "best_fit_cases", "6.3": "split_cases",
                            "6.7": "merge_cases"}[ex], lambda rng: [])
    if ex == "6.3":
        monkeypatch.setattr(A, "SPLIT_CASES", [])
    v = evaluate(ex, wrong)
    assert v.status == "fail" and "inside labkit's CachingAllocator" in v.message, v.message
    assert hint in v.message, v.message


@pytest.mark.parametrize("ex, wrong, hint", [
    ("6.6", first_fit, "smallest cached free block"),
    ("6.6", best_fit_no_oversize, "oversize"),
    ("6.3", split_small_remainders, "at least 512 B"),
    ("6.7", no_merge, "absorbs each free neighbour"),
    ("6.7", merge_across_segments, "blocks of two segments never merge"),
])
def test_the_replay_alone_catches_each_shortcut(ex, wrong, hint, monkeypatch):
    _replayed(ex, wrong, hint, monkeypatch)


CORE_CUT = [(C, "best_fit_block"), (C, "split_rule"), (C, "merge_free_block"),
            (C.LABKIT_RULES, "best_fit"), (C.LABKIT_RULES, "should_split"),
            (C.LABKIT_RULES, "merge")]


@pytest.mark.parametrize("ex, right, wrong, hint", [
    ("6.6", best_fit, first_fit, "smallest cached free block"),
    ("6.6", best_fit, best_fit_no_oversize, "oversize"),
    ("6.3", split, split_small_remainders, "at least 512 B"),
    ("6.7", merge, no_merge, "absorbs each free neighbour"),
    ("6.7", merge, merge_across_segments, "blocks of two segments never merge"),
])
def test_the_replay_runs_no_rule_of_labkits_in_the_checker(ex, right, wrong, hint,
                                                           monkeypatch):
    """As in the student release, which cuts labkit's three rules out: the replay comes
    from labkit's side (recorded), and the unit cases skipped, the replay alone still
    passes the right rule and catches each shortcut."""
    monkeypatch.setattr(A, {"6.6": "best_fit_cases", "6.3": "split_cases",
                            "6.7": "merge_cases"}[ex], lambda rng: [])
    monkeypatch.setattr(A, "SPLIT_CASES", [])
    good, bad = replayed(ex, [right, wrong], monkeypatch, CORE_CUT)
    assert good.status == "pass", good.message
    assert bad.status == "fail" and "inside labkit's CachingAllocator" in bad.message
    assert hint in bad.message, bad.message


def _first_wrong_answer(role, rule, events, options):
    """The first event at which ``rule`` answers one of labkit's recorded questions
    differently (what replay_check finds), or None."""
    for event, args, want in R.rule_calls(C.LABKIT_RULES[role], role, events, options)["calls"]:
        try:
            if A.allocator_takes(role, args, rule(*args)) != \
                    A.allocator_takes(role, args, want):
                return event
        except C.CoreError:
            return event
    return None


@pytest.mark.parametrize("role, rule", [
    ("best_fit", first_fit), ("best_fit", best_fit_no_oversize),
    ("best_fit", best_fit_last_tie), ("should_split", split_small_remainders),
    ("should_split", lambda b, s, small, ms: not split(b, s, small, ms)),
    ("merge", no_merge), ("merge", merge_before_only), ("merge", merge_across_segments),
])
def test_decision_by_decision_finds_where_a_replay_with_the_rule_parts_ways(role, rule):
    """Asking the rule labkit's recorded questions finds the event after which the
    allocator with the rule inside first holds other blocks (or stops): as strong as
    replaying the rule inside the allocator, on every trace the checks replay. With
    expandable segments the allocator moves best fit's block along one more rule of
    PyTorch's, which can make a wrong answer harmless for a while: the questions catch it
    there no later than the replay."""
    import numpy as np
    found = 0
    for what, events, options in A.core_traces(np.random.default_rng(3)):
        mine = R.replay_summary(rule, role, events, options)
        want = R.replay_summary(C.LABKIT_RULES[role], role, events, options)
        replay, asked = R.first_difference(mine, want), _first_wrong_answer(role, rule, events, options)
        if options.get("expandable_segments"):
            assert replay is None or asked is not None and asked <= replay, what
        else:
            assert asked == replay, what
        found += replay is not None
    assert found


def test_rule_calls_records_each_question_in_event_order():
    events = [("alloc", 0, 3 * MiB), ("alloc", 1, 100), ("free", 0, 0), ("alloc", 2, MiB + 1),
              ("free", 1, 0), ("free", 2, 0)]
    got = R.rule_calls(C.LABKIT_RULES["merge"], "merge", events)
    assert [e for e, _, _ in got["calls"]] == [2, 4, 5] and got["error"] is None
    block, before, after = got["calls"][0][1]
    assert block["size"] == 3 * MiB and before is None and after["free"] and \
        got["calls"][0][2] == (block["addr"], 20 * MiB)
    splits = R.rule_calls(C.LABKIT_RULES["should_split"], "should_split", events)["calls"]
    assert [(e, a, w) for e, a, w in splits][:2] == [
        (0, [20 * MiB, 3 * MiB, False, C.NO_LIMIT], True),
        (1, [2 * MiB, 512, True, C.NO_LIMIT], True)]
    full = R.rule_calls(C.LABKIT_RULES["merge"], "merge", events[:3] + [("alloc", 2, 30 * MiB)],
                        {"capacity": 22 * MiB})       # 2 MiB stay reserved: 32 MiB > 22
    assert full["error"]["step"] == 3 and "OutOfMemoryError" in full["error"]["message"]
    assert [e for e, _, _ in full["calls"]] == [2]
    with pytest.raises(ValueError, match="role must be one of"):
        R.rule_calls(split, "split", events)


def test_the_recorded_training_step_is_among_the_traces():
    import numpy as np
    names = [what for what, _, _ in A.core_traces(np.random.default_rng(0))]
    assert "the chapter's recorded training step" in names and len(names) == 5
    events = A.recorded_events()
    assert len(events) > 300 and {e[0] for e in events} == {"alloc", "free"}


# ---- the rest ---------------------------------------------------------------------------

def no_checkpoint(model, x, k):
    for layer in model:
        x = layer(x)
    return x


def every_block(model, x, k):
    layers = list(model)
    for i in range(0, len(layers), 2):
        x = checkpoint(lambda h, i=i: layers[i + 1](layers[i](h)), x, use_reentrant=False)
    return x


def no_grad_segments(model, x, k):
    layers = list(model)
    per = len(layers) // k
    with torch.no_grad():
        for layer in layers[:-per]:
            x = layer(x)
    for layer in layers[-per:]:
        x = layer(x)
    return x


def checkpoint_sequential_itself(model, x, k):
    from torch.utils.checkpoint import checkpoint_sequential
    return checkpoint_sequential(model, k, x, use_reentrant=False)


def checkpointing_the_last_segment_too(model, x, k):
    layers = list(model)
    per = len(layers) // k
    for i in range(k):
        part = layers[i * per:(i + 1) * per] if i < k - 1 else layers[i * per:]

        def run(h, part=part):
            for layer in part:
                h = layer(h)
            return h
        x = checkpoint(run, x, use_reentrant=False)
    return x


def test_checkpointing_every_segment_is_also_right():
    assert evaluate("6.9", checkpointing_the_last_segment_too).status == "pass"


def kv_contiguous(events, b, max_len):
    return [(u, p, c, c) for u, p, _, c in kv(events, b, max_len)]


def kv_block_per_append(events, b, max_len):
    tables, toks, out = {}, {}, []
    for r, n in events:
        if n == 0:
            tables.pop(r)
            toks.pop(r)
        else:
            tables[r] = tables.get(r, 0) + -(-n // b)
            toks[r] = toks.get(r, 0) + n
        used, tok = sum(tables.values()), sum(toks.values())
        out.append((used, used, used * b - tok, len(tables) * max_len - tok))
    return out


def kv_floor_plus_one(events, b, max_len):
    toks, out, pool = {}, [], 0
    for r, n in events:
        if n == 0:
            toks.pop(r)
        else:
            toks[r] = toks.get(r, 0) + n
        used = sum(t // b + 1 for t in toks.values())
        pool = max(pool, used)
        tok = sum(toks.values())
        out.append((used, pool, used * b - tok, len(toks) * max_len - tok))
    return out


def kv_no_reuse(events, b, max_len):
    """Right in use and waste, but every block taken is a new one: no free list."""
    created, tables, toks, result = 0, {}, {}, []
    for (u, p, w, c), (r, n) in zip(kv(events, b, max_len), events):
        if n:
            need = -(-(toks.get(r, 0) + n) // b) - tables.get(r, 0)
            created += need
            tables[r] = tables.get(r, 0) + need
            toks[r] = toks.get(r, 0) + n
        else:
            tables.pop(r)
            toks.pop(r)
        result.append((u, created, w, c))
    return result


def test_block_reference_equals_torch_measurement():
    from labkit.memory.measure import transformer_block_saved
    for s, b, h, a in [(7, 2, 40, 5), (12, 1, 24, 3)]:
        assert ch.block_saved_bytes(s, b, h, a) == transformer_block_saved(s, b, h, a).total_bytes


@pytest.mark.parametrize("ex, listed", [
    ("6.2", "labkit.memory.allocator:round_size"), ("6.3", "labkit.memory.allocator:should_split"),
    ("6.1", "labkit.memory.estimator:model_state_bytes"),
    ("6.4", "labkit.memory.measure:saved_tensor_bytes"),
    ("6.9", "torch.utils.checkpoint:checkpoint_sequential"),
])
def test_labkit_functions_that_compute_the_answer_are_listed(ex, listed):
    from labkit.check.core import get
    assert listed in get(ex).answers


# the right counter with one change: every saved tensor counted, tensors keyed by their own
# data pointer (a view not its base's storage), the parameters not left out
saved_every_call = mutant(saved, "found[storage.data_ptr()] = storage.nbytes()",
                          "found[len(found)] = storage.nbytes()")
saved_by_data_ptr = mutant(saved, "found[storage.data_ptr()] = storage.nbytes()",
                           "found[t.data_ptr()] = t.untyped_storage().nbytes()")
saved_with_params = mutant(saved, "skip = {t.untyped_storage().data_ptr() for t in exclude}",
                           "skip = set()")


WRONG = [
    ("6.6", first_fit, "that is first fit"),
    ("6.6", best_fit_no_oversize, "oversize"),
    ("6.6", best_fit_last_tie, "lowest address"),
    ("6.6", lambda free, size, ms, r: max(((s, a) for a, s in free if s >= size),
                                          default=(0, None))[1], "takes the smallest"),
    ("6.3", split_small_remainders, "remainder is > 1 MiB"),
    ("6.3", split_at_one_mib, "(strictly)"),
    ("6.7", no_merge, "must be absorbed"),
    ("6.7", merge_across_segments, "merges across segments"),
    ("6.7", merge_before_only, "before or after"),
    ("6.4", saved_every_call, "you counted every save"),
    ("6.4", saved_by_data_ptr, "not t.data_ptr()"),
    ("6.4", saved_with_params, "leave out the storages"),
    ("6.9", no_checkpoint, "nothing was recomputed"),
    ("6.9", every_block, "k + n/k"),
    ("6.9", no_grad_segments, "gradients"),
    ("6.9", checkpoint_sequential_itself, "checkpoint_sequential"),
    ("6.10", kv_contiguous, "contiguous reservation's waste"),
    ("6.10", kv_block_per_append, "last block is full"),
    ("6.10", kv_floor_plus_one, "not ⌊t/B⌋ + 1"),
    ("6.10", kv_no_reuse, "free list before adding new ones"),
    ("6.8", lambda s, b, h, a: layer_bytes(s, b, h, a), "Korthikanti's GPU count"),
    ("6.8", lambda s, b, h, a: layer_bytes(s, b, h, a) + 8 * s * b, "2 bytes per element"),
    ("6.8", lambda s, b, h, a: 36 * s * b * h + 6 * a * s * s * b, "mean and 1/std"),
    ("6.8", lambda s, b, h, a: 36 * s * b * h + 8 * s * b, "attention scores"),
    ("6.8", lambda s, b, h, a: 2 * block_bytes(s, b, h, a), "bfloat16"),
    ("6.2", lambda n: (512 * (n // 512 + 1), "small" if n <= MiB else "large", segment(n)[2]),
     "not down"),
    ("6.2", lambda n: (segment(n)[0], "small" if segment(n)[0] < MiB else "large", segment(n)[2]),
     "inclusive"),
    ("6.2", lambda n: (segment(n)[0], segment(n)[1], 2 * MiB if segment(n)[0] <= MiB else 20 * MiB),
     "round up to a multiple of 2 MiB"),
    ("6.1", lambda n, o: 8 * n, "parameters + gradients only"),
    ("6.1", lambda n, o: {"sgd": 8, "momentum": 12, "adam": 12}[o] * n, "two states per parameter"),
    ("6.1", lambda n, o: {"sgd": 4, "momentum": 8, "adam": 12}[o] * n, "left out the gradient"),
    ("6.1", lambda n, o: {"sgd": 2, "momentum": 3, "adam": 4}[o] * n, "count bytes"),
    ("6.1", lambda n, o: {"sgd": 4, "momentum": 6, "adam": 8}[o] * n, "or counted 2 bytes"),
    ("6.1", lambda n, o: {"sgd": 8, "momentum": 16, "adam": 24}[o] * n, "Adam 2"),
    ("6.5", lambda s, b, h, a: 34 * s * b * h, "left out the attention scores"),
    ("6.5", lambda s, b, h, a: layer_bytes(s, b, h, a) / 2, "do not halve"),
    ("6.5", lambda s, b, h, a: s * b * h * (34 + 5 * a / h), "not 5a/h"),
    ("6.5", lambda s, b, h, a: s * b * h * 34 + 5 * a * s * s * b / 2, "sbh(34 + 5as/h)"),
]


@pytest.mark.parametrize("ex, wrong, hint", WRONG)
def test_wrong_answers_and_shortcuts_fail_with_their_hint(ex, wrong, hint):
    v = evaluate(ex, wrong)
    assert v.status == "fail" and hint in v.message, v.message
