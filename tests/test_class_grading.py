"""``python -m autograder grade-class``: a class autograded by several workers, killed, and resumed.

One class of notebook 02 (the cheapest to grade): a full student, the untouched release, a student whose
cells end the worker and hang when replayed, and a submission that is not a notebook at all. (Cheating is
tried in each course folder of tests/test_nbgrader_e2e.py, through the same grader.) The same class
goes through plain ``nbgrader autograde`` (the oracle) and through ``grade-class --workers 2``, which is
SIGKILLed, with its workers, as soon as the first submission is done, then run again. Both gradebooks must agree, the finished submissions must not be
graded again, and the CSV must be the one ``nbgrader export`` writes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from attacks import REPLAYS_DIFFERENTLY
from notebooks import ROOT, read, require_sandbox
from released import release_into
from test_nbgrader_e2e import Student, nbgrader, points, right, submission

from coursetools.notebook_vocabulary import is_graded_cell, test_id

NOTEBOOK = "02_normalization"
STUDENTS = {
    "full": Student({}, set()),
    "stub": Student(None, set(points(NOTEBOOK))),
    # Its RMSNorm cell ends the process, and its LayerNorm cell hangs when the grader replays it: both cost
    # their own points, with a report, and the others' grades are as they would be without this student.
    "replayer": Student(
        {
            "layer_norm": REPLAYS_DIFFERENTLY + right(NOTEBOOK, "layer_norm"),
            "rms_norm": right(NOTEBOOK, "rms_norm") + "\nimport os\nos._exit(1)\n",
        },
        set(points(NOTEBOOK)),
    ),
}
# Seconds per cell or call: the replayer's hang costs this much each time it is graded. Notebook 02's cells and
# checks take well under a second each, sandboxed, on the busy 2-core machine.
TIMEOUT = "--TrustedVerdict.timeout=5"
BROKEN = "broken"  # its submission is not JSON: nbgrader cannot grade it, and it costs only this student


def make_class(folder: Path, students: dict | None = None) -> Path:
    """A course folder with notebook 02 released and one submission per student (default ``STUDENTS``), plus
    the broken one."""
    folder.mkdir(mode=0o755)
    release_into(folder, NOTEBOOK)
    release = read(folder / "course" / NOTEBOOK / f"{NOTEBOOK}.ipynb")
    for name, student in (students or STUDENTS).items():
        (folder / "submitted" / name / NOTEBOOK).mkdir(parents=True)
        nbformat.write(
            submission(release, NOTEBOOK, student), folder / "submitted" / name / NOTEBOOK / f"{NOTEBOOK}.ipynb"
        )
    (folder / "submitted" / BROKEN / NOTEBOOK).mkdir(parents=True)
    (folder / "submitted" / BROKEN / NOTEBOOK / f"{NOTEBOOK}.ipynb").write_text("{not a notebook")
    return folder


def gradebook_scores(folder: Path) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        return {
            s.student.id: {g.name: g.score for g in s.notebooks[0].grades}
            for s in gradebook.find_assignment(NOTEBOOK).submissions
        }


def graded_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Each graded notebook's inode and modification time (a regrading replaces the file).

    Graded: its test cells show verdicts. nbgrader first writes the file sanitized, without any.
    """
    found = {}
    for path in (folder / "autograded").glob(f"*/{NOTEBOOK}/{NOTEBOOK}.ipynb"):
        stat = path.stat()
        try:
            shown = verdicts(folder, path.parts[-3])
        except Exception:  # noqa: BLE001 - being written
            continue
        if shown and all(shown):
            found[path.parts[-3]] = (stat.st_ino, stat.st_mtime_ns)
    return found


