"""The course notebooks' vocabulary, in one place: which cells are answers, tests and preamble, how they pair, what
an unfinished answer says, and which files are course notebooks.

The autograder (grading, the nbgrader plugin, the reports), the student-side tools (``coursetools``), the maintenance
tools (``tools/``) and the tests all read the same notebooks. Each rule below used to be spelled again where it was
needed, and two of them had drifted apart; ``tests/test_notebook_vocabulary.py`` now fails when a file reads nbgrader's
cell metadata or spells the stub line itself instead of calling this module.

Every function takes a cell as a plain dict (a notebook read as JSON) or as an nbformat ``NotebookNode`` (a dict
subclass) alike, so this module imports neither nbformat nor torch: it is cheap to import in a kernel, a grading
worker or a tool.

Two id conventions pair an exercise's answer cell with its test cell, and both are real:

- nbgrader's **grade ids** (``metadata.nbgrader.grade_id``): the answer cell is ``<id>`` and its test cell
  ``<id>_test`` (:func:`test_id`, :func:`answer_id`). The autograder registers its checks under ``<id>`` and nbgrader's
  gradebook records each test cell's score under ``<id>_test``.
- Jupyter's **cell ids** (``cell.id``, nbformat 4.5): the answer cell is ``<x>-answer`` and its test cell ``<x>-test``
  (:func:`jupyter_test_id`, :func:`jupyter_answer_id`). JupyterLab sends only the cell id with each execution, so a
  test cell running in a kernel finds its answer cell's source by this pair (``coursetools.cell_sources``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# ---------------------------------------------------------------------------------------------------------------
# nbgrader's cell metadata


def nbgrader_meta(cell: Mapping) -> Mapping:
    """The cell's nbgrader metadata (``metadata.nbgrader``); empty for a cell nbgrader does not manage.

    The only place that reads the key: nbgrader's schema (grade_id, solution, grade, points, locked) is then
    read through the functions below."""
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def nbgrader_resources(resources: Mapping) -> Mapping:
    """What nbgrader's converters put in nbconvert's ``resources`` under ``"nbgrader"`` (the assignment, the
    student, the gradebook's url) for a preprocessor; empty when the preprocessor is not run by nbgrader."""
    return resources.get("nbgrader") or {}


def grade_id(cell: Mapping) -> str | None:
    """The cell's nbgrader grade id (``<id>`` for an answer cell, ``<id>_test`` for its test cell), or None."""
    return nbgrader_meta(cell).get("grade_id") or None


def is_answer_cell(cell: Mapping) -> bool:
    """An nbgrader solution cell: the student's answer (``### BEGIN/END SOLUTION`` in solutions/, the stub in
    the release). Its grade id is the exercise's id."""
    return bool(nbgrader_meta(cell).get("solution"))


def is_graded_cell(cell: Mapping) -> bool:
    """A cell nbgrader gives points to. In this course only the test cells are graded (answer cells are not)."""
    return bool(nbgrader_meta(cell).get("grade"))


def is_test_cell(cell: Mapping) -> bool:
    """A graded cell that is not an answer: our checks (``check("<id>", globals())``), never student code.

    The grader does not run them in the student's process; the nbgrader plugin writes each one's verdict."""
    return is_graded_cell(cell) and not is_answer_cell(cell)


def points(cell: Mapping) -> int:
    """The points nbgrader gives the cell (those of its exercise for a test cell); 0 for an ungraded cell."""
    return int(nbgrader_meta(cell).get("points") or 0) if is_graded_cell(cell) else 0


def is_locked(cell: Mapping) -> bool:
    """nbgrader keeps the cell read-only for the student and restores it before grading (the test cells)."""
    return bool(nbgrader_meta(cell).get("locked"))


# ---------------------------------------------------------------------------------------------------------------
# Pairing an answer cell with its test cell (see the module's docstring: two conventions)

TEST_ID_SUFFIX = "_test"  # nbgrader grade ids: <id> / <id>_test
JUPYTER_ANSWER_SUFFIX = "-answer"  # Jupyter cell ids: <x>-answer / <x>-test
JUPYTER_TEST_SUFFIX = "-test"


def test_id(answer_id: str) -> str:
    """The grade id of the test cell of the exercise whose answer cell has grade id ``answer_id``: ``<id>_test``."""
    return f"{answer_id}{TEST_ID_SUFFIX}"


test_id.__test__ = False  # not a test, for pytest's collection of modules that import it


def is_test_id(grade_id: str | None) -> bool:
    """Whether the grade id is a test cell's (``<id>_test``)."""
    return bool(grade_id) and grade_id.endswith(TEST_ID_SUFFIX)


def answer_id(test_id: str) -> str:
    """The exercise's id (its answer cell's grade id) from its test cell's grade id: ``<id>_test`` -> ``<id>``.

    nbgrader's gradebook names each grade after the graded cell's grade id, so this is also how a gradebook grade
    is read back as an exercise. An id without the suffix is returned as it is."""
    return test_id.removesuffix(TEST_ID_SUFFIX)


def jupyter_answer_id(cell_id: str | None) -> str | None:
    """The Jupyter cell id of the answer cell that the test cell ``<x>-test`` belongs to (``<x>-answer``); None
    when ``cell_id`` is not a test cell's id. (Cell ids, not nbgrader grade ids: see the module's docstring.)"""
    if not cell_id or not cell_id.endswith(JUPYTER_TEST_SUFFIX):
        return None
    return cell_id.removesuffix(JUPYTER_TEST_SUFFIX) + JUPYTER_ANSWER_SUFFIX


def jupyter_test_id(cell_id: str | None) -> str | None:
    """The Jupyter cell id of the test cell of the answer cell ``<x>-answer`` (``<x>-test``); None otherwise."""
    if not cell_id or not cell_id.endswith(JUPYTER_ANSWER_SUFFIX):
        return None
    return cell_id.removesuffix(JUPYTER_ANSWER_SUFFIX) + JUPYTER_TEST_SUFFIX


# ---------------------------------------------------------------------------------------------------------------
# The cells that run with the answer cells when another program loads a notebook's definitions

# Given cells whose definitions the answers build on, by Jupyter cell id: the configuration classes (``configs``,
# ``config-<name>``: notebooks 08, 09, 10, 12) and given classes a later answer uses (notebook 11's CachedBlock,
# used by its CachedDecoder).
GIVEN_CELLS = ("cached-block",)
GIVEN_PREFIXES = ("configs", "config-")
# The cells that make those definitions runnable in a fresh namespace: the imports (``setup``) and the earlier
# notebooks' parts (``earlier``, which calls ``use_earlier``).
CONTEXT_CELLS = ("setup", "earlier")


def is_given_cell(cell: Mapping) -> bool:
    """A given (not exercise) code cell whose definitions the answer cells build on: a config cell or one of
    ``GIVEN_CELLS``."""
    cell_id = cell.get("id") or ""
    return cell.get("cell_type") == "code" and (cell_id in GIVEN_CELLS or cell_id.startswith(GIVEN_PREFIXES))


def is_preamble_cell(cell: Mapping) -> bool:
    """A code cell run before the answer cells when a notebook's definitions are loaded on their own
    (``coursetools.notebook_import``, ``autograder.grading.definition_cells``): the context cells (imports, the
    earlier notebooks' parts) and the given cells, in notebook order."""
    return cell.get("cell_type") == "code" and (cell.get("id") in CONTEXT_CELLS or is_given_cell(cell))


def is_definition_cell(cell: Mapping) -> bool:
    """A code cell a later program runs to load this notebook's definitions: the preamble and the answer cells."""
    return cell.get("cell_type") == "code" and (is_preamble_cell(cell) or is_answer_cell(cell))


# ---------------------------------------------------------------------------------------------------------------
# An exercise's heading: the markdown cell "### Exercise K — title  (difficulty ...)" before its answer cell; K is
# the answer cell's place in the notebook (tools/stamp.py writes it)

EXERCISE_HEADING = re.compile(r"### Exercise (\d+)\b")


def exercise_heading(cells: list, answer: int) -> int | None:
    """The index of the heading of the exercise whose answer cell is ``cells[answer]``: the last markdown cell before
    it that starts ``### Exercise K``; None when there is none."""
    for index in range(answer - 1, -1, -1):
        cell = cells[index]
        if cell.get("cell_type") == "markdown" and EXERCISE_HEADING.match(source_text(cell.get("source", ""))):
            return index
    return None


def heading_title(source: str | Iterable[str]) -> str:
    """The exercise's title as its heading gives it: "### Exercise 2 — RMSNorm in float32  (difficulty ...)" gives
    "Exercise 2: RMSNorm in float32", the form of the grader's ``Exercise.title``."""
    first = source_text(source).splitlines()[0].removeprefix("### ")
    return first.split("(difficulty")[0].strip().replace(" — ", ": ", 1)


# ---------------------------------------------------------------------------------------------------------------
# The stub: what nbgrader leaves of an answer in the release

STUB_LINE = "raise NotImplementedError()"  # nbgrader's default code stub (ClearSolutions.code_stub)
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")  # around the solution in solutions/'s answer cells


def without_solution_markers(source: str) -> str:
    """An answer cell of solutions/ as the solution reads without nbgrader's marker lines (no trailing newline)."""
    return "\n".join(line for line in source_text(source).splitlines() if line.strip() not in SOLUTION_MARKERS)


def source_text(source: str | Iterable[str]) -> str:
    """A cell's source as one string: nbformat gives a string, a notebook read as plain JSON a list of lines."""
    return source if isinstance(source, str) else "".join(source)


def is_stub_source(source: str | Iterable[str]) -> bool:
    """Whether the source still holds the stub line, i.e. the answer is not finished (anywhere in the source:
    the stub sits indented inside the function or method the student completes)."""
    return STUB_LINE in source_text(source)


def is_stub_line(line: str) -> bool:
    """Whether one line of code is the stub line (a traceback's last line, for ``coursetools.run_all``)."""
    return line.strip() == STUB_LINE


# ---------------------------------------------------------------------------------------------------------------
# Which files are course notebooks

NOTEBOOK_SUFFIX = ".ipynb"
CHECKPOINTS = ".ipynb_checkpoints"  # JupyterLab's saved copies, in a folder beside each notebook
_COURSE_NAME = re.compile(r"[0-9]{2}_.*")  # NN_name: the number orders the course


def is_checkpoint(path: str | Path) -> bool:
    """A file in JupyterLab's checkpoints folder: a saved copy, never what the student works on."""
    return CHECKPOINTS in Path(path).parts


def is_notebook_file(path: str | Path) -> bool:
    """Any notebook a student could have saved (a copy such as ``04_attention-Copy1.ipynb`` included), but not a
    JupyterLab checkpoint."""
    return Path(path).suffix == NOTEBOOK_SUFFIX and not is_checkpoint(path)


def is_course_notebook_path(path: str | Path) -> bool:
    """A course notebook where the course keeps it: ``NN_name/NN_name.ipynb`` (the folder and the file share the
    name). A copy (``NN_name-Copy1.ipynb``), a checkpoint or another notebook is not one."""
    path = Path(path)
    return is_notebook_file(path) and path.parent.name == path.stem and bool(_COURSE_NAME.fullmatch(path.stem))


def notebook_files(root: str | Path) -> list[Path]:
    """Every notebook one folder below ``root`` (``solutions/`` or ``course/``), copies included, sorted."""
    return sorted(p for p in Path(root).glob(f"*/*{NOTEBOOK_SUFFIX}") if is_notebook_file(p))


def course_notebook_paths(root: str | Path) -> list[Path]:
    """The course notebooks one folder below ``root`` (``root/NN_name/NN_name.ipynb``), in course order."""
    return [p for p in notebook_files(root) if is_course_notebook_path(p)]


def find_course_root(folder: str | Path) -> Path | None:
    """The nearest folder at or above ``folder`` that holds the course's ``data/`` or its nbgrader config."""
    folder = Path(folder)
    for candidate in [folder, *folder.parents]:
        if (candidate / "nbgrader_config.py").is_file() or (candidate / "data").is_dir():
            return candidate
    return None
