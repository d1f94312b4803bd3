"""Helpers for tests: find the course's notebooks, edit their answer cells, run them here."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import matplotlib
import nbformat

from autograder.errors import cell_number
from autograder.grading import student_cells
from autograder.notebooks import NOTEBOOKS
from coursetools.grading_run import GRADING_ENV
from coursetools.notebook_vocabulary import grade_id, notebook_files

ROOT = Path(__file__).resolve().parents[1]


def discovered() -> list[str]:
    """Notebooks found in solutions/, whether or not the autograder knows them."""
    return sorted(p.parent.name for p in notebook_files(ROOT / "solutions"))


def solution_path(notebook: str) -> Path:
    return ROOT / "solutions" / notebook / f"{notebook}.ipynb"


def release_path(notebook: str) -> Path:
    return ROOT / "course" / notebook / f"{notebook}.ipynb"


def read(path: Path):
    return nbformat.read(path, as_version=4)


def answer_source(nb, exercise_id: str) -> str:
    (cell,) = [c for c in nb.cells if grade_id(c) == exercise_id]
    return cell.source


def with_answer(nb, exercise_id: str, source: str):
    """A copy of ``nb`` whose answer cell ``exercise_id`` holds ``source``."""
    nb = copy.deepcopy(nb)
    (cell,) = [c for c in nb.cells if grade_id(c) == exercise_id]
    cell.source = source
    return nb


@contextlib.contextmanager
def working_directory(path: Path):
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def require_sandbox() -> None:
    """Skip where bubblewrap cannot run, except in CI (COURSE_REQUIRE_SANDBOX=1), where that fails."""
    import pytest

    from autograder.sandbox import unavailable_reason

    reason = unavailable_reason()
    if reason and os.environ.get("COURSE_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"the sandbox is required here: {reason}")
    if reason:
        pytest.skip(reason)


def run_here(nb, cwd: Path) -> dict:
    """Execute a notebook's student cells in this process (no test cells), as graded; skip cells that fail."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace: dict = {"__name__": "__notebook__"}
    # As the grader runs them: the namespace is for checks, so long demonstrations are cut short.
    with working_directory(cwd), mock.patch.dict(os.environ, {GRADING_ENV: "1"}):
        for index, source in student_cells(nb):
            try:
                # dont_inherit: run cells as Jupyter does, without this file's `from __future__ import
                # annotations` (under it a @dataclass cell fails, its module "__notebook__" being unknown)
                exec(compile(source, f"<cell {cell_number(index)}>", "exec", dont_inherit=True), namespace)
            except Exception:  # noqa: BLE001 - a stub's demo cells fail; the checks say why
                pass
    plt.close("all")
    return namespace


__all__ = [
    "NOTEBOOKS",
    "ROOT",
    "answer_source",
    "grade_id",
    "read",
    "release_path",
    "require_sandbox",
    "run_here",
    "solution_path",
    "with_answer",
]


def autograder_as_it_goes(*args: str) -> tuple[int, str, list[tuple[float, str]], float]:
    """``python -m autograder ARGS`` with stderr read as it comes: (exit status, stdout, [(seconds since the start,
    stderr line)], seconds until it ended), to see what a command says while it works, not only at the end."""
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-m", "autograder", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as done:
        said = [(time.monotonic() - started, line.rstrip("\n")) for line in done.stderr]
        out = done.stdout.read()
    return done.returncode, out, said, time.monotonic() - started