def grade_class(folder: Path, *args: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade-class", NOTEBOOK, *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    require_sandbox()
    scratch = tmp_path_factory.mktemp("classes")
    scratch.chmod(0o755)
    plain = make_class(scratch / "plain")
    assert nbgrader(plain, "autograde", NOTEBOOK, TIMEOUT).returncode != 0  # nbgrader too fails on the broken one

    parallel = make_class(scratch / "parallel")
    killed = grade_class(parallel, "--workers", "2", TIMEOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    while not graded_files(parallel) and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(killed.pid, signal.SIGKILL)  # the command and its workers, mid-way
    killed.communicate()
    done_before = graded_files(parallel)
    rerun = grade_class(parallel, "--workers", "2", TIMEOUT)
    out, err = rerun.communicate(timeout=600)
    return plain, parallel, done_before, rerun.returncode, out, err


def test_the_killed_run_had_finished_some_but_not_all(classes):
    _, _, done_before, _, _, _ = classes
    assert 1 <= len(done_before) < len(STUDENTS)


def verdicts(folder: Path, student: str) -> list[str]:
    """What the test cells of a student's autograded notebook say (for the message of a failed comparison)."""
    path = folder / "autograded" / student / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    if not path.is_file():
        return ["(not autograded)"]
    cells = [c for c in read(path).cells if is_graded_cell(c)]
    return ["\n".join(o.get("evalue") or o.get("text", "") for o in c.get("outputs", [])) for c in cells]


def test_gradebook_equals_plain_nbgrader_autograde(classes):
    plain, parallel, _, _, _, _ = classes
    ours, theirs = gradebook_scores(parallel), gradebook_scores(plain)
    differ = {
        s: (verdicts(parallel, s), verdicts(plain, s))
        for s in ours.keys() | theirs.keys()
        if ours.get(s) != theirs.get(s)
    }
    assert ours == theirs, differ
    for name, student in STUDENTS.items():  # and both are right
        assert ours[name] == {test_id(e): p * (e not in student.zero) for e, p in points(NOTEBOOK).items()}


def test_resume_grades_the_rest_and_nothing_twice(classes):
    _, parallel, done_before, returncode, out, err = classes
    after = graded_files(parallel)
    assert set(after) == set(STUDENTS)
    assert {name: after[name] for name in done_before} == done_before
    summary = out.splitlines()[0]
    regraded = len(STUDENTS) - len(done_before)
    assert summary.startswith(
        f"{NOTEBOOK}: {regraded} graded, {len(done_before)} already graded (skipped), 0 could not be graded, 1 failed"
    )


def test_a_broken_submission_costs_only_its_student(classes):
    _, _, _, returncode, out, err = classes
    assert returncode == 1
    failures = [line.strip() for line in out.splitlines()[1:]]
    assert failures == ["failed:", f"{BROKEN}: NotJSONError: Notebook does not appear to be JSON: '{{not a notebook'"]
    assert "Traceback" not in err
    assert "Warning:" not in err, err[-3000:]  # nbgrader's SQLAlchemy "not in session" warnings, among others


def test_csv_is_nbgrader_export(classes):
    _, parallel, _, _, _, _ = classes
    assert nbgrader(parallel, "export", "--to", str(parallel / "exported.csv")).returncode == 0
    ours = (parallel / "grades.csv").read_text()
    assert ours == (parallel / "exported.csv").read_text()
    assert len(ours.splitlines()) == 1 + len(STUDENTS) + 1


def test_refuses_where_there_is_no_assignment(tmp_path):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    done = grade_class(tmp_path)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 2 and err.strip().count("\n") == 0, err
    assert "nbgrader generate_assignment 02_normalization" in err


def test_student_code_cannot_read_the_class_grades(tmp_path):
    """grades.csv, where nbgrader export and grade-class write by default, is hidden like the gradebook."""
    require_sandbox()
    from nbgrader.coursedir import CourseDirectory

    from autograder.nbgrader_plugin import private_paths
    from autograder.sandbox import Sandbox

    tmp_path.chmod(0o755)
    (tmp_path / "grades.csv").write_text("student_id,score\nalice,6.0\n")
    folder = tmp_path / "autograded" / "bob" / NOTEBOOK
    folder.mkdir(parents=True)
    seen = {}
    for name, private in (("hidden", private_paths(CourseDirectory(root=str(tmp_path)))), ("shown", [])):
        with Sandbox(folder, tmp_path, private) as sandbox:
            seen[name] = subprocess.run(
                sandbox.wrap(["cat", str(tmp_path / "grades.csv")]),
                capture_output=True,
                text=True,
                env=sandbox.environment(),
                timeout=60,
            ).stdout
    assert "alice" in seen["shown"]  # the control: without the private path the file is readable
    assert "alice" not in seen["hidden"]


def test_the_bar_says_what_each_submission_being_graded_is_doing(classes):
    """Issue 52 §5: under the class's bar, each running grading's phase (starting Python, running cells i/N,
    checks j/M), redrawn every second: a hung submission held the bar at 1/2 for two minutes, saying nothing.

    The bar shows the latest phase at each redraw, so only the phases that last seconds are sure to be drawn:
    notebook 02's cells, run one after another, do; its checks take under a second and may pass between two
    redraws (1 fresh-clone run in 4 drew none). Every phase comes down the same wire (``phase_listener``);
    the exact sequence, checks included, is ``test_showing_progress``'s, and what the bar does with each
    phase is ``test_the_bar_keeps_each_students_latest_phase``'s."""
    *_, err = classes
    said = re.findall(r"\| ((?:\w+: [^|\r\n]+?)(?: \| \w+: [^|\r\n]+?)*)\]", err)
    phases = {
        phase
        for line in said
        for part in line.split(" | ")
        for phase in re.findall(r"^\w+: (starting Python|running cells|checks|replaying cells)", part)
    }
    assert "running cells" in phases, err[-3000:]


def test_the_bar_keeps_each_students_latest_phase():
    import queue

    from autograder.class_grading import Doing
    from autograder.phases import Phase

    phases = queue.Queue()
    doing = Doing(phases)
    assert doing.line() == ""
    for student, phase in [
        ("bob", Phase("starting", detail="sandboxed")),
        ("alice", Phase("cells", 3, 13, "cell 9")),
        ("bob", Phase("cells", 1, 13, "cell 5")),
        ("alice", Phase("checks", 2, 4, "layer_norm")),
    ]:
        phases.put((student, str(phase)))
    doing.read()
    assert doing.line() == "alice: checks 2/4 (layer_norm) | bob: running cells 1/13 (cell 5)"
    doing.done("alice")
    phases.put(("bob", str(Phase("cells", 2, 13, "x" * 200))))
    doing.read()
    assert doing.line() == "bob: " + str(Phase("cells", 2, 13, "x" * 200))[: Doing.WIDTH]
