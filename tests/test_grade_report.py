"""The reports from grades (no kernels): the grouped table with points and subtotals,
feedback only where there is something to say, pass rates, per-learner feedback files, the
LMS exports, and grades.html (table, bar chart, histogram) rendered in a real Chromium."""
import base64
import csv
import re

import pytest

from grading_runs import SHOTS, chromium_page
from labkit.grade.authoring import check_cell, code, notebook
from labkit.grade.config import from_dict
from labkit.grade.report import (feedback_lines, from_grades, header, learner_markdown,
                                 pass_rates, render_html, rows, write_class, write_feedback,
                                 write_lms)
from labkit.grade.runner import Assignment, NotebookGrade

CONFIG = from_dict({"points": {"1.2": 3}, "assignment": [
    {"name": "first", "chapters": [1]}, {"name": "second", "notebooks": ["02_b"]}]})


def assignment():
    a = notebook([code("x = 1"), check_cell("1.1", "x"), check_cell("1.2", "x")])
    b = notebook([code("y = 1"), check_cell("2.1", "y")])
    return Assignment({"01_a.ipynb": a, "02_b.ipynb": b},
                      {"01_a.ipynb": ["1.1", "1.2"], "02_b.ipynb": ["2.1"]})


def grades():
    out = [
        NotebookGrade("ada", "01_a.ipynb", {"1.1": "pass", "1.2": "pass"},
                      {"1.1": "correct", "1.2": "correct"}, student_id="S1"),
        NotebookGrade("ada", "02_b.ipynb", {"2.1": "fail"}, {"2.1": "off by one. Hint: <n>"},
                      student_id="S1", tracebacks={"2.1": "ValueError: <bad>"}),
        NotebookGrade("bob", "01_a.ipynb", {"1.1": "pass", "1.2": "missing"},
                      {"1.1": "correct", "1.2": "not answered yet"}, student_id="S2"),
        NotebookGrade("bob", "02_b.ipynb", {"2.1": "missing"}, {},
                      ["02_b.ipynb: notebook not submitted"], submitted=False),
        NotebookGrade("cy", "01_a.ipynb", {"1.1": "error", "1.2": "error"},
                      {"1.1": "the check never ran", "1.2": "the check never ran"},
                      ["01_a.ipynb: the kernel died in cell-3"]),
        NotebookGrade("cy", "02_b.ipynb", {"2.1": "pass"}, {"2.1": "correct"},
                      submitted_at="2026-01-03T00:00:00+00:00"),
    ]
    for g in out:
        g.apply_points(CONFIG)
    return out


def view():
    return from_grades(grades(), assignment(), config=CONFIG, notes=["ignored stray.txt"])


def test_table_has_points_subtotals_and_groups():
    v = view()
    assert header(v) == ["learner", "student_id", "1.1", "1.2", "01_a points", "2.1",
                         "02_b points", "written points", "total", "max", "notes"]
    got = {r[0]: r[:10] for r in rows(v)}
    assert got["ada"] == ["ada", "S1", "pass", "pass", "4", "fail", "0", "0", "4", "5"]
    assert got["bob"][2:7] == ["pass", "missing", "1", "missing", "0"]
    assert got["cy"][8] == "1"
    assert pass_rates(v) == {"1.1": 2 / 3, "1.2": 1 / 3, "2.1": 1 / 3}
    assert v.assignments == {"first": ["01_a.ipynb"], "second": ["02_b.ipynb"]}


def test_late_policy_scales_the_points():
    late = from_dict({"late": {"policy": "per_day", "penalty": 0.5, "max_days": 1},
                      "assignment": [{"name": "b", "chapters": [2],
                                      "due": "2026-01-01T00:00:00Z"}]})
    g = NotebookGrade("cy", "02_b.ipynb", {"2.1": "pass"}, submitted_at="2026-01-01T12:00:00+00:00")
    g.apply_points(late, late.due_of("02_b.ipynb"))
    assert (g.late_days, g.late_factor, g.points["2.1"]) == (1, 0.5, 0.5)
    g = NotebookGrade("cy", "02_b.ipynb", {"2.1": "pass"}, submitted_at="2026-01-03T00:00:00+00:00")
    g.apply_points(late, late.due_of("02_b.ipynb"))
    assert g.points["2.1"] == 0.0 and "2 days late" in g.notes[-1]
    with pytest.raises(ValueError, match="late.policy"):
        from_dict({"late": {"policy": "sometimes"}})
    with pytest.raises(ValueError, match="points.x"):
        from_dict({"points": {"x": 1}})


def test_feedback_lists_only_what_has_something_to_say():
    v = view()
    assert feedback_lines(v.learners["ada"], v) == ["2.1: off by one. Hint: <n>"]
    assert feedback_lines(v.learners["bob"], v) == ["01_a.ipynb: not answered yet: 1.2",
                                                    "02_b.ipynb: not submitted"]
    text = learner_markdown(v.learners["ada"], v)
    assert "4 of 5 points" in text and "ValueError: <bad>" in text and "bob" not in text


def test_write_reports_feedback_and_lms(tmp_path):
    v = view()
    csv_path, md_path, html_path = write_class(v, tmp_path / "g")
    page = html_path.read_text()
    assert "<td>ada</td>" in page and "off by one. Hint: &lt;n&gt;" in page   # escaped
    assert 'colspan="4">01_a.ipynb' in page and "<abbr title=" in page
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(pngs) == 2 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "ignored stray.txt" in md_path.read_text() and "ignored stray.txt" in page
    with pytest.raises(ValueError, match="--out must be a folder"):
        write_class(v, csv_path)
    files = write_feedback(v, tmp_path / "fb")
    assert sorted(p.name for p in files) == ["ada.html", "ada.md", "bob.html", "bob.md",
                                             "cy.html", "cy.md"]
    plain, canvas, moodle = write_lms(v, tmp_path / "g")
    lms = list(csv.DictReader(plain.open()))
    assert lms[0] == {"student_id": "S1", "learner": "ada", "first": "4", "second": "0",
                      "total": "4"}
    c = list(csv.reader(canvas.open()))
    assert c[1] == ["Points Possible", "", "", "", "", "4", "1"] and len(c) == 4  # cy: no id
    m = list(csv.reader(moodle.open()))
    assert m[0] == ["ID number", "Email address", "first", "second"]


def test_empty_rows_render():
    page = render_html(from_grades([], assignment()))
    assert "0 learners" in page and page.count("data:image/png;base64,") == 2


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_grades_html_renders_in_chromium(tmp_path, record_property):
    _, _, html_path = write_class(view(), tmp_path)
    shot = SHOTS / "grades_html.png"
    with chromium_page({"width": 1100, "height": 900}) as page:
        page.goto(html_path.as_uri())
        page.wait_for_function(
            "() => [...document.images].length === 2 && "
            "[...document.images].every(i => i.complete && i.naturalWidth > 0)",
            timeout=30_000)
        n_rows = page.locator("#grades tbody tr").count()
        sizes = page.evaluate("() => [...document.images].map(i => [i.id, i.naturalWidth])")
        page.screenshot(path=str(shot), full_page=True)
    record_property("screenshot", str(shot))
    print(f"\nscreenshot: {shot}")
    assert n_rows == 3
    assert [name for name, _ in sizes] == ["pass-rates", "scores"]
    assert all(width > 200 for _, width in sizes)
