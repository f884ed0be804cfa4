"""Chapter 11's checkers accept the references and independent right answers, and reject
missing and plausible wrong answers: the backfill pass inside the simulator (11.1, 11.6),
the atomic save under a simulated kill (11.7) and the resume after a real one (11.8)."""
import math
import os
import shutil
import tempfile

import pytest
import torch

from labkit.check import FAIL, MISSING, PASS, evaluate, get
from labkit.check import ch11
from labkit.cluster.stragglers import harmonic


@pytest.mark.parametrize("ex", ["11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7"])
def test_reference_passes_and_missing_is_missing(ex):
    e = get(ex)
    assert evaluate(ex, e.reference, refuse=False).status == PASS
    assert evaluate(ex, e.reference).status == FAIL            # labkit's own is refused
    assert evaluate(ex, None).status == MISSING


# ---- 11.1 --------------------------------------------------------------------------------

def _can_backfill(now, free, running, head, g, est):
    """Written independently: walk the distinct end times, adding every job that ends at
    each, until the head fits."""
    if g > free:
        return False
    shadow, avail = _shadow(now, free, running, head)
    return now + est <= shadow or g <= avail - head


def test_11_1_an_independent_answer_passes_on_every_seed():
    for seed in (None, 1, 2, 3):
        assert evaluate("11.1", _can_backfill, seed=seed).status == PASS


def _fits_now(now, free, running, head, g, est):
    return g <= free




def _shadow(now, free, running, head):
    """(shadow time, GPUs free then)."""
    avail, shadow = free, now
    for t in sorted({e for e, _ in running}):
        if avail >= head:
            break
        avail += sum(x for e, x in running if e == t)
        shadow = t
    return shadow, avail


