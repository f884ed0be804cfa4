"""The generator: solution regions become stubs; notebooks/ is never stale; text sources and
their notebooks agree; authoring rules."""
import os
import re

import nbformat
import pytest

from labkit.course import CHAPTERS
from labkit.grade.authoring import check_cell, code, md, notebook, write
from labkit.grade.generate import (NOTEBOOKS, SOLUTIONS, NotebookFormatError, check_cells,
                                   generate, learner_version, notebook_to_text, render,
                                   strip_solutions, text_to_notebook)


def test_region_inside_a_function_becomes_not_implemented():
    src = ("def f(x):\n    '''doc'''\n    ### BEGIN SOLUTION\n    y = x * 2\n"
           "    # a comment\n    return y\n    ### END SOLUTION")
    out = strip_solutions(src)
    assert out == ("def f(x):\n    '''doc'''\n    # YOUR CODE HERE (about 2 lines)\n"
                   '    raise NotImplementedError("write this, then run the check below")')
    ns = {}
    exec(out, ns)
    with pytest.raises(NotImplementedError):
        ns["f"](1)


def test_top_level_region_sets_every_assigned_name_to_none():
    src = "a = 1\n### BEGIN SOLUTION\nbytes_total = 16 * 10**8\nx, (y, z) = 1, (2, 3)\nx += 1\n### END SOLUTION\nb = 2"
    assert strip_solutions(src) == ("a = 1\nbytes_total = None  # YOUR ANSWER HERE\n"
                                    "x = None  # YOUR ANSWER HERE\ny = None  # YOUR ANSWER HERE\n"
                                    "z = None  # YOUR ANSWER HERE\nb = 2")


def test_custom_stub_lines_win():
    src = "### BEGIN SOLUTION\n# STUB: tile = ...  # pick a tile size\ntile = 16\n### END SOLUTION"
    assert strip_solutions(src) == "tile = ...  # pick a tile size"


