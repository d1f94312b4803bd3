"""Grade a whole notebook: run its code in a worker, then every exercise's checks here.

Used by the command line (``python -m autograder check``) and by the nbgrader
preprocessor, so a self-check and the gradebook always agree.
"""

from __future__ import annotations

import importlib
import itertools
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from autograder import wire
from autograder.errors import cell_number
from autograder.exercises import ExerciseResult, checks_for, checks_to_run, exercise_index, run_exercise
from autograder.impl import RemoteImpl
from autograder.notebook_format import nbformat
from autograder.notebooks import WORKER_IMPORTS
from autograder.phases import Phase, starting_detail
from autograder.process import CellOutcome, StudentProcess, Worker
from autograder.sandbox import (
    DEFAULT_TIMEOUT,
    Limits,
    Sandbox,
    SandboxUnavailable,
    unavailable_reason,
    unsandboxed_note,
)
from coursetools.notebook_vocabulary import (
    answer_id,
    find_course_root,
    grade_id,
    is_answer_cell,
    is_definition_cell,
    is_test_cell,
)

__all__ = ["DEFAULT_TIMEOUT", "grade", "grade_file", "self_check", "unsandboxed_note"]


def student_cells(nb) -> list[tuple[int, str]]:
    """Every code cell the worker should run, in order: all but the test cells."""
    return [
        (index, cell.source)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and not is_test_cell(cell)
    ]


def definition_cells(nb) -> list[tuple[int, str]]:
    """The cells a later program loads from this notebook (``coursetools.notebook_import``): the preamble
    (imports, earlier notebooks' parts, given configs and classes) and the answer cells, in order."""
    return [(index, source) for index, source in student_cells(nb) if is_definition_cell(nb.cells[index])]


def identify(nb) -> str:
    """The course notebook that ``nb`` is a copy of, from the ids of its graded cells.

    Not from its file name: JupyterLab's Duplicate saves ``NAME-Copy1.ipynb``, and a
    student may save their work under any name.
    """
    from autograder.notebooks import NOTEBOOKS

    # From the notebook modules' declarations, read without importing them: importing every notebook's checks
    # imported their oracles too (notebook 10's brought in transformers and peft, 6 s), in every grading process.
    owner = exercise_index()
    overlap = dict.fromkeys(NOTEBOOKS, 0)
    for graded in {grade_id(cell) for cell in nb.cells} - {None}:
        exercise = graded if graded in owner else answer_id(graded)  # an answer cell's id, or its test cell's
        if exercise in owner:
            overlap[owner[exercise]] += 1
    best = max(overlap.values())
    matches = [name for name, count in overlap.items() if count == best]
    if best == 0 or len(matches) > 1:
        raise LookupError("none of its cells carries the id of an exercise of this course")
    return matches[0]


