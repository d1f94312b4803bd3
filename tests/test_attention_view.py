"""bertviz views draw with no internet access: standalone, and inside JupyterLab.

A real browser (headless Chromium, driven by playwright-core) opens the view with every
request that would leave this machine refused, and waits for bertviz's SVG to draw.
As a control, bertviz's own HTML (which loads its libraries from a CDN) stays blank.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch
from notebooks import ROOT

from coursetools.attention_view import LIBRARIES, attention_html

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
DRIVER = ROOT / "tests" / "browser" / "render.mjs"
missing = [what for what, ok in [
    ("Chromium", Path(CHROMIUM).exists()), ("node", shutil.which("node")),
    ("node_modules (make installs them)", (ROOT / "node_modules" / "playwright-core").exists()),
] if not ok]
# CI installs the browser (.ci/run) and sets COURSE_REQUIRE_BROWSER so that these never skip there.
pytestmark = pytest.mark.skipif(
    bool(missing) and not os.environ.get("COURSE_REQUIRE_BROWSER"), reason=f"missing: {', '.join(missing)}"
)

TOKENS = ["Lily", "saw", "a", "big", "red", "ball", "."]


def _attention(layers=3, heads=4):
    seq = len(TOKENS)
    g = torch.Generator().manual_seed(0)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return [torch.softmax(torch.randn(1, heads, seq, seq, generator=g).masked_fill(~causal, float("-inf")), -1)
            for _ in range(layers)]


def _render(url: str, timeout_ms: int = 90000) -> dict:
    done = subprocess.run(["node", str(DRIVER), url, str(timeout_ms)], capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env=dict(os.environ, CHROMIUM=CHROMIUM))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _page(path: Path, body: str) -> str:
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    return path.as_uri()


def test_libraries_are_the_pinned_ones():
    assert "d3js.org v5.7.0" in LIBRARIES["d3"].read_text()[:200]
    assert "RequireJS 2.3.6" in LIBRARIES["require"].read_text()[:300]
    assert "jQuery v2." in LIBRARIES["jquery"].read_text()[:200]


@pytest.mark.parametrize("view", ["head", "model"])
def test_view_draws_offline_standalone(view, tmp_path):
    result = _render(_page(tmp_path / f"{view}.html", attention_html(_attention(), TOKENS, view)))
    assert result["error"] is None, result
    assert result["drawn"] > 0 and result["blocked"] == [] and not result["pageErrors"], result
    assert result["fallbackHidden"] is True, "the static picture should give way to the drawn view"


def test_bertviz_alone_stays_blank_offline(tmp_path):
    """The control: without local libraries the view cannot draw here."""
    import bertviz

    raw = bertviz.head_view(_attention(), TOKENS, html_action="return").data
    result = _render(_page(tmp_path / "raw.html", raw), timeout_ms=5000)
    assert result["drawn"] == 0 and any("cdnjs" in url for url in result["blocked"]), result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_view_draws_offline_inside_jupyterlab(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("head_view(attention, tokens)")
    cell.outputs = [nbformat.v4.new_output(
        "display_data", data={"text/html": attention_html(_attention(), TOKENS, "head"), "text/plain": "<HTML>"})]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "view.ipynb")
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "data"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    bin_dir = Path(sys.executable).parent
    subprocess.run([bin_dir / "jupyter", "trust", "view.ipynb"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=60)  # JupyterLab runs scripts of trusted notebooks only
    port, token = _free_port(), "course-test-token"
    server = subprocess.Popen(
        [bin_dir / "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={tmp_path}"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        result = _render(f"http://127.0.0.1:{port}/lab/tree/view.ipynb?token={token}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert result["error"] is None, result
    assert result["drawn"] > 0 and result["blocked"] == [], result
