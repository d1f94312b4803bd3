"""A whole class through real nbgrader: release, submissions, autograde, feedback, export.

Each simulated student is a release notebook with some answer cells filled in. Cheaters
combine a trick with a wrong answer to ONE exercise: the trick must not earn that
exercise, and the student's right answers must still earn theirs.
"""

from __future__ import annotations

import copy
import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from leaks import html_text, leaked, secret_lines
from notebooks import ROOT, answer_source, grade_id, read, solution_path
from wrong.nb01_tokens_embeddings import WRONG

from autograder.exercises import checks_for

ASSIGNMENT = "01_tokens_embeddings"
POINTS = {e.id: e.points for e in checks_for(ASSIGNMENT).exercises}
TIMEOUT = 10  # seconds per cell, in the kernel and in the grading worker
SOLUTION = read(solution_path(ASSIGNMENT))


def right(exercise: str) -> str:
    return answer_source(SOLUTION, exercise)


def wrong(exercise: str) -> str:
    return next(w.code for w in WRONG if w.exercise == exercise)


FAKE_AUTOGRADER = """
import sys, types
fake = types.ModuleType("autograder")
fake.check = lambda *args, **kwargs: print("All visible checks passed.")
sys.modules["autograder"] = fake
"""

# student: (answers that differ from the solution, edit to the notebook, exercises that must score 0)
CLASS = {
    "full": ({}, None, set()),
    "stub": (None, None, set(POINTS)),
    "wrong": ({e: wrong(e) for e in POINTS}, None, set(POINTS)),
    "patches_torch": (
        {"embedding": wrong("embedding") + "\ntorch.allclose = lambda *a, **k: True\n"
                                           "torch.testing.assert_close = lambda *a, **k: None\n"
                                           "torch.equal = lambda *a, **k: True\n"},
        None, {"embedding"}),
    "fakes_autograder": ({"sinusoidal": wrong("sinusoidal") + FAKE_AUTOGRADER}, None, {"sinusoidal"}),
    "patches_builtins": (
        {"learned_positions": wrong("learned_positions") + "\nimport builtins\n"
         "builtins.isinstance = lambda *a: True\nbuiltins.AssertionError = Warning\n"},
        None, {"learned_positions"}),
    "exits_in_cell": ({"input_embedding": right("input_embedding") + "\nimport os\nos._exit(0)\n"}, None, {"input_embedding"}),
    "exits_in_forward": (
        {"learned_positions": right("learned_positions").replace(
            "def forward(self, positions: torch.Tensor) -> torch.Tensor:\n",
            "def forward(self, positions: torch.Tensor) -> torch.Tensor:\n        import os; os._exit(1)\n")},
        None, {"learned_positions"}),
    "loops_forever": ({"sinusoidal": "while True:\n    pass\n"}, None, {"sinusoidal"}),
    "prints_megabytes": ({"embedding": right("embedding") + '\nprint("spam " * 4_000_000)\n'}, None, set()),
    "raises": ({"input_embedding": 'raise RuntimeError("I give up")\n'}, None, {"input_embedding"}),
    "deletes_tests": ({"embedding": wrong("embedding")}, "delete", {"embedding"}),
    "edits_tests": ({"embedding": wrong("embedding")}, "edit", {"embedding"}),
}


def submission(release, answers, edit):
    nb = copy.deepcopy(release)
    if answers is None:  # the untouched release
        return nb
    for cell in nb.cells:
        exercise = grade_id(cell)
        if exercise in POINTS:
            cell.source = answers.get(exercise, right(exercise))
    if edit == "delete":
        nb.cells = [c for c in nb.cells if not (grade_id(c) or "").endswith("_test")]
    elif edit == "edit":
        for cell in nb.cells:
            if grade_id(cell) == "embedding_test":
                cell.source = 'print("All visible checks passed.")'
    return nb


def nbgrader(course: Path, *args):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), *args, "--log-level=WARN"],
        cwd=course, env=env, capture_output=True, text=True, timeout=1200,
    )


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("class")
    course.chmod(0o755)  # grading as root runs student code as another user, who must read the course
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / ASSIGNMENT, course / "solutions" / ASSIGNMENT)
    shutil.copytree(ROOT / "data" / "tinystories", course / "data" / "tinystories")
    assert nbgrader(course, "generate_assignment", ASSIGNMENT).returncode == 0
    release = read(course / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    for student, (answers, edit, _) in CLASS.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(submission(release, answers, edit), folder / f"{ASSIGNMENT}.ipynb")
    graded = nbgrader(course, "autograde", ASSIGNMENT,
                      f"--TrustedVerdict.timeout={TIMEOUT}")
    assert graded.returncode == 0, graded.stderr[-3000:]
    assert nbgrader(course, "generate_feedback", ASSIGNMENT).returncode == 0
    assert nbgrader(course, "export", "--to", str(course / "grades.csv")).returncode == 0
    return course


def _scores(course: Path, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
        return {grade.name.removesuffix("_test"): grade.score for grade in notebook.grades}


@pytest.mark.parametrize("student", CLASS)
def test_gradebook_holds_the_trusted_verdict(course, student):
    _, _, zero = CLASS[student]
    expected = {exercise: 0 if exercise in zero else points for exercise, points in POINTS.items()}
    assert _scores(course, student) == expected


def test_export_totals(course):
    with open(course / "grades.csv") as handle:
        rows = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(handle)}
    expected = {s: sum(p for e, p in POINTS.items() if e not in zero) for s, (_, _, zero) in CLASS.items()}
    assert rows == expected


def _feedback(course: Path, student: str) -> str:
    return (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


def test_feedback_explains_what_is_wrong(course):
    text = html_text(_feedback(course, "wrong"))
    assert "standard deviation" in text  # the wrong Embedding's init
    text = html_text(_feedback(course, "loops_forever"))
    assert "infinite loop" in text


@pytest.mark.parametrize("student", CLASS)
def test_feedback_shows_no_hidden_test(course, student):
    hidden = secret_lines(SOLUTION, "hidden")
    assert not leaked(hidden, html_text(_feedback(course, student)))


def test_feedback_shows_no_solution(course):
    """The untouched release gets feedback without a line of the solutions (the messages included)."""
    solution = secret_lines(SOLUTION, "solution")
    assert not leaked(solution, html_text(_feedback(course, "stub")))
