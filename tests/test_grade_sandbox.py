"""Who made a replaced function: the learner (a cell, a file they wrote) or an installed
library patching another on import. The answer is by where the code lives, not by a guess
at the folder's name (a checkout in /tmp once graded torch.package's own patch of
``inspect.getfile`` as the learner's)."""
import inspect
import os
import sysconfig

from labkit.grade import processes, sandbox


def compiled(filename):
    ns = {}
    exec(compile("def f():\n    return 1\n", filename, "exec"), ns)
    return ns["f"]


def test_installed_code_is_not_the_learners_wherever_it_lives(monkeypatch):
    site = sysconfig.get_paths()["purelib"]
    assert not sandbox.learner_made(compiled(os.path.join(site, "torch", "package", "x.py")))
    assert not sandbox.learner_made(inspect.getfile)
    assert not sandbox.learner_made(sandbox.snapshot)          # labkit's own


def test_cells_and_files_the_learner_wrote_are_the_learners(tmp_path):
    assert sandbox.learner_made(compiled("<ipython-input-3-abc>"))
    assert sandbox.learner_made(compiled("/tmp/ipykernel_4242/1234.py"))
    assert sandbox.learner_made(compiled(str(tmp_path / "my_helpers.py")))
    assert sandbox.learner_made(compiled(os.path.join(os.getcwd(), "cheat.py")))


def test_altered_reports_the_learners_patch_and_not_a_librarys(monkeypatch):
    before = sandbox.snapshot()
    monkeypatch.setattr(inspect, "getfile", compiled("/tmp/ipykernel_1/9.py"))
    assert "inspect.getfile was replaced" in sandbox.altered(before, sandbox.snapshot())
    site = sysconfig.get_paths()["purelib"]
    monkeypatch.setattr(inspect, "getfile",
                        compiled(os.path.join(site, "torch", "package", "importer.py")))
    assert "inspect.getfile was replaced" not in sandbox.altered(before, sandbox.snapshot())


def test_a_checkout_in_the_temporary_folder_is_still_installed_code(monkeypatch):
    venv = "/tmp/course-checkout/.venv/lib/python3.11/site-packages"
    paths = dict(sysconfig.get_paths(), purelib=venv, platlib=venv)
    monkeypatch.setattr(processes.sysconfig, "get_paths", lambda: paths)
    processes.installed_roots.cache_clear()
    try:
        assert not sandbox.learner_made(compiled(venv + "/torch/package/package_importer.py"))
        assert sandbox.learner_made(compiled("/tmp/ipykernel_7/55.py"))
    finally:
        processes.installed_roots.cache_clear()
