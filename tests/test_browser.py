"""A real browser: JupyterLab in headless Chromium runs each chapter's cell tagged
``browser-test`` after the cells it needs (:func:`labkit.grade.slices.cells_feeding`: the
first code cell and those defining, transitively, the names it uses; the labs in between are
the nbval runs' business), moves its first slider and sees the
widget's output change, with its plot (an ``<img>`` in the widget's output) present and
decoded after the move.

Needs Debian's Chromium (``make test`` installs it as root) and Python Playwright; never
``playwright install``. Screenshots go to a folder the test prints.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from labkit.grade.generate import NOTEBOOKS
from labkit.grade.slices import cells_feeding

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]
SHOTS = Path(tempfile.gettempdir()) / "labkit-browser-screenshots"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


def browser_notebooks() -> list[str]:
    names = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if any("browser-test" in c.metadata.get("tags", []) for c in nb.cells):
            names.append(path.name)
    return names


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (make test installs it as root)")
    pytest.importorskip("playwright.sync_api")
    root = tmp_path_factory.mktemp("lab")
    work = root / "notebooks"
    shutil.copytree(NOTEBOOKS, work)             # the server may autosave: never the repo's
    env = dict(os.environ)
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR",
                "JUPYTERLAB_WORKSPACES_DIR"):
        (root / var).mkdir()
        env[var] = str(root / var)
    env.pop("LABKIT_GRADE", None)
    news = root / "JUPYTERLAB_SETTINGS_DIR" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)                      # no "get notified about news?" toast
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port, token = free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         f"--IdentityProvider.token={token}", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True", "--allow-root",
         "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=(root / "server.log").open("w"))
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start: " + (root / "server.log").read_text()[-2000:])
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


READY = """() => {
  const app = window.jupyterapp;
  if (!app || !app.shell || !app.shell.currentWidget) return false;
  const w = app.shell.currentWidget;
  const ctx = w.sessionContext;
  if (!ctx || !ctx.session || !ctx.session.kernel) return false;
  const k = ctx.session.kernel;
  return ctx.isReady && k.connectionStatus === 'connected' && k.status === 'idle';
}"""

# Running is over when every chosen code cell has an execution count, or when one of them
# shows an error; read from the notebook model, not the DOM.
ALL_RUN = """(chosen) => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const cells = chosen.map(i => nb.widgets[i]);
  for (const c of cells) {
    const outs = c.model.outputs;
    for (let i = 0; i < outs.length; i++) {
      const o = outs.get(i).toJSON();
      if (o.output_type === 'error') return 'error in cell ' + c.model.id + ': ' + o.ename + ': ' + o.evalue;
    }
  }
  return cells.length > 0 && cells.every(c => c.model.executionCount !== null) ? 'done' : false;
}"""

# The chosen cells one after another, as a reader clicks "run" on each: a cell is sent once
# the previous one has finished.
RUN_CELLS = """async (chosen) => {
  const app = window.jupyterapp;
  for (const i of chosen) {
    app.shell.currentWidget.content.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
  }
}"""

TAGGED_INDEX = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  return nb.widgets.findIndex(c => (c.model.getMetadata('tags') || []).includes('browser-test'));
}"""


IMAGE_READY = """el => {
  const imgs = [...el.querySelectorAll('.widget-output img')];
  return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0);
}"""

IMAGES = "els => els.flatMap(e => [...e.querySelectorAll('img')]).map(i => [i.complete, i.naturalWidth])"


def _ends(text: str) -> str:
    """The start and the end of a long text (a traceback's last line is what matters)."""
    return text if len(text) < 900 else f"{text[:200]} [...] {text[-600:]}"


def settle(cell, steady_for: int = 3, limit: int = 40) -> str:
    """The output once it has not changed for ``steady_for`` half-second looks."""
    last, steady = snapshot(cell), 0
    for _ in range(limit):
        time.sleep(0.5)
        now = snapshot(cell)
        steady = steady + 1 if now == last else 0
        last = now
        if steady >= steady_for:
            break
    return last


def snapshot(cell) -> str:
    """What the widget's interactive output shows (images and text), not the controls."""
    return cell.locator(".widget-output").evaluate_all(
        "els => els.map(e => e.innerHTML).join('\\n')")


def errors(cell) -> int:
    """Tracebacks and stderr text in the widget's output (a draw that raised)."""
    return cell.locator(".widget-output .jp-OutputArea-output[data-mime-type="
                        "'application/vnd.jupyter.stderr']").count()


