"""Write into each solution notebook what its exercises' declarations determine (`make stamp`; `make outputs` and
`make release` run it first).

An exercise is declared once, in ``autograder/notebooks/nbNN_*.py`` (``Exercise(id, title, points=...)``), in the
order of the notebook's answer cells (the code cells holding ``### BEGIN SOLUTION``). For the k-th of them this tool
writes, so that none of it is typed by hand:

- the answer cell: nbgrader's metadata (a solution cell, grade id ``id``) and the Jupyter cell id ``exK-answer``;
- its test cell, the first code cell after it (only explanations may stand between; one is inserted right after the
  answer cell when there is none): the two check calls, nbgrader's metadata (graded, locked, the exercise's points,
  grade id ``id_test``), the ``raises-exception`` tag that lets Run All go past it, and the cell id ``exK-test``;
- its heading, the last markdown cell before the answer cell that starts with ``### Exercise``: the cell id ``exK``
  and the number K in ``### Exercise K``.

The grader numbers the exercise the same way (``Exercise.title``, from ``NotebookChecks``), so the number is typed
nowhere.

    python tools/stamp.py             # stamp every solution notebook
    python tools/stamp.py --check     # exit 1, naming each cell that disagrees with its declaration
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: autograder and coursetools are beside tools/
from autograder.exercises import checks_for  # noqa: E402
from coursetools.notebook_vocabulary import (  # noqa: E402
    EXERCISE_HEADING,
    JUPYTER_ANSWER_SUFFIX,
    JUPYTER_TEST_SUFFIX,
    course_notebook_paths,
    exercise_heading,
    is_test_cell,
    test_id,
)

SOLUTIONS = ROOT / "solutions"
SOLUTION_MARKER = "### BEGIN SOLUTION"
RUN_ALL_TAG = "raises-exception"  # Run All goes on past a cell that carries it (tools/run_all_tags.py)
NBGRADER_SCHEMA = 3

TEST_CELL = """# Visible checks for this exercise: run this cell after your answer cell.
from autograder import check

check("{id}", globals())
### BEGIN HIDDEN TESTS
check("{id}", globals(), hidden=True)
### END HIDDEN TESTS"""


def test_cell_source(exercise_id: str) -> str:
    return TEST_CELL.format(id=exercise_id)


test_cell_source.__test__ = False  # not a test, for pytest's collection of modules that import it


def answer_metadata(exercise) -> dict:
    return {
        "grade": False,
        "grade_id": exercise.id,
        "locked": False,
        "schema_version": NBGRADER_SCHEMA,
        "solution": True,
    }


def test_metadata(exercise) -> dict:
    return {
        "grade": True,
        "grade_id": test_id(exercise.id),
        "locked": True,
        "points": exercise.points,
        "schema_version": NBGRADER_SCHEMA,
        "solution": False,
    }


test_metadata.__test__ = False


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _set_source(cell, text: str) -> None:
    cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) else text


def is_marked_answer(cell) -> bool:
    return cell["cell_type"] == "code" and SOLUTION_MARKER in _source(cell)


def _is_a_test_cell(cell) -> bool:
    """A test cell, stamped (graded, not an answer) or written as one (its first line is a test cell's): the cell
    to stamp. Any other code cell after an answer cell is the notebook's own (a demo) and is never overwritten."""
    first_line = TEST_CELL.split("\n", 1)[0]
    return cell["cell_type"] == "code" and (is_test_cell(cell) or _source(cell).startswith(first_line))


def _new_test_cell() -> dict:
    return {"cell_type": "code", "execution_count": None, "id": "", "metadata": {}, "outputs": [], "source": ""}