def import_quietly(modules: tuple[str, ...]) -> None:
    """Import ``modules`` ahead of the checks; a failure is left for the check that imports it to report."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001, S110 - the check importing it says what went wrong
            pass


@dataclass
class NotebookReport:
    notebook: str
    exercises: list[ExerciseResult]
    cells: dict[int, CellOutcome]  # what each code cell did (and showed, when recorded)
    warnings: list[str] = field(default_factory=list)  # limits an unsandboxed check could not set

    @property
    def score(self) -> int:
        return sum(r.points for r in self.exercises)

    @property
    def max_score(self) -> int:
        return sum(r.exercise.points for r in self.exercises)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.exercises)

    def to_json(self) -> dict:
        return {
            "notebook": self.notebook,
            "score": self.score,
            "max_score": self.max_score,
            "exercises": [r.to_json() for r in self.exercises],
        }


def grade(
    nb,
    cwd: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    limits: Limits | None = None,
    sandboxed: bool = True,
    course_root: Path | None = None,
    private: list[Path] = (),
    record: bool = False,
    exercises: Collection[str] | None = None,
    hidden: bool = True,
    definitions_only: bool = False,
    on_phase: Callable[[Phase], None] | None = None,
) -> NotebookReport:
    """Run notebook ``nb`` (found in folder ``cwd``) in a sandboxed worker and check every exercise.

    ``course_root`` is shown to student code read-only, except ``private`` paths; with
    ``record``, every code cell's outputs are kept in the report. ``exercises`` (ids) checks only
    those; ``hidden=False`` runs only the visible checks, as the notebook's test cells do (the
    TinyStories program asks this of the parts it trains). ``definitions_only`` runs only the cells
    that a later program loads (``definition_cells``), not the demos: the program checks what it will use,
    in seconds rather than the time of the whole notebook. ``on_phase`` is told each step as it begins:
    starting Python, each cell, each check (``autograder.phases``; the checker's own counts, for a display).
    """
    said = on_phase or (lambda phase: None)
    name = identify(nb)  # from the cells' ids, in milliseconds: which notebook says what the worker imports
    imports = WORKER_IMPORTS.get(name, ())
    with Sandbox(Path(cwd), course_root, list(private), limits or Limits(), enabled=sandboxed) as sandbox:
        # The worker starts first: it imports torch and IPython while this process imports the checks (and
        # torch); on two cores that halves the wait before the first cell runs.
        starting = Worker(sandbox, imports)
        said(Phase("starting", detail=starting_detail(sandbox.enabled)))
        try:
            checks = checks_for(name)
        except BaseException:
            starting.kill()
            raise
        cells = definition_cells(nb) if definitions_only else student_cells(nb)
        process = StudentProcess(
            checks.adapter_module,
            cells,
            sandbox,
            timeout,
            record,
            starting=starting,
            on_phase=on_phase,
            imports=imports,
        )
        try:
            outcomes = _run_cells(process, checks.oracle_imports)
            chosen = [e for e in checks.exercises if exercises is None or e.id in exercises]
            results = _check_exercises(nb, chosen, process, outcomes, cells, hidden=hidden, said=said)
        finally:
            process.close()
    return NotebookReport(name, results, outcomes, process.warnings)


def _run_cells(process: StudentProcess, oracle_imports: tuple[str, ...]) -> dict[int, CellOutcome]:
    """The worker runs the notebook's cells while this process imports the checks' slow oracles (transformers).

    They are imported before any check runs: no two threads ever import at once while checking. Reading a reply
    (torch.load) imports what it needs once, here, before the other thread starts."""
    wire.load_reply(wire.dump_reply({"ok": True}))
    prefetch = threading.Thread(target=import_quietly, args=(oracle_imports,), daemon=True)
    prefetch.start()
    try:
        return process.run_cells()
    finally:
        prefetch.join()


def _check_exercises(nb, chosen, process, outcomes, cells, *, hidden: bool, said) -> list[ExerciseResult]:
    """Each chosen exercise's checks, on the student's process, with why its answer cell failed where it did."""
    answer_index = {grade_id(cell): index for index, cell in enumerate(nb.cells) if is_answer_cell(cell)}

    def note(exercise) -> str:
        index = answer_index.get(exercise.id)
        if index is None:
            return f"the answer cell `{exercise.id}` is missing from the notebook"
        if not outcomes[index].ok:
            return f"your answer cell (cell {cell_number(index)}) failed: {outcomes[index].error}"
        return ""

    def source_of(exercise) -> str | None:
        index = answer_index.get(exercise.id)
        return nb.cells[index].source if index is not None else None

    total = sum(checks_to_run(e, hidden=hidden, source=source_of(e)) for e in chosen)
    steps = itertools.count(1)
    results = []
    for exercise in chosen:
        index = answer_index.get(exercise.id)
        result = run_exercise(
            exercise,
            RemoteImpl(process),
            note=note(exercise),
            source=source_of(exercise),
            context=[text for i, text in cells if i != index],
            hidden=hidden,
            on_check=lambda e=exercise: said(Phase("checks", next(steps), total, e.id)),
        )
        # A restart while checking may have replayed the answer cell, and the replay may have failed.
        result.note = result.note or (note(exercise) if not result.passed else "")
        results.append(result)
    return results


def grade_file(path: str | Path, **options) -> NotebookReport:
    """Grade the notebook at ``path``; its folder's course root is shown to student code read-only."""
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    return grade(nb, path.parent, course_root=find_course_root(path.parent), **options)


def self_check(path: str | Path, **options) -> tuple[NotebookReport, str | None]:
    """Grade as ``python -m autograder check`` does, and say why it ran unsandboxed (None: sandboxed).

    Sandboxed where bubblewrap runs; elsewhere (macOS, Binder, a container) a student's self-check still
    grades, with the memory and file-size limits, and the caller says so once.
    """
    reason = unavailable_reason()
    if reason is None:
        try:
            return grade_file(path, sandboxed=True, **options), None
        except SandboxUnavailable as error:
            reason = str(error)
    return grade_file(path, sandboxed=False, **options), reason
