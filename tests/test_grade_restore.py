"""Putting canonical check cells back: edited, moved, deleted and extra checks."""
import copy

from labkit.grade.authoring import check_cell, code, md, notebook
from labkit.grade.restore import restore_checks


def solution():
    return notebook([md("# T"), code("def f(x):\n    return x"), check_cell("0.1", "f"),
                     code("y = 2"), check_cell("0.2", "y")])


def test_untouched_notebook_is_left_alone():
    sol = solution()
    restored = restore_checks(copy.deepcopy(sol), sol)
    assert not restored.tampered
    assert [c.source for c in restored.notebook.cells] == [c.source for c in sol.cells]


def test_edited_check_is_restored_and_reported():
    sol = solution()
    sub = copy.deepcopy(sol)
    sub.cells[2].source = 'print("✅ Exercise 0.1 passed")'
    restored = restore_checks(sub, sol)
    assert restored.notebook.cells[2].source == 'check("0.1", f)'
    assert restored.notes == ["check 0.1 was edited; restored"]


def test_check_with_new_id_is_matched_by_its_exercise():
    sol = solution()
    sub = copy.deepcopy(sol)
    sub.cells[4].id = "abc"
    sub.cells[4].source = 'check("0.2", 2)'
    restored = restore_checks(sub, sol)
    assert restored.notebook.cells[4].id == "check-0-2"
    assert restored.notebook.cells[4].source == 'check("0.2", y)'
    assert restored.notes == ["check 0.2 was edited; restored"]


def test_deleted_check_is_inserted_after_its_predecessor():
    sol = solution()
    sub = copy.deepcopy(sol)
    del sub.cells[2]
    restored = restore_checks(sub, sol)
    assert [c.id for c in restored.notebook.cells] == [c.id for c in sol.cells]
    assert restored.notes == ["check 0.1 was deleted; restored"]


def test_extra_check_calls_are_emptied():
    sol = solution()
    sub = copy.deepcopy(sol)
    sub.cells.insert(1, code('check("0.1", lambda x: x)'))
    sub.cells[1].id = "sneaky"
    restored = restore_checks(sub, sol)
    assert "check(" not in restored.notebook.cells[1].source
    assert restored.notebook.cells[3].source == 'check("0.1", f)'
    assert restored.notes == ["an extra cell calling check(0.1) was emptied"]


def test_notebook_saved_as_nbformat_3_is_not_flagged():
    """Converting 4 -> 3 -> 4 drops cell ids and adds metadata; the checks are unchanged."""
    import nbformat

    sol = solution()
    back = nbformat.reads(nbformat.writes(nbformat.convert(copy.deepcopy(sol), 3)), as_version=4)
    assert [c.get("id") for c in back.cells] != [c.get("id") for c in sol.cells]
    restored = restore_checks(back, sol)
    assert restored.notes == []
    assert [c.id for c in restored.notebook.cells if c.id.startswith("check-")] == \
        ["check-0-1", "check-0-2"]
    back.cells[2].source = 'check("0.1", lambda n: 1)'          # a real edit still is one
    assert restore_checks(back, sol).notes == ["check 0.1 was edited; restored"]


def test_verdict_log_skips_predictions_and_junk(tmp_path):
    from labkit.grade.runner import _read_log

    log = tmp_path / "log.jsonl"
    log.write_text('{"prediction": "0.amdahl", "guess": 20.0}\n'
                   '{"exercise": "0.1", "status": "fail", "message": "off"}\n'
                   'not json\n[1]\n{"exercise": "0.2"}\n'
                   '{"exercise": "0.1", "status": "pass", "message": "correct"}\n')
    assert _read_log(log) == {"0.1": [{"exercise": "0.1", "status": "fail", "message": "off"},
                                      {"exercise": "0.1", "status": "pass",
                                       "message": "correct"}]}