@pytest.mark.parametrize("src, msg", [
    ("### BEGIN SOLUTION\nx = 1", "without END"),
    ("x = 1\n### END SOLUTION", "without BEGIN"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
    ("### BEGIN SOLUTION\nx = (\n### END SOLUTION", "does not parse"),
])
def test_broken_markers_are_reported(src, msg):
    with pytest.raises(NotebookFormatError, match=msg):
        strip_solutions(src)


def test_learner_version_strips_code_markdown_and_outputs():
    nb = notebook([md("Answer:\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"),
                   code("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
                   check_cell("0.1", "f")])
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[1].execution_count = 3
    learner = learner_version(nb)
    assert learner.cells[0].source == "Answer:\n*Write your answer here.*"
    assert "return 1" not in learner.cells[1].source
    assert learner.cells[1].outputs == [] and learner.cells[1].execution_count is None
    assert learner.cells[2].source == 'check("0.1", f)' and learner.cells[2].id == "check-0-1"
    assert nb.cells[1].outputs  # the solution itself is untouched


@pytest.mark.parametrize("mutate, msg", [
    (lambda c: c.metadata.update(tags=[]), "tagged 'check'"),
    (lambda c: setattr(c, "id", "cell-9"), "must have id check-0-1"),
    (lambda c: c.metadata.pop("labkit"), "metadata labkit.exercise"),
    (lambda c: setattr(c, "source", 'check("0.1", f)\ncheck("0.2", g)'), "exactly once"),
])
def test_check_cell_rules(mutate, msg):
    cell = check_cell("0.1", "f")
    mutate(cell)
    nb = nbformat.v4.new_notebook(cells=[cell])
    with pytest.raises(NotebookFormatError, match=msg):
        check_cells(nb)


def test_generate_reports_stale_missing_and_extra(tmp_path):
    sols, nbs = tmp_path / "solutions", tmp_path / "notebooks"
    sols.mkdir()
    nbs.mkdir()
    (sols / "01_a.ipynb").write_text(nbformat.writes(notebook([code("x = 1")])) + "\n")
    (nbs / "99_orphan.ipynb").write_text("{}")
    problems = generate(sols, nbs, check_only=True)
    assert any("01_a.ipynb: out of date" in p for p in problems)
    assert any("99_orphan.ipynb: in notebooks/ but not in solutions/" in p for p in problems)
    generate(sols, nbs)
    assert generate(sols, nbs, check_only=True) == ["99_orphan.ipynb: in notebooks/ but not in solutions/"]


# ---- text sources: solutions/NN_slug.py is the source, NN_slug.ipynb its pair ----------------

def draft():
    cells = [md("# A"), code("x = 1", tags=("browser-test",)), code("y = 2"),
             check_cell("0.1", "x")]
    cells[2].metadata["labkit"] = {"note": "kept"}
    nb = notebook(cells)
    nb.cells[2].id = "named"
    return nb


def test_text_keeps_ids_tags_and_metadata_and_a_check_cells_id_follows_from_its_exercise():
    nb = draft()
    text = notebook_to_text(nb)
    assert '# %% [markdown] id="cell-000"' in text
    assert '# %% id="cell-001" tags=["browser-test"]' in text
    assert '# %% labkit={"exercise": "0.1"} tags=["check"]\ncheck("0.1", x)' in text
    assert render(text_to_notebook(text)) == render(nb)       # the text alone gives it back
    assert notebook_to_text(text_to_notebook(text)) == text


def test_a_cell_written_without_an_id_gets_the_next_free_number():
    text = notebook_to_text(draft()).replace('id="cell-001" ', 'id="cell-030" ')
    new = text_to_notebook(text + "\n# %%\nz = 3\n\n# %% [markdown]\nMore.\n")
    assert [c.id for c in new.cells] == ["cell-000", "cell-030", "named", "check-0-1",
                                         "cell-031", "cell-032"]


def test_a_hand_written_text_gets_ids_and_one_layout(tmp_path):
    sols = tmp_path / "solutions"
    sols.mkdir()
    text = sols / "01_a.py"
    text.write_text('# %% [markdown]\n# # A\n\n\n# %%\nx = 1\n# %% tags=["check"] '
                    'labkit={"exercise": "0.1"}\ncheck("0.1", x)\n')
    assert generate(sols, tmp_path / "nbs", check_only=True)[:2] == [
        "01_a.py: cells without an id, or laid out by hand (run `make notebooks`)",
        "01_a.ipynb: missing, written from 01_a.py (run `make notebooks`)"]
    generate(sols, tmp_path / "nbs")
    assert text.read_text().endswith('# %% [markdown] id="cell-000"\n# # A\n\n'
                                     '# %% id="cell-001"\nx = 1\n\n'
                                     '# %% labkit={"exercise": "0.1"} tags=["check"]\n'
                                     'check("0.1", x)\n')
    assert generate(sols, tmp_path / "nbs", check_only=True) == []


def test_a_drifted_pair_is_reported_and_synced_from_its_text(tmp_path):
    sols, nbs = tmp_path / "solutions", tmp_path / "notebooks"
    sols.mkdir()
    text, pair = sols / "01_a.py", sols / "01_a.ipynb"
    write(text, list(draft().cells))
    assert generate(sols, nbs) == ["01_a.ipynb: missing, written from 01_a.py (run `make "
                                   "notebooks`)", "01_a.ipynb: out of date with solutions/ "
                                   "(run `make notebooks`)"]
    assert generate(sols, nbs, check_only=True) == []

    def touch(path, when):                     # the later-modified half, explicitly
        os.utime(path, (when, when))

    text.write_text(text.read_text().replace("y = 2", "y = 3"))          # the text edited
    touch(pair, 1_000), touch(text, 2_000)
    assert generate(sols, nbs, check_only=True)[0] == \
        "01_a.ipynb: differs from 01_a.py (run `make notebooks`)"
    generate(sols, nbs)
    assert generate(sols, nbs, check_only=True) == []
    assert nbformat.read(pair, as_version=4).cells[2].source == "y = 3"

    nb = nbformat.read(pair, as_version=4)                    # the notebook edited in Lab
    nb.cells[2].source = "y = 4"
    pair.write_text(render(nb))
    touch(text, 1_000), touch(pair, 2_000)
    assert generate(sols, nbs, check_only=True) == [
        "01_a.ipynb: differs from 01_a.py (run `make notebooks`)"]
    with pytest.raises(NotebookFormatError, match="01_a.ipynb was edited after 01_a.py"):
        generate(sols, nbs)                                    # never overwrites its edits
    text.unlink()                                              # keep the notebook's edits
    generate(sols, nbs)
    assert "y = 4" in text.read_text() and generate(sols, nbs, check_only=True) == []

    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi")]   # only outputs
    pair.write_text(render(nb))
    touch(text, 1_000), touch(pair, 2_000)
    assert generate(sols, nbs) == [
        "01_a.ipynb: solution notebook holds outputs (run `make notebooks`)"]


# ---- the repository itself -------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_each_chapter_is_a_text_source_and_its_notebook_in_agreement(path):
    """The committed notebook is exactly what its text alone gives (ids, tags and metadata
    included), and the text exactly what the notebook gives."""
    text = path.with_suffix(".py").read_text(encoding="utf-8")
    assert render(text_to_notebook(text)) == path.read_text(encoding="utf-8")
    assert notebook_to_text(nbformat.read(path, as_version=4)) == text


def test_learner_notebooks_are_up_to_date_and_hold_no_outputs():
    assert generate(SOLUTIONS, NOTEBOOKS, check_only=True) == []


def solution_paths():
    return sorted(SOLUTIONS.glob("*.ipynb"))


def test_every_solution_is_a_known_chapter():
    names = {ch.filename for ch in CHAPTERS}
    assert solution_paths() and all(p.name in names for p in solution_paths())


@pytest.mark.parametrize("path", solution_paths(), ids=lambda p: p.stem)
def test_chapter_follows_the_house_rules(path):
    """DESIGN.md: every exercise registered; chapters (not 00) have >= 4 checked exercises
    and >= 2 widgets; one widget cell is tagged browser-test."""
    from labkit.check import get

    nb = nbformat.read(path, as_version=4)
    exercises = check_cells(nb)
    chapter = int(path.name[:2])
    for ex_id in exercises:
        assert int(ex_id.split(".")[0]) == chapter, f"{ex_id} checked in chapter {chapter}"
        get(ex_id)
    widget_call = re.compile(r"\binteract(ive)?\(|_widget\(|\bwidgets\.\w+\(")
    widgets = sum(bool(widget_call.search(c.source)) for c in nb.cells if c.cell_type == "code")
    browser = [c for c in nb.cells if "browser-test" in c.metadata.get("tags", [])]
    assert len(browser) == 1 and widget_call.search(browser[0].source)
    assert len(exercises) >= (1 if chapter == 0 else 4)
    assert widgets >= (1 if chapter == 0 else 2)


# ---- widget lints: predict before every widget; widgets come from labkit builders ---------

WIDGET_BUILD = re.compile(r"(?<!def )\b(\w+_widget)\(")
PREDICT_CALL = re.compile(r"\bpredict\(")
BARE_WIDGET = re.compile(r"\b(interact|interactive|interact_manual)\(|\bwidgets\.[A-Z]\w*\(|"
                         r"\b\w+_(explorer|view)\(")
SECTION = re.compile(r"^#{1,2}\s", re.M)


def sections(nb):
    """The notebook's code cells grouped by section (a markdown `#` or `##` heading)."""
    groups = [[]]
    for cell in nb.cells:
        if cell.cell_type == "markdown" and SECTION.search(cell.source):
            groups.append([])
        elif cell.cell_type == "code":
            groups[-1].append(cell)
    return groups


def predict_problems(nb) -> list[str]:
    """Cells that build a widget with no `predict(` before them in the same section."""
    problems = []
    for cells in sections(nb):
        predicted = False
        for cell in cells:
            build = WIDGET_BUILD.search(cell.source)
            guess = PREDICT_CALL.search(cell.source)
            if build and not predicted and not (guess and guess.start() < build.start()):
                problems.append(f"cell {cell.get('id')}: {build.group(1)}(...) with no "
                                f"predict(...) before it in its section")
            predicted = predicted or bool(guess)
    return problems


def builder_problems(nb) -> list[str]:
    """Cells that build widgets by hand instead of calling a labkit `*_widget(` builder."""
    return [f"cell {c.get('id')}: {m.group(0)}...) — use a *_widget() builder from labkit"
            for c in nb.cells if c.cell_type == "code"
            for m in [BARE_WIDGET.search(c.source)] if m]


# Chapters still being converted when these lints were added (2026-11-30): remove a name
# when its chapter passes (xfail is not strict, so a fixed chapter does not fail CI).
PREDICT_XFAIL: set[str] = set()
BUILDER_XFAIL: set[str] = set()      # chapters whose widgets are not labkit builders yet


def lint_params(xfail):
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(
        reason="chapter not converted yet", strict=False)] if p.name in xfail else [])
        for p in solution_paths()]


