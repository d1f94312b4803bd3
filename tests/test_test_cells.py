"""What an exercise's test cell (``autograder.check``) runs and shows, in a real IPython shell.

Issue 24: the test cell names a catalogued mistake, even one only a hidden check or the static half of a rule
catches. tests/test_wrong_implementations.py walks the whole catalogue (``shown_by_test_cell``); these tests
prove the two mechanisms that make it true in the notebook: the hidden checks run once the visible ones pass,
and the answer cell's source is read by cell id, as JupyterLab sends it.
"""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from coursetools import cell_sources
from coursetools.notebook_vocabulary import jupyter_test_id

SETUP = "import torch\nimport torch.nn.functional as F\nfrom coursetools.run_all import explain_unfinished\n"
ANSWER_CELL = "ex5-answer"  # one_hot's answer cell id, as JupyterLab sends it
TEST_CELL = jupyter_test_id(ANSWER_CELL)
RIGHT = "def one_hot(tokens, vocab_size):\n    return (tokens[..., None] == torch.arange(vocab_size)).float()\n"


@pytest.fixture
def shell(monkeypatch):
    shell = InteractiveShell.instance()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    cell_sources._SOURCES.clear()
    shell.run_cell(
        SETUP + "explain_unfinished()\n", store_history=True, cell_id="setup"
    )  # as the notebooks' setup cells do
    yield shell
    shell.events.unregister("pre_run_cell", cell_sources._record)
    shell.set_custom_exc((), None)
    InteractiveShell.clear_instance()


def _run(shell, source, cell_id, capsys) -> tuple[str, str | None]:
    result = shell.run_cell(source, store_history=True, cell_id=cell_id)  # as ipykernel runs a cell
    error = result.error_in_exec
    return capsys.readouterr().out, f"{type(error).__name__}: {error}" if error else None


