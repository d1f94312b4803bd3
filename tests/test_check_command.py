"""Every notebook prints its self-check command in one form, the one that works in the lab's terminal.

JupyterLab's terminal opens in the lab's root, the course's top folder (`make lab` runs the server there; Binder
starts it in the repository), with the course's Python first on its PATH (jupyter/student/
jupyter_server_config.py). So the command is `python -m autograder check course/NN_name/NN_name.ipynb`: plain
`python`, the path from the top folder. tests/test_student_session.py types the printed command into a real
terminal of `make lab` and reads the check's report.
"""

from __future__ import annotations

import re

import pytest
from notebooks import discovered, read, release_path, solution_path

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
    return f"python -m autograder check course/{notebook}/{notebook}.ipynb"


def test_every_notebook_is_covered():
    assert discovered()[0] == "00_welcome" and discovered()[-1] == "13_tinystories" and len(discovered()) == 14


@pytest.mark.parametrize("where", [solution_path, release_path], ids=["solutions", "course"])
@pytest.mark.parametrize("notebook", discovered())
def test_the_notebook_prints_the_one_form_with_its_own_path(notebook, where):
    assert printed_check_commands(read(where(notebook))) == [expected_command(notebook)]