@pytest.mark.parametrize("path", lint_params(PREDICT_XFAIL))
def test_every_widget_is_preceded_by_a_prediction(path):
    nb = nbformat.read(path, as_version=4)
    assert predict_problems(nb) == []


@pytest.mark.parametrize("path", lint_params(BUILDER_XFAIL))
def test_widgets_are_built_by_labkit_builders(path):
    nb = nbformat.read(path, as_version=4)
    assert builder_problems(nb) == []


def test_the_widget_lints_can_fail():
    nb = notebook([md("## A"), code("w = cost_widget(world=4)"),
                   md("## B"), code('predict("k", guess, "q")'), code("budget_widget()"),
                   md("### still B"), code("x_widget()"),
                   md("## C"), code('x_widget(); predict("k", 1)'),
                   code("interact(f, n=(1, 8))"), code("w = widgets.IntSlider()"),
                   code("collective_explorer()"), code("def my_widget(x):\n    pass")])
    assert predict_problems(nb) == [
        "cell cell-001: cost_widget(...) with no predict(...) before it in its section",
        "cell cell-008: x_widget(...) with no predict(...) before it in its section"]
    assert [p.split(":")[0] for p in builder_problems(nb)] == ["cell cell-009", "cell cell-010",
                                                               "cell cell-011"]


