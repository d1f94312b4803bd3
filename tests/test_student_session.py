"""A student's session in a real browser: `make lab`, notebook 05, answers typed in, Run All.

JupyterLab runs headless through the students' own command (`make lab`, with a token on a free port) on a
scratch copy of notebook 05, the one with both matplotlib plots and bertviz attention views. Debian's
Chromium, with every request off this machine refused, types the solutions into the answer cells (one of
them wrong on purpose), runs all cells, and the test reads what a student would see: the visible checks'
verdicts, the wrong answer's message, a plot, the attention view drawn. It also checks what a student must
not see: nbgrader's instructor tools and JupyterLab's news pop-up. The same `make lab` serves two more tests: a
terminal opened as a student opens one, into which the self-check command that notebook 01 prints is typed as
printed, and the Assignment List's answer on a lab without an nbgrader exchange (one friendly line). Screenshots
go to build/screenshots/.

The control, an instructor's plain `jupyter lab`, shows those tools and the pop-up, and nbgrader's own error for
the missing exchange, so the checks can fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser_driver import ROOT, Terminal, jupyter_lab, offline_page, requires_browser
from notebooks import answer_source, grade_id, read, release_path, solution_path, with_answer
from test_check_command import printed_check_commands

from coursetools.assignment_list import NBGRADER_NO_EXCHANGE, NO_EXCHANGE
from coursetools.notebook_vocabulary import answer_id, is_answer_cell, is_graded_cell, points, test_id

pytestmark = requires_browser

NOTEBOOK = "05_multihead_attention"
SCREENSHOTS = ROOT / "build" / "screenshots"
# The Nbgrader menu's instructor entries ("Formgrader (local)" shows only when a local config is allowed).
INSTRUCTOR_MENU = {"Course List", "Formgrader", "Create assignment"}
INSTRUCTOR_PLUGINS = {
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
}
NEWS_QUESTION = "Would you like to get notified about official Jupyter news?"
# The answer typed wrong: RoPE rotates the queries but forgets the keys (its last exercise; Run All goes on past
# a failing test cell since tools/run_all_tags.py tags them, but waiting for this one's verdict then still
# means that every other verdict, plot and view has run before it).
WRONG_ID = "rotary_attention"
RIGHT_LINE = "q, k = self.rope(q, token_positions), self.rope(k, token_positions)"
WRONG_LINE = "q = self.rope(q, token_positions)"
# The notebook whose printed self-check command is typed into the lab's terminal, and its exercise answered.
TERMINAL_NOTEBOOK = "01_tokens_embeddings"
TERMINAL_ANSWERED = "embedding"


def _environment(tmp_path: Path) -> dict:
    """The machine's environment with Jupyter's and IPython's per-user state in a temp dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        OMP_NUM_THREADS="1",
    )
    return env


def _scratch_course(tmp_path: Path) -> Path:
    """A copy of the notebook's folder, and of the data file it finds by walking up from it.

    The lab's root has no nbgrader exchange: its nbgrader_config.py points at a folder that does not exist,
    wherever the machine's default exchange may be.
    """
    root = tmp_path / "lab"
    shutil.copytree(release_path(NOTEBOOK).parent, root / "course" / NOTEBOOK)
    (root / "data" / "tinystories").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "tinystories" / "tinystories_tiny.txt", root / "data" / "tinystories")
    (root / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(tmp_path / 'no-exchange')!r}\n")
    return root


