"""A real browser: JupyterLab in headless Chromium runs each chapter, moves the first slider
of the cell tagged ``browser-test`` and sees the widget's output change.

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

# Run-all is over when every code cell has an execution count, or when a cell shows an
# error (JupyterLab stops the queue there); read from the notebook model, not the DOM.
ALL_RUN = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const cells = nb.widgets.filter(c => c.model.type === 'code');
  for (const c of cells) {
    const outs = c.model.outputs;
    for (let i = 0; i < outs.length; i++) {
      const o = outs.get(i).toJSON();
      if (o.output_type === 'error') return 'error in cell ' + c.model.id + ': ' + o.ename + ': ' + o.evalue;
    }
  }
  return cells.length > 0 && cells.every(c => c.model.executionCount !== null) ? 'done' : false;
}"""

TAGGED_INDEX = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  return nb.widgets.findIndex(c => (c.model.getMetadata('tags') || []).includes('browser-test'));
}"""


def snapshot(cell) -> str:
    """What the widget's interactive output shows (images and text), not the controls."""
    return cell.locator(".widget-output").evaluate_all(
        "els => els.map(e => e.innerHTML).join('\\n')")


@pytest.mark.parametrize("name", browser_notebooks())
def test_slider_changes_the_result(lab, name, record_property):
    from playwright.sync_api import sync_playwright

    base, token = lab
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # a workspace of its own, reset: nothing restored from the previous notebook
            page.goto(f"{base}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={token}")
            page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
            page.evaluate("async () => { await window.jupyterapp.restored; }")
            page.wait_for_function(READY, timeout=120_000)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            outcome = page.wait_for_function(ALL_RUN, timeout=240_000, polling=500).json_value()
            assert outcome == "done", f"{name}: run-all stopped at an {outcome}"
            index = page.evaluate(TAGGED_INDEX)
            assert index >= 0, f"{name}: no cell tagged browser-test"
            cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
            cell.scroll_into_view_if_needed()
            handle = cell.locator(".widget-slider .noUi-handle").first
            handle.wait_for(timeout=30_000)
            page.wait_for_function(
                "el => el.querySelectorAll('.widget-output img, .widget-output pre').length > 0",
                arg=cell.element_handle(), timeout=60_000)
            before = snapshot(cell)
            readout = cell.locator(".widget-readout").first.inner_text()
            handle.focus()
            for _ in range(3):
                handle.press("ArrowRight")
            deadline = time.time() + 60
            while snapshot(cell) == before and time.time() < deadline:
                time.sleep(0.25)
            after = snapshot(cell)
            for _ in range(20):                    # let the last update land before the shot
                time.sleep(0.5)
                if snapshot(cell) == after:
                    break
                after = snapshot(cell)
            cell.locator(".widget-output").last.evaluate(
                "el => Promise.all([...el.querySelectorAll('img')].map(i => i.decode()))")
            shot = SHOTS / f"{Path(name).stem}.png"
            cell.screenshot(path=str(shot))
            record_property("screenshot", str(shot))
            print(f"\nscreenshot: {shot}")
            assert cell.locator(".widget-readout").first.inner_text() != readout, \
                "the slider did not move"
            assert after != before, f"{name}: moving the slider did not change the output"
        finally:
            browser.close()
