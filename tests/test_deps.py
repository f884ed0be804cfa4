"""Dependencies that hold on a user's machine: pyproject's bounds and environment.yml's pins
agree, what labkit imports at run time is a runtime dependency, and numpy stays below 2.5."""
import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("packaging.requirements")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402
from packaging.version import Version  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")        # Python >= 3.11 (the pinned environment)


def pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    dev = [Requirement(r) for r in project["optional-dependencies"]["dev"]]
    return {canonicalize_name(r.name): r for r in runtime}, \
        {canonicalize_name(r.name): r for r in dev}


def pins(path=REPO / "environment.yml"):
    found = re.findall(r"^ *- ([A-Za-z][A-Za-z0-9_.-]*)==(\S+)$", path.read_text(), re.M)
    return {canonicalize_name(name): Version(v) for name, v in found}


def test_every_pin_satisfies_pyprojects_bound_and_both_list_the_same_packages():
    runtime, dev = pyproject()
    bounds = {**dev, **runtime}
    pinned = pins()
    assert sorted(set(bounds) - set(pinned)) == [], "in pyproject.toml, not pinned"
    assert sorted(set(pinned) - set(bounds)) == [], "pinned, not in pyproject.toml"
    for name, version in pinned.items():
        assert bounds[name].specifier.contains(version, prereleases=True), \
            f"environment.yml pins {name}=={version}, outside pyproject's {bounds[name]}"
    assert not set(runtime) & set(dev)


def test_binder_uses_the_same_environment():
    assert pins(REPO / "binder" / "environment.yml") == pins()


def test_numpy_is_bounded_below_2_5_for_numba_cuda():
    runtime, _ = pyproject()
    spec = runtime["numpy"].specifier
    assert spec.contains("2.4.6") and not spec.contains("2.5.0") and not spec.contains("2.5.2")
    assert "row_stack" in (REPO / "pyproject.toml").read_text()   # the reason is written down


# Authoring tools (dev extra): labkit.grade.generate imports jupytext inside the functions
# that read and write a chapter's text source; `make notebooks` needs it, the grader does not.
AUTHORING_TOOLS = {"jupytext"}


def third_party_imports(module_level_only=False):
    """Top-level modules labkit imports (anywhere, lazily or not; or only at module level),
    outside the stdlib."""
    mods: dict[str, set[str]] = {}
    for path in (REPO / "labkit").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body if module_level_only else ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "labkit":
                    mods.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return mods


def test_what_labkit_imports_is_a_runtime_dependency():
    """Each module labkit imports comes from a runtime dependency or from a package one of
    them requires (IPython comes with ipywidgets); the grader's pytest and nbval included.
    Test-only tools (playwright, hypothesis, xdist) must not be imported by labkit; an
    authoring tool only inside a function, so that importing labkit never needs it."""
    runtime, dev = pyproject()
    provided = {}
    for name in runtime:
        provided[name] = name
        for req in md.requires(name) or []:
            r = Requirement(req)
            if r.marker is None or "extra" not in str(r.marker):
                provided.setdefault(canonicalize_name(r.name), name)
    dists = md.packages_distributions()
    problems = []
    for module, files in sorted(third_party_imports().items()):
        owners = [canonicalize_name(d) for d in dists.get(module, [module])]
        if module in AUTHORING_TOOLS and module not in third_party_imports(True):
            assert set(owners) <= set(dev), f"{module}: an authoring tool is a dev extra"
            continue
        if not any(o in provided for o in owners):
            where = "dev extra" if any(o in dev for o in owners) else "no dependency"
            problems.append(f"{module} ({where}) imported by {sorted(files)[0]}")
    assert problems == []
    assert {"nbformat", "nbval", "pytest"} <= set(runtime)        # the grader runs them


def test_ipykernel_is_bounded_below_7_for_widget_plots():
    """ipykernel 7 + JupyterLab's default commsOverSubshells loses widget plots
    (ipython/ipykernel#1564); tests/test_browser.py shows it on chapter 05's first draw."""
    _, dev = pyproject()
    spec = dev["ipykernel"].specifier
    assert spec.contains(str(pins()["ipykernel"])) and not spec.contains("7.0.0")
    assert "ipykernel#1564" in (REPO / "pyproject.toml").read_text()