# ---- README's chapter table ----------------------------------------------------------------

def test_readme_chapter_table_is_generated_from_course_py():
    from labkit.grade.generate import README, update_readme

    assert update_readme(README, SOLUTIONS, check_only=True) == []


def test_readme_table_lists_only_chapters_with_a_solution(tmp_path):
    from labkit.grade.generate import (TABLE_BEGIN, TABLE_END, readme_table,
                                       readme_with_table, update_readme)

    (tmp_path / "02_autodiff.ipynb").write_text("{}")
    (tmp_path / "10_model_parallel.ipynb").write_text("{}")
    table = readme_table(tmp_path).splitlines()
    assert [row[:4] for row in table[2:]] == ["| 02", "| 10"]
    assert "[Model parallelism](notebooks/10_model_parallel.ipynb)" in table[3]
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{TABLE_BEGIN}\nold\n{TABLE_END}\nrest\n")
    assert update_readme(readme, tmp_path, check_only=True)
    update_readme(readme, tmp_path)
    assert readme.read_text() == f"intro\n{TABLE_BEGIN}\n{chr(10).join(table)}\n{TABLE_END}\nrest\n"
    with pytest.raises(NotebookFormatError, match="lacks the markers"):
        readme_with_table("no markers", "t")


def test_contributing_maps_every_chapter_and_package():
    from pathlib import Path

    from labkit.grade.generate import REPO

    guide = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for ch in CHAPTERS:
        assert f"`{ch.filename[:-6]}`" in guide, ch.filename
    packages = sorted(p.name for p in Path(REPO / "labkit").iterdir()
                      if (p / "__init__.py").exists())
    assert [p for p in packages if f"labkit.{p}" not in guide] == []
