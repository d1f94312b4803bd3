"""Run All in a real JupyterLab goes through every untouched course notebook (issue 24).

JupyterLab runs headless on a scratch copy of the untouched release, and Debian's Chromium runs
``Run > Run All Cells`` in each notebook, then saves it; the saved file is checked cell by cell.
Every code cell must have run (Run All did not stop at the first failing test cell: JupyterLab
honours the ``raises-exception`` tag), the graded test cells show their failed checks
(``ChecksFailed``), a demonstration that needs an unfinished exercise (``tools/run_all_waiting.json``)
shows one line naming it and no traceback, every other cell raises nothing, and draws its picture
wherever the solution draws one. In the page, every picture a cell drew is an ``<img>`` with
alternative text (``coursetools.figures``). In notebook 00 Run All only draws the progress button;
a click on it shows the course's progress table.

The notebooks run as a student's would (no grading mode): with the exercises unfinished, the long
demonstrations stop at once; notebook 13's short training run (not an exercise's) takes 5 steps
(``COURSE_TINYSTORIES_STEPS``) instead of 80, and the demonstrations that need no exercise (notebook 15's
pre-training) run short, as in nbval (``COURSE_SHORT_RUNS``, tests/conftest.py). The notebooks are split over
two classes, each with one JupyterLab server and one browser, so that pytest-xdist's ``--dist loadscope`` runs
the classes on its two workers at once; the split balances their measured times.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import threading
import time
import urllib.request

import nbformat
import pytest
from browser_driver import ROOT, jupyter_lab, offline_page, requires_browser
from notebooks import discovered, read, release_path, solution_path
from test_student_session import _environment, _shot

sys.path.insert(0, str(ROOT / "tools"))
import run_all_tags  # noqa: E402

WAITING = run_all_tags.load_waiting()
PROMPT = re.compile(r"^\[\d+\]:$")
IDLE = "(ipykernel) | Idle"  # the status bar, once the notebook's kernel has started and is idle
RUN_ALL_TIMEOUT = 300  # seconds for one notebook's Run All; each takes 5-35 s on a busy 2-core machine
# Notebook 00 sits in a course folder of its own, so that its progress button grades it alone.
WELCOME = "00_welcome"

# Each class runs on one worker, and they take about the same time: 70 s and 74 s, each alone on a busy
# 2-core machine (2026-11-26, load 3; 108 s and 106 s at load 5). This test prints each notebook's time.
EARLY = (
    "00_welcome",
    "01_tokens_embeddings",
    "02_normalization",
    "03_rope",
    "04_attention",
    "05_multihead_attention",
    "06_feed_forward",
    "07_blocks",
    "16_serving_scaling",  # the later notebooks take longer: the last one joins the first class to even them out
)
LATE = tuple(notebook for notebook in discovered() if notebook not in EARLY)  # a new notebook joins it by itself


def test_the_split_covers_every_notebook():
    assert sorted(EARLY + LATE) == discovered()


def _where(notebook: str) -> str:
    """The notebook's folder in the scratch lab, relative to the lab's root."""
    return f"welcome/course/{notebook}" if notebook == WELCOME else f"course/{notebook}"


@pytest.fixture(scope="class")
def lab_and_page(request, tmp_path_factory):
    """One JupyterLab on a scratch copy of the class's notebooks (and data/, benchmarks/), and one browser page."""
    tmp = tmp_path_factory.mktemp("run-all")
    root = tmp / "lab"
    for notebook in request.cls.NOTEBOOKS:
        shutil.copytree(release_path(notebook).parent, root / _where(notebook))
    for folder in ("data", "benchmarks"):  # what the notebooks read, found above their folder
        shutil.copytree(ROOT / folder, root / folder)
    if WELCOME in request.cls.NOTEBOOKS:
        (root / "welcome" / "data" / "tinystories").mkdir(parents=True)
        shutil.copy(ROOT / "data" / "tinystories" / "tinystories_tiny.txt", root / "welcome" / "data" / "tinystories")
    env = _environment(tmp)
    env["COURSE_TINYSTORIES_STEPS"] = "5"
    env.pop("COURSE_GRADING", None)
    # expose_app_in_browser: window.jupyterapp, to open and save notebooks with JupyterLab's own commands
    with (
        jupyter_lab(root, env=env, args=("--LabApp.expose_app_in_browser=True",)) as lab,
        offline_page(height=1000) as browsing,
    ):
        _load(browsing.page, lab)
        yield lab, browsing


