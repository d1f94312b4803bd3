"""Every notebook prints its self-check command in one form, the one that works wherever the notebook came from.

JupyterLab's terminal has the course's Python first on its PATH (jupyter/student/jupyter_server_config.py), and
opens in the lab's root: the course's top folder in `make lab` and on Binder, the student's home on the hub,
where the Assignments panel fetched the notebook into NN_name/. So the command is `python -m autograder check
NN_name`: plain `python`, and the notebook's name, which ``autograder.notebook_path`` looks for in those places
(issue 52 §2: the path from the top folder failed on the hub). tests/test_student_session.py types the printed
command into a real terminal of `make lab`, tests/test_hub.py into a student's terminal on the hub.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from notebooks import discovered, read, release_path, solution_path

from autograder.notebook_path import locate
from autograder.notebooks import NOTEBOOKS

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def printed_check_commands(nb) -> list[str]:
    """The lines of the notebook's markdown code blocks that run ``autograder check``."""
    return [
        line.strip()
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for block in FENCE.findall(cell.source)
        for line in block.splitlines()
        if "autograder check" in line
    ]


def expected_command(notebook: str) -> str:
    return f"python -m autograder check {notebook}"


def test_every_notebook_is_covered():
    assert discovered() == NOTEBOOKS  # every notebook the grader has checks for is found in course/


@pytest.mark.parametrize("where", [solution_path, release_path], ids=["solutions", "course"])
@pytest.mark.parametrize("notebook", discovered())
def test_the_notebook_prints_the_one_form_with_its_own_path(notebook, where):
    assert printed_check_commands(read(where(notebook))) == [expected_command(notebook)]


# --- where `check NAME` finds the notebook -------------------------------------------------------------------------


def _notebook(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    return path


@pytest.mark.parametrize(
    "layout",
    [
        "course/02_normalization/02_normalization.ipynb",
        "02_normalization/02_normalization.ipynb",
        "02_normalization.ipynb",
    ],
    ids=["clone or Binder: the top folder", "hub: the fetched folder in the home", "the notebook's own folder"],
)
def test_check_finds_the_notebook_by_its_name_where_each_setup_keeps_it(tmp_path, layout):
    cwd, home = tmp_path / "here", tmp_path / "home"
    copy = _notebook(cwd / layout)
    for argument in ("02_normalization", "02_normalization.ipynb"):
        assert locate(argument, cwd, home) == (copy, cwd / argument != copy)  # by name, unless it is the path


def test_a_terminal_elsewhere_finds_the_hubs_fetched_copy_in_the_home(tmp_path):
    cwd, home = tmp_path / "somewhere", tmp_path / "home"
    cwd.mkdir()
    copy = _notebook(home / "02_normalization" / "02_normalization.ipynb")
    assert locate("02_normalization", cwd, home) == (copy, True)
    # the command the notebooks printed before, from a folder where it does not exist: found by its name
    assert locate("course/02_normalization/02_normalization.ipynb", cwd, home) == (copy, True)


def test_an_existing_path_is_graded_as_given_before_any_copy_found_by_name(tmp_path):
    cwd, home = tmp_path / "here", tmp_path / "home"
    _notebook(cwd / "02_normalization" / "02_normalization.ipynb")
    mine = _notebook(cwd / "drafts" / "02_normalization-Copy1.ipynb")
    assert locate("drafts/02_normalization-Copy1.ipynb", cwd, home) == (mine, False)


def test_no_such_notebook_says_no_such_file_with_the_paths_it_looked_at(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "check", "02_normalization"],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", done
    said = done.stderr.strip()
    assert said.startswith(f"02_normalization: no such file: {tmp_path / '02_normalization'};"), said
    for place in ("02_normalization", "course/02_normalization"):
        assert str(tmp_path / place) in said, said
    assert "\n" not in said and "Traceback" not in said, said
