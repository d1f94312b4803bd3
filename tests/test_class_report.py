"""``python -m autograder report``: a class of notebook 02 graded by ``grade-class``, then reported on.

The class (the cheapest notebook to grade, one ``grade-class --workers 2`` run, about 35 s on the
busy 2-core development machine): full marks, an untouched release, two students who made the same
catalogued mistake in LayerNorm (tests/wrong; one of them also forgets RMSNorm's gain), one whose
RMSNorm cell raises an error whose text is HTML, and a submission that is not a notebook. The report
must give each exercise's pass rate, the mistake two students made as the most frequent, the
histogram of the five scores it can count, the submission it could not grade and why, and escape
whatever a student's code said. The other classes of the suite are graded by test modules that
pytest-xdist may run on another worker, and none has two students with the same mistake, so this
module grades its own.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from notebooks import ROOT, require_sandbox, working_directory
from test_class_grading import BROKEN
from test_class_grading import make_class as grading_class
from test_nbgrader_e2e import Student

from autograder.__main__ import main as command
from autograder.class_report import (
    ANSWER_CELL,
    ClassReport,
    failures,
    masked_where_they_differ,
    normalise,
    read_class,
)
from autograder.exercises import CheckVerdict, ExerciseState, Status, Verdict, run_exercise
from autograder.nbgrader_plugin import VERDICT_KEY, verdict_of

NOTEBOOK = "02_normalization"
SCRIPT = "<script>alert('owned')</script>"


def catalogued(exercise: str, mistake: str) -> str:
    """The answer cell of a catalogued wrong implementation (tests/wrong), by its name."""
    from wrong import wrong_versions

    (code,) = [w.code for w in wrong_versions(NOTEBOOK) if w.exercise == exercise and w.mistake == mistake]
    return code


EPS_OUTSIDE = catalogued("layer_norm", "eps outside the square root")
STUDENTS = {  # name -> answers, and the score each must get (3 points per exercise)
    "full": (Student({}, set()), 6),
    "stub": (Student(None, set()), 0),
    "eps1": (Student({"layer_norm": EPS_OUTSIDE}, set()), 3),
    "eps2": (Student({"layer_norm": EPS_OUTSIDE, "rms_norm": catalogued("rms_norm", "forgets the gain")}, set()), 0),
    "script": (Student({"rms_norm": f"raise RuntimeError({SCRIPT!r})\n"}, set()), 3),
}
LAYER_NORM, RMS_NORM = "Exercise 1: LayerNorm from scratch", "Exercise 2: RMSNorm"


def make_class(folder: Path) -> Path:
    return grading_class(folder, {name: student for name, (student, _) in STUDENTS.items()})


def autograder(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [sys.executable, "-m", "autograder", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@dataclass
class Reported:
    folder: Path
    report: ClassReport  # read in this process
    out: str  # what `report` printed
    html: str  # the page it wrote


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> Reported:
    require_sandbox()
    scratch = tmp_path_factory.mktemp("report")
    scratch.chmod(0o755)
    folder = make_class(scratch / "course")
    graded = autograder(folder, "grade-class", NOTEBOOK, "--workers", "2", "--TrustedVerdict.timeout=10")
    assert graded.returncode == 1 and "1 failed" in graded.stdout, graded.stderr[-3000:]
    with working_directory(folder):
        said = io.StringIO()
        with contextlib.redirect_stdout(said):  # the command, in this process: nbgrader and torch are loaded
            assert command(["report", NOTEBOOK]) == 0
        report, _ = read_class(NOTEBOOK)
    return Reported(folder, report, said.getvalue(), (folder / "reports" / f"{NOTEBOOK}.html").read_text())


def test_pass_rates(reported):
    """Each exercise: passed by two of the five graded, failed by two, untouched by the stub."""
    rows = {row.title: (row.passed, row.failing, row.not_started, row.n) for row in reported.report.exercises}
    assert rows == {LAYER_NORM: (2, 2, 1, 5), RMS_NORM: (2, 2, 1, 5)}
    table = reported.out.splitlines()
    assert table[0].split() == ["exercise", "pass", "rate", "passed", "failing", "not", "started", "n"]
    for title in (LAYER_NORM, RMS_NORM):
        (line,) = [line for line in table if line.startswith(title)]
        assert line[len(title) :].split() == ["40%", "2", "2", "1", "5"]


def test_the_mistake_two_students_made_comes_first(reported):
    first, *others = reported.report.mistakes
    assert (first.exercise, first.students) == (LAYER_NORM, {"eps1", "eps2"})
    # Both students' message is the same, numbers included: every number is the mistake's own, none masked.
    assert first.said["eps1"] == first.said["eps2"] and first.text == " ".join(first.said["eps1"].split())
    assert "eps is added outside the square root" in first.text
    assert sorted((m.exercise, tuple(m.students)) for m in others) == [(RMS_NORM, ("eps2",)), (RMS_NORM, ("script",))]
    by_student = {tuple(m.students): m for m in others}
    assert "the learnable gain `weight` is not applied" in by_student["eps2",].text
    assert by_student["script",].check == ANSWER_CELL and SCRIPT in by_student["script",].text
    assert f"  2: {LAYER_NORM}: " in reported.out and "[eps1, eps2]" in reported.out


def test_histogram(reported):
    assert reported.report.scores == {name: score for name, (_, score) in STUDENTS.items()}
    counts = {low: count for low, _, count in reported.report.histogram()}
    assert counts == {0: 2, 1: 0, 2: 0, 3: 2, 4: 0, 5: 0, 6: 1}
    bars = [int(n) for n in re.findall(r'<rect class="bar"[^>]* data-count="(\d+)"', reported.html)]
    assert bars == [2, 0, 0, 2, 0, 0, 1]
    assert "Submissions per score (points): 0: 2; 1: 0; 2: 0; 3: 2; 4: 0; 5: 0; 6: 1" in reported.html


def test_the_submission_that_could_not_be_graded(reported):
    why = "NotJSONError: Notebook does not appear to be JSON: '{not a notebook'"
    assert reported.report.ungraded == {BROKEN: why}
    assert f"1 could not be graded: {BROKEN} ({why})" in reported.out
    assert escape(why) in reported.html


class _Page(HTMLParser):
    """The elements of a page, its text, and the attributes that could load something."""

    def __init__(self):
        super().__init__()
        self.tags, self.text, self.links = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [value for name, value in attrs if name in ("src", "href", "srcset", "xlink:href")]

    def handle_data(self, data):
        self.text.append(data)


def test_page_is_self_contained_and_escapes_what_students_wrote(reported):
    page = _Page()
    page.feed(reported.html)
    assert "script" not in page.tags, "a student's message became a script element"
    assert SCRIPT in "".join(page.text)  # shown as text
    assert page.links == []  # no external assets
    assert page.tags.count("table") == 5 and page.tags.count("th") >= 5 * 2
    assert 'role="img"' in reported.html and '<title id="histogram-title">' in reported.html


def test_refuses_without_a_gradebook(tmp_path, capsys):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    with working_directory(tmp_path):
        assert command(["report", NOTEBOOK]) == 2
    said = capsys.readouterr().err
    assert "no gradebook" in said and "grade-class" in said, said
    assert not (tmp_path / "gradebook.db").exists() and not (tmp_path / "reports").exists()


def test_a_verdict_reads_back_what_the_grader_kept():
    """``Verdict.from_json`` gives back the enums ``ExerciseResult.to_json`` wrote; what is no verdict reads as none."""
    from autograder.exercises import find_exercise
    from autograder.impl import LocalImpl

    exercise, adapters = find_exercise("layer_norm")
    result = run_exercise(exercise, LocalImpl({}, adapters))  # nothing defined: every check fails
    verdict = verdict_of({"metadata": {VERDICT_KEY: result.to_json()}})
    assert verdict == Verdict(
        "layer_norm",
        False,
        ExerciseState.FAILING,
        result.note,
        tuple(
            CheckVerdict(r.check.name, r.check.description, r.check.hidden, r.status, r.message) for r in result.results
        ),
    )
    assert all(isinstance(check.status, Status) for check in verdict.checks)
    for kept in (None, "passed", {"id": "x"}, {"id": "x", "passed": True, "state": "maybe"}):
        assert verdict_of({"metadata": {VERDICT_KEY: kept}}) is None, kept


def test_reading_a_verdict():
    """A verdict's mistakes are read from its statuses: the answer cell's error, then the failed checks and the
    broken rule; a stub met or a check not run is none; numbers are grouped away."""
    check = {"description": "", "hidden": False, "check": "c"}
    data = {
        "id": "layer_norm",
        "passed": False,
        "state": "failing",
        "note": "your answer cell (cell 4) failed: ValueError: 3 != 4",
        "checks": [
            check | {"description": "output matches", "status": "failed", "message": "the shapes differ\nsecond line"},
            check | {"description": "grads", "status": "rule", "message": "do not use torch.var"},
            check | {"description": "dtype", "status": "not implemented", "message": "not implemented yet: ..."},
            check | {"description": "later", "status": "not run", "message": "not run: the process stopped"},
            check | {"description": "shape", "status": "passed", "message": ""},
        ],
    }
    verdict = Verdict.from_json(data)
    assert failures(verdict) == [
        (ANSWER_CELL, "your answer cell (cell 4) failed: ValueError: 3 != 4"),
        ("output matches", "the shapes differ"),
        ("grads", "do not use torch.var"),
    ]
    stub = Verdict.from_json(data | {"note": "", "checks": data["checks"][2:], "state": "not started"})
    assert failures(stub) == []  # not started
    assert failures(None) is None  # no verdict kept: a score given by hand, or graded before verdicts were kept
    assert failures(replace(verdict, passed=True)) == [("-", "the grader passed it: its score was changed by hand")]
    assert normalise("the shapes  differ: [2, 3] vs -0.5, eps=1e-05; x32 in float16") == (
        "the shapes differ: [#, #] vs #, eps=#; x32 in float16"
    )
    # One mistake's messages: the numbers they share are kept, the ones that differ masked.
    assert (
        masked_where_they_differ(["divide by d - 1: got 0.53 at [2, 3]", "divide by d - 1:  got 0.61 at [2, 4]"])
        == "divide by d - 1: got # at [2, #]"
    )
    assert masked_where_they_differ(["exit status 7"]) == "exit status 7"


def test_the_page_names_who_made_each_mistake_and_how_each_student_did(reported):
    page = _Page()
    page.feed(reported.html)
    text = " ".join(" ".join(page.text).split())
    assert "eps1, eps2" in text  # the students behind the mistake two made
    report = reported.report
    assert set(report.outcomes) == set(report.scores)
    assert report.outcomes["full"] == {LAYER_NORM: "passed", RMS_NORM: "passed"}
    assert report.outcomes["stub"] == {LAYER_NORM: "not started", RMS_NORM: "not started"}
    assert report.outcomes["eps1"][LAYER_NORM].startswith("failing: ") and report.outcomes["eps1"][RMS_NORM] == "passed"
    for student, score in report.scores.items():  # one row per student, with their score
        assert f"{student} {score:g}" in text


def test_student_code_cannot_read_the_reports():
    """reports/, where `report` writes the class's results, is hidden from student code like grades.csv."""
    from nbgrader.coursedir import CourseDirectory

    from autograder.nbgrader_plugin import private_paths

    assert Path("/course/reports") in private_paths(CourseDirectory(root="/course"))