def _load(page, lab) -> None:
    """JupyterLab in the page, in a workspace of the test's own with nothing open."""
    page.goto(f"{lab.url}/lab/workspaces/run-all?reset&token={lab.token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")


def _cells(page):
    return page.locator(".jp-Notebook .jp-Cell")


def _wait_idle(page, timeout_ms: int = RUN_ALL_TIMEOUT * 1000) -> None:
    page.locator("#jp-main-statusbar", has_text=IDLE).wait_for(timeout=timeout_ms)


def _api(lab, method: str, path: str):
    request = urllib.request.Request(f"{lab.url}{path}", method=method, headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read()
    return json.loads(body) if body else None


def _images(cell) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def check_untouched_run(notebook: str, nb) -> None:
    """The assertions on an untouched notebook after Run All, on its saved cells."""
    solved = {c.id: c for c in read(solution_path(notebook)).cells}
    waiting = set(WAITING[notebook])
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        where = f"{notebook}, cell {cell.id}"
        assert cell.execution_count, f"{where} did not run"
        errors = _errors(cell)
        if run_all_tags.is_graded_test(cell):
            assert errors and errors[0]["ename"] == "ChecksFailed", f"{where}: {errors}"
        elif cell.id in waiting:
            # the unfinished answer itself, or a name that an earlier waiting cell could not make
            assert [o["ename"] for o in errors] in (["NotImplementedError"], ["NameError"]), f"{where}: {errors}"
            assert len(errors[0]["traceback"]) == 1, f"{where}: a traceback, not one line: {errors[0]['traceback']}"
            (line,) = errors[0]["traceback"]
            assert line.startswith('This cell waits for "Exercise '), f"{where}: {line}"
        else:
            assert not errors, f"{where} failed: {errors}"
            if _images(solved[cell.id]):
                assert _images(cell), f"{where} drew no picture (the solution draws one)"


def _run_all(page, notebook: str, cells) -> None:
    """Run > Run All Cells, then wait until every code cell has run and the kernel is idle.

    Fails at once, naming the cells, when Run All stops early (no cell waits to run any more, the
    kernel is idle and a code cell has not run), and after ``RUN_ALL_TIMEOUT`` when it never ends.
    """
    code = [c.id for c in cells if c.cell_type == "code"]
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Run").click()
    page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt")
    idle = page.locator("#jp-main-statusbar", has_text=IDLE)
    start = time.monotonic()
    stopped_since = None
    while True:
        shown = prompts.evaluate_all("ps => ps.map(p => p.textContent.trim())")
        drawn = len(shown) == len(code)  # JupyterLab draws a long notebook's cells a batch at a time
        not_run = [i for i, p in enumerate(shown + [""] * (len(code) - len(shown))) if not PROMPT.match(p)]
        if drawn and not not_run:
            break
        if drawn and "[*]:" not in shown and idle.count():
            stopped_since = stopped_since or time.monotonic()
        else:
            stopped_since = None
        first = not_run[0]
        after = f" after cell {code[first - 1]}" if first else ""
        if stopped_since and time.monotonic() - stopped_since > 5:
            pytest.fail(
                f"{notebook}: Run All stopped{after}: cell {code[first]} (and {len(not_run) - 1} more) never ran"
            )
        if time.monotonic() - start > RUN_ALL_TIMEOUT:
            pytest.fail(f"{notebook}: Run All did not finish in {RUN_ALL_TIMEOUT} s: cell {code[first]} has not run")
        time.sleep(0.5)
    _wait_idle(page)


def _save(page, lab, notebook: str) -> nbformat.NotebookNode:
    """Save the notebook (the command behind File > Save Notebook) and read the saved file.

    The command, not a click: a click on the menu right after Run All, while the page is still drawing
    the outputs, was sometimes lost.
    """
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    path = lab.root / _where(notebook) / f"{notebook}.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert any(c.get("execution_count") for c in nb.cells if c.cell_type == "code"), f"{notebook}: not saved"
    return nb


def _check_alt_text(page, notebook: str, nb) -> None:
    """Every picture in the notebook's outputs is an <img> with alternative text."""
    images = page.locator(".jp-Notebook .jp-OutputArea-output img")
    alts = images.evaluate_all("imgs => imgs.map(img => img.getAttribute('alt') || '')")
    without = [i for i, alt in enumerate(alts) if not alt.strip()]
    assert not without, f"{notebook}: {len(without)} of {len(alts)} pictures have no alternative text"
    figures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert len(alts) >= figures, f"{notebook}: {figures} pictures in the saved file, {len(alts)} in the page"


def _progress_click(page) -> None:
    button = page.get_by_role("button", name="Show my progress")
    assert button.count() == 1, "Run All draws the progress button"
    button.scroll_into_view_if_needed()
    widths = button.evaluate("b => [b.scrollWidth, b.clientWidth]")
    assert widths[0] <= widths[1], f"the button's label is cut off (its text needs {widths[0]} px, it has {widths[1]})"
    button.click()
    table = _cells(page).filter(has=button).locator(".jp-OutputArea-output", has_text="not started")
    table.last.wait_for(timeout=180_000)
    _shot(page, "run_all_progress_table")


def run_all_in_the_lab(notebook: str, lab, browsing) -> None:
    page = browsing.page
    cells = read(release_path(notebook)).cells
    code = [i for i, c in enumerate(cells) if c.cell_type == "code"]
    tests = [i for i in code if run_all_tags.is_graded_test(cells[i])]
    waiting = [i for i in code if cells[i].id in WAITING[notebook]]
    # The last code cell comes after a failing test cell: only a Run All that goes on reaches it.
    assert tests and tests[0] < code[-1], notebook
    start = time.monotonic()
    browsing.blocked.clear()
    try:
        # Opened as a student's double click would, in the page already loaded (a fresh page for each
        # notebook took 3-4 s more): the only notebook open, so the page's cells are its cells.
        page.evaluate(
            "async path => { await window.jupyterapp.commands.execute('docmanager:open', "
            "{path, factory: 'Notebook'}); }",
            f"{_where(notebook)}/{notebook}.ipynb",
        )
        _cells(page).first.wait_for(timeout=60_000)
        # every cell drawn (JupyterLab draws a long notebook a batch of cells at a time)
        page.wait_for_function(
            f"() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length >= {len(code)}", timeout=60_000
        )
        # A notebook opened after another may ask which kernel to start: the default.
        accept = page.locator(".jp-Dialog", has_text="Select Kernel").locator(".jp-mod-accept")
        idle = page.locator("#jp-main-statusbar", has_text=IDLE)  # a kernel, started and idle
        accept.or_(idle).first.wait_for(timeout=120_000)
        if accept.count():
            accept.click()
            _wait_idle(page, 120_000)
        _run_all(page, notebook, cells)
        saved = _save(page, lab, notebook)
        check_untouched_run(notebook, saved)
        _check_alt_text(page, notebook, saved)
        if notebook == WELCOME:
            _cells(page).nth(waiting[0]).scroll_into_view_if_needed()
            _cells(page).nth(waiting[0]).locator(".jp-OutputArea-output").first.wait_for(state="visible")
            _shot(page, f"run_all_{notebook}")
            _progress_click(page)
        # Only what the notebook's own text links (the Colab badge of notebook 13) may have been asked for.
        linked = "".join(c.source for c in cells if c.cell_type == "markdown")
        outside = [address for address in browsing.blocked if address not in linked]
        assert outside == [], f"{notebook}: requests left this machine: {outside}"
    except Exception:
        with contextlib.suppress(Exception):  # the failure explains itself, whatever happens here
            _shot(page, f"run_all_failure_{notebook}")
        with contextlib.suppress(Exception):
            _load(page, lab)  # afresh for the next notebook, whatever this one left behind
        raise
    finally:
        # Close it and shut its kernel down, so that the next notebook has the cores (in the background:
        # the server answers once the kernel has gone, a second or two).
        page.evaluate("async () => { await window.jupyterapp.commands.execute('application:close-all'); }")
        for session in _api(lab, "GET", "/api/sessions"):
            if session["path"].endswith(f"{notebook}.ipynb"):
                threading.Thread(
                    target=_api, args=(lab, "DELETE", f"/api/sessions/{session['id']}"), daemon=True
                ).start()
    print(f"{notebook}: Run All in the browser, saved and checked in {time.monotonic() - start:.1f} s")


@requires_browser
class TestRunAllEarly:
    NOTEBOOKS = EARLY

    @pytest.mark.parametrize("notebook", EARLY)
    def test_run_all_untouched(self, notebook, lab_and_page):
        run_all_in_the_lab(notebook, *lab_and_page)


@requires_browser
class TestRunAllLate:
    NOTEBOOKS = LATE

    @pytest.mark.parametrize("notebook", LATE)
    def test_run_all_untouched(self, notebook, lab_and_page):
        run_all_in_the_lab(notebook, *lab_and_page)
