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

SETUP = "import torch\nimport torch.nn.functional as F\nfrom coursetools.run_all import explain_unfinished\n"
RIGHT = "def one_hot(tokens, vocab_size):\n    return (tokens[..., None] == torch.arange(vocab_size)).float()\n"


@pytest.fixture
def shell(monkeypatch):
    shell = InteractiveShell.instance()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    cell_sources._SOURCES.clear()
    shell.run_cell(SETUP + "explain_unfinished()\n", store_history=True, cell_id="setup")  # as the notebooks' setup cells do
    yield shell
    shell.events.unregister("pre_run_cell", cell_sources._record)
    shell.set_custom_exc((), None)
    InteractiveShell.clear_instance()


def _run(shell, source, cell_id, capsys) -> tuple[str, str | None]:
    result = shell.run_cell(source, store_history=True, cell_id=cell_id)  # as ipykernel runs a cell
    error = result.error_in_exec
    return capsys.readouterr().out, f"{type(error).__name__}: {error}" if error else None


def test_a_passing_exercise_runs_its_hidden_checks_too(shell, capsys):
    _run(shell, RIGHT, "ex5-answer", capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', "ex5-test", capsys)
    assert error is None, out
    assert "(hidden)" in out and "All 2 visible and 1 hidden checks passed." in out, out  # the rules, 1 check


def test_a_mistake_only_a_hidden_check_catches_is_named_in_the_notebook(shell, capsys):
    # right for a 1-D sequence, which the visible check gives; a hidden one gives a [batch, seq] grid
    _run(shell, "def one_hot(tokens, vocab_size):\n    return (tokens.reshape(-1, 1) == torch.arange(vocab_size))"
                ".float()\n", "ex5-answer", capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', "ex5-test", capsys)
    assert error and error.startswith("ChecksFailed") and "the visible checks pass, but" in error, (error, out)
    assert "✗" in out and "(hidden)" in out, out


def test_the_rules_are_read_from_the_answer_cell_by_its_id(shell, capsys):
    # a forbidden call that the checks never reach: only reading the source finds it
    forbidden = RIGHT + "\n\ndef unused(tokens):\n    return F.one_hot(tokens)\n"
    _run(shell, forbidden, "ex5-answer", capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', "ex5-test", capsys)
    assert error and "✗ follows the exercise's rules" in out and "do not call F.one_hot" in out, out
    _run(shell, RIGHT, "ex5-answer", capsys)  # the answer cell run again: its latest source counts
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', "ex5-test", capsys)
    assert error is None, out


def test_without_cell_ids_the_checks_still_run(shell, capsys):
    _run(shell, RIGHT, None, capsys)
    out, error = _run(shell, 'from autograder import check\ncheck("one_hot", globals())', None, capsys)
    assert error is None and "rules" not in out, out