def test_a_passing_exercise_runs_its_hidden_checks_too(shell, capsys):
    _run(shell, RIGHT, ANSWER_CELL, capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', TEST_CELL, capsys)
    assert error is None, out
    assert "(hidden)" in out and "All 2 visible and 1 hidden checks passed." in out, out  # the rules, 1 check


def test_a_mistake_only_a_hidden_check_catches_is_named_in_the_notebook(shell, capsys):
    # right for a 1-D sequence, which the visible check gives; a hidden one gives a [batch, seq] grid
    _run(
        shell,
        "def one_hot(tokens, vocab_size):\n    return (tokens.reshape(-1, 1) == torch.arange(vocab_size)).float()\n",
        ANSWER_CELL,
        capsys,
    )
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', TEST_CELL, capsys)
    assert error and error.startswith("ChecksFailed") and "the visible checks pass, but" in error, (error, out)
    assert "✗" in error and "(hidden)" in error, (error, out)  # the failures are the error's own text


def test_the_rules_are_read_from_the_answer_cell_by_its_id(shell, capsys):
    # a forbidden call that the checks never reach: only reading the source finds it
    forbidden = RIGHT + "\n\ndef unused(tokens):\n    return F.one_hot(tokens)\n"
    _run(shell, forbidden, ANSWER_CELL, capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', TEST_CELL, capsys)
    assert error and "✗ follows the exercise's rules" in error and "do not call F.one_hot" in error, (error, out)
    _run(shell, RIGHT, ANSWER_CELL, capsys)  # the answer cell run again: its latest source counts
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', TEST_CELL, capsys)
    assert error is None, out


def test_without_cell_ids_the_checks_still_run(shell, capsys):
    _run(shell, RIGHT, None, capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', None, capsys)
    assert error is None and "rules" not in out, out


def test_nbgrader_validate_shows_the_failed_checks(tmp_path):
    """What the toolbar's Validate button runs (``nbgrader validate``) shows a failing test cell's error only: the
    failed checks and why must be that error's text, not lines printed above it."""
    import subprocess
    import sys
    from pathlib import Path

    import nbformat
    from notebooks import answer_source, read, release_path, solution_path, with_answer

    notebook, solution = read(release_path("02_normalization")), read(solution_path("02_normalization"))
    wrong = answer_source(solution, "layer_norm").replace("+ self.eps", "+ 0 * self.eps")  # eps left out
    assert wrong != answer_source(solution, "layer_norm")
    for exercise in ("layer_norm", "rms_norm"):
        notebook = with_answer(
            notebook, exercise, wrong if exercise == "layer_norm" else answer_source(solution, exercise)
        )
    nbformat.write(notebook, tmp_path / "02_normalization.ipynb")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "validate", "02_normalization.ipynb"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = done.stdout
    assert "VALIDATION FAILED ON 1 CELL" in said, said[-3000:]
    assert "✗ eps sits inside the square root" in said and "LayerNorm(16, eps=" in said, said[-3000:]


# --- a test cell's time limit: an answer that never returns, and the stop button -------------------------------

HANGS = "calls = 0\ndef relative_positions(n):\n    global calls\n    calls += 1\n    while True:\n        pass\n"


def _test_cell(shell, capsys, **options) -> tuple[str, str | None]:
    arguments = "".join(f", {name}={value!r}" for name, value in options.items())
    source = f'from autograder import check\ncheck("relative_positions", globals(){arguments})'
    return _run(shell, source, "ex1-test", capsys)


def test_an_answer_that_never_returns_fails_the_test_cell_naming_its_line(shell, capsys):
    """Issue 52 §4: the test cell stops the call at grading's time limit (here 1 s), names the student's line,
    quoted, and runs none of the exercise's other checks, each of which would wait as long again."""
    _run(shell, HANGS, "ex1-answer", capsys)
    out, error = _test_cell(shell, capsys, timeout=1)
    assert error and error.startswith("ChecksFailed"), (error, out)
    assert "did not finish within 1 s (an infinite loop, or far too slow)" in error, error
    assert "line 5 of your cell In[" in error and "in relative_positions: `while True:`" in error, error
    assert "not run: an earlier check of this exercise ran out of time in your code" in error, error
    assert shell.user_ns["calls"] == 1, "the exercise's other checks called the hung code again"


def test_interrupting_a_test_cell_says_where_the_code_was_without_the_graders_traceback(shell, capsys):
    """The stop button raises KeyboardInterrupt in the running code: the test cell ends with one message that
    names the student's line, and IPython shows no traceback through autograder's modules."""
    _run(shell, HANGS.replace("        pass\n", "        raise KeyboardInterrupt\n"), "ex1-answer", capsys)
    result = shell.run_cell(
        'from autograder import check\ncheck("relative_positions", globals())', store_history=True, cell_id="ex1-test"
    )
    shown = capsys.readouterr()
    error = result.error_in_exec
    assert type(error).__name__ == "ChecksFailed", error
    assert "not run: an earlier check of this exercise ran out of time in your code" in str(error), error
    assert "was interrupted: it was running line 6 of your cell In[" in str(error), error
    assert "autograder/" not in shown.out + shown.err, shown.out + shown.err  # no traceback through the grader
    assert shell.user_ns["calls"] == 1


def test_an_interrupt_in_the_graders_own_code_ends_the_test_cell_in_one_line(shell, capsys, monkeypatch):
    import autograder.feedback

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(autograder.feedback, "run_exercise", interrupted)
    _run(shell, RIGHT, ANSWER_CELL, capsys)
    result = shell.run_cell(
        'from autograder import check\ncheck("one_hot", globals())', store_history=True, cell_id=TEST_CELL
    )
    shown = capsys.readouterr()
    assert type(result.error_in_exec).__name__ == "ChecksFailed", result.error_in_exec
    assert "interrupted while checking" in str(result.error_in_exec)
    assert "Traceback" not in shown.out + shown.err and "autograder/" not in shown.out + shown.err
