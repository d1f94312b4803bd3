"""No silent waits (issue 35 §3): what takes more than a few seconds says what it is doing as it goes.

``check`` says its phases on stderr (starting Python, running cells i/N, checks j/M: a line each, or a bar on a
terminal) and keeps stdout for the report; the notebook's progress button shows a line per notebook as each
is graded. The numbers expected are counted from the notebook and the checks, not from the grader.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

from notebooks import autograder_as_it_goes, read, solution_path

from autograder.exercises import checks_for
from autograder.phases import PREFIX, Display, Phase
from coursetools.notebook_vocabulary import is_test_cell

NOTEBOOK = "01_tokens_embeddings"  # the quickest to grade


def test_check_says_each_phase_as_it_goes_and_keeps_stdout_for_the_report():
    nb = read(solution_path(NOTEBOOK))
    run = [i + 1 for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and not is_test_cell(cell)]
    exercises = checks_for(NOTEBOOK).exercises
    checks = [e.id for e in exercises for _ in range(len(e.checks) + bool(e.rules))]  # the rules, read: one more
    status, out, said, ended = autograder_as_it_goes("check", str(solution_path(NOTEBOOK)), "--json")
    assert status == 0, said[-20:]

    report = json.loads(out)
    assert out == json.dumps(report, indent=2) + "\n", "stdout holds the JSON report and nothing else"
    # every check ran: the report's own counts ("all 7 checks passed") add up to the checks counted here
    assert sum(int(e["message"].split()[1]) for e in report["exercises"]) == len(checks), report
    phases = [line.removeprefix(PREFIX) for _, line in said if line.startswith(PREFIX)]
    sandboxed = phases[0] == "starting Python (sandboxed)"
    assert phases == [
        "starting Python (sandboxed)" if sandboxed else "starting Python (without a sandbox)",
        *(f"running cells {i}/{len(run)} (cell {cell})" for i, cell in enumerate(run, 1)),
        *(f"checks {j}/{len(checks)} ({exercise})" for j, exercise in enumerate(checks, 1)),
    ], said
    if sandboxed:  # else the note that it ran without one follows the phases
        assert len(said) == len(phases), said
    assert said[0][0] < ended - 1, "the phases came only at the end"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_that_is_gone_once_done():
    terminal = _Terminal()
    display = Display(terminal)
    display(Phase("starting", detail="sandboxed"))
    for i in range(1, 4):
        display(Phase("cells", i, 3, f"cell {i * 2}"))
    assert terminal.getvalue().rsplit("\r", 1)[-1].startswith("running cells 3/3 |"), terminal.getvalue()
    display(Phase("checks", 1, 2, "embedding"))
    display.close()
    drawn = terminal.getvalue()
    assert "starting Python (sandboxed)" in drawn and "cell 6" in drawn and "checks 1/2" in drawn
    assert "\n" not in drawn and PREFIX not in drawn, drawn  # redrawn in place, never a line per step
    assert drawn.rsplit("\r", 2)[-2].strip() == "", "the bar is wiped before the report is printed"


def test_a_closed_stream_ends_the_display_not_the_grading():
    stream = io.StringIO()
    display = Display(stream)
    stream.close()
    display(Phase("cells", 1, 2))
    display.close()


# --- the progress button of notebook 00 (coursetools.run_all.progress_button) ---

SLOW_GRADER = """
import sys, time
from pathlib import Path
from autograder import progress
from autograder.__main__ import main

go = Path(sys.argv[1])
last = progress.notebook_paths(progress.find_course())[-1]

def grade_row(path, course, timeout, limits):  # a stand-in for grading; the last notebook waits for the test
    while path == last and not go.exists():
        time.sleep(0.05)
    relative = str(path.relative_to(course))
    return progress.Row(path.stem, relative, "graded", score=1, max_score=2)

progress.grade_row = grade_row
sys.exit(main([*sys.argv[2:], "--workers", "1"]))
"""


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_progress_button_shows_each_notebook_as_it_is_graded(tmp_path, monkeypatch):
    """The button runs ``python -m autograder progress``, here with a stand-in grader whose last notebook waits:
    the lines of the notebooks graded before it show while it waits, and the table comes at the end."""
    import ipywidgets
    from IPython import display as ipython_display

    from autograder.notebooks import NOTEBOOKS
    from coursetools import run_all

    folder = tmp_path / "course" / "00_welcome"  # where the welcome notebook runs
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("COURSE_PROGRESS_CACHE", str(tmp_path / "cache"))
    go = tmp_path / "go"
    real_popen = subprocess.Popen
    ran = []

    def popen(command, **options):
        assert command[:4] == [sys.executable, "-m", "autograder", "progress"], command
        ran.append(command)
        return real_popen([sys.executable, "-c", SLOW_GRADER, str(go), *command[3:]], **options)

    shown = []
    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(ipython_display, "display", shown.append)
    run_all.progress_button()
    (box,) = shown
    button, output = box.children
    assert isinstance(button, ipywidgets.Button) and isinstance(output, ipywidgets.Output)

    def text() -> str:
        return "".join(part.get("text", "") for part in output.outputs)

    total = len(NOTEBOOKS)
    try:
        button.click()
        assert _wait(lambda: f"[{total - 1}/{total}]" in text() or not button.disabled, 60), text()
        time.sleep(0.3)  # time enough for anything else already said to show
        assert f"[{total}/{total}]" not in text() and "total" not in text(), "the last notebook is still waiting"
        assert button.disabled
    finally:
        go.touch()
    assert _wait(lambda: not button.disabled, 60), text()
    assert ran, "the button ran the progress command"
    lines = text().splitlines()
    rows = [line for line in lines if line.startswith("[")]
    assert [row.split("]")[0] for row in rows] == [f"[{n}/{total}" for n in range(1, total + 1)], lines
    assert lines[-1].split() == ["total", f"{total}/{2 * total}"], lines
    assert lines.index(rows[-1]) < lines.index(next(line for line in lines if line.startswith("notebook")))