@pytest.mark.parametrize("wrong, hint", [
    (_fits_now, "Fitting now is not enough"),
    (lambda *a: 1, "True or False"),
    (ch11._can_backfill_first_end, "same time give their GPUs back together"),
    (lambda now, free, running, head, g, est:
     g <= free and now + est <= _shadow(now, free, running, head)[0], "extra"),
])
def test_11_1_rejects(wrong, hint):
    v = evaluate("11.1", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_11_1_the_issue_22_cases():
    assert ch11.can_backfill(0, 2, [(10, 2), (10, 2)], 4, 2, 20) is True
    assert ch11.can_backfill(0, 1, [(5, 1), (5, 1), (9, 4)], 2, 1, 50) is True
    assert ch11._can_backfill_first_end(0, 2, [(10, 2), (10, 2)], 4, 2, 20) is False


# ---- 11.6: the backfill pass inside the simulator ----------------------------------------

def _my_backfill(now, queue, running, free):
    """EASY written independently: the shadow from the distinct end times, the reservation
    as a copy of the free GPUs."""
    head = queue[0]
    at_shadow = free.copy()
    shadow = now
    for t in sorted({r.end for r in running}):
        if at_shadow.fits(head.gpus):
            break
        for r in running:
            if r.end == t:
                at_shadow.give(r.alloc)
        shadow = t
    out = []
    for job in queue[1:]:
        alloc = free.place(job.gpus)
        if alloc is None:
            continue
        if now + job.estimate > shadow:
            trial = at_shadow.copy()
            trial.take(alloc)
            if not trial.fits(head.gpus):
                continue
            at_shadow = trial
        free.take(alloc)
        out.append(job.job)
    return out


def test_11_6_an_independent_pass_passes_on_every_seed():
    for seed in (None, 5, 6, 7):
        assert evaluate("11.6", _my_backfill, seed=seed).status == PASS


@pytest.mark.parametrize("kw, hint", [
    (dict(ties=False), "give their GPUs back together"),
    (dict(extra=False), "'extra' GPUs"),
    (dict(accumulate=False), "uses up extra GPUs"),
    (dict(scan="next"), "right behind the head"),
    (dict(scan="stop"), "stopped at the first job"),
    (dict(strict=True), "exactly at the shadow time"),
])
def test_11_6_named_shortcuts_fail_with_their_hint(kw, hint):
    # the shortcut models reuse labkit's scheduler.reservation: judged without refusal
    v = evaluate("11.6", ch11.backfill_variant(**kw), refuse=False)
    assert v.status == FAIL and hint in v.message, v.message


def _greedy(now, queue, running, free):
    """Every job that fits now starts: no reservation at all."""
    out = []
    for job in queue[1:]:
        alloc = free.place(job.gpus)
        if alloc is not None:
            free.take(alloc)
            out.append(job.job)
    return out


def test_11_6_other_mistakes():
    assert evaluate("11.6", lambda now, queue, running, free: []).status == FAIL
    assert evaluate("11.6", _greedy).status == FAIL
    v = evaluate("11.6", lambda now, queue, running, free: [queue[0].job])
    assert v.status == "error" and "behind the head" in v.message, v.message
    # deciding on a copy and never taking from `free`: two jobs land on the same GPUs
    v = evaluate("11.6", lambda now, queue, running, free: _greedy(now, queue, running,
                                                                   free.copy()) * 2)
    assert v.status == "error", v.message


def test_11_6_calling_labkits_reservation_is_refused():
    v = evaluate("11.6", ch11.backfill_variant())
    assert v.status == FAIL and "scheduler.reservation" in v.message, v.message


def test_11_6_the_issue_22_case_starts_c_at_two():
    from labkit.cluster.scheduler import backfill_schedule
    rows = [(0, 2, 10, 10), (0, 2, 10, 10), (1, 4, 5, 5), (2, 2, 20, 20)]
    assert backfill_schedule(ch11.easy_backfill, rows, 1, 6) == [0, 0, 10, 2]
    assert backfill_schedule(ch11.backfill_variant(ties=False), rows, 1, 6) == [0, 0, 10, 10]


# ---- 11.7: the atomic save -----------------------------------------------------------------

def _atomic(state, path):
    """Written independently: NamedTemporaryFile next to path, fdatasync, Path.replace."""
    from pathlib import Path
    path = Path(path)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
        torch.save(state, f)
        f.flush()
        os.fdatasync(f.fileno())
    Path(f.name).replace(path)
    fd = os.open(path.parent, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


from os import fsync as _fsync, replace as _replace     # noqa: E402  (imported by name)


def _atomic_by_name(state, path):
    tmp = f"{path}.part"
    with open(tmp, "wb") as f:
        f.write(b"")
        torch.save(state, f)
        f.flush()
        _fsync(f.fileno())
    _replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    _fsync(fd)
    os.close(fd)


def _variant(*, in_place=False, fsync=True, flush=True, dirsync=True, other_dir=False,
             copy=False, swallow=False):
    def save(state, path):
        if in_place:
            torch.save(state, path)
            return
        directory = tempfile.gettempdir() if other_dir else os.path.dirname(path)
        fd, tmp = tempfile.mkstemp(dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(state, f)
                if flush:
                    f.flush()
                if fsync:
                    os.fsync(f.fileno())
        except BaseException:
            if not swallow:
                raise
            return
        (shutil.copyfile if copy else os.replace)(tmp, path)
        if dirsync:
            dfd = os.open(os.path.dirname(path), os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
    return save


@pytest.mark.parametrize("right", [_atomic, _atomic_by_name, _variant()])
def test_11_7_right_answers_pass(right):
    assert evaluate("11.7", right).status == PASS
    assert evaluate("11.7", right, seed=9).status == PASS


@pytest.mark.parametrize("kw, hint", [
    (dict(in_place=True), "torn file"),
    (dict(fsync=False), "never fsynced"),
    (dict(flush=False), "f.flush() first"),
    (dict(dirsync=False), "fsync the directory"),
    (dict(other_dir=True), "EXDEV"),
    (dict(copy=True), "a copy onto path"),
    (dict(swallow=True), "BaseException"),
])
def test_11_7_shortcuts_fail_with_their_hint(kw, hint):
    v = evaluate("11.7", _variant(**kw))
    assert v.status == FAIL and hint in v.message, v.message


def test_11_7_removing_path_first_leaves_nothing():
    def remove_first(state, path):
        if os.path.exists(path):
            os.remove(path)
        _atomic(state, path)
    v = evaluate("11.7", remove_first)
    assert v.status == FAIL and "no checkpoint at all" in v.message, v.message


# ---- 11.8: resume after a real kill -----------------------------------------------------------

class _Mine:
    """Written independently, through 11.7's save written here; ``drop`` and ``keep_step``
    make the wrong variants below."""
    drop: tuple = ()
    keep_step = True

    def __init__(self, path):
        self.path = path

    def save(self, model, optimizer, step):
        state = {"m": model.state_dict(), "o": optimizer.state_dict(), "s": step,
                 "g": torch.random.get_rng_state()}
        for k in self.drop:
            state.pop(k)
        _atomic(state, self.path)

    def resume(self, model, optimizer):
        if not os.path.exists(self.path):
            return 0
        st = torch.load(self.path, weights_only=True)
        model.load_state_dict(st["m"])
        if "o" in st:
            optimizer.load_state_dict(st["o"])
        if "g" in st:
            torch.random.set_rng_state(st["g"])
        return st["s"] if self.keep_step else 0


def _drop(*keys, step=True):
    return type("Partial", (_Mine,), {"drop": keys, "keep_step": step})


class _InMemory(_Mine):
    """Keeps the checkpoint in a class attribute: survives a 'kill' inside one process,
    not a real one."""
    kept: dict = {}

    def save(self, model, optimizer, step):
        import copy
        _InMemory.kept = copy.deepcopy({"m": model.state_dict(), "o": optimizer.state_dict(),
                                        "s": step, "g": torch.random.get_rng_state()})

    def resume(self, model, optimizer):
        if not _InMemory.kept:
            return 0
        model.load_state_dict(_InMemory.kept["m"])
        optimizer.load_state_dict(_InMemory.kept["o"])
        torch.random.set_rng_state(_InMemory.kept["g"])
        return _InMemory.kept["s"]


class _NoneAtStart(_Mine):
    def resume(self, model, optimizer):
        return super().resume(model, optimizer) or None


@pytest.mark.parametrize("wrong, hint", [
    (_drop("g"), "restore torch's generator"),
    (_drop("o"), "momentum buffer"),
    (_drop(step=False), "save the step and return it"),
    (_NoneAtStart, "return 0"),
    (lambda path: None, "pass the class itself"),
])
def test_11_8_in_process_mistakes_fail_before_any_launch(wrong, hint):
    v = evaluate("11.8", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_11_8_stub_is_missing_and_labkits_class_is_refused():
    class Stub:
        def __init__(self, path):
            self.path = path

        def save(self, model, optimizer, step):
            raise NotImplementedError

        def resume(self, model, optimizer):
            raise NotImplementedError
    assert evaluate("11.8", Stub).status == MISSING
    assert evaluate("11.8", None).status == MISSING
    assert "implementation" in evaluate("11.8", get("11.8").reference).message

    class Sub(get("11.8").reference):
        pass
    assert evaluate("11.8", Sub).status == FAIL


@pytest.mark.slow
def test_11_8_right_answers_pass_under_torchrun_and_memory_does_not():
    assert evaluate("11.8", get("11.8").reference, refuse=False).status == PASS
    assert evaluate("11.8", _Mine, seed=3).status == PASS
    v = evaluate("11.8", _InMemory)          # passes the in-process kill, not a real one
    assert v.status == FAIL and "resume from the checkpoint" in v.message, v.message


# ---- 11.2-11.5: formula checks ---------------------------------------------------------------

def _daly_no_minus(c, m):
    return ch11.daly_interval(c, m) + c if c < 2 * m else m


@pytest.mark.parametrize("wrong, hint", [
    (lambda c, m: math.sqrt(2 * c * m), "Young"),
    (lambda c, m: math.sqrt(c * m), "factor 2"),
    (_daly_no_minus, "− C"),
    (lambda c, m: math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c,
     "simply M"),
])
def test_11_2_rejects(wrong, hint):
    v = evaluate("11.2", wrong, refuse=False)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda L, m: L / 2, "uniform"),
    (lambda L, m: m, "without the condition"),
    (lambda L, m: m - L / math.exp(L / m), "M − L"),
])
def test_11_3_rejects(wrong, hint):
    v = evaluate("11.3", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, b, p, s: b * (1 + (s - 1) * p), "one worker's mean"),
    (lambda n, b, p, s: b * (1 + (s - 1) * min(1.0, n * p)), "union bound"),
    (lambda n, b, p, s: b * s, "only when"),
    (lambda n, b, p, s: b * (1 + (s - 1) * (1 - (1 - p) ** (n - 1))), "E[step]"),
])
def test_11_4_rejects(wrong, hint):
    v = evaluate("11.4", wrong)
    assert v.status == FAIL and hint in v.message, v.message


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, b, base, d: base + d * harmonic(n), "slowest of N"),
    (lambda n, b, base, d: base + d * harmonic(n + b), "slowest of all"),
    (lambda n, b, base, d: base + d * (harmonic(n) - harmonic(b)), "H_m − H_(m−N)"),
    (lambda n, b, base, d: base + d * math.log(n + 1), "H_(N+b) − H_b"),
])
def test_11_5_rejects(wrong, hint):
    v = evaluate("11.5", wrong)
    assert v.status == FAIL and hint in v.message, v.message


def test_the_watch_puts_everything_back():
    import builtins
    import io
    from labkit.cluster import ckpt_lab
    names = {"fsync": os.fsync}
    before = (builtins.open, io.open, os.write, os.fsync, os.replace, os.rename, torch.save)
    with pytest.raises(ckpt_lab.SimulatedKill):
        with ckpt_lab.WatchedIO(kill_after=3, aliases=names) as w:
            assert names["fsync"] is not before[3] and os.fsync is not before[3]
            with open(os.path.join(tempfile.mkdtemp(), "x"), "wb") as f:
                f.write(b"abcdef")
    assert w.written == 3
    assert (builtins.open, io.open, os.write, os.fsync, os.replace, os.rename,
            torch.save) == before and names["fsync"] is before[3]
