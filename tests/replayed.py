"""A check run as in the student release, without building one (``tests/test_release.py``
builds the whole release): ``ref`` replays a recording of labkit's reference on learning
mode's inputs, and the labkit functions named in ``cut`` (references, as the release cuts
them) raise when anything calls them."""
from labkit.check import core, handles


class Cut(Exception):
    """A reference the student release does not ship was called."""


def _cut(name):
    def not_shipped(*args, **kwargs):
        raise Cut(f"{name} is not in the student release")
    return not_shipped


def replayed(exercise_id: str, answers, monkeypatch, cut=()) -> list[core.Verdict]:
    """The verdicts on each of ``answers`` with a replaying ``ref`` (labkit's reference
    recorded first) and every ``(owner, name)`` of ``cut`` (an attribute of a module or a
    key of a dict) replaced by a function that raises :class:`Cut` (the verdict is then an
    error naming it)."""
    ex = core.get(exercise_id)
    rec = handles.Recording(ex.reference, None, "labkit's reference")
    verdict = core.run_checker(ex, handles.Live(ex.reference), rec, core.exercise_rng(ex.id))
    assert verdict.passed, verdict.message
    for owner, name in cut:
        if isinstance(owner, dict):
            monkeypatch.setitem(owner, name, _cut(name))
        else:
            monkeypatch.setattr(owner, name, _cut(name))
    calls = rec.transcript.to_json()
    return [core.run_checker(ex, handles.Live(answer, ex.refused()),
                             handles.Replaying(handles.Transcript.from_json(calls),
                                               "labkit's reference"),
                             core.exercise_rng(ex.id)) for answer in answers]
