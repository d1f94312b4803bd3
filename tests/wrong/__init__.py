"""Plausible wrong implementations, one module per notebook (``nb<notebook stem>.py``).

Each module has ``WRONG``: a list of ``Wrong(exercise, mistake, code, says)``, where
``code`` replaces the answer cell and ``says`` is a fragment the failure message must
contain, so the student is told what is wrong, not just that something is.
The code runs after ``PRELUDE``, the imports every course notebook's setup cell makes.

A wrong version is best written as an edit of the solution (``variant``): the solution's answer cell with
the mistake replacing a line or two, so it differs from a right answer only by the mistake and follows the
solution when the solution changes (``variant`` fails loudly when the text it replaces is gone).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import nbformat

from coursetools.notebook_vocabulary import grade_id, is_answer_cell, without_solution_markers


class Wrong(NamedTuple):
    exercise: str
    mistake: str
    code: str
    says: str


PRELUDE = "import math\nimport einops\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


@functools.cache
def solution_answers(notebook: str) -> dict[str, str]:
    """Grade id -> the solution's answer cell for that exercise, without nbgrader's solution markers."""
    cells = nbformat.read(SOLUTIONS / notebook / f"{notebook}.ipynb", as_version=4).cells
    return {grade_id(cell): without_solution_markers(cell.source) + "\n" for cell in cells if is_answer_cell(cell)}


def variant(notebook: str, exercise: str, *replacements: tuple[str, str]) -> str:
    """The solution's answer cell of ``exercise`` with each ``(old, new)`` replaced, once each, in order."""
    code = solution_answers(notebook)[exercise]
    for old, new in replacements:
        assert old in code, f"{notebook} {exercise}: {old!r} is not in the solution's answer cell"
        code = code.replace(old, new, 1)
    return code


def catalogue(notebook: str) -> tuple[dict[str, str], Callable[..., str]]:
    """A wrong-versions module's two tools: the solution's answer cells (``RIGHT``, which must pass) and
    ``variant`` bound to ``notebook`` (``variant(exercise, (old, new), ...)``)."""
    return solution_answers(notebook), functools.partial(variant, notebook)