def wait_for_image(page, cell, element, seconds: float) -> tuple[bool, str]:
    """Wait until the settled output holds a loaded, decoded <img>; (ready, output)."""
    deadline, ready, after = time.time() + seconds, False, ""
    while time.time() < deadline:
        after = settle(cell)
        ready = page.evaluate(IMAGE_READY, element)
        if ready and snapshot(cell) == after:
            break
        time.sleep(0.5)
    return ready, after


OPEN = """async (path) => {
  const app = window.jupyterapp;
  const w = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  app.shell.activateById(w.id);
  await w.context.ready;
}"""

# the notebook's kernel shut down and its tab closed, unsaved (no dialog: disposing asks
# nothing), so that the next notebook is the only one on the page
CLOSE = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.sessionContext) return;
  await w.sessionContext.shutdown();
  w.context.model.dirty = false;
  w.dispose();
}"""


@pytest.fixture(scope="module")
def page(lab):
    """One Chromium and one JupyterLab page for every notebook: launching the browser and
    loading the JupyterLab app took most of the browser's CPU time when each notebook had
    its own (a workspace of its own, reset: nothing restored from an earlier run)."""
    from playwright.sync_api import sync_playwright

    base, token = lab
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            pg.goto(f"{base}/lab/workspaces/browser-test?reset&token={token}")
            pg.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
            pg.evaluate("async () => { await window.jupyterapp.restored; }")
            yield pg
        finally:
            browser.close()


@pytest.mark.parametrize("name", browser_notebooks())
def test_slider_changes_the_result(page, name, record_property):
    try:
        page.evaluate(OPEN, name)
        page.wait_for_function(READY, timeout=120_000)
        index = page.evaluate(TAGGED_INDEX)
        assert index >= 0, f"{name}: no cell tagged browser-test"
        chosen = cells_feeding(nbformat.read(NOTEBOOKS / name, as_version=4), index)
        page.evaluate(f"() => {{ ({RUN_CELLS})({chosen}); }}")     # not awaited here
        outcome = page.wait_for_function(ALL_RUN, arg=chosen, timeout=240_000,
                                         polling=500).json_value()
        assert outcome == "done", f"{name}: running up to the widget stopped at an {outcome}"
        cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
        cell.scroll_into_view_if_needed()
        handle = cell.locator(".widget-slider .noUi-handle").first
        handle.wait_for(timeout=30_000)
        element = cell.element_handle()
        # The first draw (made while the cell ran) is a decoded plot and no traceback.
        # With ipykernel 7 and JupyterLab's default commsOverSubshells it was not: the
        # previous cell's widget traffic ran post_execute on a subshell thread, which drew
        # this figure concurrently (mathtext ParseException) and sent it where no output
        # area shows it (ipython/ipykernel#1564; pyproject.toml pins ipykernel < 7).
        image_ready, before = wait_for_image(page, cell, element, 60)
        assert image_ready and not errors(cell), (
            f"{name}: the widget's first draw shows no plot or an error: "
            f"{_ends(cell.locator('.widget-output').last.inner_text())!r}")
        readout = cell.locator(".widget-readout").first.inner_text()
        handle.focus()
        handle.press("ArrowRight")             # one step: one update to wait for
        if cell.locator(".widget-readout").first.inner_text() == readout:
            handle.press("ArrowLeft")          # it sat at its maximum
            handle.press("ArrowLeft")
        deadline = time.time() + 60
        while snapshot(cell) == before and time.time() < deadline:
            time.sleep(0.25)
        # the plot itself, not a change of text alone: once the output has settled it
        # holds an <img> that has loaded and decoded (an undecoded or broken image has
        # naturalWidth 0); settle again if it has not, so the shot shows the final state
        image_ready, after = wait_for_image(page, cell, element, 90)
        no_image = "" if image_ready and not errors(cell) else (
            f"{name}: after the slider moved, the widget's output holds no decoded image "
            f"(its plot) or an error: images (complete, width) = "
            f"{cell.locator('.widget-output').evaluate_all(IMAGES)}; text: "
            f"{_ends(cell.locator('.widget-output').last.inner_text())!r}")
        shot = SHOTS / f"{Path(name).stem}.png"
        cell.screenshot(path=str(shot))
        record_property("screenshot", str(shot))
        print(f"\nscreenshot: {shot}")
        assert not no_image, no_image
        assert cell.locator(".widget-readout").first.inner_text() != readout, \
            "the slider did not move"
        assert after != before, f"{name}: moving the slider did not change the output"
    finally:
        page.evaluate(CLOSE)
