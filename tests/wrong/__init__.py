"""Plausible wrong implementations of every exercise, and the harness that reads them.

The wrong versions of a notebook's exercises live in ``wrong/nb<notebook>.py``, beside that notebook's checks
(``autograder/notebooks/nb<notebook>.py``) and named like them, but here in tests/: they quote the solution's lines,
so they stay out of the release and of the wheel. Each module's ``WRONG_VERSIONS`` is a tuple of
:class:`WrongVersion`, one per mistake::

    WrongVersion(
        LAYER_NORM,                       # the exercise's declaration, imported from its checks' module
        "eps outside the square root",    # what the mistake is (the test's id)
        "eps is added outside",           # a fragment the failure message must contain
        edit(_OUT, "out = centred / (torch.sqrt(var) + self.eps) * self.weight + self.bias"),
    )

Each ``edit(old, new)`` replaces ``old`` by ``new`` in the solution's answer cell of the exercise, once, in order; a
line that several mistakes edit is quoted once, as a module constant (``_OUT`` above). For a mistake that rewrites
most of the cell, ``code=`` (the whole answer cell) takes the place of the edits. As an edit, a wrong version differs
from a right answer only by the mistake and follows the solution when the solution changes (:func:`variant` fails
loudly when the text it replaces is gone). Each one is graded after ``PRELUDE``, the imports every course
notebook's setup cell makes (``tests/test_wrong_implementations.py``).

``wrong/edits.py`` builds the right answers in other styles and the rule dodges that ``tests/test_rules.py`` grades.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import NamedTuple

from notebooks import read, solution_path

from autograder.exercises import Exercise, checks_for, module_name
from coursetools.notebook_vocabulary import grade_id, is_answer_cell, without_solution_markers


def edit(old: str, new: str) -> tuple[str, str]:
    """Replace ``old`` (text of the solution's answer cell) by ``new``."""
    return old, new


@dataclass(frozen=True, init=False)
class WrongVersion:
    """One plausible mistake in one exercise's answer, as the edits that make it or as the whole cell."""

    exercise: Exercise
    mistake: str
    says: str
    edits: tuple[tuple[str, str], ...]
    code: str | None

    def __init__(self, exercise: Exercise, mistake: str, says: str, *edits: tuple[str, str], code: str | None = None):
        assert bool(edits) != (code is not None), f"{mistake!r}: give the edits or the whole code, not both or neither"
        for name, value in dict(exercise=exercise, mistake=mistake, says=says, edits=edits, code=code).items():
            object.__setattr__(self, name, value)


class Wrong(NamedTuple):
    """A wrong version ready to grade: the exercise's grade id and the answer cell's code."""

    exercise: str
    mistake: str
    code: str
    says: str


PRELUDE = "import math\nimport einops\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


@functools.cache
def solution_answers(notebook: str) -> dict[str, str]:
    """Grade id -> the solution's answer cell for that exercise, without nbgrader's solution markers."""
    cells = read(solution_path(notebook)).cells
    return {grade_id(cell): without_solution_markers(cell.source) + "\n" for cell in cells if is_answer_cell(cell)}


@functools.cache
def wrong_versions(notebook: str) -> tuple[Wrong, ...]:
    """Every wrong version of the notebook's exercises (``wrong/nb<notebook>.py``), with its code made."""
    declared = importlib.import_module(f"wrong.{module_name(notebook)}").WRONG_VERSIONS
    exercises = checks_for(notebook).exercises
    found = []
    for version in declared:
        assert version.exercise in exercises, f"{notebook}: {version.mistake!r} is for an exercise of another notebook"
        code = version.code if version.code is not None else variant(notebook, version.exercise.id, *version.edits)
        found.append(Wrong(version.exercise.id, version.mistake, code, version.says))
    return tuple(found)


def variant(notebook: str, exercise: str, *replacements: tuple[str, str]) -> str:
    """The solution's answer cell of ``exercise`` with each ``(old, new)`` replaced, once each, in order."""
    code = solution_answers(notebook)[exercise]
    for old, new in replacements:
        assert old in code, f"{notebook} {exercise}: {old!r} is not in the solution's answer cell"
        code = code.replace(old, new, 1)
    return code
