"""The grader's guard on installed code (labkit.grade.processes, runner.grade_class): a
submission that rewrites, adds or deletes a file of labkit or of the installed packages
while it is graded stops the run with GradingCompromised, naming the learner first seen;
bytecode caches, which every import may write, are not read."""
import os
import shutil
import sys

import nbformat
import pytest

from labkit.grade import processes, runner

ZERO = "00_start_here.ipynb"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An installed tree of its own in place of site-packages and labkit."""
    root = tmp_path / "site-packages"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "pkg" / "_ext.so").write_bytes(b"\x7fELF....")
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"cache")
    monkeypatch.setattr(processes, "installed_roots",
                        lambda stdlib=True: (os.path.join(str(root), ""),))
    return root


def test_a_rewrite_an_addition_and_a_deletion_are_changes(site):
    before = processes.installed_files()
    assert sorted(os.path.relpath(p, site) for p in before) == ["pkg/_ext.so", "pkg/mod.py"]
    mod = site / "pkg" / "mod.py"
    st = mod.stat()
    mod.write_text("x = 2\n")                                    # same size, new content
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    (site / "pkg" / "evil.pth").write_text("import os\n")
    (site / "pkg" / "_ext.so").unlink()
    (site / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"other cache")
    (site / "pkg" / "__pycache__" / "new.cpython-311.pyc").write_bytes(b"new cache")
    changed = processes.changed_files(before, processes.installed_files())
    assert [os.path.relpath(p, site) for p in changed] == [
        "pkg/_ext.so", "pkg/evil.pth", "pkg/mod.py"]


def test_a_submission_that_writes_installed_code_stops_the_run(site, tmp_path, monkeypatch):
    sols = tmp_path / "solutions"
    sols.mkdir()
    shutil.copy(runner.SOLUTIONS / ZERO, sols / ZERO)
    subs = tmp_path / "submissions"
    for who in ("amy", "ben"):
        (subs / who).mkdir(parents=True)
        nb = nbformat.read(sols / ZERO, as_version=4)
        nb.cells[0].source += f"\n# {who}'s copy"                  # two distinct files
        nbformat.write(nb, subs / who / ZERO)

    def fake_grade(learner, path, name, assignment, **kw):     # no notebook is run
        if learner == "ben":
            (site / "pkg" / "mod.py").write_text("x = 'ben was here'\n")
        return runner.NotebookGrade(learner, name, {i: "pass" for i in
                                                    assignment.exercises[name]})

    monkeypatch.setattr(runner, "grade_notebook", fake_grade)
    with pytest.raises(runner.GradingCompromised, match=r"mod\.py.*first seen after ben/"):
        runner.grade_class(subs, runner.Assignment.load(sols), progress=False, seed=1)


def test_the_real_tree_is_read_without_its_bytecode():
    files = processes.installed_files()
    assert any(p.endswith(os.path.join("labkit", "grade", "processes.py")) for p in files)
    assert any(p.endswith(os.path.join("numpy", "__init__.py")) for p in files)
    assert not any("__pycache__" in p or p.endswith(".pyc") for p in files)
    assert all(p.startswith(processes.installed_roots(stdlib=False)) for p in files), sys.prefix
