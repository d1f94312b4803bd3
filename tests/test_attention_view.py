"""bertviz views draw with no internet access: standalone, and inside JupyterLab.

A real browser (Debian's Chromium, driven from Python by tests/browser_driver.py) opens the view
with every request that would leave this machine refused, and waits for bertviz's SVG to draw.
As a control, bertviz's own HTML (which loads its libraries from a CDN) stays blank.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from browser_driver import jupyter_lab, offline_page, requires_browser

from coursetools.attention_view import attention_html

pytestmark = requires_browser

TOKENS = ["Lily", "saw", "a", "big", "red", "ball", "."]
# How many shapes bertviz has drawn (0 before it draws), and whether the course's static picture
# has given way to the drawing (null where the page has no such picture).
DRAWN = """() => { const svg = document.querySelector('[id^="bertviz-"] svg');
                   return svg ? svg.querySelectorAll("rect, line, text").length : 0; }"""
FALLBACK_HIDDEN = """() => { const box = document.querySelector('[id^="course-attention-"] .fallback');
                            return box ? getComputedStyle(box).display === "none" : null; }"""


def _attention(layers=3, heads=4):
    seq = len(TOKENS)
    g = torch.Generator().manual_seed(0)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return [
        torch.softmax(torch.randn(1, heads, seq, seq, generator=g).masked_fill(~causal, float("-inf")), -1)
        for _ in range(layers)
    ]


def _render(url: str, timeout_ms: int = 90000) -> dict:
    """Open ``url`` offline and wait for bertviz to draw: what it drew, what was refused, what raised."""
    from playwright.sync_api import TimeoutError as Timeout

    with offline_page() as browsing:
        page, result = browsing.page, {"drawn": 0, "error": None, "fallback_hidden": None}
        try:
            page.goto(url)
            page.wait_for_function(f"({DRAWN})() > 0", timeout=timeout_ms, polling=250)
            result["drawn"] = page.evaluate(DRAWN)
            try:  # the course's script looks for the drawing every 100 ms, then hides the picture
                page.wait_for_function(f"({FALLBACK_HIDDEN})() !== false", timeout=5000, polling=100)
            except Timeout:
                pass
            result["fallback_hidden"] = page.evaluate(FALLBACK_HIDDEN)
        except Timeout as error:
            result["error"] = str(error).splitlines()[0]
        return dict(result, blocked=list(browsing.blocked), page_errors=list(browsing.page_errors))


def _page(path: Path, body: str) -> str:
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    return path.as_uri()


@pytest.mark.parametrize("view", ["head", "model"])
def test_view_draws_offline_standalone(view, tmp_path):
    result = _render(_page(tmp_path / f"{view}.html", attention_html(_attention(), TOKENS, view)))
    assert result["error"] is None, result
    assert result["drawn"] > 0 and result["blocked"] == [] and not result["page_errors"], result
    assert result["fallback_hidden"] is True, "the static picture should give way to the drawn view"


def test_bertviz_alone_stays_blank_offline(tmp_path):
    """The control: without local libraries the view cannot draw here."""
    import bertviz

    raw = bertviz.head_view(_attention(), TOKENS, html_action="return").data
    result = _render(_page(tmp_path / "raw.html", raw), timeout_ms=5000)
    assert result["drawn"] == 0 and any("cdnjs" in url for url in result["blocked"]), result


def test_view_draws_offline_inside_jupyterlab(tmp_path):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("head_view(attention, tokens)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data", data={"text/html": attention_html(_attention(), TOKENS, "head"), "text/plain": "<HTML>"}
        )
    ]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "view.ipynb")
    env = dict(
        os.environ,
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    subprocess.run(
        [Path(sys.executable).parent / "jupyter", "trust", "view.ipynb"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )  # JupyterLab runs scripts of trusted notebooks only
    with jupyter_lab(tmp_path, env=env) as lab:
        result = _render(lab.tree("view.ipynb"))
    assert result["error"] is None, result
    assert result["drawn"] > 0 and result["blocked"] == [], result
    assert result["fallback_hidden"] is True, "the static picture should give way to the drawn view"
