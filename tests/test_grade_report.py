"""The reports from grades (no kernels): feedback only where there is something to say, pass
rates, and grades.html (table, bar chart, histogram) rendered in a real Chromium."""
import base64
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from labkit.grade.authoring import check_cell, code, notebook
from labkit.grade.report import feedback, pass_rates, render_html, table, write_reports
from labkit.grade.runner import Assignment, NotebookGrade

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(tempfile.gettempdir()) / "labkit-browser-screenshots"


def assignment():
    a = notebook([code("x = 1"), check_cell("1.1", "x"), check_cell("1.2", "x")])
    b = notebook([code("y = 1"), check_cell("2.1", "y")])
    return Assignment({"01_a.ipynb": a, "02_b.ipynb": b},
                      {"01_a.ipynb": ["1.1", "1.2"], "02_b.ipynb": ["2.1"]})


def grades():
    return [
        NotebookGrade("ada", "01_a.ipynb", {"1.1": "pass", "1.2": "pass"},
                      {"1.1": "correct", "1.2": "correct"}),
        NotebookGrade("ada", "02_b.ipynb", {"2.1": "fail"}, {"2.1": "off by one. Hint: <n>"}),
        NotebookGrade("bob", "01_a.ipynb", {"1.1": "pass", "1.2": "missing"},
                      {"1.1": "correct", "1.2": "not answered yet"}),
        NotebookGrade("bob", "02_b.ipynb", {"2.1": "missing"}, {},
                      ["02_b.ipynb: notebook not submitted"], submitted=False),
        NotebookGrade("cy", "01_a.ipynb", {"1.1": "error", "1.2": "error"},
                      {"1.1": "the check never ran", "1.2": "the check never ran"},
                      ["01_a.ipynb: the kernel crashed or stopped responding"]),
        NotebookGrade("cy", "02_b.ipynb", {"2.1": "pass"}, {"2.1": "correct"}),
    ]


def test_table_scores_and_pass_rates():
    header, rows = table(grades(), assignment())
    assert header == ["learner", "1.1", "1.2", "2.1", "score", "total", "notes"]
    assert [r[:6] for r in rows] == [["ada", "pass", "pass", "fail", "2", "3"],
                                     ["bob", "pass", "missing", "missing", "1", "3"],
                                     ["cy", "error", "error", "pass", "1", "3"]]
    assert pass_rates(grades(), assignment()) == {"1.1": 2 / 3, "1.2": 1 / 3, "2.1": 1 / 3}


def test_feedback_lists_only_what_has_something_to_say():
    assert feedback(grades()) == [
        "ada · 2.1: off by one. Hint: <n>",
        "bob · 01_a.ipynb: not answered yet: 1.2",
        "bob · 02_b.ipynb: not submitted",
        "cy · 1.1: the check never ran",
        "cy · 1.2: the check never ran",
    ]


def test_write_reports_and_html(tmp_path):
    csv_path, md_path, html_path = write_reports(grades(), assignment(), tmp_path / "g",
                                                 ["ignored stray.txt"])
    page = html_path.read_text()
    assert "<td>ada</td>" in page and "off by one. Hint: &lt;n&gt;" in page   # escaped
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(pngs) == 2 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "ignored stray.txt" in md_path.read_text() and "ignored stray.txt" in page
    with pytest.raises(ValueError, match="--out must be a folder"):
        write_reports(grades(), assignment(), csv_path)


def test_empty_rows_render():
    page = render_html([], assignment())
    assert "0 learners" in page and page.count("data:image/png;base64,") == 2


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_grades_html_renders_in_chromium(tmp_path, record_property):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make test installs it as root)")
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    _, _, html_path = write_reports(grades(), assignment(), tmp_path)
    SHOTS.mkdir(exist_ok=True)
    shot = SHOTS / "grades_html.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(html_path.as_uri())
            page.wait_for_function(
                "() => [...document.images].length === 2 && "
                "[...document.images].every(i => i.complete && i.naturalWidth > 0)",
                timeout=30_000)
            rows = page.locator("#grades tbody tr").count()
            sizes = page.evaluate("() => [...document.images].map(i => [i.id, i.naturalWidth])")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    record_property("screenshot", str(shot))
    print(f"\nscreenshot: {shot}")
    assert rows == 3
    assert [name for name, _ in sizes] == ["pass-rates", "scores"]
    assert all(width > 200 for _, width in sizes)