def stamp(nb: dict, notebook: str) -> tuple[list[str], list[str]]:
    """Stamp ``nb`` (a notebook read as JSON) in place from ``notebook``'s declarations. Return what changed and what
    cannot be stamped (a missing heading, a declared title with another number), one line per cell, naming it."""
    exercises = checks_for(notebook).exercises
    cells = nb["cells"]
    answers = [i for i, cell in enumerate(cells) if is_marked_answer(cell)]
    if len(answers) != len(exercises):
        return [], [
            f"{notebook}: {len(answers)} answer cells ({SOLUTION_MARKER}) but {len(exercises)} exercises "
            f"declared in autograder/notebooks: declare each answer cell's exercise, in order"
        ]
    changes, problems = [], []
    for number, exercise in reversed(list(enumerate(exercises, start=1))):  # from the end: insertions keep indices
        done, wrong = _stamp_exercise(cells, answers[number - 1], number, exercise, notebook)
        changes[:0], problems[:0] = done, wrong
    return changes, problems


def _stamp_exercise(cells: list, answer: int, number: int, exercise, notebook: str) -> tuple[list[str], list[str]]:
    changes, problems = [], []

    def put(cell, what: str, value, key: str, container=None):
        target = cell if container is None else container
        if target.get(key) != value:
            named = cell.get("id")
            target[key] = value
            changes.append(f"{notebook} exercise {number} ({exercise.id}): {what} of cell {named!r} ({value!r})")

    stem = f"ex{number}"
    answer_cell = cells[answer]
    put(answer_cell, "the nbgrader metadata", answer_metadata(exercise), "nbgrader", answer_cell["metadata"])
    put(answer_cell, "the cell id", stem + JUPYTER_ANSWER_SUFFIX, "id")

    following = next((i for i in range(answer + 1, len(cells)) if cells[i]["cell_type"] != "markdown"), len(cells))
    if following == len(cells) or not _is_a_test_cell(cells[following]):  # a demo after a new answer cell stays
        cells.insert(answer + 1, _new_test_cell())
        following = answer + 1
        changes.append(f"{notebook} exercise {number} ({exercise.id}): a test cell inserted after its answer cell")
    test = cells[following]
    if _source(test) != test_cell_source(exercise.id):
        _set_source(test, test_cell_source(exercise.id))
        changes.append(f"{notebook} exercise {number} ({exercise.id}): the check calls of cell {test.get('id')!r}")
    put(test, "the nbgrader metadata", test_metadata(exercise), "nbgrader", test["metadata"])
    tags = list(test["metadata"].get("tags", []))
    put(test, "the tags", tags if RUN_ALL_TAG in tags else [*tags, RUN_ALL_TAG], "tags", test["metadata"])
    put(test, "the cell id", stem + JUPYTER_TEST_SUFFIX, "id")

    heading = exercise_heading(cells, answer)
    if heading is None:
        problems.append(
            f"{notebook} exercise {number} ({exercise.id}): no '### Exercise {number} ...' heading "
            f"before its answer cell {answer_cell.get('id')!r}: write one"
        )
    else:
        text = _source(cells[heading])
        stamped = EXERCISE_HEADING.sub(f"### Exercise {number}", text, count=1)
        if stamped != text:
            _set_source(cells[heading], stamped)
            changes.append(
                f"{notebook} exercise {number} ({exercise.id}): the number in heading cell {cells[heading].get('id')!r}"
            )
        put(cells[heading], "the cell id", stem, "id")
    return changes, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 naming each cell that disagrees; write nothing")
    args = parser.parse_args(argv)
    disagreements, unstampable = [], []
    for path in course_notebook_paths(SOLUTIONS):
        nb = json.loads(path.read_text(encoding="utf-8"))
        stamped = copy.deepcopy(nb)
        changes, problems = stamp(stamped, path.parent.name)
        disagreements += changes
        unstampable += problems
        if changes and not args.check:
            path.write_text(json.dumps(stamped, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for line in disagreements:
        print(("disagrees: " if args.check else "stamped: ") + line)
    for line in unstampable:
        print("cannot stamp: " + line)
    return 1 if unstampable or (args.check and disagreements) else 0


if __name__ == "__main__":
    sys.exit(main())