def _assignment_lists(lab) -> dict:
    """What nbgrader's assignment-list server extension answers the panel: the course list, one course's lists."""
    answers = {}
    for path in ("courses", "assignments?course_id=course101"):
        request = urllib.request.Request(f"{lab.url}/{path}", headers={"Authorization": f"token {lab.token}"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            answers[path.partition("?")[0]] = json.loads(reply.read())
    return answers


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    """`make lab` on a scratch course, shared by this module's tests of the students' lab.

    Beside notebook 05 the course holds notebook 01 with one exercise answered and saved (the terminal's test
    checks it).
    """
    tmp = tmp_path_factory.mktemp("student-lab")
    root = _scratch_course(tmp)
    shutil.copytree(release_path(TERMINAL_NOTEBOOK).parent, root / "course" / TERMINAL_NOTEBOOK)
    answered = with_answer(
        read(release_path(TERMINAL_NOTEBOOK)),
        TERMINAL_ANSWERED,
        answer_source(read(solution_path(TERMINAL_NOTEBOOK)), TERMINAL_ANSWERED),
    )
    nbformat.write(answered, root / "course" / TERMINAL_NOTEBOOK / f"{TERMINAL_NOTEBOOK}.ipynb")
    with jupyter_lab(root, env=_environment(tmp), via_make=True) as lab:
        yield lab


def _open_notebook(page, lab) -> None:
    page.goto(lab.tree(f"course/{NOTEBOOK}/{NOTEBOOK}.ipynb"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    _wait_idle(page)


def _wait_idle(page, timeout_ms: int = 90_000) -> None:
    page.locator("#jp-main-statusbar", has_text="| Idle").wait_for(timeout=timeout_ms)


def _instructor_tools(page, lab) -> dict:
    """What of nbgrader's instructor tools, and of the news question, this JupyterLab page shows."""
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    menu = page.locator(".lm-Menu .lm-Menu-item:visible .lm-Menu-itemLabel").all_inner_texts()
    page.keyboard.press("Escape")
    config = json.loads(page.locator("#jupyter-config-data").text_content())
    return {
        "menu": set(menu),
        "sidebar": set(
            page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all(
                "tabs => tabs.map(t => t.getAttribute('title') || t.textContent)"
            )
        ),
        "locked": set(config.get("lockedExtensions", [])),
        "formgrader_status": page.request.get(f"{lab.url}/formgrader?token={lab.token}").status,
        "news_toasts": page.locator(".Toastify__toast", has_text=NEWS_QUESTION).count(),
    }


def _type_into_cell(page, index: int, source: str) -> None:
    """Replace cell ``index``'s text as a student does: click into it, select all, type."""
    editor = page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    page.keyboard.press("Escape")  # back to command mode


def _output_text(page, index: int) -> str:
    # text_content, not inner_text: cells off screen are not laid out (content-visibility), inner_text is empty.
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").text_content()


def _shot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"student_session_{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


def test_student_session_in_a_real_browser(student_lab):
    released, solved = read(release_path(NOTEBOOK)), read(solution_path(NOTEBOOK))
    answers = {grade_id(c): i for i, c in enumerate(released.cells) if is_answer_cell(c)}
    tests = {answer_id(grade_id(c)): i for i, c in enumerate(released.cells) if is_graded_cell(c)}
    assert answers.keys() == tests.keys() and WRONG_ID in answers, "notebook 05's exercises changed"
    wrong = answer_source(solved, WRONG_ID).replace(RIGHT_LINE, WRONG_LINE)
    assert wrong != answer_source(solved, WRONG_ID), "the wrong answer must differ from the solution"
    code = [(i, c.source) for i, c in enumerate(released.cells) if c.cell_type == "code"]
    plots = [i for i, source in code if "plt.subplots" in source]
    views = [i for view in ("head_view(", "model_view(") for i, source in code if view in source]
    assert plots and len(views) == 2 and max(plots[0], *views) < tests[WRONG_ID]

    started, lab = time.monotonic(), student_lab
    with offline_page(height=1000) as browsing:
        page = browsing.page
        try:
            _open_notebook(page, lab)
            for exercise, index in answers.items():
                _type_into_cell(page, index, wrong if exercise == WRONG_ID else answer_source(solved, exercise))
            page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Run").click()
            page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            failing = page.locator(".jp-Notebook .jp-Cell").nth(tests[WRONG_ID])
            failing.locator(".jp-OutputArea", has_text="checks failed").wait_for(state="attached", timeout=90_000)
            _wait_idle(page)

            verdicts = {exercise: _output_text(page, index) for exercise, index in tests.items()}
            for exercise, text in verdicts.items():
                if exercise != WRONG_ID:
                    assert (
                        "✓" in text
                        and "✗" not in text
                        and re.search(r"All \d+ visible( and \d+ hidden)? checks passed\.", text)
                    ), (
                        exercise,
                        text,
                    )
            lines = verdicts[WRONG_ID].splitlines()
            assert any(line.startswith("✗") for line in lines), verdicts[WRONG_ID]
            first_failure = next(i for i, line in enumerate(lines) if line.startswith("✗"))
            assert lines[first_failure + 1].startswith("    ") and lines[first_failure + 1].strip(), (
                "a failed check says why, on the (indented) line below it"
            )
            assert re.search(r"\d+ of \d+ checks failed:", verdicts[WRONG_ID]), verdicts[WRONG_ID]
            failing.scroll_into_view_if_needed()
            _shot(page, "failing_answer")

            plot = page.locator(".jp-Notebook .jp-Cell").nth(plots[0]).locator(".jp-OutputArea img").first
            plot.scroll_into_view_if_needed()
            assert plot.evaluate(
                "img => img.complete && img.naturalWidth > 100 && img.src.startsWith('data:image/png')"
            )
            _shot(page, "plot")
            for name, index in zip(("head_view", "model_view"), views, strict=True):
                view = page.locator(".jp-Notebook .jp-Cell").nth(index).locator("[id^='course-attention-']")
                view.scroll_into_view_if_needed()
                # bertviz draws into an SVG; the static picture under it hides once it has.
                view.locator("svg text").first.wait_for(timeout=30_000)
                assert view.locator(".fallback").is_hidden()
                _shot(page, name)

            seen = _instructor_tools(page, lab)
            assert seen["menu"] == {"Assignment List"}, seen
            assert not any("Create Assignment" in tab for tab in seen["sidebar"]), seen
            assert INSTRUCTOR_PLUGINS <= seen["locked"] and seen["formgrader_status"] == 404, seen
            assert seen["news_toasts"] == 0, "the news question popped up"
            refused = page.request.post(
                f"{lab.url}/lab/api/plugins",
                headers={"Authorization": f"token {lab.token}"},
                data=json.dumps({"cmd": "enable", "plugin_name": "@jupyter/nbgrader:create-assignment"}),
            )
            assert refused.status == 500 and "locked" in refused.text(), "the Extension Manager could turn it back on"
            # The assignment list is the student's tool: its extension loaded and opens.
            page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
            page.locator(".lm-Menu .lm-Menu-itemLabel", has_text="Assignment List").click()
            panel = page.locator("#nbgrader-assignment-list")
            panel.wait_for(timeout=30_000)
            # Without an exchange it says, in one line, what it is for (coursetools/assignment_list.py).
            panel.locator("#released_assignments_list_error", has_text=NO_EXCHANGE).wait_for(timeout=30_000)
            assert NBGRADER_NO_EXCHANGE not in panel.inner_text()
            _shot(page, "assignment_list")
            assert browsing.blocked == [], f"requests left this machine: {browsing.blocked}"
        except Exception:
            _shot(page, "failure")  # what the student saw when it went wrong
            raise
    print(f"student session: {time.monotonic() - started:.0f} s")


BROKEN = ("ModuleNotFoundError", "No module named", "command not found", "No such file")


def test_the_printed_check_command_runs_in_the_labs_terminal(student_lab):
    """A student opens File > New > Terminal in `make lab` and types the command that notebook 01 prints.

    The terminal opens in the lab's root with the course's Python first on PATH, so the check grades the lab's
    copy of the notebook (one exercise answered there, none in the repository's course/) and prints its score;
    in the old lab it opened in make's folder, and its login shell's /etc/profile took the course's Python off
    PATH (`python: command not found`, or the system's: `No module named 'nbformat'`).
    """
    (command,) = printed_check_commands(read(release_path(TERMINAL_NOTEBOOK)))
    total = sum(points(c) for c in read(release_path(TERMINAL_NOTEBOOK)).cells if is_graded_cell(c))
    (answered,) = [
        points(c) for c in read(release_path(TERMINAL_NOTEBOOK)).cells if grade_id(c) == test_id(TERMINAL_ANSWERED)
    ]
    lab = student_lab
    with offline_page(height=1000) as browsing:
        page = browsing.page
        try:
            page.goto(f"{lab.url}/lab/workspaces/terminal?reset&token={lab.token}")
            terminal = Terminal(page)
            terminal.type(command)
            terminal.wait_for(lambda said: "Score:" in said or any(sign in said for sign in BROKEN), 120)
            page.wait_for_timeout(500)
            output = terminal.output()
            _shot(page, "terminal_check")
        except Exception:
            _shot(page, "failure_terminal")
            raise
    assert "".join(command.split()) in "".join(output.split()), output[-3000:]  # typed (xterm wraps long lines)
    assert not [sign for sign in BROKEN if sign in output], output[-3000:]
    assert f"Score: {answered}/{total}" in output, output[-3000:]
    assert browsing.blocked == [], f"requests left this machine: {browsing.blocked}"


def test_the_assignment_list_says_in_one_line_that_this_lab_has_no_exchange(student_lab):
    """The panel's requests, on a lab without an nbgrader exchange: one friendly line, not nbgrader's error."""
    answers = _assignment_lists(student_lab)
    assert answers == dict.fromkeys(("courses", "assignments"), {"success": False, "value": NO_EXCHANGE})
    assert "\n" not in NO_EXCHANGE and len(NO_EXCHANGE) < 200


def test_control_an_instructor_lab_shows_the_tools(tmp_path):
    """The same checks on an instructor's plain `jupyter lab` find every tool, and the news question."""
    with (
        jupyter_lab(_scratch_course(tmp_path), env=_environment(tmp_path)) as lab,
        offline_page() as browsing,
    ):
        page = browsing.page
        _open_notebook(page, lab)
        page.locator(".Toastify__toast", has_text=NEWS_QUESTION).wait_for(timeout=30_000)
        seen = _instructor_tools(page, lab)
        lists = _assignment_lists(lab)
    assert INSTRUCTOR_MENU | {"Assignment List"} == seen["menu"], seen
    # and nbgrader's own error for the missing exchange, which the students' lab says in one line instead
    for answer in lists.values():
        assert not answer["success"] and answer["value"].strip().startswith(NBGRADER_NO_EXCHANGE), answer
    assert "Nbgrader Create Assignment" in seen["sidebar"] and seen["formgrader_status"] == 200, seen
    assert not seen["locked"] and seen["news_toasts"] == 1, seen
