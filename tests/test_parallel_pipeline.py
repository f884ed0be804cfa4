"""Pipeline schedules: the simulated bubble equals the closed form of Narayanan et al.
(SC'21 §2.2), dependencies hold in every task, stashes match 1F1B's p - s."""
import pytest

from labkit.parallel.pipeline import bubble_formula, peak_stash, pipeline_schedule, stage_order

CASES = [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 64, 1), ("gpipe", 1, 3, 1),
         ("interleaved", 4, 8, 2), ("interleaved", 4, 16, 4), ("interleaved", 8, 64, 4),
         ("interleaved", 2, 4, 3), ("1f1b", 6, 3, 1)]


@pytest.mark.parametrize("kind, p, m, v", CASES)
@pytest.mark.parametrize("tf, tb", [(1.0, 2.0), (1.0, 1.0), (1.3, 2.9)])
def test_bubble_matches_paper(kind, p, m, v, tf, tb):
    s = pipeline_schedule(kind, p, m, v, tf, tb)
    assert s.bubble_fraction == pytest.approx(bubble_formula(kind, p, m, v), rel=1e-9)
    assert s.makespan == pytest.approx((m + (p - 1) / v) * (tf + tb), rel=1e-9)
    assert s.idle_fraction == pytest.approx(s.bubble_fraction / (1 + s.bubble_fraction))
    assert len(s.tasks) == 2 * p * m * v


@pytest.mark.parametrize("kind, p, m, v", CASES)
def test_dependencies_and_no_overlap(kind, p, m, v):
    s = pipeline_schedule(kind, p, m, v)
    end = {(t.kind, t.chunk * p + t.stage, t.microbatch): t for t in s.tasks}
    last = p * v - 1
    for t in s.tasks:
        vs = t.chunk * p + t.stage
        if t.kind == "F" and vs > 0:
            assert t.start >= end[("F", vs - 1, t.microbatch)].end - 1e-12
        if t.kind == "B":
            dep = end[("F", vs, t.microbatch)] if vs == last else end[("B", vs + 1, t.microbatch)]
            assert t.start >= dep.end - 1e-12
    for st in range(p):
        ts = s.stage_tasks(st)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(ts, ts[1:]))


def test_stash_gpipe_m_1f1b_p_minus_s():
    assert pipeline_schedule("gpipe", 4, 8).peak_stash == (8,) * 4
    assert pipeline_schedule("1f1b", 4, 8).peak_stash == (4, 3, 2, 1)
    assert pipeline_schedule("1f1b", 6, 3).peak_stash == (3, 3, 3, 3, 2, 1)   # min(p-s, m)
    s = pipeline_schedule("interleaved", 4, 8, 2)
    # Megatron's warm-up (p-s-1)*2 + (v-1)*p forwards, plus the first steady forward
    assert s.peak_stash == tuple((4 - st - 1) * 2 + 4 + 1 for st in range(4))
    assert s.peak_activations[0] == pytest.approx(11 / 2)


def test_1f1b_order_last_and_first_stage():
    assert stage_order("1f1b", 4, 4, 3) == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0),
                                            ("F", 2, 0), ("B", 2, 0), ("F", 3, 0), ("B", 3, 0)]
    o = pipeline_schedule("1f1b", 4, 6).order(0)
    assert [k for k, _, _ in o] == list("FFFFBFBFBBBB")


def test_1f1b_order_with_fewer_microbatches_than_warmup():
    # m < p - s - 1: the warm-up is cut to m forwards and no steady state follows, so a
    # "p - s - 1 warm-up forwards, then one more" rule would ask for micro-batches that
    # do not exist (stage 0 of p = 6 with m = 2 wants 5 warm-up forwards)
    assert stage_order("1f1b", 6, 2, 0) == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("B", 1, 0)]
    assert stage_order("1f1b", 5, 1, 1) == [("F", 0, 0), ("B", 0, 0)]
    # m = p - s - 1 exactly: all forwards are warm-up, then all backwards
    assert stage_order("1f1b", 5, 3, 1) == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0),
                                            ("B", 0, 0), ("B", 1, 0), ("B", 2, 0)]
    for p, m in ((6, 2), (8, 3), (5, 1)):
        for st in range(p):
            o = pipeline_schedule("1f1b", p, m).order(st)
            assert [(k, j, c) for k, j, c in o] == stage_order("1f1b", p, m, st)
            assert [k for k, _, _ in o].index("B") == min(p - st, m)


@pytest.mark.parametrize("kind, p, m, v", CASES + [
    ("1f1b", 6, 2, 1), ("1f1b", 8, 3, 1), ("gpipe", 5, 2, 1), ("interleaved", 4, 4, 3),
    ("interleaved", 3, 3, 2), ("interleaved", 8, 8, 2)])
def test_peak_stash_closed_form_equals_the_simulation(kind, p, m, v):
    s = pipeline_schedule(kind, p, m, v)
    assert tuple(peak_stash(kind, p, m, st, v) for st in range(p)) == s.peak_stash


@pytest.mark.parametrize("args, word", [
    (("gpipe", 0, 4), "stages"), (("pipedream", 2, 4), "kind"), (("interleaved", 4, 6, 2), "multiple"),
    (("interleaved", 4, 8, 1), "chunks"), (("1f1b", 4, 8, 2), "chunks"), (("gpipe", 2, 0), "microbatches"),
    (("gpipe", 2, 2, 1, 0.0), "t_forward"), (("gpipe", 2, 2, 1, 1.0, -1.0), "t_backward"),
])
def test_bad_arguments_name_the_parameter(args, word):
    with pytest.raises(ValueError, match=word):
        pipeline_schedule(*args)


def test_gantt_plot():
    import matplotlib
    matplotlib.use("Agg")
    from labkit.parallel.mp_plots import plot_schedule
    fig = plot_schedule(pipeline_schedule("interleaved", 4, 8, 2))
    assert len(fig.axes[0].patches) == 2 * 4 * 8 * 2
    assert "bubble" in fig.axes[0].get_title()
    matplotlib.pyplot.close("all")


def test_stage_order_validates():
    with pytest.raises(ValueError, match="stage"):
        stage_order("1f1b", 4, 8, 4)
    with pytest.raises(TypeError, match="microbatches"):
        stage_order("1f1b", 4, "8", 0)


def test_compare_schedules_against_the_papers_closed_forms():
    from labkit.parallel.pipeline import compare_schedules
    c = compare_schedules(4, 8, chunks=2)
    # GPipe and 1F1B: (p-1)/m = 3/8; interleaved (p-1)/(v·m) = 3/16 (SC'21 §2.2)
    assert c.bubble == pytest.approx({"gpipe": 0.375, "1f1b": 0.375, "interleaved": 0.1875})
    assert c.formula == pytest.approx(0.1875)
    # stage 0 stashes m (GPipe), p (1F1B), and (warm-up (p-1)·2 + (v-1)·p + 1) / v chunks
    assert c.stash == {"gpipe": 8.0, "1f1b": 4.0, "interleaved": 5.5}
    assert c.least_stash == "1f1b"
    big = compare_schedules(8, 64, 4)
    assert big.bubble["interleaved"] == pytest.approx(7 / 256)
    assert big.bubble["gpipe"] == pytest.approx(7 / 64)
    with pytest.raises(ValueError, match="microbatches"):
        compare_schedules(4, 6, 2)
