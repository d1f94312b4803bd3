"""The source of every cell this kernel has run, by cell id: JupyterLab sends the id with each execution.

An exercise's test cell (``autograder.check``) reads its answer cell's latest source from here, so the static
half of the exercise's rules (a forbidden function under another name, a class it must not reuse) applies in the
notebook as it does at grading, where the saved notebook is read. A test cell ``<x>-test`` belongs to the answer
cell ``<x>-answer`` (``notebook_vocabulary.jupyter_answer_id``; tests/test_notebook_structure.py holds every notebook
to this).
"""

from __future__ import annotations

from coursetools.notebook_vocabulary import jupyter_answer_id

_SOURCES: dict[str, str] = {}  # cell id -> the source it last ran with
_RUNNING: list[str | None] = [None]  # the id of the cell running now


def _record(info) -> None:
    cell_id = getattr(info, "cell_id", None)
    _RUNNING[0] = cell_id
    if cell_id:
        _SOURCES[cell_id] = info.raw_cell


def remember(shell) -> None:
    """Record each cell's source before it runs (once per kernel, however often the setup cell runs)."""
    if _record not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", _record)
    # The cell running now (the setup cell, whose imports say what `F` and `nn` are) started before the hook
    # was there: its source is the last entry of IPython's input history.
    history = shell.user_ns.get("In") or [""]
    _SOURCES["(the cell that called remember)"] = history[-1]


def answer_source() -> tuple[str, list[str]] | None:
    """For the test cell running now, its answer cell's latest source and, as context for the rules' imports,
    every other cell's; None outside JupyterLab (no cell ids) or before the answer cell ran."""
    answer = jupyter_answer_id(_RUNNING[0])
    if answer is None or answer not in _SOURCES:
        return None
    return _SOURCES[answer], [source for cell, source in _SOURCES.items() if cell != answer]
