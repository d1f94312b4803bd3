"""Grade a whole notebook: run its code in a worker, then every exercise's checks here.

Used by the command line (``python -m autograder check``) and by the nbgrader
preprocessor, so a self-check and the gradebook always agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.exercises import ExerciseResult, checks_for, run_exercise
from autograder.impl import RemoteImpl
from autograder.sandbox import StudentProcess

DEFAULT_TIMEOUT = 30.0  # seconds per cell and per call into student code


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_test_cell(cell) -> bool:
    """A graded cell that is not an answer: our checks, never student code."""
    meta = _nbgrader(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def student_cells(nb) -> list[tuple[int, str]]:
    """Every code cell the worker should run, in order: all but the test cells."""
    return [
        (index, cell.source)
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and not is_test_cell(cell)
    ]


@dataclass
class NotebookReport:
    notebook: str
    exercises: list[ExerciseResult]

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
            "exercises": [
                {
                    "id": r.exercise.id,
                    "passed": r.passed,
                    "points": r.points,
                    "max_points": r.exercise.points,
                    "message": r.message,
                }
                for r in self.exercises
            ],
        }


def grade(nb, name: str, cwd: Path, timeout: float = DEFAULT_TIMEOUT) -> NotebookReport:
    """Run notebook ``nb`` (file stem ``name``) in a worker and check every exercise."""
    checks = checks_for(name)
    cells = student_cells(nb)
    process = StudentProcess(checks.adapter_module, cells, Path(cwd), timeout)
    try:
        outcomes = process.run_cells()
        answer_index = {
            _nbgrader(cell).get("grade_id"): index
            for index, cell in enumerate(nb.cells)
            if _nbgrader(cell).get("solution")
        }
        results = []
        for exercise in checks.exercises:
            index = answer_index.get(exercise.id)
            if index is None:
                note = f"the answer cell `{exercise.id}` is missing from the notebook"
            elif not outcomes[index].ok:
                note = f"your answer cell (cell {index}) failed: {outcomes[index].error}"
            else:
                note = ""
            results.append(run_exercise(exercise, RemoteImpl(process), note=note))
    finally:
        process.close()
    return NotebookReport(name, results)


def grade_file(path: str | Path, timeout: float = DEFAULT_TIMEOUT) -> NotebookReport:
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    return grade(nb, path.stem, path.parent.resolve(), timeout)
