"""Plausible wrong implementations of every exercise, and the harness that reads them.

The wrong versions of an exercise live beside it in its solution notebook: a raw cell tagged ``wrong-versions``
(``coursetools.notebook_vocabulary.is_wrong_versions_cell``) after the exercise's test cell, which the release
leaves out. The cell is TOML, one ``[[wrong]]`` table per mistake::

    [[wrong]]
    mistake = "eps outside the square root"   # what the mistake is (the test's id)
    says = "eps is added outside"             # a fragment the failure message must contain
    [[wrong.edit]]                            # the answer cell above, with ``old`` replaced by ``new`` (once, in order)
    old = '''
            out = centred / torch.sqrt(var + self.eps) * self.weight + self.bias
    '''
    new = '''
            out = centred / (torch.sqrt(var) + self.eps) * self.weight + self.bias
    '''

or, for a mistake that rewrites most of the cell, ``code`` (the whole answer cell) in place of the edits. As an edit,
a wrong version differs from a right answer only by the mistake and follows the solution when the solution changes
(:func:`variant` fails loudly when the text it replaces is gone). Each one is graded after ``PRELUDE``, the imports
every course notebook's setup cell makes (``tests/test_wrong_implementations.py``).

The modules ``nbNN_name.py`` build the rule dodges that ``tests/test_rules.py`` grades (code written from the
solution with helpers, e.g. every attention's softmax replaced).
"""

from __future__ import annotations

import functools
import tomllib
from typing import NamedTuple

from notebooks import read, solution_path

from coursetools.notebook_vocabulary import grade_id, is_answer_cell, is_wrong_versions_cell, without_solution_markers


class Wrong(NamedTuple):
    exercise: str
    mistake: str
    code: str
    says: str


PRELUDE = "import math\nimport einops\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


@functools.cache
def _solution_cells(notebook: str) -> tuple:
    return tuple(read(solution_path(notebook)).cells)


@functools.cache
def solution_answers(notebook: str) -> dict[str, str]:
    """Grade id -> the solution's answer cell for that exercise, without nbgrader's solution markers."""
    cells = _solution_cells(notebook)
    return {grade_id(cell): without_solution_markers(cell.source) + "\n" for cell in cells if is_answer_cell(cell)}


@functools.cache
def wrong_versions(notebook: str) -> tuple[Wrong, ...]:
    """Every wrong version in the notebook's ``wrong-versions`` cells, each of the answer cell above its cell."""
    found, exercise = [], None
    for cell in _solution_cells(notebook):
        if is_answer_cell(cell):
            exercise = grade_id(cell)
        elif is_wrong_versions_cell(cell):
            assert exercise, f"{notebook}: a wrong-versions cell before any answer cell"
            for entry in _entries(notebook, cell):
                _check_keys(notebook, exercise, entry)
                found.append(Wrong(exercise, entry["mistake"], _code(notebook, exercise, entry), entry["says"]))
    return tuple(found)


def _entries(notebook: str, cell) -> list[dict]:
    try:
        return tomllib.loads(cell.source)["wrong"]
    except (tomllib.TOMLDecodeError, KeyError) as error:
        raise AssertionError(f"{notebook}, cell {cell.id}: not a list of [[wrong]] tables in TOML: {error}") from None


REQUIRED_KEYS, ONE_OF_KEYS = {"mistake", "says"}, {"edit", "code"}  # both of the first, exactly one of the second


def _check_keys(notebook: str, exercise: str, entry: dict) -> None:
    """A misspelt key fails here, not as a wrong version that silently lost its edit or its message."""
    where = f"{notebook} {exercise} {entry.get('mistake')!r}"
    assert REQUIRED_KEYS <= entry.keys() and len(ONE_OF_KEYS & entry.keys()) == 1, f"{where}: keys {sorted(entry)}"
    unknown = entry.keys() - REQUIRED_KEYS - ONE_OF_KEYS
    assert not unknown, f"{where}: unknown keys {sorted(unknown)}"
    assert all(edit.keys() == {"old", "new"} for edit in entry.get("edit", ())), f"{where}: an edit's keys"


def _code(notebook: str, exercise: str, entry: dict) -> str:
    """A wrong version's answer cell: its ``code``, or the solution's with its edits."""
    if "code" in entry:
        return entry["code"]
    return variant(notebook, exercise, *((edit["old"], edit["new"]) for edit in entry["edit"]))


def variant(notebook: str, exercise: str, *replacements: tuple[str, str]) -> str:
    """The solution's answer cell of ``exercise`` with each ``(old, new)`` replaced, once each, in order."""
    code = solution_answers(notebook)[exercise]
    for old, new in replacements:
        assert old in code, f"{notebook} {exercise}: {old!r} is not in the solution's answer cell"
        code = code.replace(old, new, 1)
    return code
