"""The pipeline-schedule simulator's invariants on schedules drawn by Hypothesis: each
micro-batch's forward before its backward on every stage (and the data dependencies between
stages), a stage doing one thing at a time, every pass run once and the total work
conserved, and GPipe's and 1F1B's bubble the closed form of Narayanan et al. (SC'21, §2.2):
bubble / ideal = (p − 1)/m, so the idle share of device-time is (p − 1)/(m + p − 1)."""
import pytest
from hypothesis import given, settings, strategies as st

from labkit.parallel.pipeline import pipeline_schedule

times = st.floats(0.1, 5.0)


@st.composite
def schedules(draw):
    kind = draw(st.sampled_from(["gpipe", "1f1b", "interleaved"]))
    p = draw(st.integers(1, 6))
    if kind == "interleaved":
        v, m = draw(st.integers(2, 3)), p * draw(st.integers(1, 3))
    else:
        v, m = 1, draw(st.integers(1, 12))
    return pipeline_schedule(kind, p, m, v, draw(times), draw(times))


SET = settings(max_examples=60, deadline=None)


@SET
@given(s=schedules())
def test_forward_before_backward_and_each_stage_one_task_at_a_time(s):
    p, v = s.stages, s.chunks
    tasks = {(t.kind, t.chunk * p + t.stage, t.microbatch): t for t in s.tasks}
    for (kind, vs, j), t in tasks.items():
        if kind == "B":         # after its own forward, and after the next stage's backward
            assert t.start >= tasks[("F", vs, j)].end
            if vs < p * v - 1:
                assert t.start >= tasks[("B", vs + 1, j)].end
        elif vs > 0:            # after the previous stage's forward
            assert t.start >= tasks[("F", vs - 1, j)].end
    for stage in range(p):
        run = s.stage_tasks(stage)
        assert all(b.start >= a.end for a, b in zip(run, run[1:]))
        assert all(t.end > t.start for t in run)


@SET
@given(s=schedules())
def test_every_pass_runs_once_and_the_work_is_conserved(s):
    p, m, v = s.stages, s.microbatches, s.chunks
    keys = [(t.kind, t.stage, t.chunk, t.microbatch) for t in s.tasks]
    assert len(keys) == len(set(keys)) == 2 * p * m * v
    assert set(keys) == {(k, st_, c, j) for k in "FB" for st_ in range(p) for c in range(v)
                         for j in range(m)}
    busy = sum(t.end - t.start for t in s.tasks)
    assert busy == pytest.approx(p * m * (s.t_forward + s.t_backward), rel=1e-12)
    assert s.makespan == pytest.approx(max(t.end for t in s.tasks), rel=1e-12)
    assert s.makespan >= m * (s.t_forward + s.t_backward) * (1 - 1e-12)   # a stage's own work


@SET
@given(s=schedules().filter(lambda s: s.kind != "interleaved"))
def test_gpipe_and_1f1b_bubbles_are_the_closed_form(s):
    p, m = s.stages, s.microbatches
    assert s.bubble_fraction == pytest.approx((p - 1) / m, rel=1e-9, abs=1e-12)
    assert s.idle_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-9, abs=1e-12)
    assert s.makespan == pytest.approx((m + p - 1) * (s.t_forward + s.t_backward), rel=1e-9)
