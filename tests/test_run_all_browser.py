"""Run All in a real JupyterLab goes through an untouched notebook (issue 24).

JupyterLab runs headless on a scratch copy of the untouched release of notebook 00 (``NOTEBOOKS``),
and Debian's Chromium runs ``Run > Run All Cells`` in it. Every code cell must get an execution count
(Run All did not stop at the first failing test cell: JupyterLab honours the ``raises-exception``
tag), the test cells show their failed checks, a demonstration that needs an exercise shows the one
line naming it, and a picture that needs none is drawn. In notebook 00 Run All only draws the
progress button; a click on it shows the course's progress table. tests/test_run_all.py runs all
fourteen notebooks the same way through nbclient, which is cheaper than a browser.
"""

from __future__ import annotations

import re
import shutil
import time

from browser_driver import ROOT, jupyter_lab, offline_page, requires_browser
from notebooks import read, release_path
from test_student_session import _environment, _shot

pytestmark = requires_browser

NOTEBOOKS = ("00_welcome",)  # the others run through nbclient (tests/test_run_all.py): a browser costs more
PROMPT = re.compile(r"^\[\d+\]:$")


def _cells(page):
    return page.locator(".jp-Notebook .jp-Cell")


def _wait_idle(page, timeout_ms: int = 120_000) -> None:
    page.locator("#jp-main-statusbar", has_text="| Idle").wait_for(timeout=timeout_ms)


def test_run_all_goes_through_untouched_notebooks(tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    root = tmp_path / "lab"
    for notebook in NOTEBOOKS:
        shutil.copytree(release_path(notebook).parent, root / "course" / notebook)
    (root / "data" / "tinystories").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "tinystories" / "tinystories_tiny.txt", root / "data" / "tinystories")

    started = time.monotonic()
    with jupyter_lab(root, env=_environment(tmp_path)) as lab, offline_page(height=1000) as browsing:
        page = browsing.page
        try:
            for notebook in NOTEBOOKS:
                cells = read(release_path(notebook)).cells
                code = [i for i, c in enumerate(cells) if c.cell_type == "code"]
                tests = [i for i in code if cells[i].metadata.get("nbgrader", {}).get("grade")]
                tagged = [i for i in code if "raises-exception" in cells[i].metadata.get("tags", [])]
                waiting = [i for i in tagged if i not in tests]
                # The last code cell comes after a failing test cell: only a Run All that goes on reaches it.
                assert tests and waiting and tests[0] < code[-1]
                # A workspace of its own: only this notebook open, so the page's cells are its cells.
                page.goto(f"{lab.url}/lab/workspaces/run-all-{notebook[:2]}/tree/course/{notebook}/{notebook}.ipynb"
                          f"?token={lab.token}")
                _cells(page).first.wait_for(timeout=60_000)
                # A second notebook in the same workspace may ask which kernel to start: the default.
                accept = page.locator(".jp-Dialog", has_text="Select Kernel").locator(".jp-mod-accept")
                try:
                    accept.wait_for(timeout=3_000)
                    accept.click()
                except PlaywrightTimeout:  # none asked
                    pass
                _wait_idle(page)
                page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Run").click()
                page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
                last = _cells(page).nth(code[-1]).locator(".jp-InputPrompt")
                deadline = time.monotonic() + 120
                while not PROMPT.match(last.text_content().strip()):  # a locator: cells may be re-rendered
                    assert time.monotonic() < deadline, f"{notebook}: Run All never reached the last cell"
                    time.sleep(0.5)
                _wait_idle(page)
                prompts = {i: _cells(page).nth(i).locator(".jp-InputPrompt").text_content().strip() for i in code}
                assert all(PROMPT.match(p) for p in prompts.values()), f"{notebook}: cells not run: {prompts}"
                # text_content, not inner_text: cells off screen are not laid out, inner_text is empty.
                out = {i: _cells(page).nth(i).locator(".jp-Cell-outputArea").text_content() for i in code}
                for i in tests:
                    assert "checks failed (see above)" in out[i], (notebook, i, out[i])
                for i in waiting:
                    assert 'This cell waits for "Exercise ' in out[i] and "Traceback" not in out[i], (notebook, i, out[i])
                pictures = [i for i in code if i not in tagged and _cells(page).nth(i).locator(".jp-Cell-outputArea img").count()]
                assert pictures, f"{notebook}: no picture drawn"
                _cells(page).nth(waiting[0]).scroll_into_view_if_needed()
                _shot(page, f"run_all_{notebook}")
                if notebook == "00_welcome":
                    button = page.get_by_role("button", name="Show my progress")
                    assert button.count() == 1, "Run All draws the progress button"
                    button.scroll_into_view_if_needed()
                    button.click()
                    table = _cells(page).filter(has=button).locator(".jp-OutputArea-output", has_text="not started")
                    table.last.wait_for(timeout=180_000)
                    _shot(page, "run_all_progress_table")
            assert browsing.blocked == [], f"requests left this machine: {browsing.blocked}"
        except Exception:
            _shot(page, "run_all_failure")
            raise
    print(f"Run All in the browser: {time.monotonic() - started:.0f} s")
