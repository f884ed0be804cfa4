"""labkit.course: the chapter map and SEED_COVERAGE point at real notebooks and cells."""
import ast
import re
from pathlib import Path

import nbformat
import pytest

from labkit import course

SOLUTIONS = course.REPO / "solutions"
KEY = re.compile(r"^000/(exercise/(10|[1-9])|experiment/[12]|example/[1-3])$"
                 r"|^00[24]/[a-z0-9]+(-[a-z0-9]+)*$")


def _cell_ids(filename):
    nb = nbformat.read(SOLUTIONS / filename, as_version=4)
    return {c.get("id") for c in nb.cells}


def test_keys_are_well_formed():
    bad = [k for k in course.SEED_COVERAGE if not KEY.match(k)]
    assert not bad, f"malformed SEED_COVERAGE keys: {bad}"


@pytest.mark.parametrize("key", sorted(course.SEED_COVERAGE))
def test_every_entry_points_at_an_existing_cell(key):
    filename, cell_id = course.SEED_COVERAGE[key]
    known = {ch.filename for ch in course.CHAPTERS}
    assert filename in known, f"{key}: {filename} is not a chapter of labkit.course.CHAPTERS"
    assert (SOLUTIONS / filename).exists(), f"{key}: solutions/{filename} does not exist"
    assert cell_id in _cell_ids(filename), f"{key}: no cell with id {cell_id!r} in {filename}"


def _entries_with_markers():
    """(marker chapter, key, filename) for each entry, read from course.py's source."""
    src = Path(course.__file__).read_text(encoding="utf-8")
    tree = ast.parse(src)
    node = next(n for n in tree.body if isinstance(n, ast.AnnAssign)
                and getattr(n.target, "id", "") == "SEED_COVERAGE")
    lines = src.splitlines()
    markers = {i + 1: int(m.group(1)) for i, line in enumerate(lines)
               if (m := re.match(r"\s*# ch(\d\d)\s*$", line))}
    out = []
    for k, v in zip(node.value.keys, node.value.values):
        above = [ln for ln in markers if ln < k.lineno]
        chapter = markers[max(above)] if above else None
        out.append((chapter, k.value, v.elts[0].value))
    return out


def test_no_key_is_given_twice():
    keys = [k for _, k, _ in _entries_with_markers()]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    assert not twice, f"keys given twice (the dict keeps only the last one): {twice}"


def test_entries_sit_under_their_chapter_marker():
    for chapter, key, filename in _entries_with_markers():
        assert chapter is not None and filename.startswith(f"{chapter:02d}_"), \
            f"{key} -> {filename} sits under the '# ch{chapter:02d}' marker"


def test_all_chapter_markers_are_kept():
    src = Path(course.__file__).read_text(encoding="utf-8")
    for ch in course.CHAPTERS:
        assert f"    # ch{ch.number:02d}\n" in src


def test_seed_coverage_map_lists_every_item(tmp_path):
    (tmp_path / "02_autodiff.ipynb").write_text("{}")
    table = course.seed_coverage_map(tmp_path)
    rows = table.splitlines()[2:]
    assert len(rows) == len(set(course.SEED_COVERAGE) | set(course.SEED_000_ITEMS))
    assert "| 000/exercise/1 | static vs dynamic" in table
    assert "[02_autodiff.ipynb](02_autodiff.ipynb), cell `seed-ex1`" in table   # linked: exists
    assert "06_memory.ipynb, cell `seed-ex5`" in table                         # not linked
    assert "[06_memory.ipynb]" not in table
    # exercises sort by number: 10 comes after 9
    order = [r.split("|")[1].strip() for r in rows]
    assert order.index("000/exercise/10") == order.index("000/exercise/9") + 1


def test_chapter_map_links_only_existing_notebooks(tmp_path):
    (tmp_path / "02_autodiff.ipynb").write_text("{}")
    table = course.chapter_map(tmp_path)
    assert "[Computation graphs and autodiff](02_autodiff.ipynb)" in table
    assert "Memory management *(in preparation)*" in table


def _table(tmp_path, text):
    table = tmp_path / "chapters.csv"
    table.write_text(text, encoding="utf-8")
    return table


def test_chapters_are_read_from_the_csv_in_order():
    assert [ch.number for ch in course.CHAPTERS] == list(range(13))
    assert course.CHAPTERS[6] == course.Chapter(6, "memory", "Memory management",
                                                "training-memory budget; caching allocator; "
                                                "checkpointing")
    assert course.CHAPTERS[0].experiments == ("environment and device report; widgets, "
                                              "checks, grading")     # a quoted field


@pytest.mark.parametrize("text, says", [
    ("", "the header must be number,slug,title,experiments"),
    ("number,slug,name,experiments\n0,a,A,x\n", "the header must be"),
    ("number,slug,title,experiments\n", "no chapter rows"),
])
def test_a_table_without_its_header_or_rows_is_refused(tmp_path, text, says):
    with pytest.raises(ValueError, match=says):
        course._read_chapters(_table(tmp_path, text))


@pytest.mark.parametrize("rows, says", [
    ("0,a,A,x\n2,b,B,y\n", r"line 3: chapters are numbered 0, 1, 2, … in order; expected 1"),
    ("1,a,A,x\n", r"line 2: .*expected 0, got '1'"),
    ("0,a,,x\n", r"line 2: a chapter needs all of number, slug, title, experiments, none empty"),
    ("0,a,A\n", r"line 2: a chapter needs all of"),
])
def test_a_row_out_of_order_or_with_an_empty_field_is_refused(tmp_path, rows, says):
    table = _table(tmp_path, "number,slug,title,experiments\n" + rows)
    with pytest.raises(ValueError, match=says):
        course._read_chapters(table)
